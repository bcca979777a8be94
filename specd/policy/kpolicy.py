"""How many drafts a request asks for in a round: the K policy.

The rule that keeps any K policy exact. A request's K for a round may depend on
what was committed before the round (its output and its own acceptance history)
and on facts about the machine (measured costs), never on the round's target rows
or on its acceptance and terminal uniforms. Within the round, the proposer may
stop drafting early on draft-side information only (``--draft-stop``: the draft's
largest probability at the next position). Both make the number of drafts a
stopping time of the draft process, decided before the target looks at any of
it, and the accept/reject/correction rule is exact for every such K: the emitted
tokens follow the target's law whatever K was.

Per request: a policy never reads another request's history, so given the same
cost table a request's K schedule, the draws it consumes and its tokens do not
depend on its batch-mates. Greedy output never depends on K at all.

K = 0 is a plain target step for that request: no drafts, the terminal token is
drawn from p.
"""

from __future__ import annotations

from collections.abc import Mapping

from specd.core.sources import Plan, first_available, plan_from
from specd.core.state import RequestState
from specd.core.tree_shape import MAX_TREE_NODES
from specd.errors import KScheduleMismatch, UsageError, shown

MAX_K = 64  # drafts per round, fixed or auto; past this a draft is never the bottleneck worth widening
# -k auto's largest K unless --k-max says: a lookup copying a passage still gains from 16 to 32
# drafts on a CPU (33 verified rows cost 1.1-1.3 times 17 there), and the ledger picks below it.
DEFAULT_K_MAX = 32
# --tree auto's node budget unless --tree-budget says: a verification call of 17 rows per request, where a
# GPU's call costs about one of 1 and the best trees of a useful draft stop gaining (docs/choosing-k.md)
DEFAULT_TREE_BUDGET = 16


def check_k(value: int | str, where: str = "-k") -> None:
    """A fixed K in 1..MAX_K, or the word auto."""
    if value != "auto" and not (isinstance(value, int) and 1 <= value <= MAX_K):
        raise UsageError(f"{where} must be auto or in 1..{MAX_K}, got {value}")


def check_k_max(value: int, where: str = "--k-max") -> None:
    """The largest K -k auto may choose: 1..MAX_K."""
    if not 1 <= value <= MAX_K:
        raise UsageError(f"{where} must be in 1..{MAX_K}, got {value}")


def check_tree_budget(value: int, where: str = "--tree-budget", allow_zero: bool = False) -> None:
    """The most nodes a tree -k auto chooses may have: 2..MAX_TREE_NODES (0, where allowed: chains only)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not (2 <= value <= MAX_TREE_NODES or (allow_zero and value == 0))
    ):
        raise UsageError(f"{where} must be in 2..{MAX_TREE_NODES} (nodes of a tree), got {value!r}")


class KPolicy:
    """The interface: ``plan`` a request's round, the source it drafts from and how many drafts it
    asks for (before the engine clamps K to the request's budget), given the sources that can
    propose this round as ``Offer``s (index, identity, a lookup's match length) in the user's
    order. Costs reach a policy that needs them through the cost object it was built with (the
    engine publishes each round's timing to its observers)."""

    def plan(self, state: RequestState, sources) -> Plan:
        raise NotImplementedError


class FixedK(KPolicy):
    """The same K every round (the request's own ``Request.k`` wins when set)."""

    def __init__(self, k: int):
        self.k = k

    def plan(self, state: RequestState, sources) -> Plan:
        return first_available(sources, self.k)


class ScheduleK(KPolicy):
    """Replay recorded schedules (request id -> (K, source identity or None) per round), so a sampled
    run that chose K and the source from measured time is reproduced token for token anywhere."""

    def __init__(self, schedules: Mapping[str, tuple[tuple[int, str | None], ...]]):
        self.schedules = dict(schedules)

    def plan(self, state: RequestState, sources) -> Plan:
        schedule = self.schedules.get(state.request_id)
        if schedule is None:
            raise KScheduleMismatch(f"--k-schedule has no schedule for request {shown(state.request_id)}")
        if state.rounds >= len(schedule):
            raise KScheduleMismatch(
                f"--k-schedule: request {shown(state.request_id)} needs a round {state.rounds + 1} its recorded "
                f"schedule ({len(schedule)} rounds) does not have: another prompt, model or budget than the "
                "recorded run's"
            )
        k, source = schedule[state.rounds]
        if k == 0:
            return Plan(None, 0)
        if not source:  # recorded before sources were recorded: the first that proposes
            return first_available(sources, k)
        offer = next((o for o in sources if o.identity == source), None)
        if offer is None:
            raise KScheduleMismatch(
                f"--k-schedule: request {shown(state.request_id)} drafted from {shown(source)} in round "
                f"{state.rounds + 1}, which this run does not have or cannot use there (another --draft than the "
                "recorded run's)"
            )
        return plan_from(offer, k)
