"""What one call of a Hugging Face model is fed over a slot cache (specd.models.hf.slot_cache).

A call runs over batch rows of the cache: every row in use (each request's rows right-padded
to the call's longest, a row with no input all padding), or, for requests that have just joined
with whole prompts to feed, only theirs (the others would be padded by a prompt's length). For
each batch row it gives, as tensors: the token ids, their logical positions (rotary embeddings
see each row's true positions, a tree node its depth's), the column each input's K/V is written
at (temporary row t of a slot with c committed rows: column c + t; padding goes after a row's
real inputs, where the next step writes over it), and the attention mask: a query sees its
slot's committed columns and, among the temporary ones, its ancestors and itself (a chain's:
every column up to its own, so its mask is one comparison). A token tree's rows (or a slot whose
temporary rows branch) get their rows of the mask from the ledger's parents. The model is given
the mask additive, in its dtype, built once a call: 0 where a query attends, -inf where not (the
form SDPA turns a boolean mask into in every layer, at two operations a layer: the same sums, bit
for bit); for eager attention the dtype's lowest instead of -inf. A model whose floating parameters
are of several dtypes gets SDPA's mask boolean: its queries' dtype is not known before the call.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specd.core.model import RowInput
from specd.core.rows import joined
from specd.core.transfer import to_device
from specd.models.hf.graphs import SPARE
from specd.models.hf.grouped_attention import registered as grouped_sdpa
from specd.models.hf.slot_cache import SlotCache

# Attention implementations a step runs with: both take a ready 4D mask (transformers passes it on
# untouched). A model configured for another (flash attention takes 2D masks only) runs with SDPA.
MASKED_ATTENTION = ("sdpa", "eager")
# A draft's device-held tokens reach a call's ids row by row (one operation a row) up to this many rows,
# beyond it by one scatter (about four operations: its index, the tokens joined, the write).
SLICED_ROWS = 4


@dataclass(frozen=True)
class Call:
    """One call's inputs over B batch rows and n columns of input."""

    ids: torch.Tensor  # int64[B, n] token ids (padding: the pad id)
    positions: torch.Tensor  # int64[B, n] logical positions
    write: torch.Tensor  # int64[B, n] the column each input's K/V is written at
    mask: torch.Tensor  # float[B, 1, n, span] additive (0 attends, -inf or eager's lowest not), or bool (mask_dtype)
    span: int  # columns attention reads
    batch: torch.Tensor | None  # int64[B] the physical rows of the call; None: rows 0..B-1
    at: tuple[int, ...]  # per input row (in the order given): its batch row in the call


def attention_of(model) -> str:
    """The attention a step runs the model with (MASKED_ATTENTION): its own where it takes a 4D
    mask, else SDPA where the model supports it, else eager."""
    impl = getattr(model.config, "_attn_implementation", None)
    if impl in MASKED_ATTENTION:
        return impl
    return "sdpa" if getattr(model, "_supports_sdpa", True) else "eager"


