"""Preallocated K/V for a Hugging Face model: one batch row per request slot, rollback by length.

Each layer's keys and values live in one tensor float[rows, kv_heads, capacity, head_dim],
allocated at the first step and grown by doubling (rows as requests join, columns as outputs
grow). A slot's batch row holds its committed rows at columns 0..c-1, in order, so a committed
row's column is its logical position, and the round's temporary rows after them, in the order
they were staged (column c + t for temporary row t). A step writes each of its input rows at a
column given as a tensor and attends through a 4D mask given as a tensor: a query sees its slot's
committed columns and, among the temporary ones, its own ancestors and itself (a chain's: every
temporary row before it).

Committing a chain's prefix moves a length and copies nothing; committing a token tree's path
copies the path's columns down next to the committed ones first. Dropping temporary rows costs
nothing: the next step writes over them. A finished request's row is free and the next request to
join takes it; ``compact`` moves the highest rows down into free ones once a quarter are free, so
a step runs over the rows in use. The ledger (``specd.core.kv.KVCache``) keeps the token identities;
the store keeps the tensors. Nothing here reads from the device.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from specd.core.kv import KVCache, KVRows
from specd.core.transfer import to_device
from specd.errors import CacheIdentityError

MIN_CAPACITY = 64  # columns allocated at first; grown by doubling


class SlotStore(Cache):
    """The K/V tensors, as the transformers ``Cache`` a model's attention layers write into.

    Before each call the adapter sets ``write`` int64[B, n] (the column each input row of the call's
    B batch rows is written at), ``span`` (the columns attention reads: every column any query may
    see) and ``batch`` (the physical rows of the call, int64[B]; None: rows 0..B-1, read as views,
    with no copy)."""

    def __init__(self) -> None:
        super().__init__(layers=[])
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.rows = 0  # allocated batch rows
        self.capacity = 0  # allocated columns
        self.write: torch.Tensor | None = None
        self.batch: torch.Tensor | None = None
        self.span = 0
        self._columns: torch.Tensor | None = None
        self._at: torch.Tensor | None = None  # ``write`` expanded (``_index``)
        self._at_of: torch.Tensor | None = None  # the ``write`` it was expanded from

    def __repr__(self) -> str:
        return f"SlotStore(rows={self.rows}, capacity={self.capacity}, layers={len(self.keys)})"

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.span

    def columns(self, span: int, device: torch.device) -> torch.Tensor:
        """0..span-1 as int64[span] on ``device`` (a view of one arange, kept: a step compares its
        write columns against it for its mask)."""
        if self._columns is None or self._columns.shape[0] < span or self._columns.device != device:
            self._columns = torch.arange(max(span, self.capacity), device=device)
        return self._columns[:span]

    def reserve(self, rows: int, columns: int) -> None:
        """At least ``rows`` batch rows and ``columns`` columns, growing by doubling (a copy of
        what is held); layers not allocated yet take the size at their first write."""
        if rows <= self.rows and columns <= self.capacity:
            return
        new_rows = max(rows, 2 * self.rows if rows > self.rows else self.rows)
        new_cap = max(columns, MIN_CAPACITY, 2 * self.capacity if columns > self.capacity else self.capacity)
        for store in (self.keys, self.values):
            for i, old in enumerate(store):
                grown = old.new_zeros(new_rows, old.shape[1], new_cap, old.shape[3])
                grown[: old.shape[0], :, : old.shape[2]] = old
                store[i] = grown
        self.rows, self.capacity = new_rows, new_cap

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        """Write the call's new rows (float[B, H, n, D]) at their columns -> the keys and values
        attention reads: float[B, H, span, D]."""
        if layer_idx == len(self.keys):  # first write of this layer: its shape, dtype and device
            _, heads, _, dim = key_states.shape
            shape = (self.rows, heads, self.capacity, dim)
            self.keys.append(key_states.new_zeros(shape))
            self.values.append(value_states.new_zeros(shape))
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        at = self._index(key_states.shape)
        if key_states.dtype != keys.dtype:
            key_states, value_states = key_states.to(keys.dtype), value_states.to(values.dtype)
        if self.batch is None:
            b = key_states.shape[0]
            k, v = keys[:b], values[:b]  # views: written in place
            k.scatter_(2, at, key_states)
            v.scatter_(2, at, value_states)
            return k[:, :, : self.span], v[:, :, : self.span]
        k = keys.index_select(0, self.batch).scatter_(2, at, key_states)
        v = values.index_select(0, self.batch).scatter_(2, at, value_states)
        keys.index_copy_(0, self.batch, k)
        values.index_copy_(0, self.batch, v)
        return k[:, :, : self.span], v[:, :, : self.span]

    def _index(self, shape: torch.Size) -> torch.Tensor:
        """``write`` expanded to the new rows' shape [B, H, n, D], as ``scatter_`` takes it: built
        once a call and shared by its layers (a view of ``write``, so a captured call's copy into
        ``write`` reaches it)."""
        at = self._at
        if at is None or self._at_of is not self.write or at.shape != shape:
            at = self._at = self.write[:, None, :, None].expand(shape)
            self._at_of = self.write
        return at

    def move_columns(self, row: int, start: int, source: torch.Tensor) -> None:
        """Row ``row``'s columns start.. take its columns ``source`` (int64[m], each >= its target)."""
        for store in (self.keys, self.values):
            for t in store:
                t[row, :, start : start + len(source)] = t[row].index_select(1, source)

    def move_row(self, source: int, target: int) -> None:
        """Batch row ``target`` takes row ``source``'s K/V."""
        for store in (self.keys, self.values):
            for t in store:
                t[target] = t[source]

    def clear(self) -> None:
        """Give every tensor back (no row in use)."""
        self.keys, self.values, self.rows, self.capacity = [], [], 0, 0


