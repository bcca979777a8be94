"""Loading Hugging Face models and tokenizers, with every failure as one typed error."""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from specd.errors import ModelLoadError, OutOfMemory, RemoteCodeRefused, UnsafeWeights, UsageError, one_line, shown

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    name = (name or "auto").lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name} was asked for, but this machine has no CUDA device (try --device cpu)")
        return torch.device(name)
    if name == "cpu":
        return torch.device("cpu")
    raise UsageError(f"unknown device {shown(name)}; use auto, cpu, cuda or cuda:N")


def resolve_dtype(name: str, device: torch.device | None = None) -> torch.dtype | str:
    """--dtype on ``device`` -> a torch dtype, or "auto" (transformers' word for the checkpoint's own
    dtype) for auto on CUDA. auto is float32 on a CPU, where half precision is slow."""
    if name == "auto":
        return "auto" if device is not None and device.type == "cuda" else torch.float32
    try:
        return DTYPES[name]
    except KeyError:
        raise UsageError(f"unknown dtype {shown(name)}; choose one of auto, {', '.join(DTYPES)}") from None


@dataclass
class Loaded:
    model: torch.nn.Module
    tokenizer: object
    name: str  # what the user named (path, hub id, gguf file)
    source: str  # "folder" | "hub" | "gguf" | "memory" (an object the caller handed over)


def _oom(err: BaseException) -> bool:
    return (
        isinstance(err, MemoryError) or "out of memory" in str(err).lower() or type(err).__name__ == "OutOfMemoryError"
    )


@contextmanager
def one_gguf_parse():
    """Within this block a GGUF file's metadata is parsed once, and fast. transformers parses it
    for the tokenizer, again for the config and again for the weights, and gguf's reader slices
    its memory map once per vocabulary entry (about 15 s for Gemma 3's 262,144 tokens here): the
    block reads through a plain array view of the same map (``PlainGGUFReader``, the same fields
    and tensors, about 4x faster), keeps each file's reader for the block (it only reads its map),
    and builds gguf's tensor-name map once per architecture (transformers asks for it once per
    submodule: hundreds of times). transformers turns each metadata value into Python one by one, a
    string through a list of its bytes (once per vocabulary entry, for each of its three parses):
    within the block a string's bytes are decoded as they lie (``parse_value``, about 2x faster).
    transformers draws a progress bar over the tensors on stderr (its own tqdm, which
    ``disable_progress_bar`` does not reach): within the block it draws none."""
    try:
        import gguf
    except ImportError:  # the load itself says what is missing
        yield
        return
    original_reader, original_name_map, readers = gguf.GGUFReader, gguf.get_tensor_name_map, {}
    fast = plain_reader_class(original_reader)
    bar_owner = _gguf_bar_owner()
    original_bar = getattr(bar_owner, "tqdm", None)
    original_parse = getattr(bar_owner, "_gguf_parse_value", None)

    def reader(path, *args, **kwargs):
        key = (os.path.realpath(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = fast(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original_name_map)
    if original_bar is not None:
        bar_owner.tqdm = functools.partial(original_bar, disable=True)
    if original_parse is not None:
        bar_owner._gguf_parse_value = functools.partial(parse_value, original_parse)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_name_map
        if original_bar is not None:
            bar_owner.tqdm = original_bar
        if original_parse is not None:
            bar_owner._gguf_parse_value = original_parse


GGUF_STRING, GGUF_ARRAY = 8, 9  # gguf's value types: a UTF-8 string; an array of the type after it


def parse_value(original: Callable, value, types):
    """transformers' ``_gguf_parse_value`` (``original``) of a GGUF field part ``value`` of ``types``,
    a string decoded from its uint8 bytes as they lie instead of through a Python list of them (the
    same text; anything else is ``original``'s)."""
    kinds = types if isinstance(types, list) else [types]
    if kinds in ([GGUF_STRING], [GGUF_ARRAY, GGUF_STRING]) and getattr(value, "dtype", None) == "uint8":
        return value.tobytes().decode()
    return original(value, types)


def _gguf_bar_owner():
    """transformers' GGUF loader module, whose ``tqdm`` draws the tensors' bar (None: not loadable)."""
    try:
        from transformers import modeling_gguf_pytorch_utils
    except ImportError:
        return None
    return modeling_gguf_pytorch_utils


# the reader method PlainGGUFReader replaces, as gguf 0.19 declares it (a reader declared otherwise is used as it is)
READER_GET = ("self", "offset", "dtype", "count", "override_order")


def plain_reader_class(base: type) -> type:
    """gguf's reader, reading through a plain ndarray view of its memory map: slicing a
    ``np.memmap`` runs Python code for every slice (and the reader takes one slice per scalar
    of the metadata), a plain view of the same bytes slices in C. The same bytes, dtypes and
    offsets, so the same fields and tensors (tested against gguf's own reader)."""
    import inspect

    import numpy as np

    get = getattr(base, "_get", None)
    if not callable(get) or list(inspect.signature(get).parameters) != [*READER_GET]:
        return base  # a gguf whose reader reads otherwise: use it as it is

    class PlainGGUFReader(base):  # type: ignore[valid-type, misc]
        _itemsizes: dict = {}

        def _get(self, offset, dtype, count=1, override_order=None):
            plain = self.__dict__.get("_plain")
            if plain is None:
                plain = self._plain = self.data.view(np.ndarray)
            count = int(count)
            itemsize = self._itemsizes.get(dtype)
            if itemsize is None:
                itemsize = self._itemsizes[dtype] = np.dtype(dtype).itemsize
            arr = plain[offset : offset + itemsize * count].view(dtype=dtype)[:count]
            return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))

    return PlainGGUFReader


