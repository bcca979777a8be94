"""The ledger's table: one row per (K, batch) with every term of the formula, and the best K
per batch. The formula itself (E[G], E[T_round], the progress rate, the best K) has one home,
``specd.policy.ledger``; this module lays it out for ``sweep-k``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specd.errors import EmptyRange
from specd.policy.ledger import CostModel, accepted_distribution, best_k, expected_progress, round_time, survival
from specd.policy.profile import AcceptanceProfile


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
