"""When a tree pays: a static tree's expected accepted length from the acceptance profile by depth
and sibling rank, the best tree at each node count, and what a tree round costs.

Terms (a tree's are ``specd.core.tree``'s). beta[j-1][r] is the chance that the child of rank r
of a node at depth j - 1 is accepted, given that the walk stands at that node and refused its
children of ranks 0..r-1 (a request's evidence: ``History.ranks``). Rank 0 is what a chain
drafts, so beta[j-1][0] is a chain's alpha_j.

Model: a node's acceptance depends on its depth and rank only (Sequoia's positional acceptance,
Chen et al. 2024, with the depth kept). The expected number of accepted drafts below an accepted
node v at depth d, whose children c_0, c_1, .. are tried in rank order, is then

    E(v) = sum_r  prod_{i<r} (1 - beta[d][i])  beta[d][r]  (1 + E(c_r))

and a tree's E[A] = E(root), E[G] = 1 + E[A] (the correction or bonus token). A chain's is
sum_j prod_{i<=j} alpha_i, the ledger's (``specd.policy.ledger``). The best tree of at most n
nodes and d levels maximizes E(root): a dynamic program over (depth, rank, nodes left),
``best_trees``, exact under the model (a child of rank r gets m nodes for its own subtree, the
later ranks what is left), for every n and d at once: -k auto prices each (its nodes are its
verification rows, its levels its draft calls) and keeps the fastest.

A tree round's time (``tree_round_time``): the draft drafts level by level, one call a level
(``specd.core.tree_draft``): the root's, then one over the nodes of each depth that get
children; the target verifies every node in one call of nodes + 1 rows per request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specd.core.tree_shape import TreeShape


@dataclass(frozen=True)
class TreeProfile:
    """beta[j-1][r] for depths 1..len(betas) and ranks 0..len(betas[j-1]) - 1 (module docstring)."""

    betas: tuple[tuple[float, ...], ...]
    source: str = "given"

    def beta(self, depth: int, rank: int) -> float:
        """beta at a 1-based ``depth`` and 0-based ``rank``: past the last depth given, the last
        depth's; past the last rank given at a depth, 0 (no evidence that such a child is ever kept)."""
        row = self.betas[min(depth, len(self.betas)) - 1]
        return row[rank] if rank < len(row) else 0.0

    def table(self, depth: int, ranks: int) -> np.ndarray:
        """float64[depth, ranks] of beta."""
        return np.array([[self.beta(j, r) for r in range(ranks)] for j in range(1, depth + 1)], dtype=np.float64)


@dataclass(frozen=True)
class Candidate:
    """The best tree the model finds within a node count: its shape and E[A]."""

    shape: TreeShape
    expected_accepted: float


def depth_reach(shape: TreeShape, profile: TreeProfile) -> tuple[float, ...]:
    """s_j = Pr(A >= j) for j = 1..depth of a static ``shape`` under ``profile``: the chance the walk
    accepts a node at depth j, summed over the nodes there (a node is accepted with its parent's
    chance times prod_{i<r} (1 - beta_i) beta_r). E[A] = sum_j s_j (the recursion of the module
    docstring); a chain's s_j is the ledger's survival."""
    assert shape.choices is not None, "a dynamic tree's nodes depend on the draft's rows, not on a profile"
    kept: dict[tuple[int, ...], float] = {(): 1.0}
    reach = [0.0] * shape.depth
    for path in sorted(shape.choices, key=lambda c: (len(c), c)):  # parents first, siblings in rank order
        parent = path[:-1]
        refused = 1.0
        for r in range(path[-1]):
            refused *= 1.0 - profile.beta(len(path), r)
        kept[path] = kept[parent] * refused * profile.beta(len(path), path[-1])
        reach[len(path) - 1] += kept[path]
    return tuple(reach)


