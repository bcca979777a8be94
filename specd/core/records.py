"""Acceptance-log rows: emitted by the engine as data, never printed.

One ``AcceptanceRecord`` per proposed token and one ``RoundRecord`` per round.
``specd.traces.log`` serializes them under the versioned schema ``specd.trace/v1``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class AcceptanceRecord:
    request_id: str
    round_id: str
    round_index: int
    draft_index: int  # i in 1..k
    position: int  # absolute output position the draft token would occupy
    draft_token: int
    q_prob: float  # q_i(d_i)
    p_prob: float  # p_i(d_i)
    accept_ratio: float  # min(1, p/q)
    uniform: float | None  # U_i, None when the test was not reached or greedy
    reached: bool  # every earlier draft was accepted
    accepted: bool
    correction_distribution_id: str | None  # set on the rejected position
    committed_token_count: int  # output tokens after this round was published

    def as_dict(self) -> dict:
        return {"type": "proposal", **asdict(self)}


@dataclass(frozen=True)
class RoundRecord:
    request_id: str
    round_id: str
    round_index: int
    k: int
    accepted: int  # A
    terminal_kind: str  # correction | bonus | stop
    terminal_token: int
    emitted: tuple[int, ...]
    start_position: int  # output length before the round
    committed_token_count: int
    finish_reason: str | None

    def as_dict(self) -> dict:
        return {"type": "round", **asdict(self), "emitted": list(self.emitted)}
