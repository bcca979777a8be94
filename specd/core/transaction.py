"""One request's speculative round as a transaction, and the store it publishes into.

    READY -> VERIFIED -> DECIDED -> STAGED -> PUBLISHED
                     \\-------------------------> ABORTED (S_0 stays authoritative)

The round (``specd.core.round``) drives each request's transaction through these
phases and computes what it stages; the transaction only holds the phase, checks
the order, and builds the audit record. Nothing authoritative changes before
PUBLISHED: the successor S_1 is assembled off to the side and published by a
compare-and-swap on the request's generation counter. Publishing the same round
twice returns the same successor and appends nothing.

Extension points (``transaction_cls`` of the engine): ``stage_processor`` (how a
processor state follows the published tokens) and ``checkpoint`` (called at each of
the five points in CHECKPOINTS; it does nothing, and a subclass that raises there
aborts the round: the failure-injection tests use it). A failure at any of them
leaves S_0 authoritative.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from specd.core.layouts import FrontierLayout, Verified
from specd.core.processors import PolicyState
from specd.core.state import RequestState
from specd.core.stops import StopDecision
from specd.errors import StaleGeneration, TransactionStateError

CHECKPOINTS = ("verified", "decided", "staged_kv", "staged_output", "before_publish")


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
    source: str | None  # the draft source (None: no drafts)
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

    accepted: int  # A: the accepted draft prefix
    terminal: int  # the correction (A < k) or bonus (A = k) token
    is_bonus: bool


class RoundTransaction:
    def __init__(self, start: RequestState, layout: FrontierLayout):
        self.start = start
        self.layout = layout
        self.round_id = f"{start.request_id}/round-{start.rounds}"
        self.phase = Phase.READY
        self.drafts: tuple[int, ...] = ()
        self.proposal_draws = 0
        self.source: str | None = None
        self.match: int | None = None  # the source's match length (a lookup's evidence)
        self.verified_rows: Verified | None = None
        self._temporary: tuple[int, ...] | None = None
        self.outcome: Outcome | None = None
        self.stop: StopDecision | None = None
        self.kv_keep = 0
        self.successor: RequestState | None = None
        self.record: SpeculativeCommit | None = None

    # -- phases ---------------------------------------------------------------
    def verified(
        self,
        drafts: tuple[int, ...],
        verified: Verified,
        proposal_draws: int,
        source: str | None = None,
        match: int | None = None,
    ) -> None:
        """The drafts (from ``source`` at match length ``match``, having consumed ``proposal_draws``
        proposal uniforms) and the target's verification of them."""
        self._expect(Phase.READY)
        self.drafts, self.verified_rows, self.proposal_draws = drafts, verified, proposal_draws
        self.source = source if drafts else None
        self.match = match if drafts else None
        self.phase = Phase.VERIFIED
        self.checkpoint("verified")

    def decided(self, outcome: Outcome) -> None:
        self._expect(Phase.VERIFIED)
        self.outcome = outcome
        self.phase = Phase.DECIDED
        self.checkpoint("decided")

    @property
    def temporary_rows(self) -> tuple[int, ...]:
        """Token identities of the round's temporary target K/V rows: the replayed frontier's, then the drafts'."""
        if self._temporary is None:
            v = self.verified_rows
            self._temporary = (v.kv_frontier.tokens if v.kv_frontier else ()) + v.kv_draft.tokens
        return self._temporary

    def staged(self, stop: StopDecision, kv_keep: int, successor: RequestState, reached: int) -> None:
        """Hold S_1, computed off to the side (S_0 untouched): the stops' outcome, how many temporary
        K/V rows become history, and the successor; ``reached``: acceptance tests whose uniforms it consumed."""
        self._expect(Phase.DECIDED)
        self.stop, self.kv_keep = stop, kv_keep
        self.checkpoint("staged_kv")
        self.successor = successor
        self.record = self._audit(reached)
        self.phase = Phase.STAGED
        self.checkpoint("staged_output")

    def stage_processor(self, state: PolicyState, emitted: tuple[int, ...]) -> PolicyState:
        """Stateful processors advance over the published tokens only, never over rejected drafts."""
        if not state.stateful:
            return state
        for token in emitted:
            state = state.advance(token)
        return state

    def checkpoint(self, point: str) -> None:
        """Called at each point of CHECKPOINTS; an extension point for failure injection (no-op)."""

    def publish(self, store: RequestStore) -> tuple[RequestState, bool]:
        """Compare-and-swap S_0 -> S_1. Returns (successor, newly_published)."""
        if self.phase is Phase.PUBLISHED:
            return store.publish(self.record, self.successor)
        self._expect(Phase.STAGED)
        self.checkpoint("before_publish")
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
    def _audit(self, reached: int) -> SpeculativeCommit:
        start, outcome, stop, successor = self.start, self.outcome, self.stop, self.successor
        rows = self.temporary_rows
        kind = ("bonus" if outcome.is_bonus else "correction") if stop.terminal_emitted else "stop"
        record = object.__new__(SpeculativeCommit)  # one per request and round: skip the frozen __setattr__s
        record.__dict__.update(
            request_id=start.request_id,
            round_id=self.round_id,
            expected_generation=start.generation,
            layout=self.layout.name,
            k=len(self.drafts),
            source=self.source,
            draft_token_ids=tuple(self.drafts),
            accepted_draft_count=outcome.accepted,
            terminal_kind=kind,
            terminal_token=outcome.terminal,
            emitted_token_ids=stop.emitted,
            committed_kv_token_ids=rows[: self.kv_keep],
            discarded_kv_token_ids=rows[self.kv_keep :],
            reached_acceptance_tests=reached,
            proposal_draws=self.proposal_draws,
            rng_before=start.rng.counters,
            rng_after=successor.rng.counters,
            processor_before_hash=start.target_proc.digest() if start.target_proc.stateful else "",
            processor_after_hash=successor.target_proc.digest() if successor.target_proc.stateful else "",
            finish_reason=successor.finish_reason,
        )
        return record

    def _expect(self, phase: Phase) -> None:
        if self.phase is not phase:
            raise TransactionStateError(f"{self.round_id}: expected phase {phase.value}, is {self.phase.value}")


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