def expected_accepted(shape: TreeShape, profile: TreeProfile) -> float:
    """E[A] of a static ``shape`` under ``profile``: sum_j Pr(A >= j) (``depth_reach``)."""
    return sum(depth_reach(shape, profile))


def best_trees(profile: TreeProfile, nodes: int, depth: int) -> list[Candidate]:
    """The trees -k auto weighs within ``nodes`` nodes and ``depth`` levels: for every node count n and
    depth cap d, the tree of at most n nodes and d levels with the largest E[A] under ``profile`` (ties:
    the fewest nodes), each distinct tree once, its nodes depth first (``shape_spec`` writes one). The
    depth caps matter where a draft step is dear: a shallower tree drafts in fewer calls. The dynamic
    program, for all caps at once, over depths j from the deepest up: f(j, n) = g(j, 0, n) (0 below
    the cap), where g(j, r, n) is the larger of 0 and
    max_m beta_jr (1 + f(j + 1, m - 1)) + (1 - beta_jr) g(j, r + 1, n - m)."""
    depth = max(0, min(depth, nodes))
    if depth == 0:
        return []
    beta = profile.table(depth, nodes)
    n_idx, m_idx = np.arange(nodes + 1), np.arange(1, nodes + 1)
    valid = m_idx[None, :] <= n_idx[:, None]  # [n, m]: a child's subtree of m nodes within n
    rest = np.clip(n_idx[:, None] - m_idx[None, :], 0, None)
    caps = np.arange(1, depth + 1)[:, None]  # [C, 1]: the depth cap of each batch row
    f = np.zeros((depth, depth + 2, nodes + 1))  # [cap, j, n]
    choice = np.zeros((depth, depth + 1, nodes, nodes + 1), dtype=np.int64)  # m given to rank r (0: no child)
    for j in range(depth, 0, -1):
        g = np.zeros((depth, nodes + 1))
        for r in range(nodes - 1, -1, -1):
            b = beta[j - 1, r]
            if b <= 0.0:  # a child never kept adds nothing, and neither do later ranks
                g = np.zeros((depth, nodes + 1))
                continue
            gain = b * (1.0 + f[:, j + 1, m_idx - 1])  # [C, m]
            cand = np.where(valid[None], gain[:, None, :] + (1.0 - b) * g[:, rest], -1.0)  # [C, n, m]
            best = cand.argmax(axis=2)  # the fewest nodes on a tie
            value = np.take_along_axis(cand, best[:, :, None], 2)[:, :, 0]
            take = value > 0.0
            choice[:, j, r] = np.where(take, best + 1, 0)
            g = np.where(take, value, 0.0)
        f[:, j] = np.where(caps >= j, g, 0.0)
    out, seen = [], set()
    for c in range(depth):
        for n in range(1, nodes + 1):
            if f[c, 1, n] <= (f[c, 1, n - 1] if n > 1 else 0.0) or (c and f[c, 1, n] <= f[c - 1, 1, n]):
                continue  # the same tree as with a node fewer, or a level fewer
            choices = tuple(_rebuild(choice[c], 1, n, ()))  # depth first: each parent before its children
            if choices not in seen:
                seen.add(choices)
                out.append(Candidate(TreeShape(choices), float(f[c, 1, n])))
    return out