def mask_dtype(model, attention: str) -> torch.dtype | None:
    """The dtype a step's additive mask is built in: the model's one floating dtype. None (SDPA takes
    the boolean mask) where its floating parameters are of several dtypes, a module kept in float32
    say, so that the queries' dtype is not known; eager attention takes the first parameter's."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if len(dtypes) == 1 or attention == "eager":
        return next(model.parameters()).dtype
    return None


class attention_as:  # noqa: N801 - a context manager, used as a function
    """``config``'s attention implementation set to ``attention`` for the length of one call (transformers
    reads it at every forward), and back after: a model object handed over stays as its owner left it.
    ``fields``: ``plain_fields(config)``, which a model finds once for all its calls."""

    __slots__ = ("config", "attention", "own", "fields")

    def __init__(self, config, attention: str, fields: dict | None = None) -> None:
        # SDPA's calls run as specd's grouped SDPA (K/V heads not repeated for several query rows)
        self.config, self.attention = config, grouped_sdpa() if attention == "sdpa" else attention
        self.fields = fields

    def __enter__(self) -> None:
        if self.fields is not None:
            self.own = self.fields[INTERNAL]
            self.fields[INTERNAL] = self.attention
        else:
            self.own = getattr(self.config, "_attn_implementation", None)
            if self.own != self.attention:
                self.config._attn_implementation = self.attention

    def __exit__(self, *exc) -> None:
        if self.fields is not None:
            self.fields[INTERNAL] = self.own
        elif self.own != self.attention:
            self.config._attn_implementation = self.own


INTERNAL = "_attn_implementation_internal"  # where transformers' config keeps its attention implementation


def plain_fields(config) -> dict | None:
    """``config``'s own attribute dict where its attention implementation lies there as a plain value
    with nothing to pass on (a config without sub-configs), else None. transformers' setter checks the
    value and passes it on to sub-configs (about 10 us a set, two a call); where there is nothing to pass
    on, the field is written as it lies. Tried once: a value written there must be what transformers
    reads back."""
    fields = vars(config)
    prop = getattr(type(config), "_attn_implementation", None)
    if INTERNAL not in fields or not isinstance(prop, property) or getattr(config, "sub_configs", None):
        return None
    own, probe = fields[INTERNAL], object()
    fields[INTERNAL] = probe
    try:
        read = getattr(config, "_attn_implementation", None)
    finally:
        fields[INTERNAL] = own
    return fields if read is probe else None


def subset(cache: SlotCache, rows: Sequence[RowInput]) -> bool:
    """Whether a call runs over its own rows only: joiners' whole prompts, beside running requests."""
    return len(rows) < len(cache.rows) and all(len(r.tokens) > 1 and cache.length(r.slot) == 0 for r in rows)


def plan_call(
    cache: SlotCache,
    rows: Sequence[RowInput],
    pad_id: int,
    attention: str,
    dtype: torch.dtype | None,
    bucket: tuple[int, int] | None = None,
) -> Call:
    """The call's inputs (module docstring); the cache's store is reserved for it. ``dtype``: the
    additive mask's (``mask_dtype``; None: SDPA's boolean mask). ``bucket`` (batch
    rows, rows per request): padded to that shape, attention over the store's whole capacity, which
    keeps SPARE columns past every slot's rows (a captured step's, specd.models.hf.graphs). Reads
    nothing from the device: what a slot holds is the ledger's."""
    if subset(cache, rows):  # joiners' prompts: only their rows run
        slots: list[int | None] = [r.slot for r in rows]
        batch_rows = [cache.row_of(r.slot) for r in rows]
    else:
        slots, batch_rows = list(cache.rows), []
    n_new = max(len(r.tokens) for r in rows)
    if bucket is not None:
        slots += [None] * (bucket[0] - len(slots))  # padded batch rows: free rows of the store
        n_new = bucket[1]
    ids, pos, write, trees, pending, span = _lay_out(cache, rows, slots, n_new, pad_id)
    if bucket is not None:
        cache.store.reserve(len(slots), span + SPARE)
        span = cache.store.capacity
    else:
        cache.store.reserve(len(cache.rows), span)
    device = cache.device
    every = len(pending) == len(slots) and all(b == i and not first for i, (b, first, _) in enumerate(pending))
    if every and all(len(r.tokens) == n_new for r in rows):  # a draft step: every token on the device, in order
        positions, columns_at = to_device([pos, write], torch.long, device).unbind(0)
        token_ids = joined([t for _, _, t in pending])
        token_ids = (token_ids if token_ids.device == device else token_ids.to(device)).view(len(slots), n_new)
    else:
        token_ids, positions, columns_at = to_device([ids, pos, write], torch.long, device).unbind(0)
        if len(pending) <= SLICED_ROWS:  # a model draft's tokens, never read: written into the ids on the device
            for b, first, t in pending:
                token_ids[b, first : first + len(t)] = t
        else:
            at = [(b, first + j) for b, first, t in pending for j in range(len(t))]
            where = to_device(at, torch.long, device)
            token_ids.index_put_((where[:, 0], where[:, 1]), torch.cat([t.to(device) for _, _, t in pending]))
    if bucket is None and n_new == 1 and not trees and all(w[0] == span - 1 for w in write):
        # one query a row, each at the span's last column: it sees every column, a mask of one value (a
        # target-only call whose slots are of one length, at batch 1 every one; a model draft's steps)
        fill = torch.ones if dtype is None else torch.zeros
        mask = fill(len(slots), 1, 1, span, dtype=dtype or torch.bool, device=device)
    else:
        attends = columns_at[:, None, :, None] >= cache.store.columns(span, device)  # bool[B, 1, n, span]: chains
        if trees:
            attends[to_device([b for b, *_ in trees], torch.int64, device), 0] = torch.stack(
                [_tree_rows(cache, row, committed, base, n_new, span) for _, row, committed, base in trees]
            ).to(device, non_blocking=True)
        mask = attends if dtype is None else torch.where(attends, *_additive(dtype, device, attention))
    batch = to_device(batch_rows, torch.int64, device) if batch_rows else None
    at = tuple(slots.index(r.slot) for r in rows) if batch_rows else tuple(cache.row_of(r.slot) for r in rows)
    return Call(token_ids, positions, columns_at, mask, span, batch, at)


