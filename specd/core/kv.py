"""The K/V ledger: committed rows, temporary rows, and their token identities.

Every cache (the table model's, or a Hugging Face cache wrapper) keeps this
ledger per slot: ``committed`` is authoritative history, ``temporary`` holds
rows a step produced that no transaction has committed yet. A step stages its
rows; a transaction commits a prefix of the temporary rows and drops the rest.
Positions are absolute and must be contiguous: a row whose position is not the
next one (a replayed frontier, a gap) is refused with CacheIdentityError.
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
    """Row traffic over the cache's life (for the stats ledger)."""

    staged: int = 0
    committed: int = 0
    discarded: int = 0


@dataclass
class KVCache:
    """Identity ledger for ``slots`` requests. Subclasses add physical tensors."""

    slots: int
    _committed: list[list[int]] = field(default_factory=list)
    _temporary: list[list[int]] = field(default_factory=list)
    counts: LedgerCounts = field(default_factory=LedgerCounts)

    def __post_init__(self) -> None:
        self._committed = [[] for _ in range(self.slots)]
        self._temporary = [[] for _ in range(self.slots)]

    def committed(self, slot: int) -> tuple[int, ...]:
        return tuple(self._committed[slot])

    def temporary(self, slot: int) -> tuple[int, ...]:
        return tuple(self._temporary[slot])

    def visible(self, slot: int) -> list[int]:
        """What the next step's first input sees: committed then temporary rows."""
        return self._committed[slot] + self._temporary[slot]

    def length(self, slot: int) -> int:
        return len(self._committed[slot]) + len(self._temporary[slot])

    def stage(self, rows: KVRows) -> None:
        """Record rows a step produced; positions must continue the slot's rows."""
        start = self.length(rows.slot)
        expected = tuple(range(start, start + len(rows)))
        if rows.positions != expected:
            raise CacheIdentityError(
                f"slot {rows.slot}: rows at positions {list(rows.positions)} but the cache holds "
                f"{start} rows (expected positions {list(expected)}): duplicate or shifted position"
            )
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
        self._after_commit(slot)

    def discard(self, slot: int) -> None:
        self.commit(slot, 0)

    def reset(self, slot: int) -> None:
        """Forget a slot entirely (request finished or rebuilt)."""
        self._committed[slot] = []
        self._temporary[slot] = []
        self._after_commit(slot)

    def release(self, slot: int) -> None:
        """The request finished: physical caches may free its storage (identities stay)."""

    def _after_commit(self, slot: int) -> None:
        """Hook for physical caches: make storage match the ledger."""