def _rebuild(choice: np.ndarray, j: int, n: int, path: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The nodes (rank paths) of the best subtree below ``path`` (its children at depth j) in n nodes."""
    out: list[tuple[int, ...]] = []
    r = 0
    while j < choice.shape[0] and r < choice.shape[1] and n > 0:
        m = int(choice[j, r, n])
        if m == 0:
            break
        child = (*path, r)
        out.append(child)
        out.extend(_rebuild(choice, j + 1, m - 1, child))
        n -= m
        r += 1
    return out


def best_tree(profile: TreeProfile, costs, nodes: int, depth: int, batch: int = 1, beat: float = 0.0):
    """The fastest tree that is not a chain, of at most ``nodes`` nodes and ``depth`` levels, at ``costs``
    and at ``batch`` requests per call (the B - 1 others emitting one token each, as
    ``ledger.progress_rates`` prices a chain): -> (its shape, written by ``shape_spec``; its progress
    rate (1 + E[A] + B - 1) / E[T_round]), or None where every best tree is a chain or ``tree_bound``
    says none could beat ``beat``."""
    if nodes < 2 or depth < 1 or tree_bound(profile, costs, min(depth, nodes), nodes, batch) <= beat:
        return None
    best = None
    for candidate in best_trees(profile, nodes, depth):
        if candidate.shape.is_chain:
            continue  # a chain is priced as a chain
        rate = (1.0 + candidate.expected_accepted + batch - 1) / tree_round_time(costs, candidate.shape, batch)
        if best is None or rate > best[1]:
            best = (candidate.shape, rate)
    if best is None:
        return None
    return TreeShape(best[0].choices, spec=shape_spec(best[0].choices)), best[1]


def tree_bound(profile: TreeProfile, costs, depth: int, nodes: int, batch: int) -> float:
    """A rate no tree (not a chain) of at most ``nodes`` nodes and ``depth`` levels exceeds, cheap to
    read: a tree of d levels accepts at most as one with every rank at every node would (the walk
    passes depth j with 1 - prod_r (1 - beta_jr)), drafts in d calls of at least one row each (a
    call of more rows costing no less), and verifies at least d + 1 nodes. Where it cannot beat the
    chain the trees are not searched (on a CPU, whose rows and draft steps are dear: every round)."""
    passes = 1.0 - np.prod(1.0 - profile.table(depth, nodes), axis=1)  # [depth]
    reach = np.cumprod(passes)
    verify = [costs.verify_time(n, batch, 0) for n in range(2, nodes + 1)]  # verify[n - 2]: n nodes
    fixed = costs.state_cost + costs.queue_cost
    return max(
        (1.0 + float(reach[:d].sum()) + batch - 1) / (costs.draft_calls((1,) * d, batch) + min(verify[d - 1 :]) + fixed)
        for d in range(1, min(depth, nodes - 1) + 1)
    )


def shape_spec(choices) -> str:
    """How a static shape is written for a user: branching counts (3,2,1) when every node of a depth
    has as many children, else its EAGLE choices as JSON."""
    choices = tuple(sorted(choices, key=lambda c: (len(c), c)))
    shape = TreeShape(choices)
    widths: list[int] = []
    paths: list[tuple[int, ...]] = [()]
    for _ in range(shape.depth):
        counts = {shape.children(p) for p in paths}
        if len(counts) != 1 or 0 in counts:
            return "[" + ",".join("[" + ",".join(map(str, c)) + "]" for c in choices) + "]"
        (w,) = counts
        widths.append(w)
        paths = [p + (r,) for p in paths for r in range(w)]
    return ",".join(map(str, widths))


def level_rows(shape: TreeShape) -> tuple[int, ...]:
    """Rows per request of each draft call of a round drafting ``shape``: the root's one, then the
    nodes of each depth that get children (a chain of k: k ones)."""
    assert shape.choices is not None
    parents = {c[:-1] for c in shape.choices if len(c) > 1}
    return (1, *(sum(1 for p in parents if len(p) == d) for d in range(1, shape.depth)))


def tree_round_time(cost, shape: TreeShape, batch: int = 1, context: int = 0) -> float:
    """E[T_round] of a round drafting ``shape``: its draft calls (``level_rows``, each a draft step over
    that many rows per request: ``cost.draft_calls``), one verification over nodes + 1 rows per
    request, and the round's own work. A chain of k is ``ledger.round_time`` at K = k."""
    draft = cost.draft_calls(level_rows(shape), batch)
    return draft + cost.verify_time(shape.size, batch, context) + cost.state_cost + cost.queue_cost
