"""llama.cpp through llama-cpp-python's low-level API: the binding, a GGUF file loaded once, and a
context whose one verb (``Context.decode``) scores packed rows of several sequences in one call.

Terms: a *context* is one llama.cpp context (its K/V cells); a *sequence* is a llama.cpp sequence
id, one per request, with a stream of cells of its own; a *row* is one input token at its position
in one or more sequences (``seqs``: a token may belong to several sequences, as a tree's shared
prefix would). Only this module touches ctypes; everything above it sees numpy and torch.

The binding's logits buffer is rewritten by the next call, so ``decode`` returns the rows asked in
one float32 copy of that buffer (one copy per call, never one per row); callers take views of it.
"""

from __future__ import annotations

import ctypes
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from specd.errors import BackendFailed, BackendUnavailable, CellsExhausted, ModelLoadError, one_line
from specd.models.numbers import digits_only

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"  # the version make install builds (pyproject's llamacpp extra pins it)
INSTALL_HINT = "pip install 'specd[llamacpp]' (builds llama.cpp, a few minutes; make install does this)"
FLASH_ATTN_ENABLED = 1  # LLAMA_FLASH_ATTN_TYPE_ENABLED
DECODE_NO_CELLS = 1  # llama_decode: no K/V cells free for the batch
UBATCH = 512  # rows of one micro-batch (llama.cpp's default)
K_TYPES = {"f16": 1, "q8_0": 8}  # GGML_TYPE_F16, GGML_TYPE_Q8_0
WARN, ERROR = 3, 4  # ggml_log_level
_LOG: deque[tuple[int, str]] = deque(maxlen=12)  # llama.cpp's last warnings and errors, for one-line messages
_STATE: dict = {}


def binding():
    """The ``llama_cpp`` module, initialized once and quiet (its log lines are kept for messages, not
    printed); BackendUnavailable (one line) where it is not installed or its library does not load."""
    if "lib" in _STATE:
        return _STATE["lib"]
    try:
        import llama_cpp
    except ImportError:
        raise BackendUnavailable(f"the llama.cpp backend needs {PACKAGE}: {INSTALL_HINT}") from None
    except OSError as err:  # the package is there but its shared library is not loadable
        raise BackendUnavailable(
            f"{PACKAGE} is installed but its library does not load ({one_line(str(err))}); reinstall: {INSTALL_HINT}"
        ) from None

    @llama_cpp.llama_log_callback
    def keep(level, text, user_data):
        if level in (WARN, ERROR) and text:  # info and debug are dropped
            _LOG.append((level, text.decode("utf-8", "replace").strip()))

    llama_cpp.llama_log_set(keep, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    _STATE.update(lib=llama_cpp, log=keep)  # the callback must outlive every call into the library
    return llama_cpp


def available() -> bool:
    """Whether the binding imports here (no error raised)."""
    try:
        binding()
    except BackendUnavailable:
        return False
    return True


def last_log() -> str:
    """What llama.cpp logged about a failure since the log was cleared, for a message: its first error
    (the cause; later ones only say that loading failed), else its last warning, else ""."""
    errors = [text for level, text in _LOG if level == ERROR]
    text = errors[0] if errors else (_LOG[-1][1] if _LOG else "")
    text = text.split(": ", 1)[1] if text.startswith("llama_") and ": " in text else text  # its function's name
    return one_line(text.removeprefix("error loading model: "), 200)


@dataclass(frozen=True)
class FileFacts:
    """What a run reads off a loaded GGUF: its logit width, trained context and attention window."""

    vocab: int  # logit row width (llama.cpp's vocabulary)
    n_ctx_train: int
    window: int | None  # sliding-window attention width, None without one
    layers: int
    kv_heads: int
    head_dim: int  # width of one attention head's keys
    parameters: int
    description: str  # llama.cpp's own, e.g. "llama 256M Q4_1"


class GGUFModel:
    """A GGUF file's weights, loaded by llama.cpp once (memory-mapped) and shared by every context."""

    def __init__(self, path: str | Path):
        lib = binding()
        self.path = Path(path)
        if not self.path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}" if not self.path.exists() else f"{path} is not a file")
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0  # a CPU backend: the weights stay where llama.cpp maps them
        params.use_extra_bufts = False
        _LOG.clear()
        handle = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not handle:
            why = last_log() or "llama.cpp could not read it"
            raise ModelLoadError(f"cannot load {path} with llama.cpp: {why}")
        self.handle = handle
        self._free = weakref.finalize(self, lib.llama_model_free, handle)
        vocab = lib.llama_model_get_vocab(handle)
        swa = int(lib.llama_model_n_swa(handle))
        text = ctypes.create_string_buffer(256)
        lib.llama_model_desc(handle, text, len(text))
        arch = _meta(lib, handle, "general.architecture")
        key_length = _meta(lib, handle, f"{arch}.attention.key_length")
        heads = max(1, int(lib.llama_model_n_head(handle)))
        self.facts = FileFacts(
            vocab=int(lib.llama_vocab_n_tokens(vocab)),
            n_ctx_train=int(lib.llama_model_n_ctx_train(handle)),
            window=swa if swa > 0 else None,
            layers=int(lib.llama_model_n_layer(handle)),
            kv_heads=int(lib.llama_model_n_head_kv(handle)),
            head_dim=int(key_length) if digits_only(key_length, 9) else int(lib.llama_model_n_embd(handle)) // heads,
            parameters=int(lib.llama_model_n_params(handle)),
            description=text.value.decode("utf-8", "replace"),
        )
        if lib.llama_model_has_encoder(handle) or not lib.llama_model_has_decoder(handle):
            raise ModelLoadError(f"{path} is not a decoder-only causal LM; specd's llama.cpp backend runs those only")
        if lib.llama_model_is_recurrent(handle) or lib.llama_model_is_hybrid(handle):
            raise ModelLoadError(
                f"{path} is a recurrent model ({self.facts.description}): its state cannot be rolled back row by row"
            )