def located(spec: str | None, gguf: str | None) -> tuple[str, str, str, str | None]:
    """Where a model is read from -> (folder or hub id, its name in messages, "gguf" | "folder" |
    "hub", the GGUF file's name in its folder or None); a missing file or folder is one line."""
    if gguf:
        path = Path(gguf)
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {gguf}" if not path.exists() else f"{gguf} is not a file")
        for package in ("gguf", "accelerate"):
            if importlib.util.find_spec(package) is None:
                raise ModelLoadError(f"loading a GGUF file needs the '{package}' package: pip install 'specd[gguf]'")
        return str(path.parent), str(path), "gguf", path.name
    if not spec:
        raise UsageError("no model given")
    source = "folder" if os.path.isdir(spec) else "hub"
    if source == "hub" and (spec.startswith((".", "/", "~")) or os.sep in spec and spec.count("/") > 1):
        raise ModelLoadError(f"model folder not found: {spec}")
    if source == "hub" and os.path.exists(spec):
        raise ModelLoadError(f"{spec} is a file; a model is a folder (or give --target-gguf for a GGUF file)")
    return spec, spec, source, None


@functools.cache
def hub_unreachable() -> bool:
    """Whether the Hugging Face hub's host has no address here (its name does not resolve: no network,
    or no route to it), asked once a process and only for a hub id while huggingface_hub is not told
    it is offline. Then a hub id is read from the local cache alone: asked to connect, huggingface_hub
    retries for about 30 s before it gives up or falls back to that cache. Behind a proxy the name is
    the proxy's to resolve: never unreachable here."""
    import socket
    from urllib.parse import urlparse
    from urllib.request import getproxies

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False  # it reads the cache alone already
    if any(getproxies().get(scheme) for scheme in ("https", "all")):
        return False
    host = urlparse(constants.ENDPOINT).hostname
    if not host:
        return False
    try:
        socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return True
    except OSError:
        return False  # not a resolver's answer: let the load try
    return False


def quiet_loading() -> None:
    """transformers' and huggingface_hub's warnings and progress bars off (a load says what fails in one
    line of its own): without a network huggingface_hub retries a hub id five times and says so in a
    line each time."""
    from huggingface_hub.utils import logging as hub_logging
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    hub_logging.set_verbosity_error()


