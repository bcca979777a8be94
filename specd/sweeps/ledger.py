"""The ledger's table: one row per (K, batch) with every term of the formula, one per (tree shape,
batch) where trees are swept, and the best shape per batch. The formula itself (E[G], E[T_round],
the progress rate, the best K) has one home, ``specd.policy.ledger``, and a tree's
(``specd.policy.trees``); this module lays them out for ``sweep-k``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specd.core.tree_shape import TreeShape
from specd.errors import EmptyRange
from specd.policy.ledger import (
    CostModel,
    accepted_distribution,
    best_k,
    expected_progress,
    progress_rate,
    round_time,
    survival,
)
from specd.policy.profile import AcceptanceProfile
from specd.policy.trees import TreeProfile, best_tree, depth_reach, tree_round_time


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
    shape: str = ""  # a tree's shape as --tree writes it ("": a chain of K)
    nodes: int = 0  # drafts verified per request: K for a chain, a tree's nodes (its depth is K)


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
    e_g = expected_progress(profile, k, stop_probability)
    t_d = cost.draft_time(k, batch)
    t_v = cost.verify_time(k, batch, context)
    t_round = round_time(cost, k, batch, context)
    pr_accepted = tuple(accepted_distribution(profile, k))
    return _row(cost, k, batch, context, s, e_g, pr_accepted, t_d, t_v, t_round, nodes=k, shape=shape)


def _row(
    cost, k, batch, context, s, e_g, pr_accepted, t_d, t_v, t_round, nodes: int, shape: ModelShape | None, spec=""
) -> LedgerRow:
    """A row from a shape's terms (a chain's or a tree's, of ``nodes`` drafts): every other column
    derives from them."""
    baseline = cost.baseline_time(batch, context)
    # replay layout: the round's nodes + 1 rows are temporary
    temp_bytes = None if shape is None else (nodes + 1) * shape.kv_bytes_per_row / e_g
    return LedgerRow(
        k=k,
        batch=batch,
        context=context,
        expected_accepted=sum(s),
        expected_progress=e_g,
        survival=tuple(s),
        pr_accepted=pr_accepted,
        draft_time=t_d,
        verify_time=t_v,
        state_time=cost.state_cost,
        queue_time=cost.queue_cost,
        round_time=t_round,
        time_per_token=t_round / e_g,
        baseline_time_per_token=baseline,
        speedup=baseline * e_g / t_round,
        discarded_kv_rows=nodes - sum(s),
        temporary_kv_bytes_per_token=temp_bytes,
        shape=spec,
        nodes=nodes,
    )


def tree_row(
    profile: TreeProfile,
    cost,
    tree: TreeShape,
    batch: int = 1,
    context: int = 0,
    shape: ModelShape | None = None,
) -> LedgerRow:
    """A static tree's row: E[A] = sum_j Pr(A >= j) under the profile by depth and rank, one draft call
    a level, one verification of nodes + 1 rows per request (specd.policy.trees). K is its depth."""
    s = depth_reach(tree, profile)
    e_g = 1.0 + sum(s)
    t_round = tree_round_time(cost, tree, batch, context)
    t_v = cost.verify_time(tree.size, batch, context)
    padded = (1.0, *s, 0.0)
    pr_accepted = tuple(padded[a] - padded[a + 1] for a in range(tree.depth + 1))
    t_d = t_round - t_v - cost.state_cost - cost.queue_cost
    return _row(cost, tree.depth, batch, context, s, e_g, pr_accepted, t_d, t_v, t_round, tree.size, shape, tree.spec)


@dataclass(frozen=True)
class Trees:
    """What a sweep prices beyond chains: static ``shapes``, under ``profile`` (acceptance by depth and
    rank), and ``budget``: the -k auto row may choose a tree of up to that many nodes (0: chains)."""

    profile: TreeProfile
    shapes: tuple[TreeShape, ...] = ()
    budget: int = 0


def sweep(
    profile: AcceptanceProfile,
    cost: CostModel,
    ks,
    batches,
    context: int = 0,
    stop_probability: float = 0.0,
    shape: ModelShape | None = None,
    auto: bool = False,
    trees: Trees | None = None,
) -> list[LedgerRow]:
    """Every (K, B), then every (tree, B) of ``trees``; the best row per batch size (chain or tree) is
    marked ``optimal``. With ``auto``, after each batch size's rows, the row -k auto (K max = the
    largest K swept) settles on once it knows the profile: the K of 0 (target-only steps) and the
    swept ones with the highest speedup, or with a tree budget the tree that beats them all."""
    ks, batches = list(ks), list(batches)
    if not ks or not batches:
        raise EmptyRange("the K range and the batch list must not be empty")
    if min(ks) < 1 or min(batches) < 1:
        raise EmptyRange("K and batch sizes must be >= 1")
    out = []
    for b in batches:
        mine = [ledger_row(profile, cost, k, b, context, stop_probability, shape) for k in ks]
        mine += [tree_row(trees.profile, cost, t, b, context, shape) for t in (trees.shapes if trees else ())]
        best = max(mine, key=lambda r: r.speedup)
        out.extend(r if r is not best else replace(r, optimal=True) for r in mine)
        if auto:
            out.append(
                replace(auto_row(profile, cost, ks, mine, b, context, stop_probability, shape, trees), policy="auto")
            )
    return out


def auto_row(profile, cost, ks, mine, b: int, context: int, stop: float, shape, trees: Trees | None) -> LedgerRow:
    """The row -k auto settles on at batch ``b``: the best K of 0 and ``ks`` (``mine``: their rows), or
    with a tree budget the fastest tree where it beats that K (``specd.policy.trees.best_tree``)."""
    chosen = best_k(profile, cost, [0, *ks], b, context, stop)
    row = ledger_row(profile, cost, 0, b, context, stop, shape) if chosen == 0 else mine[ks.index(chosen)]
    if trees is not None and trees.budget:
        rate = progress_rate(profile, cost, chosen, b, context, stop)
        found = best_tree(trees.profile, cost, trees.budget, max(ks), b, rate)
        if found is not None and found[1] > rate:
            row = tree_row(trees.profile, cost, found[0], b, context, shape)
    return replace(row, optimal=False)


def optimum(rows: list[LedgerRow], batch: int) -> tuple[LedgerRow, bool]:
    """(best row for ``batch``, chain or tree; whether it is a chain interior to the K range swept)."""
    mine = sorted((r for r in rows if r.batch == batch and r.policy == "fixed"), key=lambda r: r.k)
    best = next(r for r in mine if r.optimal)
    chains = [r for r in mine if not r.shape]
    return best, not best.shape and chains[0].k < best.k < chains[-1].k