def _meta(lib, handle, key: str) -> str:
    """A GGUF metadata value as text ("" when the file has none)."""
    out = ctypes.create_string_buffer(128)
    n = lib.llama_model_meta_val_str(handle, key.encode(), out, len(out))
    return out.value.decode("utf-8", "replace") if n >= 0 else ""


class Context:
    """One llama.cpp context over a GGUF model, ``threads`` threads, flash attention on: ``streams``
    sequences of up to ``cells`` rows each, every sequence in a K/V stream of its own (its rows in
    position order, read by its own queries only), keys cached as q8_0. ``unified``, ``k_type`` and
    ``flash_attn`` are llama.cpp's other choices, for the measurement that chose these
    (benchmarks/llamacpp_invariance.py)."""

    def __init__(
        self,
        model: GGUFModel,
        cells: int,
        streams: int,
        threads: int,
        flash_attn: bool = True,
        unified: bool = False,
        k_type: str = "q8_0",
        ubatch: int = UBATCH,
    ):
        lib = binding()
        params = lib.llama_context_default_params()
        params.n_ctx = cells * (1 if unified else streams)  # llama.cpp splits it evenly over the streams
        params.n_batch = params.n_ctx
        params.n_ubatch = min(ubatch, params.n_ctx)
        params.n_seq_max = streams
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = FLASH_ATTN_ENABLED if flash_attn else 0
        params.kv_unified = unified
        params.type_k = K_TYPES[k_type]
        params.swa_full = True  # a window's cells are never reused while a rollback could still need them
        params.no_perf = True
        _LOG.clear()
        handle = lib.llama_init_from_model(model.handle, params)
        if not handle:
            why = last_log() or "no reason given"
            raise ModelLoadError(f"llama.cpp could not create a context of {streams} x {cells} cells: {why}")
        self.lib, self.model, self.handle = lib, model, handle
        self.cells, self.streams, self.threads = cells, streams, threads
        self.vocab = model.facts.vocab
        self.memory = lib.llama_get_memory(handle)
        self._free = weakref.finalize(self, lib.llama_free, handle)
        self._tokens = np.zeros(0, np.int32)  # the batch's arrays: see _batch
        self._llama_batch = None

    def close(self) -> None:
        self._free()

    def clear(self) -> None:
        """Drop every sequence's rows."""
        self.lib.llama_memory_clear(self.memory, True)

    def copy(self, src: int, dst: int) -> None:
        """Make sequence ``dst`` a copy of sequence ``src`` (all its rows; ``dst``'s own are dropped)."""
        self.lib.llama_memory_seq_cp(self.memory, src, dst, -1, -1)

    def remove(self, seq: int, start: int, end: int = -1) -> None:
        """Drop ``seq``'s rows at positions [start, end) (end -1: to its end; start -1: all)."""
        if not self.lib.llama_memory_seq_rm(self.memory, seq, start, end):
            raise BackendFailed(f"llama.cpp refused to remove rows {start}..{end} of sequence {seq}")

    def length(self, seq: int) -> int:
        """Rows ``seq`` holds: one past its last position (llama.cpp's own count, for checks)."""
        return int(self.lib.llama_memory_seq_pos_max(self.memory, seq)) + 1

    def decode(self, tokens, positions, seqs, wants) -> torch.Tensor:
        """One llama_decode over packed rows -> float32[R, V], the logit rows of the rows with
        ``wants``, in row order (one copy of llama.cpp's buffer). tokens, positions, seqs (each row's
        sequence), wants (bool: logits for it): N values each, arrays or lists. CellsExhausted where
        the context has no cells left (nothing was written)."""
        n = len(tokens)
        batch = self._batch(n)
        self._tokens[:n] = tokens
        self._positions[:n] = positions
        self._seqs[:n] = seqs
        self._wants[:n] = wants
        batch.n_tokens = n
        code = self.lib.llama_decode(self.handle, batch)
        if code == DECODE_NO_CELLS:
            raise CellsExhausted(f"no K/V cells left for {n} rows")
        if code != 0:
            raise BackendFailed(f"llama.cpp's decode failed (code {code}): {last_log() or 'no reason given'}")
        out = torch.empty(int(np.count_nonzero(self._wants[:n])), self.vocab)
        if len(out):
            ctypes.memmove(out.data_ptr(), self.lib.llama_get_logits(self.handle), out.numel() * out.element_size())
        return out

    def _batch(self, n: int):
        """The llama_batch that every call fills (arrays kept, so a call writes its rows into them and
        makes no ctypes objects: after a decode, each new object costs tens of microseconds of cold
        caches), with room for at least ``n`` rows; each row belongs to one sequence."""
        if n > len(self._tokens) or self._llama_batch is None:
            size = max(n, 2 * len(self._tokens), 1)
            self._tokens, self._positions, self._seqs = (np.zeros(size, np.int32) for _ in range(3))
            self._wants = np.zeros(size, np.int8)
            self._n_seqs = np.ones(size, np.int32)
            self._seq_rows = (self._seqs.ctypes.data + self._seqs.itemsize * np.arange(size)).astype(np.uintp)
            lib = self.lib
            self._llama_batch = lib.llama_batch(
                n_tokens=0,
                token=self._tokens.ctypes.data_as(ctypes.POINTER(lib.llama_token)),
                embd=None,
                pos=self._positions.ctypes.data_as(ctypes.POINTER(lib.llama_pos)),
                n_seq_id=self._n_seqs.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                seq_id=self._seq_rows.ctypes.data_as(ctypes.POINTER(ctypes.POINTER(lib.llama_seq_id))),
                logits=self._wants.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
            )
        return self._llama_batch
