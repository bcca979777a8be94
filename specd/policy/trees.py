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
sum_j prod_{i<=j} alpha_i, the ledger's (``specd.policy.ledger``). Unrolled, E[A] is the sum over
the tree's nodes of each one's chance of acceptance, the product along its path of
prod_{i<r} (1 - beta[d][i]) beta[d][r] (``node_weights``). The best tree of at most n nodes and d
levels maximizes it (``best_trees``), for every n and d at once: where each rank's child is kept less
often than the one before (-k auto's prior), the n likeliest nodes, found best-first at any budget;
otherwise a dynamic program over (depth, rank, nodes left), exact for any profile while its work is
small (a child of rank r gets m nodes for its own subtree, the later ranks what is left). -k auto
prices each (its nodes are its verification rows, its levels its draft calls) and keeps the fastest.

A tree round's time (``tree_round_time``): the draft drafts level by level, one call a level
(``specd.core.tree_draft``): the root's, then one over the nodes of each depth that get
children; the target verifies every node in one call of nodes + 1 rows per request.
"""

from __future__ import annotations

import functools
import heapq
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
        """float64[depth, ranks] of beta (a copy: the caller's to change)."""
        return _table(self, depth, ranks).copy()


@functools.lru_cache(maxsize=8)  # a sweep prices every batch size under one profile
def _table(profile: TreeProfile, depth: int, ranks: int) -> np.ndarray:
    return np.array([[profile.beta(j, r) for r in range(ranks)] for j in range(1, depth + 1)], dtype=np.float64)


@dataclass(frozen=True)
class Candidate:
    """The best tree the search finds within a node count and depth cap: its shape and E[A]."""

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


def node_weights(profile: TreeProfile, depth: int, ranks: int) -> np.ndarray:
    """float64[depth, ranks]: w[j-1][r] = prod_{i<r} (1 - beta[j-1][i]) beta[j-1][r], the chance that the
    walk, standing at a node of depth j - 1, accepts its child of rank r. A node is accepted with the
    product of w along its path, and a tree's E[A] is the sum of that over its nodes (``depth_reach``).
    Past a rank never kept (beta 0) no later rank is drafted: w is 0 there."""
    beta = profile.table(depth, ranks)
    refused = np.cumprod(np.concatenate([np.ones((depth, 1)), 1.0 - beta[:, :-1]], axis=1), axis=1)
    return refused * beta * np.cumprod(beta > 0.0, axis=1)


def best_trees(profile: TreeProfile, nodes: int, depth: int) -> list[Candidate]:
    """The trees -k auto weighs within ``nodes`` nodes and ``depth`` levels: for every node count n and
    depth cap d, the tree of at most n nodes and d levels with the largest E[A] under ``profile``, each
    distinct tree once, in order of cap, then nodes. The depth caps matter where a draft step is dear: a
    shallower tree drafts in fewer calls.

    E[A] is the sum over a tree's nodes of their chance of acceptance (``node_weights``), and a node's
    is at most its parent's. Where it is also at most its lower sibling's (each rank kept less often
    than the one before, given the walk reached it: -k auto's prior, and any profile whose sibling rates
    fall fast enough), the best tree of n nodes is the n likeliest nodes, found best-first: exact, and
    quick at any budget and depth. Otherwise the exact dynamic program over depth, rank and nodes left
    (``_exact_trees``) runs where its work is at most EXACT_WORK cells; past that, the best-first search
    runs on the profile with each rank's chance capped by the lower ranks' (a tree near the best, each
    scored under the profile itself)."""
    exact, orders = _search(profile, nodes, depth)
    if exact is not None:
        return list(exact)  # the caller's: the search is kept for the next caller
    return [Candidate(_shape(order, n), total) for cap, order in orders for n, total in _prefixes(order, cap)]


EXACT_WORK = 20_000_000  # cells of the exact program (caps x levels x ranks x nodes^2): about a second


@functools.lru_cache(maxsize=8)  # a sweep searches once for all its batch sizes (a fact about the profile)
def _search(profile: TreeProfile, nodes: int, depth: int) -> tuple[list[Candidate] | None, list]:
    """(the exact program's candidates, []) or (None, the best-first orders: per depth cap that changes
    the search, (cap, its nodes in order, each with its chance of acceptance)); see ``best_trees``."""
    depth = max(0, min(depth, nodes))
    if depth == 0:
        return [], []
    w = node_weights(profile, depth, nodes)
    ordered = bool(np.all(w[:, 1:] <= w[:, :-1]))
    ranks = int((w > 0.0).sum(axis=1).max())
    if not ordered and depth * depth * ranks * (nodes + 1) * nodes <= EXACT_WORK:
        return _exact_trees(profile, nodes, depth), []
    scale = (w if ordered else np.minimum.accumulate(w, axis=1)).tolist()
    chance = w.tolist()
    full = _best_first(scale, chance, nodes, depth)
    deepest = max((len(path) for path, _ in full), default=0)
    caps = [(cap, _best_first(scale, chance, nodes, cap)) for cap in range(1, deepest)]
    return None, [*caps, (deepest, full)]  # a cap at or past the deepest node searched is the same search


def _best_first(scale: list, chance: list, nodes: int, cap: int) -> list[tuple[tuple[int, ...], float]]:
    """At most ``nodes`` nodes within ``cap`` levels, likeliest first under ``scale`` (a node's weight its
    parent's times ``scale[depth - 1][rank]``), each pushed once its parent and lower sibling are in, none
    of weight 0; each with its chance of acceptance under ``chance`` (the same product)."""
    # (-weight, when pushed: ties first come first, its rank path, its parent's weight and chance)
    heap: list[tuple[float, int, tuple[int, ...], float, float]] = []
    if scale[0][0] > 0.0:
        heap.append((-scale[0][0], 0, (0,), 1.0, 1.0))
    order: list[tuple[tuple[int, ...], float]] = []
    pushed = 1
    while heap and len(order) < nodes:
        weight, _, path, above, above_chance = heapq.heappop(heap)
        d, r = len(path), path[-1]
        mine = above_chance * chance[d - 1][r]
        order.append((path, mine))
        if d < cap and scale[d][0] > 0.0:
            heapq.heappush(heap, (weight * scale[d][0], pushed, (*path, 0), -weight, mine))
            pushed += 1
        if r + 1 < len(scale[d - 1]) and scale[d - 1][r + 1] > 0.0:
            heapq.heappush(heap, (-above * scale[d - 1][r + 1], pushed, (*path[:-1], r + 1), above, above_chance))
            pushed += 1
    return order


def _prefixes(order: list, cap: int):
    """(n, E[A]) of each prefix of a best-first ``order`` that reaches depth ``cap``: one that does not is
    the search of a lower cap, node for node."""
    total, deepest = 0.0, 0
    for n, (path, chance) in enumerate(order, 1):
        total, deepest = total + chance, max(deepest, len(path))
        if deepest == cap:
            yield n, total


def _shape(order: list, n: int) -> TreeShape:
    return TreeShape(tuple(sorted((path for path, _ in order[:n]), key=lambda c: (len(c), c))))


def _exact_trees(profile: TreeProfile, nodes: int, depth: int) -> list[Candidate]:
    """``best_trees`` by the dynamic program, for all caps at once, over depths j from the deepest up:
    f(j, n) = g(j, 0, n) (0 below the cap), where g(j, r, n) is the larger of 0 and
    max_m beta_jr (1 + f(j + 1, m - 1)) + (1 - beta_jr) g(j, r + 1, n - m) (ties: the fewest nodes);
    its nodes depth first. Exact for any profile; its work grows as depth^2 ranks nodes^2."""
    beta = profile.table(depth, nodes)
    ranks = int(np.cumprod(beta > 0.0, axis=1).sum(axis=1).max())  # past a rank never kept, none is drafted
    n_idx, m_idx = np.arange(nodes + 1), np.arange(1, nodes + 1)
    valid = m_idx[None, :] <= n_idx[:, None]  # [n, m]: a child's subtree of m nodes within n
    rest = np.clip(n_idx[:, None] - m_idx[None, :], 0, None)
    caps = np.arange(1, depth + 1)[:, None]  # [C, 1]: the depth cap of each batch row
    f = np.zeros((depth, depth + 2, nodes + 1))  # [cap, j, n]
    choice = np.zeros((depth, depth + 1, max(ranks, 1), nodes + 1), dtype=np.int64)  # m given to rank r (0: none)
    for j in range(depth, 0, -1):
        g = np.zeros((depth, nodes + 1))
        for r in range(ranks - 1, -1, -1):
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
    """The fastest tree that is not a chain among ``best_trees``, at ``costs`` and at ``batch`` requests
    per call (the B - 1 others emitting one token each, as ``ledger.progress_rates`` prices a chain):
    -> (its shape, written by ``shape_spec``; its progress rate (1 + E[A] + B - 1) / E[T_round]), or
    None where every best tree is a chain or ``tree_bound`` says none could beat ``beat``."""
    if nodes < 2 or depth < 1 or tree_bound(profile, costs, min(depth, nodes), nodes, batch) <= beat:
        return None
    exact, orders = _search(profile, nodes, depth)
    best = None
    for candidate in exact or ():
        if candidate.shape.is_chain:
            continue  # a chain is priced as a chain
        rate = (1.0 + candidate.expected_accepted + batch - 1) / tree_round_time(costs, candidate.shape, batch)
        if best is None or rate > best[1]:
            best = (candidate.shape, rate)
    priced = _Pricing(costs, batch)
    for cap, order in orders:
        found = priced.fastest(order, cap)
        if found is not None and (best is None or found[1] > best[1]):
            best = (_shape(order, found[0]), found[1])
    if best is None:
        return None
    return TreeShape(best[0].choices, spec=shape_spec(best[0].choices)), best[1]


class _Pricing:
    """A best-first order's prefixes priced as they grow (``tree_round_time`` of each, in O(1) a node):
    a node adds its chance to E[A] and a row to the verification, and, as its parent's first child, a
    row to the draft call of its parent's level."""

    def __init__(self, costs, batch: int):
        self.costs, self.batch = costs, batch
        self.root = costs.draft_calls((1,), batch)  # the root's call, and whatever any drafting round pays
        self.fixed = costs.state_cost + costs.queue_cost
        self._level: dict[int, float] = {0: 0.0}
        self._verify: dict[int, float] = {}

    def level(self, rows: int) -> float:
        """What a level's call of ``rows`` rows per request adds to a round's draft time."""
        if rows not in self._level:
            self._level[rows] = self.costs.draft_calls((1, rows), self.batch) - self.root
        return self._level[rows]

    def verify(self, n: int) -> float:
        if n not in self._verify:
            self._verify[n] = self.costs.verify_time(n, self.batch, 0)
        return self._verify[n]

    def fastest(self, order: list, cap: int) -> tuple[int, float] | None:
        """(n, rate) of the fastest prefix of ``order`` that reaches depth ``cap`` (``_prefixes``) and is
        not a chain (ties: the fewest nodes), or None."""
        rows: dict[int, int] = {}
        draft, accepted, deepest, branched, best = self.root, 0.0, 0, False, None
        parents: set[tuple[int, ...]] = set()
        for n, (path, chance) in enumerate(order, 1):
            d = len(path)
            accepted, deepest, branched = accepted + chance, max(deepest, d), branched or path[-1] > 0
            if d > 1 and path[:-1] not in parents:
                parents.add(path[:-1])
                rows[d - 1] = rows.get(d - 1, 0) + 1
                draft += self.level(rows[d - 1]) - self.level(rows[d - 1] - 1)
            if deepest == cap and branched:
                rate = (accepted + self.batch) / (draft + self.verify(n) + self.fixed)
                if best is None or rate > best[1]:
                    best = (n, rate)
        return best


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
