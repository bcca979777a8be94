"""A GGUF model on llama.cpp behind the core's CausalLM protocol.

With this backend the target *is* llama.cpp's computation on the file: its quantized weights as
stored, its 8-bit quantization of activations inside the products, its K/V cells and its
flash-attention kernel. specd's rule is exact with respect to whatever rows that computation
returns, and greedy decoding is llama.cpp's own as long as a position's row does not depend on the
call it is scored in: the context is configured so that it does not (``llamacpp_lib.Context``:
q8_0 keys, a K/V stream per request; measured in docs/llamacpp.md).

Physical layout: one llama.cpp context per cache; each open slot (request) is one llama.cpp
sequence with a stream of cells of its own. A step scores every row of every request in one
``llama_decode`` with logits for the rows asked. The ledger (specd.core.kv) and llama.cpp hold the
same rows at every moment: a commit removes the dropped temporary rows from the sequence
(``llama_memory_seq_rm``), a reset or a close removes all of them, and committed rows stay. When a
sequence outgrows its cells or more slots are open than the context has streams, the context is
rebuilt twice as large and every open slot's rows are scored again into it (the same rows, bit for
bit, by the invariance above).

Token trees (not built): a llama.cpp row may belong to several sequences (``Context.decode`` takes a
sequence set per row), so a tree's shared prefix can be one row in every branch's sequence; llama.cpp
shares a row between sequences only in one pool of cells (``kv_unified``), whose order a tree
version would then have to keep itself (a context per request would). The shared-body draft
(``self:vocab=N``) is refused on this backend: llama.cpp gives the final hidden state at every row
of a call (its embeddings output), but runs its head only inside its own graph, so a head applied
apart from it would be another function than the target's logits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

from specd.core.kv import KVCache, KVRows
from specd.core.model import RowInput, StepOutput
from specd.errors import CacheIdentityError, CellsExhausted, UsageError
from specd.models.llamacpp.lib import Context, GGUFModel

MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ: the sequences (streams) of one context
FIRST_CELLS = 512  # a new context's rows per sequence; it doubles when a sequence needs more


class LlamaCppCache(KVCache):
    """The identity ledger plus one llama.cpp context whose sequences are the open slots, numbered
    0..n-1 (a closed slot's sequence is taken over by the last one, so a call's sequences run on
    in llama.cpp's micro-batches)."""

    keeps_later = False  # its calls are done when they return: no round is launched ahead of a read

    def __init__(self, lm: LlamaCppLM):
        super().__init__()
        self.lm = lm
        self.ctx: Context | None = None  # made by the first step, sized by what it holds
        self.seq: dict[int, int] = {}  # slot -> llama.cpp sequence id
        self.rebuilds = 0

    def open(self, slot: int) -> None:
        if len(self.seq) >= MAX_SEQUENCES:
            raise UsageError(
                f"llama.cpp holds at most {MAX_SEQUENCES} sequences in one context: decode at most "
                f"{MAX_SEQUENCES} requests together (--batch-size)"
            )
        super().open(slot)
        self.seq[slot] = len(self.seq)  # its stream is empty: a sequence that left was removed

    def close(self, slot: int) -> None:
        super().close(slot)
        seq = self.seq.pop(slot, None)
        if seq is None:
            return
        last = len(self.seq)  # the highest sequence id in use
        if seq != last:
            moved = next(s for s, q in self.seq.items() if q == last)
            self.seq[moved] = seq
            if self.holds(last):
                self.ctx.copy(last, seq)  # its rows, cells and order as they were
        if self.holds(last):
            self.ctx.remove(last, -1)
        elif self.holds(seq):
            self.ctx.remove(seq, -1)  # the sequence that took its place has no rows yet

    def commit(self, slot: int, keep: int | Sequence[int], later: int = 0) -> None:
        if later:  # llama.cpp's own calls are done when they return: nothing is run ahead of a read
            raise CacheIdentityError("llama.cpp's cache keeps no later round's rows")
        kept = len(self.kept(slot, keep))  # a chain's path: its first rows (this backend stages chains only)
        start = len(self._committed[slot]) + kept  # the first dropped row's position
        dropped = len(self._temporary[slot]) - kept
        super().commit(slot, keep)
        if dropped > 0 and self.holds(self.seq[slot]):
            self.ctx.remove(self.seq[slot], start)

    def reset(self, slot: int) -> None:
        super().reset(slot)
        if self.holds(self.seq[slot]):
            self.ctx.remove(self.seq[slot], -1)

    def holds(self, seq: int) -> bool:
        """Whether llama.cpp has a stream for ``seq`` (one opened since the last step has none, and no rows)."""
        return self.ctx is not None and seq < self.ctx.streams

    def sequence_lengths(self) -> dict[int, int]:
        """slot -> the rows llama.cpp holds in its sequence (its own count: what the ledger must match)."""
        return {slot: (self.ctx.length(seq) if self.holds(seq) else 0) for slot, seq in self.seq.items()}

    def ensure(self, rows: Sequence[RowInput]) -> None:
        """Room for ``rows``: a stream for every open slot and, in each, room for its rows; else a
        context with twice what is needed, rebuilt from the ledger's rows."""
        longest = max((self.length(r.slot) + len(r.tokens) for r in rows), default=0)
        ctx = self.ctx
        if ctx is not None and longest <= ctx.cells and len(self.seq) <= ctx.streams:
            return
        cells = max(FIRST_CELLS, 2 * longest, ctx.cells if ctx else 0)
        streams = max(len(self.seq), ctx.streams if ctx else 1)
        self.rebuild(-(-cells // 256) * 256, min(MAX_SEQUENCES, 1 << (streams - 1).bit_length()))

    def rebuild(self, cells: int, streams: int) -> None:
        """A new context of ``streams`` sequences of ``cells`` rows holding every open slot's rows,
        scored again (no logits)."""
        old = self.ctx
        self.ctx = Context(self.lm.file, cells, streams, self.lm.threads, k_type=self.lm.k_type)
        if old is not None:
            old.close()
            self.rebuilds += 1
        rows = [RowInput(slot, tuple(self.visible(slot)), tuple(range(self.length(slot)))) for slot in self.seq]
        rows = [r for r in rows if r.tokens]
        if rows:
            self.lm.decode(self, rows, [0] * len(rows))


LLAMA_CPP_CHAINS = "llama.cpp's backend verifies chains only (a request's stream holds one path)"


class LlamaCppLM:
    """A GGUF model on llama.cpp (``file``: loaded once; several caches share it), named ``name``,
    its logit rows ``width`` wide (the event space's; default the file's vocabulary)."""

    splits_head = False  # see the module docstring: self:vocab=N is refused on this backend
    backend = "llama.cpp"

    def __init__(self, file: GGUFModel, name: str, width: int | None = None, threads: int | None = None):
        self.file = file
        self.name = name
        self.vocab_size = width if width is not None else file.facts.vocab
        self.device = torch.device("cpu")
        self.dtype = torch.float32  # its logit rows' (its weights keep the file's quantization)
        self.window = file.facts.window
        self.threads = threads or torch.get_num_threads()  # specd's CPU threads, one setting for both libraries
        # q8_0 keys send every call through one attention kernel (docs/llamacpp.md); llama.cpp stores
        # them in blocks of 32, so a head whose width is not a multiple of 32 keeps float16 keys.
        self.k_type = "q8_0" if file.facts.head_dim % 32 == 0 else "f16"
        self.forward_calls = 0
        what = f"{file.facts.description.replace(' ', '_')}:k={self.k_type}"
        self.identity = f"llama.cpp:{name}:{what}:cpu:sha={file_digest(file)[:12]}"

    def new_cache(self) -> LlamaCppCache:
        return LlamaCppCache(self)

    # -k auto's prior for a call's cost past the row counts it has timed: R rows cost about
    # (1.4 + R) / 2.4 one-row calls (llama.cpp's quantized products cost nearly in proportion to the
    # rows; measured on SmolLM2 Q4_1, 2 threads: 2 rows 1.32, 9 rows 4.44, 33 rows 14.4 one-row calls),
    # where a float32 model's are nearly free on this CPU (FIXED_ROWS_PRIOR, 16 rows)
    fixed_rows_prior = 1.4

    # A tree's node would have to sit in the llama.cpp sequence of every path through it (the
    # attention mask is by sequence); a stream per request holds one path, so this backend scores chains.
    tree_refusal = f"{LLAMA_CPP_CHAINS}; --backend hf verifies trees"

    def step(self, cache: LlamaCppCache, rows: Sequence[RowInput], logits_for: int | None = None) -> StepOutput:
        """``logits_for``: how many trailing rows of each input need logits (None: all, 0: none).
        Every row of every request goes into one llama_decode; the logit rows come back as views
        of one float32 tensor."""
        missing = [r.slot for r in rows if not cache.is_open(r.slot)]
        if missing:
            raise ValueError(f"slots {missing} are not open")
        rows = [r.on_host() for r in rows]  # llama.cpp takes its tokens from the host
        for r in rows:
            cache.expect(KVRows(r.slot, r.tokens, r.positions))  # refused before llama.cpp sees it
        needs = [len(r.tokens) if logits_for is None else min(len(r.tokens), logits_for) for r in rows]
        cache.ensure(rows)
        try:
            blocks = self.decode(cache, rows, needs)
        except CellsExhausted:  # the ledger counted room; llama.cpp placed otherwise: grow, score again
            cache.rebuild(2 * cache.ctx.cells, cache.ctx.streams)
            blocks = self.decode(cache, rows, needs)
        logits, kv = [], []
        for r, block in zip(rows, blocks):
            staged = KVRows(r.slot, r.tokens, r.positions)
            cache.stage(staged)
            logits.append(block if block.shape[1] == self.vocab_size else block[:, : self.vocab_size])
            kv.append(staged)
        return StepOutput(logits, kv)

    def decode(self, cache: LlamaCppCache, rows: Sequence[RowInput], needs: Sequence[int]) -> list[torch.Tensor]:
        """One llama_decode over ``rows`` (each into its slot's sequence, fed in sequence order so
        that llama.cpp's micro-batches take consecutive sequences), logits for the last ``needs[i]``
        rows of input i -> one float32[needs[i], V] view per input, of one tensor."""
        self.forward_calls += 1
        order = [0] if len(rows) == 1 else sorted(range(len(rows)), key=lambda i: cache.seq[rows[i].slot])
        tokens: list[int] = []
        positions: list[int] = []
        seqs: list[int] = []
        wants: list[bool] = []
        for i in order:
            r, n = rows[i], len(rows[i].tokens)
            tokens += r.tokens
            positions += r.positions
            seqs += [cache.seq[r.slot]] * n
            wants += [False] * (n - needs[i]) + [True] * needs[i]
        logits = cache.ctx.decode(tokens, positions, seqs, wants)
        if len(rows) == 1:
            return [logits]
        out = logits.split([needs[i] for i in order])
        blocks: list[torch.Tensor] = [out[0]] * len(rows)
        for j, i in enumerate(order):
            blocks[i] = out[j]
        return blocks


_DIGESTS: dict[tuple, str] = {}


def file_digest(file: GGUFModel) -> str:
    """sha256 of the GGUF file's bytes (once per file and process): the weights a run used."""
    stat = file.path.stat()
    key = (str(file.path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(file.path, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]
