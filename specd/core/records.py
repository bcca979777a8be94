"""What a run records, as data (never printed): acceptance-log rows, a round's timing, the result.

One ``AcceptanceRecord`` per proposed token and one ``RoundRecord`` per round
(``specd.traces.log`` serializes them under the versioned schema ``specd.trace/v1``);
one ``RoundTiming`` per round, which the engine publishes to its observers (the
measured costs of -k auto); a ``RunResult`` per run. ``round_records`` and
``round_timing`` are pure functions of a finished round's transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from specd.core.sources import SourceTiming
from specd.core.state import RequestState
from specd.core.stats import RunStats


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
    source: str | None  # the draft source of the round (None: no drafts)
    accepted: int  # A
    terminal_kind: str  # correction | bonus | stop
    terminal_token: int
    emitted: tuple[int, ...]
    start_position: int  # output length before the round
    committed_token_count: int
    finish_reason: str | None
    match: int | None = None  # a lookup's match length that the drafts continued (None: a model, or no drafts)

    def as_dict(self) -> dict:
        return {"type": "round", **asdict(self), "emitted": list(self.emitted)}


@dataclass(frozen=True)
class RoundTiming:
    """What one round cost on this machine (seconds, wall clock, device-synchronized)."""

    batch: int  # requests in the round
    draft_seconds: float  # the proposers' whole turn
    draft_steps: int  # draft forward calls, every source (0 for lookups)
    sources: tuple[SourceTiming, ...]  # each source's turn
    verify_seconds: float  # the target call(s)
    verify_rows: int  # rows the verification scored (drafts + 1 per request), all requests together
    other_seconds: float  # the rest of the round: sampling, staging, publication, cache commit
    # The shared-body source every drafting request used, when its verification was a body step of
    # the last draft plus the full head over the staged rows (not a target call over verify_rows);
    # MIXED when only some rows were; None for an ordinary verification call.
    verify_source: str | None = None


MIXED = "mixed"


@dataclass(frozen=True)
class RunResult:
    states: tuple[RequestState, ...]  # final state per request, in request order
    stats: RunStats
    commits: tuple  # SpeculativeCommit per published round, when the run keeps a log
    acceptance: tuple[AcceptanceRecord, ...]
    rounds: tuple[RoundRecord, ...]

    def new_tokens(self) -> list[tuple[int, ...]]:
        return [s.new_tokens for s in self.states]


def round_timing(txns: Sequence, drafted, blocks: dict[str, float], seconds: float) -> RoundTiming:
    """A published round's costs: ``txns`` its transactions, ``drafted`` what the sources returned
    (with each source's timing), the seconds of its draft and verify blocks and of the whole round."""
    draft_seconds, verify_seconds = blocks["draft"], blocks["verify"]
    staged = [drafted.sources[b] for b, h in enumerate(drafted.staged) if h is not None]
    plain = sum(
        1 for b, txn in enumerate(txns) if txn.drafts and (b >= len(drafted.staged) or drafted.staged[b] is None)
    )
    shared = staged[0] if staged and len(set(staged)) == 1 and not plain else (MIXED if staged else None)
    return RoundTiming(
        batch=len(txns),
        draft_seconds=draft_seconds,
        draft_steps=sum(t.steps for t in drafted.timings),
        sources=drafted.timings,
        verify_seconds=verify_seconds,
        verify_rows=sum(len(txn.drafts) + 1 for txn in txns),
        other_seconds=max(0.0, seconds - draft_seconds - verify_seconds),
        verify_source=shared,
    )


def round_records(
    txns: Sequence, decision, accept_u: torch.Tensor | None
) -> list[tuple[str, list[AcceptanceRecord], RoundRecord]]:
    """A published round's log: per request (id, one AcceptanceRecord per proposed token, its RoundRecord).
    ``decision``: the rule's Decision for the batch; ``accept_u`` float64[B, K] (None when greedy)."""
    p_d, q_d, ratio = decision.p_draft.tolist(), decision.q_draft.tolist(), decision.ratios.tolist()
    u = accept_u.tolist() if accept_u is not None else None
    out = []
    for b, txn in enumerate(txns):
        s, a = txn.start, txn.outcome.accepted
        committed = len(txn.successor.output) - s.prompt_len
        acceptance = []
        for i, token in enumerate(txn.drafts):
            reached = i <= a
            acceptance.append(
                AcceptanceRecord(
                    request_id=s.request_id,
                    round_id=txn.round_id,
                    round_index=s.rounds,
                    draft_index=i + 1,
                    position=len(s.output) + i,
                    draft_token=token,
                    q_prob=q_d[b][i],
                    p_prob=p_d[b][i],
                    accept_ratio=ratio[b][i],
                    uniform=u[b][i] if (reached and u is not None) else None,
                    reached=reached,
                    accepted=i < a,
                    correction_distribution_id=(
                        f"residual[p{i + 1}-q{i + 1}]@{txn.round_id}" if reached and i == a else None
                    ),
                    committed_token_count=committed,
                )
            )
        record = RoundRecord(
            request_id=s.request_id,
            round_id=txn.round_id,
            round_index=s.rounds,
            k=len(txn.drafts),
            source=txn.source,
            accepted=a,
            terminal_kind=txn.record.terminal_kind,
            terminal_token=txn.outcome.terminal,
            emitted=txn.stop.emitted,
            start_position=len(s.output),
            committed_token_count=committed,
            finish_reason=txn.successor.finish_reason,
            match=txn.match,
        )
        out.append((s.request_id, acceptance, record))
    return out
