"""One call at a time on a model: every specd call on a model holds its lock.

Calls on one model share state beyond its weights: the product forms being timed
(specd.models.hf.products), the call counters a round's statistics are read from, and the
eval mode a call switches a training model to (specd.models.hf.modes). Two threads on one
``Pair``, or two pairs on one model object, therefore take turns: a pipeline holds the
locks of all its models for each round (``Pipeline.stream``) and for each call that runs
them outside a round, so the threads' requests interleave round by round and each decodes
as it would alone. The locks are re-entrant (a call inside a call, in one thread) and taken
in one order (no two callers can each hold one the other waits for).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its lock, while the model lives
_MADE = threading.Lock()  # guards _LOCKS itself


def lock_of(model: object) -> threading.RLock:
    with _MADE:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = threading.RLock()
        return lock


@contextmanager
def exclusive(models: Iterable[object]) -> Iterator[None]:
    """Hold the lock of each of ``models`` (each once, in the order of their ids)."""
    with Holding(locks_of(models)):
        yield


def locks_of(models: Iterable[object]) -> tuple[threading.RLock, ...]:
    """The locks of ``models``, each model's once, in the order of their ids (the one order every
    caller takes them in)."""
    unique = {id(m): m for m in models}
    return tuple(lock_of(model) for _, model in sorted(unique.items()))


class Holding:
    """``with Holding(locks):`` holds ``locks`` in order for the block, released in reverse (a class, not a
    generator: a round's events take it once each)."""

    __slots__ = ("locks",)

    def __init__(self, locks: tuple[threading.RLock, ...]):
        self.locks = locks

    def __enter__(self) -> None:
        taken = []
        try:
            for lock in self.locks:
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise

    def __exit__(self, *exc) -> None:
        for lock in reversed(self.locks):
            lock.release()