@functools.cache
def _additive(dtype: torch.dtype, device: torch.device, attention: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The additive mask's two values as 0-dim ``dtype`` tensors on ``device``: (where a query attends,
    where it does not)."""
    masked = torch.finfo(dtype).min if attention == "eager" else float("-inf")
    return torch.zeros((), dtype=dtype, device=device), torch.full((), masked, dtype=dtype, device=device)


def _lay_out(cache: SlotCache, rows: Sequence[RowInput], slots: list[int | None], n_new: int, pad_id: int):
    """Each batch row's host-side inputs over ``n_new`` columns -> (token ids, positions, the columns
    it writes, its tree rows' facts (batch row, row, committed, base) where it branches, the tokens
    still on the device (batch row, first column, ids), the columns the call spans)."""
    by_slot = {r.slot: r for r in rows}
    ids, pos, write, trees = [], [], [], []
    pending: list[tuple[int, int, torch.Tensor]] = []  # (batch row, first column, ids): tokens on the device
    span = 0
    for b, slot in enumerate(slots):
        row = by_slot.get(slot) if slot is not None else None
        committed = cache.committed_length(slot) if slot is not None else 0
        base = cache.length(slot) if slot is not None else 0
        n = len(row.tokens) if row is not None else 0
        if row is not None:
            cache.check_window(slot, n)
            if row.parents is not None or cache.branching(slot):
                trees.append((b, row, committed, base))
        cols = list(range(base, base + n_new))
        known = list(row.tokens) if n else []
        if row is not None and row.ids is not None:
            first = n - len(row.ids)
            known[first:] = [pad_id] * len(row.ids)
            pending.append((b, first, row.ids))
        ids.append(known + [pad_id] * (n_new - n))
        pos.append(list(row.positions) + cols[n:] if n else cols)
        write.append(cols)
        span = max(span, base + n_new)
    return ids, pos, write, trees, pending, span


def _tree_rows(cache: SlotCache, row: RowInput, committed: int, base: int, n_new: int, span: int) -> torch.Tensor:
    """bool[n_new, span]: what each query of ``row`` sees when its slot's rows branch (a token tree's):
    the committed columns, its ancestors among the temporary rows (staged before or in this call),
    and itself; a padded query sees itself only."""
    out = torch.zeros(n_new, span, dtype=torch.bool)
    out[:, :committed] = True
    first = base - committed  # temporary rows staged before this call
    parents = list(cache.temporary_parents(row.slot))
    parents += row.parents if row.parents is not None else range(first - 1, first + len(row.tokens) - 1)
    for j in range(n_new):
        if j >= len(row.tokens):
            out[j, base + j] = True
            continue
        at = first + j
        while at >= 0:
            out[j, committed + at] = True
            at = parents[at]
    return out
