"""-k auto: each request's K, every round, from the speedup ledger, its own acceptance and
the machine's measured costs.

For each request and round K maximizes the ledger's predicted progress per unit time,
E[G(K)] / E[T_round(K)] (``specd.policy.ledger.progress_rate``, the one home of the
formula), over K in 0..k_max, where

- the acceptance profile is the request's own (its ``History``: reach-conditioned
  alpha_j from its published rounds), each position's rate shrunk toward the request's
  pooled rate, and that toward a Beta(1, 1) prior: nothing from other requests, so a
  request's K does not depend on its batch-mates;
- the costs are the run's, measured as it goes (``OnlineCosts``): a target call and a
  draft step as functions of their row counts, from moving medians of recent rounds,
  and the rest of a round (sampling, staging, cache commit). They are facts about the
  machine, shared by every request; ``batch`` (the number of requests the run decodes
  together, a setting of the run) is the B at which they are read.

K = 0 is a plain target step for that request. A request at K = 0 probes (the best
K >= 1) after PROBE_AFTER consecutive K = 0 rounds, the wait doubling after every probe
that did not bring it back, so that it returns when drafting would pay again and a
useless draft costs almost nothing. When the draft is so slow that even perfect
acceptance would lose, there is nothing to probe for: only every PROBE_AFTER_MAX
rounds is one K = 2 round spent re-timing it (the machine's load may have changed).

Exactness: K depends on the request's committed history and on past timings only
(see specd.policy.kpolicy). With sampling, timings decide which uniforms a request
consumes, so another machine (or another load) can give another, equally exact,
sample: the K schedule is recorded per request and ``ScheduleK`` replays it.
"""

from __future__ import annotations

import statistics
from collections import deque

from specd.core.records import RoundTiming
from specd.core.state import History, RequestState
from specd.errors import UsageError
from specd.policy.kpolicy import KPolicy, check_k_max
from specd.policy.ledger import CostModel, MeasuredCosts, best_k, progress_rate
from specd.policy.profile import AcceptanceProfile

TIMING_K = 2  # a round of two drafts times a draft step (none timed yet, or re-timing a slow draft)
PROBE_AFTER = 4  # K = 0 rounds before a probe; doubles after each probe that did not pay
PROBE_AFTER_MAX = 128  # also: K = 0 rounds before re-timing a draft too slow to ever pay
PRIOR = (1.0, 1.0)  # Beta(a, b) for a request's pooled acceptance rate
POSITION_STRENGTH = 2.0  # pseudo-rounds pulling alpha_j toward the pooled rate
FIXED_ROWS_PRIOR = 16.0  # one timed row count: T(R) taken proportional to (16 + R)
WINDOW = 48  # recent rounds the costs are read from


def request_profile(history: History, k_max: int) -> AcceptanceProfile:
    """alpha_1..alpha_kmax for one request: (accepted at j + s * pooled) / (reached j + s),
    pooled = (accepted + a) / (reached + a + b) over all its positions."""
    reached, accepted = sum(history.reached), sum(history.accepted_at)
    pooled = (accepted + PRIOR[0]) / (reached + PRIOR[0] + PRIOR[1])
    alphas = []
    for j in range(max(k_max, 1)):
        n = history.reached[j] if j < len(history.reached) else 0
        a = history.accepted_at[j] if j < len(history.accepted_at) else 0
        alphas.append((a + POSITION_STRENGTH * pooled) / (n + POSITION_STRENGTH))
    return AcceptanceProfile(tuple(alphas), False, "request history")


def _line(samples) -> tuple[float, float] | None:
    """(intercept, slope) of seconds against rows through the median at each row count seen;
    with one row count, the slope of a call whose fixed part is FIXED_ROWS_PRIOR rows."""
    by_rows: dict[int, list[float]] = {}
    for rows, seconds in samples:
        by_rows.setdefault(rows, []).append(seconds)
    if not by_rows:
        return None
    points = sorted((r, statistics.median(v)) for r, v in by_rows.items())
    if len(points) == 1:
        ((r0, t0),) = points
        slope = t0 / (FIXED_ROWS_PRIOR + r0)
        return t0 - slope * r0, slope
    n = len(points)
    mean_r = sum(r for r, _ in points) / n
    mean_t = sum(t for _, t in points) / n
    var = sum((r - mean_r) ** 2 for r, _ in points)
    slope = max(0.0, sum((r - mean_r) * (t - mean_t) for r, t in points) / var)
    return max(mean_t - slope * mean_r, 0.05 * mean_t), slope


