"""Stop rules applied to a round's outcome before publication.

- EOS or the length cap inside the accepted prefix truncates it and suppresses
  the correction/bonus;
- a correction/bonus that is EOS or reaches the cap is emitted once and ends
  the request;
- zero remaining budget runs no round (the engine never schedules it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StopDecision:
    emitted: tuple[int, ...]  # tokens appended to the output this round
    accepted_emitted: int  # A_emit: accepted drafts that survive truncation
    terminal_emitted: bool  # the correction/bonus was appended
    finish_reason: str | None  # "eos", "length", or None (request continues)


def apply_stops(accepted: Sequence[int], terminal: int, eos_ids: frozenset[int], remaining: int) -> StopDecision:
    if remaining <= 0:
        raise ValueError("a request with no remaining budget must not run a round")
    for i, token in enumerate(accepted):
        if token in eos_ids:
            return StopDecision(tuple(accepted[: i + 1]), i + 1, False, "eos")
        if i + 1 == remaining:
            return StopDecision(tuple(accepted[: i + 1]), i + 1, False, "length")
    emitted = (*accepted, terminal)
    if terminal in eos_ids:
        reason = "eos"
    elif len(emitted) == remaining:
        reason = "length"
    else:
        reason = None
    return StopDecision(tuple(emitted), len(accepted), True, reason)
