"""One request's speculative round as a transaction, and the store it publishes into.

    READY -> VERIFIED -> DECIDED -> STAGED -> PUBLISHED
                     \\-------------------------> ABORTED (S_0 stays authoritative)

The round (``specd.core.round``) drives each request's transaction through these
phases and computes what it stages (the successor and the round's ``RoundOutcome``);
the transaction only holds them and the phase, and checks the order. Nothing authoritative changes before
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

from enum import Enum
from typing import TypeVar

from specd.core.layouts import FrontierLayout, Verified
from specd.core.outcome import RoundOutcome
from specd.core.processors import PolicyState
from specd.core.state import RequestState
from specd.core.tree import DraftTree
from specd.errors import StaleGeneration, TransactionStateError

T = TypeVar("T")
CHECKPOINTS = ("verified", "decided", "staged_kv", "staged_output", "before_publish")


class Phase(str, Enum):
    READY = "READY"
    VERIFIED = "VERIFIED"
    DECIDED = "DECIDED"
    STAGED = "STAGED"
    PUBLISHED = "PUBLISHED"
    ABORTED = "ABORTED"


class RoundTransaction:
    def __init__(self, start: RequestState, layout: FrontierLayout):
        self.start = start
        self.layout = layout
        self.round_id = f"{start.request_id}/round-{start.rounds}"
        self.phase = Phase.READY
        self.drafts: tuple[int, ...] = ()  # the proposal's node tokens (a chain's d_1..d_k)
        self.tree: DraftTree = DraftTree.chain(())
        self.proposal_draws = 0
        self.source: str | None = None
        self.match: int | None = None  # the source's match length (a lookup's evidence)
        self.verified_rows: Verified | None = None
        self._temporary: tuple[int, ...] | None = None
        self._decision: tuple[int, int, bool] | None = None  # (A, terminal token, is it a bonus)
        self.path: tuple[int, ...] = ()  # the accepted nodes, from the root down (a chain's: 0..A-1)
        self.kv_rows: tuple[int, ...] = ()  # the temporary target K/V rows the staged round keeps
        self.outcome: RoundOutcome | None = None
        self.successor: RequestState | None = None

    # -- phases ---------------------------------------------------------------
    def verified(
        self,
        drafts: tuple[int, ...] | DraftTree,
        verified: Verified,
        proposal_draws: int,
        source: str | None = None,
        match: int | None = None,
    ) -> None:
        """The drafts (a tree, or a chain's tokens; from ``source`` at match length ``match``, having
        consumed ``proposal_draws`` proposal uniforms) and the target's verification of them."""
        self._expect(Phase.READY)
        self.tree = drafts if isinstance(drafts, DraftTree) else DraftTree.chain(drafts)
        self.drafts, self.verified_rows, self.proposal_draws = self.tree.tokens, verified, proposal_draws
        self.source = source if drafts else None
        self.match = match if drafts else None
        self.phase = Phase.VERIFIED
        self.checkpoint("verified")

    def decided(self, accepted: int, terminal: int, is_bonus: bool, leaf: int | None = None) -> None:
        """The rule's decision for this request, before stops: A, the terminal token and its kind, and
        the last accepted node (``leaf``; -1: none; a chain's is A - 1, the default)."""
        self._expect(Phase.VERIFIED)
        path = self.tree.path(accepted - 1 if leaf is None else leaf)
        if len(path) != accepted:
            raise TransactionStateError(f"{self.round_id}: {accepted} accepted but node {leaf} is at depth {len(path)}")
        self._decision, self.path = (accepted, terminal, is_bonus), path
        self.phase = Phase.DECIDED
        self.checkpoint("decided")

    @property
    def decision(self) -> tuple[int, int, bool]:
        """The rule's decision: (A, the terminal token, whether it is a bonus)."""
        return self._held(self._decision, "decision")

    @property
    def temporary_rows(self) -> tuple[int, ...]:
        """Token identities of the round's temporary target K/V rows: the replayed frontier's, then the drafts'."""
        if self._temporary is None:
            v = self._held(self.verified_rows, "verification")
            self._temporary = (v.kv_frontier.tokens if v.kv_frontier else ()) + v.kv_draft.tokens
        return self._temporary

    @property
    def kv_keep(self) -> tuple[int, ...]:
        """The temporary target K/V rows the staged round keeps as history (a path, in order)."""
        self._held(self.outcome, "outcome")
        return self.kv_rows

    def staged(self, outcome: RoundOutcome, successor: RequestState, kv_rows: tuple[int, ...] = ()) -> None:
        """Hold S_1, the round's outcome and the K/V rows it keeps, computed off to the side (S_0 untouched)."""
        self._expect(Phase.DECIDED)
        self.checkpoint("staged_kv")
        self.outcome, self.successor, self.kv_rows = outcome, successor, kv_rows
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
        outcome, successor = self._held(self.outcome, "outcome"), self._held(self.successor, "successor")
        if self.phase is Phase.PUBLISHED:
            return store.publish(outcome, successor)
        self._expect(Phase.STAGED)
        self.checkpoint("before_publish")
        result = store.publish(outcome, successor)
        self.phase = Phase.PUBLISHED
        return result

    def abort(self) -> bool:
        """Mark an unpublished round aborted; True if it was (a published round stays published)."""
        if self.phase is Phase.PUBLISHED:
            return False
        self.phase = Phase.ABORTED
        return True

    def _held(self, value: T | None, what: str) -> T:
        """``value``, which an earlier phase set, or TransactionStateError naming what is missing."""
        if value is None:
            raise TransactionStateError(f"{self.round_id}: no {what} yet (phase {self.phase.value})")
        return value

    def _expect(self, phase: Phase) -> None:
        if self.phase is not phase:
            raise TransactionStateError(f"{self.round_id}: expected phase {phase.value}, is {self.phase.value}")


class RequestStore:
    """Authoritative request states, published only through compare-and-swap.

    It remembers each request's latest publication (publishing that round again returns
    the same successor), and, when ``keep_commits``, every published outcome of the run (the audit trail).
    """

    def __init__(self, keep_commits: bool = True) -> None:
        self._states: dict[str, RequestState] = {}
        self._published: dict[str, tuple[RoundOutcome, RequestState]] = {}  # request id -> latest
        self.keep_commits = keep_commits
        self.commits: list[RoundOutcome] = []

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

    def publish(self, record: RoundOutcome, successor: RequestState) -> tuple[RequestState, bool]:
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
