"""A class of slip a foreign sampler's check covers (``verify-oracle --sampler``): what it is, why a size hides
it, and the smallest size that shows it (its classes: specd.oracles.samplers.slip_classes for trees,
chain_slip_classes for chains, size_classes for the widths and depths both share)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Slip:
    """A class of slip: ``hidden(vocab, shape or K)`` says why a size cannot show it (None: it can),
    ``shown_at(widest)`` the flags of the smallest size that does, for a tree whose widest sibling
    group has ``widest`` children."""

    name: str
    what: str
    hidden: Callable[[int, object], str | None]
    shown_at: Callable[[int], str]


def count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"