class SlotCache(KVCache):
    """The identity ledger plus a ``SlotStore`` whose batch rows are requests (module docstring)."""

    def __init__(self, device: torch.device, window: int | None = None):
        """``window``: the model's attention window (sliding-window layers), or None. A slot's rows
        must stay within it (a window would start to hide positions): a step past it is refused."""
        super().__init__()
        self.device = device
        self.window = window
        self.store = SlotStore()
        self.rows: list[int | None] = []  # physical batch row -> slot (None: free)
        self._row: dict[int, int] = {}  # slot -> physical batch row
        self._branching: set[int] = set()  # slots whose temporary rows are not one chain

    def row_of(self, slot: int) -> int:
        return self._row[slot]

    def open(self, slot: int) -> None:
        super().open(slot)
        free = next((i for i, s in enumerate(self.rows) if s is None), None)
        if free is None:
            free = len(self.rows)
            self.rows.append(None)
        self.rows[free] = slot
        self._row[slot] = free

    def close(self, slot: int) -> None:
        super().close(slot)
        self._branching.discard(slot)
        row = self._row.pop(slot, None)
        if row is not None:
            self.rows[row] = None
        while self.rows and self.rows[-1] is None:
            self.rows.pop()  # the rows a step runs over end at the last one in use

    def compact(self) -> None:
        """Once a quarter of the rows a step runs over are free, move the highest rows in use down
        into the free ones (a copy of each moved row), so that steps cost the live requests."""
        free = [i for i, s in enumerate(self.rows) if s is None]
        if not self._row:
            self.rows = []
            self.store.clear()
            return
        if not free or 4 * len(free) < len(self.rows):
            return
        for target in free:
            while self.rows and self.rows[-1] is None:
                self.rows.pop()
            source = len(self.rows) - 1
            if source <= target:
                break
            slot = self.rows[source]
            self.store.move_row(source, target)
            self.rows[target], self.rows[source] = slot, None
            self._row[slot] = target
        while self.rows and self.rows[-1] is None:
            self.rows.pop()

    def stage(self, rows: KVRows) -> None:
        base = len(self._temporary[rows.slot])
        super().stage(rows)
        if rows.parents is not None and any(p != base + i - 1 for i, p in enumerate(rows.parents)):
            self._branching.add(rows.slot)

    def branching(self, slot: int) -> bool:
        """Whether the slot's temporary rows are not one chain (a token tree's)."""
        return slot in self._branching

    def commit(self, slot: int, keep, later: int = 0) -> None:
        rows = list(range(keep)) if isinstance(keep, int) else list(keep)
        if rows != list(range(len(rows))) and not later:  # a tree's path: its columns move down
            rows = self.kept(slot, rows)  # a path that is not one is refused before any column moves
            start = self.committed_length(slot)
            source = to_device([start + r for r in rows], torch.int64, self.device)
            self.store.move_columns(self._row[slot], start, source)
        self._branching.discard(slot)
        super().commit(slot, keep, later)  # the path checked there (``kept``), once for a chain's rows

    def reset(self, slot: int) -> None:
        self._branching.discard(slot)
        super().reset(slot)

    def check_window(self, slot: int, n_new: int) -> None:
        """Refuse a step that would take the slot past the model's attention window."""
        if self.window is not None and self.length(slot) + n_new > self.window:
            raise CacheIdentityError(
                f"a step of {n_new} rows would take the cache past the model's attention window of "
                f"{self.window} positions ({self.length(slot)} held), where the window would hide positions"
            )
