"""The K/V ledger: committed rows, temporary rows, and their token identities.

Every cache (the table model's, or a Hugging Face cache wrapper) keeps this
ledger per slot (one slot per request): ``committed`` is authoritative history,
``temporary`` holds rows a step produced that no round has committed yet. A step
stages its rows; the round commits a path of the temporary rows and drops the
rest. Each temporary row has a parent: the temporary row it follows (its index among
the slot's temporary rows), or -1 for the committed history itself. Rows staged without
parents continue the slot's last row, one after another (a chain); a token tree's rows
name theirs (``KVRows.parents``; specd.core.tree), so siblings stand at one position and
each row sees the committed history and its own ancestors only. Positions are absolute and
must follow the parent's: a row whose position is not the next one after its parent's (a
replayed frontier, a gap) is refused with CacheIdentityError. What a round commits must be
a path from the committed history (a chain's: a prefix). Slots open when a request joins
and close when it leaves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from specd.core.record import record
from specd.errors import CacheIdentityError

# A row's token while it lives on the device only: a model draft's drafts are read once, with the
# round's decision; until then the ledger holds PENDING in their place (``KVCache.resolve``).
PENDING = -1
TAIL = 16  # rows compared to tell that a cache's committed rows are an output's prefix (``grown_prefix``)


def grown_prefix(rows: Sequence[int], tokens: Sequence[int]) -> bool:
    """Whether ``rows`` are a prefix of ``tokens``, for rows that only ever grow along one output by
    appending what it publishes (a cache's committed rows, the output that ``tokens`` is now or was):
    then their count fitting and their last rows (TAIL of them) matching tells it, not a comparison
    of every token, each round."""
    n = len(rows)
    if n > len(tokens):
        return False
    tail = min(n, TAIL)
    return tuple(rows[n - tail :]) == tuple(tokens[n - tail : n])


def same_tokens(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two rows' tokens are the same, a PENDING one standing for whatever it will be read as."""
    return len(a) == len(b) and all(x == y or PENDING in (x, y) for x, y in zip(a, b))


@record
class KVRows:
    """Identities of K/V rows: which token at which absolute position, in which slot, and for the
    rows of a token tree each row's parent (its index among the slot's temporary rows, counting
    those staged before it; -1: the committed history). ``parents`` None: a chain continuing the
    slot's last row."""

    slot: int
    tokens: tuple[int, ...]
    positions: tuple[int, ...]
    parents: tuple[int, ...] | None = None
    # int64[m] on the model's device: the row's last m tokens, which ``tokens`` holds as PENDING (a
    # model draft's, not read yet). None: every token is known.
    ids: torch.Tensor | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return len(self.tokens)

    def take(self, start: int, stop: int | None = None) -> KVRows:
        """The identities of rows start..stop (their parents are not carried: what they identify is
        token and position; pending tokens stay pending)."""
        tokens = self.tokens[start:stop]
        ids = None
        if self.ids is not None:
            first = len(self.tokens) - len(self.ids)  # the first pending row
            kept = range(len(self.tokens))[start:stop]
            pending = [i - first for i in kept if i >= first]
            ids = self.ids[pending[0] : pending[-1] + 1] if pending else None
        return KVRows(self.slot, tokens, self.positions[start:stop], ids=ids)

    def on_host(self) -> KVRows:
        """These rows with every token known (a pending row's read from the device: for a backend
        that computes on the host)."""
        if self.ids is None:
            return self
        known = self.tokens[: len(self.tokens) - len(self.ids)]
        return KVRows(self.slot, known + tuple(self.ids.tolist()), self.positions, self.parents)


@dataclass
class LedgerCounts:
    """Row traffic over the cache's life (for the run statistics)."""

    staged: int = 0
    committed: int = 0
    discarded: int = 0


@dataclass
class KVCache:
    """Identity ledger per open slot. Physical caches subclass it and override the hooks."""

    _committed: dict[int, list[int]] = field(default_factory=dict)
    _temporary: dict[int, list[int]] = field(default_factory=dict)
    _parents: dict[int, list[int]] = field(default_factory=dict)  # per temporary row: its parent
    _positions: dict[int, list[int]] = field(default_factory=dict)  # per temporary row: its position
    counts: LedgerCounts = field(default_factory=LedgerCounts)

    def open(self, slot: int) -> None:
        """A request joins: its slot starts empty."""
        if slot in self._committed:
            raise CacheIdentityError(f"slot {slot} is already open")
        self._committed[slot] = []
        self._clear(slot)

    def _clear(self, slot: int) -> None:
        self._temporary[slot], self._parents[slot], self._positions[slot] = [], [], []

    def close(self, slot: int) -> None:
        """The request left: forget the slot (physical caches free its storage)."""
        for rows in (self._committed, self._temporary, self._parents, self._positions):
            rows.pop(slot, None)

    def compact(self) -> None:
        """Give back the storage of closed slots (physical caches; the ledger has none)."""

    def tidy(self) -> None:
        """Between rounds: drop physical storage no row uses (physical caches; the ledger has none)."""

    def is_open(self, slot: int) -> bool:
        return slot in self._committed

    def committed(self, slot: int) -> tuple[int, ...]:
        return tuple(self._committed[slot])

    def temporary(self, slot: int) -> tuple[int, ...]:
        return tuple(self._temporary[slot])

    def committed_length(self, slot: int) -> int:
        return len(self._committed[slot])

    def prefix_held(self, slot: int, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` the slot's committed rows hold: all of its rows where they are a prefix
        of ``tokens``, else 0. A slot's rows only ever grow along one output (a commit appends the rows
        of what was published), so ``grown_prefix`` tells it."""
        rows = self._committed[slot]
        return len(rows) if grown_prefix(rows, tokens) else 0

    def temporary_parents(self, slot: int) -> tuple[int, ...]:
        """Each temporary row's parent (-1: the committed history)."""
        return tuple(self._parents[slot])

    def ancestors(self, slot: int, row: int) -> list[int]:
        """The temporary rows a row at temporary index ``row`` sees: its ancestors and itself, in
        order (-1: none)."""
        out = []
        while row >= 0:
            out.append(row)
            row = self._parents[slot][row]
        return out[::-1]

    def context(self, slot: int, row: int) -> list[int]:
        """The tokens a row's query sees: the committed history, then temporary row ``row`` and
        its ancestors (-1: the committed history alone)."""
        temp = self._temporary[slot]
        return self._committed[slot] + [temp[r] for r in self.ancestors(slot, row)]

    def visible(self, slot: int) -> list[int]:
        """What the next step's first input sees when it continues the slot's last row."""
        return self.context(slot, len(self._temporary[slot]) - 1)

    def length(self, slot: int) -> int:
        return len(self._committed[slot]) + len(self._temporary[slot])

    def expect(self, rows: KVRows) -> tuple[tuple[int, ...], list[int]]:
        """Refuse rows whose positions do not follow their parents' (a chain's: continue the slot's
        rows) with CacheIdentityError, before a backend sees them -> (their parents, the slot's
        temporary positions with theirs appended)."""
        slot, base = rows.slot, len(self._temporary[rows.slot])
        parents = rows.parents if rows.parents is not None else tuple(range(base - 1, base + len(rows) - 1))
        expected = list(self._positions[slot])  # every temporary row's position, these rows' appended
        for i, parent in enumerate(parents):
            if not -1 <= parent < base + i:
                raise CacheIdentityError(f"slot {slot}: row {base + i}'s parent {parent} is not a row before it")
            expected.append((expected[parent] if parent >= 0 else len(self._committed[slot]) - 1) + 1)
        if rows.positions != tuple(expected[base:]):
            raise CacheIdentityError(
                f"slot {slot}: rows at positions {list(rows.positions)} but the cache holds "
                f"{self.length(slot)} rows (expected positions {expected[base:]}): duplicate or shifted position"
            )
        return parents, expected

    def stage(self, rows: KVRows) -> None:
        """Record rows a step produced (``expect``'s check first)."""
        parents, expected = self.expect(rows)
        slot = rows.slot
        self._temporary[slot].extend(rows.tokens)
        self._parents[slot].extend(parents)
        self._positions[slot] = expected
        self.counts.staged += len(rows)

    def path_along(self, slot: int, tokens: Sequence[int]) -> list[int]:
        """The longest path of temporary rows from the committed history whose tokens are a prefix of
        ``tokens`` (a chain's: its common prefix with them)."""
        temp, parents = self._temporary[slot], self._parents[slot]
        path, at = [], -1
        for token in tokens:
            nxt = next((r for r in range(len(temp)) if parents[r] == at and temp[r] == token), None)
            if nxt is None:
                break
            path.append(nxt)
            at = nxt
        return path

    def kept(self, slot: int, keep: int | Sequence[int]) -> list[int]:
        """The temporary rows a commit keeps: the first ``keep`` (an int), or the rows ``keep`` names,
        which must form a path from the committed history (each the parent of the next)."""
        temp = self._temporary[slot]
        rows = list(range(keep)) if isinstance(keep, int) else list(keep)
        if isinstance(keep, int) and not 0 <= keep <= len(temp):
            raise CacheIdentityError(f"slot {slot}: cannot commit {keep} of {len(temp)} temporary rows")
        parent = -1
        for r in rows:
            if not 0 <= r < len(temp) or self._parents[slot][r] != parent:
                raise CacheIdentityError(
                    f"slot {slot}: cannot commit temporary rows {rows}: they are not a path from the committed rows"
                )
            parent = r
        return rows

    def commit(self, slot: int, keep: int | Sequence[int], later: int = 0) -> None:
        """The temporary rows ``keep`` names (``kept``) become history; the rest are dropped, but the
        last ``later`` rows, a round's launched after this one's (run ahead), which stay temporary: they
        must continue what is kept, from its last row (refused, CacheIdentityError, otherwise)."""
        temp = self._temporary[slot]
        if later:
            self._keep_later(slot, keep, later)
            return
        rows = self.kept(slot, keep)
        self._committed[slot].extend(temp[r] for r in rows)
        self.counts.committed += len(rows)
        self.counts.discarded += len(temp) - len(rows)
        self._clear(slot)

    def _keep_later(self, slot: int, keep: int | Sequence[int], later: int) -> None:
        """``commit`` of the rows before the last ``later``, which stay temporary, re-parented."""
        temp, parents, positions = self._temporary[slot], self._parents[slot], self._positions[slot]
        first = len(temp) - later
        rows = self.kept(slot, keep)
        if any(r >= first for r in rows) or rows != list(range(first)) or parents[first] != first - 1:
            raise CacheIdentityError(
                f"slot {slot}: a later round's rows must continue every row of the one committed before them"
            )
        self._committed[slot].extend(temp[:first])
        self.counts.committed += first
        self._temporary[slot] = temp[first:]
        self._parents[slot] = [p - first if p >= first else -1 for p in parents[first:]]
        self._positions[slot] = positions[first:]

    def discard(self, slot: int) -> None:
        self.commit(slot, 0)

    def resolve(self, slot: int, tokens: Sequence[int]) -> None:
        """The slot's first PENDING temporary rows take ``tokens``, in order (what a round read; rows a
        later round staged, run ahead, stay pending until that round is read)."""
        temp = self._temporary.get(slot)
        if not temp or PENDING not in temp:
            return
        given = iter(tokens)
        for i, token in enumerate(temp):
            if token == PENDING:
                nxt = next(given, None)
                if nxt is None:
                    return
                temp[i] = nxt

    def reset(self, slot: int) -> None:
        """Forget a slot's rows but keep it open (its history is rebuilt from scratch)."""
        self._committed[slot] = []
        self._clear(slot)
