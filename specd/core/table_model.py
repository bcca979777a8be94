"""TableModel: a causal "language model" whose raw logits are a table indexed by prefix.

For tiny vocabularies every conditional can be enumerated, and because its K/V
rows are just (token, position) identities, every cache operation is auditable.
The logits at a prefix are either given explicitly or drawn once from a seeded
normal keyed by (seed, prefix), so they do not depend on query order.

Like a real transformer it conditions on what its cache holds plus the inputs:
feed it a duplicated row and it answers a different (wrong) question.

Its "body" is the whole table and its head the identity: ``body_step`` returns the
logit rows as the hidden states, so a shared-body draft (specd.core.shared_body) runs on it
with its head restricted to a subset of columns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import torch

from specd.core.kv import KVCache, KVRows
from specd.core.model import RowInput, StepOutput


class TableModel:
    def __init__(
        self,
        vocab_size: int,
        seed: int = 0,
        scale: float = 1.5,
        name: str = "table",
        table: Mapping[tuple[int, ...], Sequence[float]] | None = None,
        dtype: torch.dtype = torch.float64,
    ):
        self.vocab_size = vocab_size
        self.seed = seed
        self.scale = scale
        self.dtype = dtype
        self.identity = f"table:{name}:V={vocab_size}:seed={seed}:scale={scale}"
        self._rows: dict[tuple[int, ...], torch.Tensor] = {}
        if table is not None:
            for prefix, row in table.items():
                self._rows[tuple(prefix)] = torch.as_tensor(row, dtype=dtype)
            self.identity = f"table:{name}:V={vocab_size}:explicit"
        self._explicit = table is not None
        self._blocks: dict[tuple[tuple[int, ...], int], torch.Tensor] = {}
        self.forward_calls = 0

    def raw_logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        """float[V]: the raw logit row after ``prefix``."""
        row = self._rows.get(prefix)
        if row is None:
            if self._explicit:
                raise KeyError(f"explicit table has no row for prefix {prefix}")
            key = hashlib.blake2b(repr((self.seed, prefix)).encode(), digest_size=8).digest()
            gen = torch.Generator().manual_seed(int.from_bytes(key, "little") & ((1 << 63) - 1))
            row = torch.randn(self.vocab_size, generator=gen, dtype=self.dtype) * self.scale
            self._rows[prefix] = row
        return row

    def new_cache(self) -> KVCache:
        return KVCache()

    splits_head = True

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The full head (the identity): hidden float[N, V] -> logits float[N, V]."""
        return hidden

    def subset_head(self, columns: torch.Tensor):
        """-> hidden float[N, V] -> float[N, len(columns)]: the logits at ``columns``."""
        return lambda hidden: hidden[:, columns]

    def body_step(self, cache: KVCache, rows: Sequence[RowInput], logits_for: int | None = None) -> StepOutput:
        """``step`` whose rows also come back as ``StepOutput.hidden`` (the head is the identity)."""
        out = self.step(cache, rows, logits_for)
        return StepOutput(out.logits, out.kv, list(out.logits))

    def step(self, cache: KVCache, rows: Sequence[RowInput], logits_for: int | None = None) -> StepOutput:
        """Each row's logits are the table's row at the context its query sees: the slot's committed
        rows and its ancestors (a chain's: every row before it; a token tree's: its own branch)."""
        self.forward_calls += 1
        logits, kv = [], []
        for row in rows:
            row = row.on_host()  # a table row is looked up by the tokens themselves
            n = len(row.tokens)
            wanted = n if logits_for is None else min(logits_for, n)  # logits only where asked
            first = len(cache.temporary(row.slot))
            new_rows = KVRows(row.slot, row.tokens, row.positions, row.parents)
            if row.parents is None:
                context = tuple(cache.visible(row.slot)) + tuple(row.tokens)
                cache.stage(new_rows)
                key = (context, wanted)
                block = self._blocks.get(key)
                if block is None:  # a table row block is a pure function of the context: built once, read only
                    out = [self.raw_logits(context[: len(context) - n + i + 1]) for i in range(n - wanted, n)]
                    block = torch.stack(out) if out else torch.empty(0, self.vocab_size, dtype=self.dtype)
                    self._blocks[key] = block
            else:
                cache.stage(new_rows)
                out = [self.raw_logits(tuple(cache.context(row.slot, first + i))) for i in range(n - wanted, n)]
                block = torch.stack(out) if out else torch.empty(0, self.vocab_size, dtype=self.dtype)
            logits.append(block)
            kv.append(new_rows)
        return StepOutput(logits, kv)
