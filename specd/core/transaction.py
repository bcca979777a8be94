"""One request's speculative round as a transaction.

    READY -> VERIFIED -> DECIDED -> STAGED -> PUBLISHED
                     \\-------------------------> ABORTED (S_0 stays authoritative)

Nothing authoritative changes before PUBLISHED: the successor S_1 is assembled
off to the side and published by a compare-and-swap on the request's generation
counter. Publishing the same round twice returns the same successor and appends
nothing. A fault hook (tests inject failures through it) runs at each of the
five points in FAULT_POINTS; a failure at any of them leaves S_0 authoritative.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from specd.core.layouts import FrontierLayout, Verified
from specd.core.processors import PolicyState
from specd.core.state import RequestState
from specd.core.stops import StopDecision, apply_stops
from specd.errors import StaleGeneration, TransactionStateError

FAULT_POINTS = ("verified", "decided", "staged_kv", "staged_output", "before_publish")
FaultHook = Callable[[str, str], None]  # (point, request_id); raising aborts the round


class Phase(str, Enum):
    READY = "READY"
    VERIFIED = "VERIFIED"
    DECIDED = "DECIDED"
    STAGED = "STAGED"
    PUBLISHED = "PUBLISHED"
    ABORTED = "ABORTED"


@dataclass(frozen=True)
class SpeculativeCommit:
    """The audit record of one published round."""

    request_id: str
    round_id: str
    expected_generation: int
    layout: str
    k: int
    draft_token_ids: tuple[int, ...]  # d_1..d_k as proposed
    accepted_draft_count: int  # A before stop truncation
    terminal_kind: Literal["correction", "bonus", "stop"]
    terminal_token: int  # the sampled correction/bonus, even when a stop suppressed it
    emitted_token_ids: tuple[int, ...]
    committed_kv_token_ids: tuple[int, ...]
    discarded_kv_token_ids: tuple[int, ...]
    reached_acceptance_tests: int
    proposal_draws: int
    rng_before: tuple[int, ...]
    rng_after: tuple[int, ...]
    processor_before_hash: str
    processor_after_hash: str
    finish_reason: str | None


@dataclass(frozen=True)
class Outcome:
    """The decision for one row, before stops."""

    accepted: int
    terminal: int
    is_bonus: bool
    sampled: bool  # False in greedy mode: no draws were consumed


class RoundTransaction:
    def __init__(
        self,
        start: RequestState,
        layout: FrontierLayout,
        eos_ids: frozenset[int],
        fault_hook: FaultHook | None = None,
    ):
        self.start = start
        self.layout = layout
        self.eos_ids = eos_ids
        self.fault_hook = fault_hook
        self.round_id = f"{start.request_id}/round-{start.rounds}"
        self.phase = Phase.READY
        self.drafts: tuple[int, ...] = ()
        self.verified_rows: Verified | None = None
        self.outcome: Outcome | None = None
        self.stop: StopDecision | None = None
        self.kv_keep = 0
        self.successor: RequestState | None = None
        self.record: SpeculativeCommit | None = None

    # -- phases ---------------------------------------------------------------
    def verified(self, drafts: tuple[int, ...], verified: Verified, proposal_draws: int) -> None:
        self._expect(Phase.READY)
        self.drafts, self.verified_rows = drafts, verified
        self.proposal_draws = proposal_draws
        self.phase = Phase.VERIFIED
        self._fault("verified")

    def decided(self, outcome: Outcome) -> None:
        self._expect(Phase.VERIFIED)
        self.outcome = outcome
        self.phase = Phase.DECIDED
        self._fault("decided")

    def stage(self) -> RequestState:
        """Assemble S_1 (K/V rows, then output, processors and RNG) without touching S_0."""
        self._expect(Phase.DECIDED)
        start, outcome = self.start, self.outcome
        accepted = self.drafts[: outcome.accepted]
        self.stop = apply_stops(accepted, outcome.terminal, self.eos_ids, start.remaining)
        branch = self.verified_rows.kv_draft.tokens
        frontier_rows = self.verified_rows.kv_frontier.tokens if self.verified_rows.kv_frontier else ()
        all_rows = frontier_rows + branch
        self.kv_keep = self.layout.rows_to_commit(self.stop.accepted_emitted, self.stop.terminal_emitted, len(all_rows))
        committed_ids = all_rows[: self.kv_keep]
        discarded_ids = all_rows[self.kv_keep :]
        self._fault("staged_kv")

        output = start.output + self.stop.emitted
        target_proc = self.stage_processor(start.target_proc, self.stop.emitted)
        draft_proc = self.stage_processor(start.draft_proc, self.stop.emitted)
        reached = self.stop.accepted_emitted + (1 if self.stop.terminal_emitted and not outcome.is_bonus else 0)
        # Streams advance over reached events only (unreached draws are read again next round).
        if outcome.sampled:
            rng = start.rng.advance_all(self.proposal_draws, reached, 1 if self.stop.terminal_emitted else 0)
        else:
            rng = start.rng.advance_all(self.proposal_draws, 0, 0)
        self.successor = start.evolve(
            output=output,
            cache_tokens=start.cache_tokens + committed_ids,
            target_proc=target_proc,
            draft_proc=draft_proc,
            rng=rng,
            generation=start.generation + 1,
            rounds=start.rounds + 1,
            history=start.history.after(len(self.drafts), outcome.accepted),
            finish_reason=self.stop.finish_reason,
            retained_logits=None,
        )
        kind = ("bonus" if outcome.is_bonus else "correction") if self.stop.terminal_emitted else "stop"
        self.record = SpeculativeCommit(
            request_id=start.request_id,
            round_id=self.round_id,
            expected_generation=start.generation,
            layout=self.layout.name,
            k=len(self.drafts),
            draft_token_ids=tuple(self.drafts),
            accepted_draft_count=outcome.accepted,
            terminal_kind=kind,
            terminal_token=outcome.terminal,
            emitted_token_ids=self.stop.emitted,
            committed_kv_token_ids=committed_ids,
            discarded_kv_token_ids=discarded_ids,
            reached_acceptance_tests=reached if outcome.sampled else 0,
            proposal_draws=self.proposal_draws,
            rng_before=start.rng.counters,
            rng_after=rng.counters,
            processor_before_hash=start.target_proc.digest() if start.target_proc.stateful else "",
            processor_after_hash=target_proc.digest() if target_proc.stateful else "",
            finish_reason=self.successor.finish_reason,
        )
        self.phase = Phase.STAGED
        self._fault("staged_output")
        return self.successor

    def stage_processor(self, state: PolicyState, emitted: tuple[int, ...]) -> PolicyState:
        """Stateful processors advance over the published tokens only, never over rejected drafts."""
        if not state.stateful:
            return state
        for token in emitted:
            state = state.advance(token)
        return state

    def publish(self, store: RequestStore) -> tuple[RequestState, bool]:
        """Compare-and-swap S_0 -> S_1. Returns (successor, newly_published)."""
        if self.phase is Phase.PUBLISHED:
            return store.publish(self.record, self.successor)
        self._expect(Phase.STAGED)
        self._fault("before_publish")
        result = store.publish(self.record, self.successor)
        self.phase = Phase.PUBLISHED
        return result

    def abort(self) -> bool:
        """Mark an unpublished round aborted; True if it was (a published round stays published)."""
        if self.phase is Phase.PUBLISHED:
            return False
        self.phase = Phase.ABORTED
        return True

    # -- helpers --------------------------------------------------------------
    def _expect(self, phase: Phase) -> None:
        if self.phase is not phase:
            raise TransactionStateError(f"{self.round_id}: expected phase {phase.value}, is {self.phase.value}")

    def _fault(self, point: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(point, self.start.request_id)


class RequestStore:
    """Authoritative request states, published only through compare-and-swap.

    It remembers each request's latest publication (publishing that round again returns
    the same successor), and, when ``keep_commits``, every commit record of the run.
    """

    def __init__(self, keep_commits: bool = True) -> None:
        self._states: dict[str, RequestState] = {}
        self._published: dict[str, tuple[SpeculativeCommit, RequestState]] = {}  # request id -> latest
        self.keep_commits = keep_commits
        self.commits: list[SpeculativeCommit] = []

    def add(self, state: RequestState) -> None:
        self._states[state.request_id] = state

    def get(self, request_id: str) -> RequestState:
        return self._states[request_id]

    def ids(self):
        return self._states.keys()

    def states(self) -> list[RequestState]:
        return list(self._states.values())

    def replace_unpublished(self, state: RequestState, expected_generation: int) -> None:
        """Non-round transitions (frontier materialization) use the same fence."""
        current = self._states[state.request_id]
        if current.generation != expected_generation:
            raise StaleGeneration(
                f"{state.request_id}: generation {current.generation}, expected {expected_generation}"
            )
        self._states[state.request_id] = state

    def publish(self, record: SpeculativeCommit, successor: RequestState) -> tuple[RequestState, bool]:
        done = self._published.get(record.request_id)
        if done is not None and done[0].round_id == record.round_id:
            if done[0] != record:
                raise StaleGeneration(f"{record.round_id} was already published with a different outcome")
            return done[1], False
        current = self._states[record.request_id]
        if current.generation != record.expected_generation:
            raise StaleGeneration(
                f"{record.round_id}: request is at generation {current.generation}, "
                f"round expected {record.expected_generation}"
            )
        self._states[record.request_id] = successor
        self._published[record.request_id] = (record, successor)
        if self.keep_commits:
            self.commits.append(record)
        return successor, True