def load(
    spec: str | None,
    gguf: str | None,
    dtype: torch.dtype | str,
    device: torch.device,
    trust_remote_code: bool = False,
    device_map: str | None = None,
    max_memory: dict | None = None,
    read_generation_config: bool = True,
    tokenizer: object = None,
) -> Loaded:
    """A model by local folder, hub id (local cache only when offline) or GGUF file.

    A model folder is a security boundary: its own Python code (an ``auto_map`` in its
    config) runs only with ``trust_remote_code``; weights come from safetensors or GGUF,
    or from pickles that torch's weights-only loader accepts (plain tensors, no code).
    Nothing is ever asked on stdin. With ``device_map="auto"`` accelerate spreads the model
    over the devices (GPUs, then CPU, then a temporary folder on disk) within ``max_memory``.
    Without ``read_generation_config`` the folder's generation_config.json is not opened: the
    model's generation config is built from its config.json (--generation-config none).
    ``tokenizer``: the folder's tokenizer, when it was already read from it (not read again).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_loading()
    kwargs: dict = {"trust_remote_code": trust_remote_code}
    where, name, source, gguf_file = located(spec, gguf)
    if source == "hub" and hub_unreachable():
        kwargs["local_files_only"] = True  # the cache alone, at once, not after the hub's retries
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
        dtype = torch.float32 if dtype == "auto" else dtype  # dequantized: no dtype of its own
    if device_map is not None:
        if importlib.util.find_spec("accelerate") is None:
            raise ModelLoadError("--device-map needs the 'accelerate' package: pip install 'specd[gguf]'")
        kwargs.update(device_map=device_map, max_memory=max_memory, offload_folder=offload_folder())
    with one_gguf_parse():
        try:
            model_kwargs = {}
            if not read_generation_config:
                from transformers import AutoConfig, GenerationConfig

                config = AutoConfig.from_pretrained(where, **kwargs)
                model_kwargs["generation_config"] = GenerationConfig.from_model_config(config)
            model = AutoModelForCausalLM.from_pretrained(
                where, dtype=dtype, weights_only=True, **kwargs, **model_kwargs
            )
            if device_map is None:
                model.to(device)
            model.eval()
        except Exception as err:  # noqa: BLE001 - every failure becomes one line
            raise _load_error(err, name, source, device, "model") from None
        try:
            if tokenizer is None:
                tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
        except Exception as err:  # noqa: BLE001
            raise _load_error(err, name, source, device, "tokenizer") from None
    return Loaded(model, tokenizer, name, source)


MEMORY_PREFIX = "memory:"  # the name of a model the caller handed over as an object


def in_memory(model, tokenizer, role: str) -> Loaded:
    """A Hugging Face causal LM and its tokenizer that the caller already holds, used as they are:
    no copy and no move (the run takes the device and dtype its weights are on), only put in eval
    mode. Its name is ``memory:`` + the name it was loaded under. ``role``: "target" or "draft"."""
    if not isinstance(model, torch.nn.Module) or getattr(model, "config", None) is None:
        raise UsageError(
            f"the {role} must be a Hugging Face causal LM (a torch module with a config), got {type(model).__name__}"
        )
    if tokenizer is None or not callable(tokenizer) or not hasattr(tokenizer, "decode"):
        raise UsageError(f"a {role} model given as an object needs its tokenizer (a Hugging Face tokenizer)")
    params = list(model.parameters())
    if not params:
        raise UsageError(f"the {role} model has no parameters")
    places = {(t.device, t.dtype) for t in params if t.is_floating_point()}
    if any(t.is_meta for t in params) or len({d for d, _ in places}) > 1:
        raise UsageError(
            f"the {role} model's weights are spread over devices or not loaded (meta tensors): give its folder "
            "and device_map='auto' instead"
        )
    if len({d for _, d in places}) > 1:
        raise UsageError(f"the {role} model's weights have more than one dtype: cast it with .to(dtype) first")
    model.eval()  # dropout off: a model in training mode would not decode its own distribution
    name = getattr(model.config, "_name_or_path", "") or type(model).__name__
    return Loaded(model, tokenizer, MEMORY_PREFIX + str(name), "memory")


def placement(model: torch.nn.Module) -> tuple[str, str]:
    """(device, dtype) names of a model's weights, as --device and --dtype spell them."""
    weight = next(t for t in model.parameters() if t.is_floating_point())
    names = {dtype: name for name, dtype in DTYPES.items()}
    if weight.dtype not in names:
        raise UsageError(f"a model in {weight.dtype} cannot be run; cast it to one of {', '.join(DTYPES)}")
    return str(weight.device), names[weight.dtype]


