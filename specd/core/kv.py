"""The K/V ledger: committed rows, temporary rows, and their token identities.

Every cache (the table model's, or a Hugging Face cache wrapper) keeps this
ledger per slot (one slot per request): ``committed`` is authoritative history,
``temporary`` holds rows a step produced that no round has committed yet. A step
stages its rows; the round commits a prefix of the temporary rows and drops the
rest. Positions are absolute and must be contiguous: a row whose position is not
the next one (a replayed frontier, a gap) is refused with CacheIdentityError.
Slots open when a request joins and close when it leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specd.errors import CacheIdentityError


@dataclass(frozen=True)
class KVRows:
    """Identities of K/V rows: which token at which absolute position, in which slot."""

    slot: int
    tokens: tuple[int, ...]
    positions: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.tokens)

    def take(self, start: int, stop: int | None = None) -> KVRows:
        return KVRows(self.slot, self.tokens[start:stop], self.positions[start:stop])


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
    counts: LedgerCounts = field(default_factory=LedgerCounts)

    def open(self, slot: int) -> None:
        """A request joins: its slot starts empty."""
        if slot in self._committed:
            raise CacheIdentityError(f"slot {slot} is already open")
        self._committed[slot] = []
        self._temporary[slot] = []

    def close(self, slot: int) -> None:
        """The request left: forget the slot (physical caches free its storage)."""
        self._committed.pop(slot, None)
        self._temporary.pop(slot, None)

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

    def visible(self, slot: int) -> list[int]:
        """What the next step's first input sees: committed then temporary rows."""
        return self._committed[slot] + self._temporary[slot]

    def length(self, slot: int) -> int:
        return len(self._committed[slot]) + len(self._temporary[slot])

    def expect(self, rows: KVRows) -> None:
        """Refuse rows whose positions do not continue the slot's rows (CacheIdentityError)."""
        start = self.length(rows.slot)
        expected = tuple(range(start, start + len(rows)))
        if rows.positions != expected:
            raise CacheIdentityError(
                f"slot {rows.slot}: rows at positions {list(rows.positions)} but the cache holds "
                f"{start} rows (expected positions {list(expected)}): duplicate or shifted position"
            )

    def stage(self, rows: KVRows) -> None:
        """Record rows a step produced; positions must continue the slot's rows."""
        self.expect(rows)
        self._temporary[rows.slot].extend(rows.tokens)
        self.counts.staged += len(rows)

    def commit(self, slot: int, keep: int) -> None:
        """The first ``keep`` temporary rows become history; the rest are dropped."""
        temp = self._temporary[slot]
        if not 0 <= keep <= len(temp):
            raise CacheIdentityError(f"slot {slot}: cannot commit {keep} of {len(temp)} temporary rows")
        self._committed[slot].extend(temp[:keep])
        self.counts.committed += keep
        self.counts.discarded += len(temp) - keep
        self._temporary[slot] = []

    def discard(self, slot: int) -> None:
        self.commit(slot, 0)

    def reset(self, slot: int) -> None:
        """Forget a slot's rows but keep it open (its history is rebuilt from scratch)."""
        self._committed[slot] = []
        self._temporary[slot] = []
