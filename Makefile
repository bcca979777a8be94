PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install test lint oracle

install:
	$(PIP) install -c constraints.txt -e ".[dev,gguf]"

test:
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff check specd tests
	$(PYTHON) -m ruff format --check specd tests

oracle:
	specd verify-oracle --vocab 2 --k 3
