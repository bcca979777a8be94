"""What a run records, as data (never printed): acceptance-log rows, a round's timing, the result.

One ``AcceptanceRecord`` per proposed token, beside each round's ``RoundOutcome``
(``specd.traces.log`` serializes both under the versioned schema ``specd.trace/v1``);
one ``RoundTiming`` per round, which the engine publishes to its observers (the
measured costs of -k auto); a ``RunResult`` per run. ``acceptance_rows`` and
``round_timing`` are pure functions of a published round's outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import torch

from specd.core.outcome import RoundOutcome
from specd.core.proposer import SourceTiming
from specd.core.record import record
from specd.core.state import RequestState
from specd.core.stats import RunStats
from specd.core.tree import DraftTree, walked


@record
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
    parent: int | None = None  # a tree round's: the node's parent (-1: the root); a chain's: None

    def as_dict(self) -> dict:
        row = {"type": "proposal", **asdict(self)}
        if self.parent is None:
            del row["parent"]  # a chain's rows are as they always were
        return row


@record
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


@record
class RunResult:
    states: tuple[RequestState, ...]  # final state per request, in request order
    stats: RunStats
    commits: tuple[RoundOutcome, ...]  # every published round in publication order (the audit trail)
    acceptance: tuple[AcceptanceRecord, ...]
    rounds: tuple[RoundOutcome, ...]  # the same outcomes by request, when the run keeps a log

    def new_tokens(self) -> list[tuple[int, ...]]:
        return [s.new_tokens for s in self.states]


def round_timing(outcomes: Sequence[RoundOutcome], drafted, blocks: dict[str, float], seconds: float) -> RoundTiming:
    """A published round's costs: ``outcomes`` its requests' outcomes, ``drafted`` what the sources
    returned (with each source's timing), the seconds of its draft and verify blocks and of the whole round."""
    draft_seconds, verify_seconds = blocks["draft"], blocks["verify"]
    rows = drafted.staged or (None,) * len(outcomes)  # per row: what a shared-body draft staged
    staged = [drafted.sources[b] for b, h in enumerate(rows) if h is not None]
    plain = sum(1 for o, h in zip(outcomes, rows) if o.k and h is None)
    shared = staged[0] if staged and len(set(staged)) == 1 and not plain else (MIXED if staged else None)
    return RoundTiming(
        batch=len(outcomes),
        draft_seconds=draft_seconds,
        draft_steps=sum(t.steps for t in drafted.timings),
        sources=drafted.timings,
        verify_seconds=verify_seconds,
        verify_rows=sum(o.k + 1 for o in outcomes),
        other_seconds=max(0.0, seconds - draft_seconds - verify_seconds),
        verify_source=shared,
    )


def log_columns(decision) -> list[torch.Tensor]:
    """What the acceptance log reads of the rule's ``decision`` (specd.core.sampler.Decision), each
    float[B, K]: p(d), q(d), the acceptance ratio and, where the rule read them, the uniforms."""
    columns = [decision.p_draft, decision.q_draft, decision.ratios]
    return columns + ([decision.uniforms] if decision.uniforms is not None else [])


def acceptance_rows(outcomes: Sequence[RoundOutcome], read: list) -> list[list[AcceptanceRecord]]:
    """A published round's per-draft log rows, per request: one AcceptanceRecord per proposed token,
    from its outcome and ``read``, the ``log_columns`` of the rule's decision as read from the device
    (lists [B][K], with the round's decision: one read)."""
    p_d, q_d, ratio = read[:3]
    u = read[3] if len(read) > 3 else None
    out = []
    for b, o in enumerate(outcomes):
        tree = DraftTree(o.draft_token_ids, o.draft_parents) if o.draft_parents else DraftTree.chain(o.draft_token_ids)
        path = o.accepted_path if o.accepted_path is not None else tuple(range(o.accepted))
        leaf = path[-1] if path else -1
        tested = set(walked(tree, path, o.accepted, leaf in tree.children))
        refused_last = tree.last_child(leaf) if leaf in tree.children else None
        rows = []
        for i, token in enumerate(o.draft_token_ids):
            reached = i in tested
            rows.append(
                AcceptanceRecord(
                    request_id=o.request_id,
                    round_id=o.round_id,
                    round_index=o.round_index,
                    draft_index=i + 1,
                    position=o.start_position + tree.depths[i] - 1,
                    draft_token=token,
                    q_prob=q_d[b][i],
                    p_prob=p_d[b][i],
                    accept_ratio=ratio[b][i],
                    uniform=u[b][i] if (reached and u is not None) else None,
                    reached=reached,
                    accepted=i in path,
                    correction_distribution_id=(
                        f"residual[p{i + 1}-q{i + 1}]@{o.round_id}" if i == refused_last else None
                    ),
                    committed_token_count=o.committed_token_count,
                    parent=None if o.draft_parents is None else o.draft_parents[i],
                )
            )
        out.append(rows)
    return out