class OnlineCosts:
    """The run's measured costs, shared by its requests: seconds of a target call and of one
    draft step against their row counts, and of the rest of a round, from the last WINDOW rounds."""

    def __init__(self, window: int = WINDOW):
        self.target: deque[tuple[int, float]] = deque(maxlen=window)
        self.draft: deque[tuple[int, float]] = deque(maxlen=window)
        self.other: deque[float] = deque(maxlen=window)
        self.version = 0
        self._read: tuple[int, int, int, MeasuredCosts | None] | None = None

    @property
    def timed_target(self) -> bool:
        return bool(self.target)

    @property
    def timed_draft(self) -> bool:
        return bool(self.draft)

    def record_draft_step(self, rows: int, seconds: float) -> None:
        """A draft step timed outside a round (see Proposer.step_seconds)."""
        self.draft.append((rows, seconds))
        self.version += 1

    def observe(self, t: RoundTiming) -> None:
        if t.verify_rows > 0 and t.verify_seconds > 0:
            self.target.append((t.verify_rows, t.verify_seconds))
        step = self._draft_step(t)
        if step is not None:
            self.draft.append((max(t.draft_rows, 1), step))
        self.other.append(t.other_seconds)
        self.version += 1

    @staticmethod
    def _draft_step(t: RoundTiming) -> float | None:
        """Seconds of one ordinary draft step in this round, or None. A first call that caught the
        draft up on many tokens (its prompt, or output decoded at K = 0) is a one-off, not a step."""
        if t.max_k == 0 or t.draft_seconds <= 0:
            return None
        if t.draft_steps == 0:  # no model (prompt lookup): the lookup's time per draft token
            return t.draft_seconds / t.max_k
        if t.draft_first_tokens <= 2:
            return t.draft_seconds / t.draft_steps
        if t.draft_steps >= 2:
            return max(t.draft_seconds - t.draft_first_seconds, 0.0) / (t.draft_steps - 1)
        return None

    def ledger_costs(self, batch: int, k_max: int) -> MeasuredCosts | None:
        """The ledger's cost record at ``batch`` for K = 0..k_max, in units of a one-row target
        call (None until a target call and a draft step have been timed). Read once per round."""
        key = (self.version, batch, k_max)
        if self._read is not None and self._read[:3] == key:
            return self._read[3]
        target, draft = _line(self.target), _line(self.draft)
        costs = None
        if target is not None and draft is not None:
            unit = target[0] + target[1]

            def call(line, rows: int) -> float:
                return (line[0] + line[1] * rows) / unit

            costs = MeasuredCosts(
                draft_step={batch: call(draft, batch)},
                verify={(k, batch): call(target, batch * (k + 1)) for k in range(k_max + 1)},
                baseline={batch: call(target, batch)},
                state_cost=statistics.median(self.other) / unit if self.other else 0.0,
                source="online",
            )
        self._read = (*key, costs)
        return costs


class FixedCosts:
    """A cost model that does not move (the oracle's, the tests', sweep-k's analytic auto row):
    a ledger CostModel read at any batch."""

    def __init__(self, model: CostModel):
        self.model = model

    def ledger_costs(self, batch: int, k_max: int) -> CostModel:
        return self.model

    timed_target = timed_draft = True


def trailing_zeros(schedule: tuple[int, ...]) -> int:
    """How many of the last rounds had K = 0."""
    zeros = 0
    for k in reversed(schedule):
        if k:
            break
        zeros += 1
    return zeros


def probe_due(schedule: tuple[int, ...]) -> bool:
    """After a run of K = 0 rounds: PROBE_AFTER of them, doubled for each earlier probe (a lone
    K > 0 round between runs of K = 0) that did not bring speculation back."""
    zeros = trailing_zeros(schedule)
    if zeros == 0:
        return False
    failed, i = 0, len(schedule) - zeros
    while i >= 2 and schedule[i - 1] > 0 and schedule[i - 2] == 0:
        failed += 1
        i -= 1
        while i > 0 and schedule[i - 1] == 0:
            i -= 1
    return zeros >= min(PROBE_AFTER * 2**failed, PROBE_AFTER_MAX)


class AutoK(KPolicy):
    """The cost-aware policy (see the module docstring). ``costs``: an OnlineCosts (the caller
    subscribes its ``observe`` to the engine's round timings), or any object with
    ``ledger_costs(batch, k_max)`` (the oracle passes fixed costs)."""

    def __init__(self, k_max: int = 8, batch: int = 1, costs=None, time_draft_step=None):
        """``time_draft_step(rows) -> seconds``: times one draft step when the costs have none yet
        (Proposer.step_seconds), so the first decision need not draft to learn what drafting costs."""
        check_k_max(k_max)
        if batch < 1:
            raise UsageError(f"batch must be >= 1, got {batch}")
        self.k_max = k_max
        self.batch = batch
        self.costs = costs if costs is not None else OnlineCosts()
        self.time_draft_step = time_draft_step

    def choose(self, state: RequestState) -> int:
        cap = min(self.k_max, state.draft_budget)
        if cap == 0 or not self.costs.timed_target:  # the run's first round times a plain target step
            return 0
        if not self.costs.timed_draft:
            if self.time_draft_step is None:
                return min(TIMING_K, cap)
            self.costs.record_draft_step(self.batch, self.time_draft_step(self.batch))
        costs = self.costs.ledger_costs(self.batch, self.k_max)
        profile = request_profile(state.history, self.k_max)
        best = best_k(profile, costs, range(cap + 1), self.batch)
        if best > 0:
            return best
        schedule = state.history.k_schedule
        if self.could_pay(costs, cap) and (not any(schedule) or probe_due(schedule)):
            # A request that never drafted tries at once: its prior is no evidence against its draft.
            return best_k(profile, costs, range(1, cap + 1), self.batch)
        if trailing_zeros(schedule) >= PROBE_AFTER_MAX:  # even perfect acceptance would lose: re-time
            return min(TIMING_K, cap)
        return 0

    def could_pay(self, costs, cap: int) -> bool:
        """Would any K >= 1 beat K = 0 if every draft were accepted? If not, no acceptance history can
        make drafting pay at these costs, and probing for one is wasted time."""
        perfect = AcceptanceProfile((1.0,), True, "perfect")
        off = progress_rate(perfect, costs, 0, self.batch)
        return any(progress_rate(perfect, costs, k, self.batch) > off for k in range(1, cap + 1))
