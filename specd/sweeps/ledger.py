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
from dataclasses import asdict, dataclass, replace

from specd.errors import EmptyRange, InvalidCost
from specd.sweeps.profile import AcceptanceProfile


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

    def draft_time(self, k: int, batch: int) -> float:
        return k * self.draft_step[batch]

    def verify_time(self, k: int, batch: int, context: int) -> float:
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


@dataclass(frozen=True)
class ModelShape:
    """Enough to count K/V bytes: 2 (K and V) x layers x kv_heads x head_dim x bytes."""

    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_value: int = 2

    @property
    def kv_bytes_per_row(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_value


@dataclass(frozen=True)
class LedgerRow:
    k: int
    batch: int
    context: int
    expected_accepted: float  # E[A]
    expected_progress: float  # E[G]
    survival: tuple[float, ...]  # s_1..s_K
    pr_accepted: tuple[float, ...]  # Pr(A = 0..K)
    draft_time: float  # T_D
    verify_time: float  # T_V
    state_time: float  # T_S
    queue_time: float  # T_Q
    round_time: float  # E[T_round]
    time_per_token: float  # E[T_round] / E[G]
    baseline_time_per_token: float  # T(B, L) per request token
    speedup: float
    discarded_kv_rows: float  # K - E[A] per request per round
    temporary_kv_bytes_per_token: float | None
    optimal: bool = False
    policy: str = "fixed"  # "auto": the row -k auto converges to (the best K in 0..K max, chosen)


def survival(profile: AcceptanceProfile, k: int) -> list[float]:
    out, s = [], 1.0
    for j in range(1, k + 1):
        s *= profile.alpha(j)
        out.append(s)
    return out


def accepted_distribution(profile: AcceptanceProfile, k: int) -> list[float]:
    s = [1.0, *survival(profile, k)]
    return [s[a] - s[a + 1] for a in range(k)] + [s[k]]


def expected_progress(profile: AcceptanceProfile, k: int, stop_probability: float = 0.0) -> float:
    s = [1.0, *survival(profile, k)]
    keep = 1.0 - stop_probability
    return sum(s[i - 1] * keep ** (i - 1) for i in range(1, k + 2))


def round_time(cost, k: int, batch: int = 1, context: int = 0) -> float:
    """E[T_round(K)] = T_D(K, B) + T_V(K, B, L) + T_S + T_Q (K = 0: a plain target step plus T_S + T_Q)."""
    return cost.draft_time(k, batch) + cost.verify_time(k, batch, context) + cost.state_cost + cost.queue_cost


def progress_rate(
    profile: AcceptanceProfile, cost, k: int, batch: int = 1, context: int = 0, stop_probability: float = 0.0
) -> float:
    """E[G(K)] / E[T_round(K)]: committed tokens per unit time, what -k auto maximizes over K."""
    return expected_progress(profile, k, stop_probability) / round_time(cost, k, batch, context)


def best_k(
    profile: AcceptanceProfile, cost, ks, batch: int = 1, context: int = 0, stop_probability: float = 0.0
) -> int:
    """-k auto's choice: the K in ``ks`` with the highest progress rate, the smaller K on a tie."""
    return max(ks, key=lambda k: (progress_rate(profile, cost, k, batch, context, stop_probability), -k))


def ledger_row(
    profile: AcceptanceProfile,
    cost: CostModel,
    k: int,
    batch: int = 1,
    context: int = 0,
    stop_probability: float = 0.0,
    shape: ModelShape | None = None,
) -> LedgerRow:
    s = survival(profile, k)
    e_a = sum(s)
    e_g = expected_progress(profile, k, stop_probability)
    t_d = cost.draft_time(k, batch)
    t_v = cost.verify_time(k, batch, context)
    t_round = round_time(cost, k, batch, context)
    baseline = cost.baseline_time(batch, context)
    temp_bytes = None
    if shape is not None:
        temp_bytes = (k + 1) * shape.kv_bytes_per_row / e_g  # replay layout: K + 1 temporary rows per round
    return LedgerRow(
        k=k,
        batch=batch,
        context=context,
        expected_accepted=e_a,
        expected_progress=e_g,
        survival=tuple(s),
        pr_accepted=tuple(accepted_distribution(profile, k)),
        draft_time=t_d,
        verify_time=t_v,
        state_time=cost.state_cost,
        queue_time=cost.queue_cost,
        round_time=t_round,
        time_per_token=t_round / e_g,
        baseline_time_per_token=baseline,
        speedup=baseline * e_g / t_round,
        discarded_kv_rows=k - e_a,
        temporary_kv_bytes_per_token=temp_bytes,
    )


def leviathan_speedup(alpha: float, k: int, c: float) -> float:
    """(1 - alpha^{K+1}) / ((1 - alpha)(1 + K c)); alpha = 1 is the limit K + 1."""
    progress = k + 1 if alpha == 1.0 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return progress / (1 + k * c)


def sweep(
    profile: AcceptanceProfile,
    cost: CostModel,
    ks,
    batches,
    context: int = 0,
    stop_probability: float = 0.0,
    shape: ModelShape | None = None,
    auto: bool = False,
) -> list[LedgerRow]:
    """Every (K, B); the best K per batch size is marked ``optimal``. With ``auto``, after each
    batch size's rows, the row -k auto (K max = the largest K swept) settles on once it knows
    the profile: the K of 0 (target-only steps) and the swept ones with the highest speedup."""
    ks, batches = list(ks), list(batches)
    if not ks or not batches:
        raise EmptyRange("the K range and the batch list must not be empty")
    if min(ks) < 1 or min(batches) < 1:
        raise EmptyRange("K and batch sizes must be >= 1")
    out = []
    for b in batches:
        mine = [ledger_row(profile, cost, k, b, context, stop_probability, shape) for k in ks]
        best = max(mine, key=lambda r: r.speedup)
        out.extend(r if r is not best else replace(r, optimal=True) for r in mine)
        if auto:
            chosen = best_k(profile, cost, [0, *ks], b, context, stop_probability)
            if chosen == 0:  # target-only steps: not a swept K, its own row
                row = ledger_row(profile, cost, 0, b, context, stop_probability, shape)
            else:
                row = mine[ks.index(chosen)]
            out.append(replace(row, policy="auto", optimal=False))
    return out


def optimum(rows: list[LedgerRow], batch: int) -> tuple[LedgerRow, bool]:
    """(best row for ``batch``, whether it is interior to the K range swept)."""
    mine = sorted((r for r in rows if r.batch == batch and r.policy == "fixed"), key=lambda r: r.k)
    best = next(r for r in mine if r.optimal)
    return best, mine[0].k < best.k < mine[-1].k
