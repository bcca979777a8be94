"""The speedup ledger as pure functions over frozen records.

Units: time is measured in target decode steps at batch 1 (T_T(1) = 1).

Acceptance (profile alpha_j, reach-conditioned):
    s_j = Pr(A >= j) = prod_{i<=j} alpha_i,   Pr(A = a) = s_a - s_{a+1},   Pr(A = K) = s_K
    E[A] = sum_j s_j,   E[G] = 1 + E[A]   (G counts the correction/bonus token)
  with a stop model (each emitted token ends the request with probability eta):
    E[G] = sum_{i=1}^{K+1} s_{i-1} (1 - eta)^{i-1}

Cost of one round for B requests with lookahead K at context L:
    T_round = T_D(K, B) + T_V(K, B, L) + T_S + T_Q
    target call over R rows:  T(R, L) = 1 + row_cost (R - 1) + context_cost R L / 1000
    T_V(K, B, L) = T(B (K + 1), L)        T_D(K, B) = K draft_cost (1 + draft_row_cost (B - 1))
    baseline step:  T(B, L) for B tokens

Time per committed token = E[T_round] / E[G] (a ratio of expectations, the
renewal-reward rate of a stationary sequence of rounds, not E[T / G]);
speedup = T(B, L) E[G] / E[T_round]. With row_cost = state = queue = context = 0
this is Leviathan et al.'s (1 - alpha^{K+1}) / ((1 - alpha)(1 + K c)).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from specd.errors import InvalidCost
from specd.policy.profile import AcceptanceProfile


@dataclass(frozen=True)
class CostModel:
    draft_cost: float = 0.05  # c: one draft step at batch 1, in target steps
    row_cost: float = 0.02  # marginal cost of one more row in a target call (0 = purely memory-bound)
    draft_row_cost: float = 0.02  # the same for the draft
    state_cost: float = 0.01  # T_S: packing, sampling, cache commit per round
    queue_cost: float = 0.0  # T_Q per round
    context_cost: float = 0.0  # per row per 1000 context tokens (attention reads)
    source: str = "analytic"

    def __post_init__(self) -> None:
        for name in ("draft_cost", "row_cost", "draft_row_cost", "state_cost", "queue_cost", "context_cost"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InvalidCost(f"cost {name} = {value} must be a finite, non-negative number")

    def target_call(self, rows: int, context: int) -> float:
        return 1.0 + self.row_cost * (rows - 1) + self.context_cost * rows * context / 1000.0

    def draft_time(self, k: int, batch: int) -> float:
        return k * self.draft_cost * (1.0 + self.draft_row_cost * (batch - 1))

    def draft_calls(self, levels, batch: int) -> float:
        """Draft calls of ``levels[i]`` rows per request each (a tree's levels; a chain of k: k ones)."""
        return sum(self.draft_cost * (1.0 + self.draft_row_cost * (rows * batch - 1)) for rows in levels)

    def verify_time(self, k: int, batch: int, context: int) -> float:
        return self.target_call(batch * (k + 1), context)

    def baseline_time(self, batch: int, context: int) -> float:
        return self.target_call(batch, context)

    def describe(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MeasuredCosts:
    """Costs timed on a device, normalized by the baseline step at batch 1 (T(1) = 1)."""

    draft_step: dict  # batch -> one draft step at that batch
    verify: dict  # (k, batch) -> one verification call
    baseline: dict  # batch -> one target decode step
    state_cost: float = 0.0
    queue_cost: float = 0.0
    source: str = "measured"
    # Where a tree needs row counts the dicts lack: total rows of a call -> its cost (same unit).
    draft_curve: Callable[[int], float] | None = field(default=None, compare=False, repr=False)
    target_curve: Callable[[int], float] | None = field(default=None, compare=False, repr=False)

    def draft_time(self, k: int, batch: int) -> float:
        return k * self.draft_step[batch]

    def draft_calls(self, levels, batch: int) -> float:
        """Draft calls of ``levels[i]`` rows per request each: a one-row level is a draft step; a wider
        one is read off ``draft_curve`` (without one, refused by name)."""
        total = 0.0
        for rows in levels:
            if rows == 1:
                total += self.draft_step[batch]
            elif self.draft_curve is not None:
                total += self.draft_curve(rows * batch)
            else:
                raise InvalidCost(
                    f"no draft call of {rows * batch} rows was timed: a tree's levels need the draft's row costs"
                )
        return total

    def verify_time(self, k: int, batch: int, context: int) -> float:
        if (k, batch) not in self.verify and self.target_curve is not None:
            return self.target_curve(batch * (k + 1))
        return self.verify[(k, batch)]

    def baseline_time(self, batch: int, context: int) -> float:
        return self.baseline[batch]

    def describe(self) -> dict:
        return {
            "source": self.source,
            "draft_step": {str(b): v for b, v in self.draft_step.items()},
            "verify": {f"k={k},batch={b}": v for (k, b), v in self.verify.items()},
            "baseline": {str(b): v for b, v in self.baseline.items()},
            "state_cost": self.state_cost,
        }


def survival(profile: AcceptanceProfile, k: int) -> list[float]:
    out, s = [], 1.0
    for j in range(1, k + 1):
        s *= profile.alpha(j)
        out.append(s)
    return out


def accepted_distribution(profile: AcceptanceProfile, k: int) -> list[float]:
    s = [1.0, *survival(profile, k)]
    return [s[a] - s[a + 1] for a in range(k)] + [s[k]]


def progress_by_k(profile: AcceptanceProfile, k_max: int, stop_probability: float = 0.0) -> list[float]:
    """E[G(K)] for K = 0..k_max in one pass: E[G(K)] = E[G(K - 1)] + s_K (1 - eta)^K, E[G(0)] = 1."""
    keep = 1.0 - stop_probability
    reach, progress = 1.0, [1.0]  # s_K (1 - eta)^K, from K = 0 on
    for k in range(1, k_max + 1):
        reach *= profile.alpha(k) * keep
        progress.append(progress[-1] + reach)
    return progress


def expected_progress(profile: AcceptanceProfile, k: int, stop_probability: float = 0.0) -> float:
    return progress_by_k(profile, k, stop_probability)[k]


def round_time(cost, k: int, batch: int = 1, context: int = 0) -> float:
    """E[T_round(K)] = T_D(K, B) + T_V(K, B, L) + T_S + T_Q (K = 0: a plain target step plus T_S + T_Q)."""
    return cost.draft_time(k, batch) + cost.verify_time(k, batch, context) + cost.state_cost + cost.queue_cost


def round_times(cost, ks, batch: int = 1, context: int = 0) -> dict[int, float]:
    """K -> E[T_round(K)] for each K in ``ks`` (``round_time``)."""
    return {k: round_time(cost, k, batch, context) for k in ks}


def progress_rates(
    profile: AcceptanceProfile,
    cost,
    ks,
    batch: int = 1,
    context: int = 0,
    stop_probability: float = 0.0,
    companions: int = 0,
    times: dict[int, float] | None = None,
) -> dict[int, float]:
    """K -> E[G(K)] / E[T_round(K)] for each K in ``ks``, E[G] in one pass (``progress_by_k``):
    committed tokens per unit time, what -k auto maximizes over K. Only the K asked are priced (a
    measured cost may hold no others).

    ``companions``: requests of the batch that share the round's verification call without
    drafting. They emit one token each and pay its width too (a batched call is as wide as its
    longest row), so one request's K is priced with the whole batch's cost:
    (E[G(K)] + companions) / E[T_round(K)]. 0: every request of the batch drafts K (the table's view).
    ``times``: ``round_times(cost, ks, batch, context)``, when the caller has them already (a plan
    prices every request of a round at one cost record).
    """
    wanted = set(ks)
    progress = progress_by_k(profile, max(wanted), stop_probability)
    if times is None:
        times = round_times(cost, wanted, batch, context)
    return {k: (progress[k] + companions) / times[k] for k in sorted(wanted)}


def progress_rate(
    profile: AcceptanceProfile,
    cost,
    k: int,
    batch: int = 1,
    context: int = 0,
    stop_probability: float = 0.0,
    companions: int = 0,
) -> float:
    """The progress rate at one K (``progress_rates``)."""
    return progress_rates(profile, cost, (k,), batch, context, stop_probability, companions)[k]


def best_k(
    profile: AcceptanceProfile,
    cost,
    ks,
    batch: int = 1,
    context: int = 0,
    stop_probability: float = 0.0,
    companions: int = 0,
) -> int:
    """-k auto's choice: the K in ``ks`` with the highest progress rate, the smaller K on a tie."""
    return best_of(progress_rates(profile, cost, ks, batch, context, stop_probability, companions))


def best_of(rates: dict[int, float], ks=None) -> int:
    """The K (of ``ks``, default all) with the highest rate in ``rates``, the smaller K on a tie."""
    return max(rates if ks is None else ks, key=lambda k: (rates[k], -k))
