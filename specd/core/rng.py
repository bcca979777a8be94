"""Named, counter-based random streams, one set per request.

A draw is a pure function of (seed, request id, stream name, counter), so

- a retry of an unpublished round re-reads exactly the same draws (the counters
  in S_0 did not move), and
- a request's draws do not depend on which other requests share the batch.

Streams: ``proposal`` (draft sampling), ``acceptance`` (one uniform per *reached*
acceptance test) and ``terminal`` (one per correction/bonus sample). Counters
advance only for events that were reached; unreached draws were never observed
and are read again by the next round, which keeps the sequence i.i.d. because
the stopping point is a stopping time of that sequence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from specd.core.record import record

STREAMS: tuple[str, ...] = ("proposal", "acceptance", "terminal")
_INDEX = {name: i for i, name in enumerate(STREAMS)}
_TWO_POW_MINUS_53 = 2.0**-53


def uniform(seed: int, request_id: str, stream: str, counter: int) -> float:
    """One U[0, 1) draw with 53 random bits; identical on every platform."""
    key = f"{seed}\x1f{request_id}\x1f{stream}\x1f{counter}".encode()
    bits = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
    return (bits >> 11) * _TWO_POW_MINUS_53


@record
class RngState:
    """Per-request stream counters; part of the published request state (R)."""

    seed: int
    request_id: str
    counters: tuple[int, int, int] = (0, 0, 0)

    def counter(self, stream: str) -> int:
        return self.counters[_INDEX[stream]]

    def peek(self, stream: str, n: int) -> list[float]:
        """The next n draws of a stream, without consuming them."""
        start = self.counter(stream)
        return [uniform(self.seed, self.request_id, stream, start + i) for i in range(n)]

    def advance_all(self, proposal: int, acceptance: int, terminal: int) -> RngState:
        """Advance the three streams at once (in STREAMS order)."""
        if min(proposal, acceptance, terminal) < 0:
            raise ValueError("cannot rewind a stream")
        if not (proposal or acceptance or terminal):
            return self
        p, a, t = self.counters
        return RngState(self.seed, self.request_id, (p + proposal, a + acceptance, t + terminal))

    def advance(self, stream: str, n: int) -> RngState:
        if n < 0:
            raise ValueError("cannot rewind a stream")
        if n == 0:
            return self
        counters = list(self.counters)
        counters[_INDEX[stream]] += n
        return RngState(self.seed, self.request_id, tuple(counters))  # type: ignore[arg-type]


# Where a round reads its uniforms: (request state, stream name, n) -> the next n draws of
# that stream, not consumed. Production reads the request's own streams; the exact
# oracle injects one representative uniform per probability cell instead.
Draws = Callable[[Any, str, int], list[float]]  # (a RequestState, stream, n); RequestState imports this module


def stream_draws(state, stream: str, n: int) -> list[float]:
    """The production Draws: the request's own named stream at its counter."""
    return state.rng.peek(stream, n)