_OFFLOAD: list[str] = []


def offload_folder() -> str:
    """A temporary folder for weights accelerate offloads to disk, removed when the process exits."""
    if not _OFFLOAD:
        import atexit
        import shutil
        import tempfile

        _OFFLOAD.append(tempfile.mkdtemp(prefix="specd-offload-"))
        atexit.register(shutil.rmtree, _OFFLOAD[0], True)
    return _OFFLOAD[0]


def _load_error(err: BaseException, name: str, source: str, device, what: str) -> Exception:
    """The one-line error for a failed load, naming what to do about it."""
    text = str(err)
    if _oom(err):
        return OutOfMemory(
            f"out of memory loading {name} on {device}: "
            "try --dtype bfloat16 or float16, --device cpu, or a smaller model"
        )
    if "trust_remote_code" in text or "custom code" in text:
        return RemoteCodeRefused(
            f"{name} asks to run its own Python code to load its {what} (an auto_map in its config); specd does "
            "not run code from a model folder unless you pass --trust-remote-code, which runs that code with "
            "your permissions: pass it only for a source you trust"
        )
    if "weights_only" in text or "Weights only load failed" in text or type(err).__name__ == "UnpicklingError":
        return UnsafeWeights(
            f"refused to load {name}: its weights are a pickle that torch's weights-only loader rejects (it holds "
            "code or objects, not only tensors); use safetensors or GGUF weights"
        )
    hint = " (no network here: a hub id must already be in the local Hugging Face cache)" if source == "hub" else ""
    detail = one_line(text) or type(err).__name__
    return ModelLoadError(f"cannot load the {what} of {shown(name)}: {detail}{hint}")


def weights_digest(model: torch.nn.Module) -> str | None:
    """sha256 of the weights as loaded, over every parameter's name, shape, dtype and bytes, read
    in place where they are in host memory (no copy). Weights anywhere else (a GPU; on disk behind a
    device map's meta tensors) are hashed from the model's weight files instead, "files:" + that
    digest, so that a manifest never copies a model to the host; None when no weight file can be
    found (a digest of nothing would vouch for nothing)."""
    import hashlib

    state = model.state_dict()
    if not all(t.device.type == "cpu" and not t.is_meta for t in state.values()):
        files = weight_files(getattr(model.config, "_name_or_path", "") or "")
        if not files:
            return None
        h = hashlib.sha256()
        for path in files:
            h.update(path.name.encode())
            with path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        return "files:" + h.hexdigest()
    h = hashlib.sha256()
    for pname, p in sorted(state.items()):
        h.update(f"{pname}:{tuple(p.shape)}:{p.dtype}".encode())
        h.update(p.detach().contiguous().reshape(-1).view(torch.uint8).numpy())  # the bytes, not a copy
    return h.hexdigest()


def weight_files(name_or_path: str) -> list[Path]:
    """A model's weight files (safetensors, else PyTorch .bin), sorted: from its folder, or for a hub
    id from the local hub cache (never the network); [] when there are none."""
    folder = Path(name_or_path) if name_or_path else None
    if folder is None or not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(name_or_path, local_files_only=True)) if name_or_path else None
        except Exception:  # noqa: BLE001 - not in the cache, or not a hub id: no files to hash
            return []
    if folder is None:
        return []
    return sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
