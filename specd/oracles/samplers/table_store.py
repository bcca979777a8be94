"""What the sampler checks make once per process: the tables (``made``), and the target's chains on a table
(``completion``). A table is a pure function of what makes it, so every check of a process (a library user's
checks, a test session's) reads each of its rows, and each target chain after an output, once."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from fractions import Fraction
from typing import TypeVar

from specd.oracles.reference import Joint, chain_joint

T = TypeVar("T")

# The tables made in this process by what made them (a configuration, or a base, a kind and a seed), the latest used
# last; at most _MADE_MOST (a wide table's rows and chains are a few hundred KB).
_MADE: OrderedDict = OrderedDict()
_MADE_MOST = 512


def made(key, make: Callable[[], T]) -> T:
    """The table made by ``key``: made by ``make`` the first time, kept for later checks."""
    if key in _MADE:
        _MADE.move_to_end(key)
        return _MADE[key]
    table = _MADE[key] = make()
    if len(_MADE) > _MADE_MOST:
        _MADE.popitem(last=False)
    return table


def completion(rows, start: tuple[int, ...], horizon: int, exact: bool = False) -> Joint:
    """The target chain over ``horizon`` tokens after ``start`` on ``rows`` (specd.oracles.reference.chain_joint, in
    Fractions where ``exact``), kept on a table that has ``completions`` (specd.oracles.samplers.tables.Table) for
    its later checks: its rows never change. Read it, never write it."""
    memo = getattr(rows, "completions", None)
    memo = {} if memo is None else memo
    key = (start, horizon, exact)
    if key not in memo:
        memo[key] = chain_joint(rows.p, start, horizon, Fraction(1) if exact else 1.0)
    return memo[key]
