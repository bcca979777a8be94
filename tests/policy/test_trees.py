"""When a tree pays: a static tree's E[A] under the acceptance by depth and rank, the best tree per
node count (against brute force), a tree round's time, and a shape written so that --tree reads it."""

import itertools
import random

import pytest

from specd.core.tree_shape import TreeShape, parse_tree
from specd.policy import trees
from specd.policy.autok import sibling_prior
from specd.policy.ledger import CostModel, expected_progress, round_time
from specd.policy.profile import AcceptanceProfile
from specd.policy.trees import (
    TreeProfile,
    best_tree,
    best_trees,
    expected_accepted,
    level_rows,
    node_weights,
    shape_spec,
    tree_round_time,
)


def random_profile(rng: random.Random, depth: int, ranks: int) -> TreeProfile:
    return TreeProfile(tuple(tuple(rng.random() for _ in range(ranks)) for _ in range(depth)))


def all_trees(nodes: int, depth: int):
    """Every static tree of at most ``nodes`` nodes and depth at most ``depth``, as sets of rank paths."""
    found = {()}
    frontier = [()]
    while frontier:
        grown = []
        for tree in frontier:
            have = set(tree)
            for parent in [(), *tree]:
                if len(parent) >= depth or len(tree) >= nodes:
                    continue
                rank = sum(1 for c in tree if len(c) == len(parent) + 1 and c[:-1] == parent)
                child = (*parent, rank)
                if child not in have:
                    new = tuple(sorted((*tree, child), key=lambda c: (len(c), c)))
                    if new not in found:
                        found.add(new)
                        grown.append(new)
        frontier = grown
    return [t for t in found if t]


@pytest.mark.parametrize("seed", range(4))
def test_a_chains_expected_accepted_length_is_the_ledgers(seed):
    rng = random.Random(seed)
    profile = random_profile(rng, 6, 3)
    alphas = AcceptanceProfile(tuple(row[0] for row in profile.betas), False, "per-position")
    for k in range(1, 7):
        assert expected_accepted(TreeShape.chain(k), profile) == pytest.approx(expected_progress(alphas, k) - 1)


@pytest.mark.parametrize("nodes,depth,seed", [(4, 4, 0), (5, 3, 1), (5, 5, 2), (6, 2, 3), (6, 6, 4)])
def test_the_best_tree_per_node_count_is_the_best_of_every_tree(nodes, depth, seed):
    profile = random_profile(random.Random(seed), depth, nodes)
    trees = all_trees(nodes, depth)
    found = {len(c.shape.choices): c for c in best_trees(profile, nodes, depth)}
    for n in range(1, nodes + 1):
        best = max(expected_accepted(TreeShape(t), profile) for t in trees if len(t) <= n)
        within = [c for size, c in found.items() if size <= n]
        got = max(c.expected_accepted for c in within)
        assert got == pytest.approx(best), n
    for c in found.values():  # each reported value is its tree's
        assert c.expected_accepted == pytest.approx(expected_accepted(c.shape, profile))
        assert c.shape.depth <= depth


@pytest.mark.parametrize(
    "betas,expected",
    [
        (((0.9, 0.05),) * 4, "1,1,1,1"),  # a strong first child, a useless second: the chain
        (((0.2, 0.2, 0.2, 0.2),), "4"),  # one depth only: every node at the root
    ],
)
def test_the_best_tree_follows_the_profile(betas, expected):
    best = max(best_trees(TreeProfile(betas), 4, len(betas)), key=lambda c: c.expected_accepted)
    assert shape_spec(best.shape.choices) == expected


@pytest.mark.parametrize("spec", ["3,2,1", "1,1,1", "2", "[[0],[1],[0,0],[0,0,0]]"])
def test_a_shape_is_written_so_that_tree_reads_it_back(spec):
    shape = parse_tree(spec)
    assert parse_tree(shape_spec(shape.choices)).choices == shape.choices


@pytest.mark.parametrize(
    "spec,levels",
    [("1,1,1", (1, 1, 1)), ("3", (1,)), ("3,2", (1, 3)), ("[[0],[1],[0,0],[0,0,0]]", (1, 1, 1)), ("2,1,1", (1, 2, 2))],
)
def test_a_tree_round_drafts_one_call_a_level_and_verifies_every_node_at_once(spec, levels):
    shape = parse_tree(spec)
    assert level_rows(shape) == levels
    cost = CostModel(draft_cost=0.1, row_cost=0.05, draft_row_cost=0.5, state_cost=0.01)
    draft = sum(0.1 * (1 + 0.5 * (rows - 1)) for rows in levels)
    assert tree_round_time(cost, shape) == pytest.approx(draft + 1 + 0.05 * shape.size + 0.01)


@pytest.mark.parametrize("k,batch", itertools.product([1, 3, 8], [1, 4]))
def test_a_chains_round_time_is_the_ledgers(k, batch):
    cost = CostModel(draft_cost=0.2, row_cost=0.03, draft_row_cost=0.1, state_cost=0.02, queue_cost=0.01)
    assert tree_round_time(cost, TreeShape.chain(k), batch) == pytest.approx(round_time(cost, k, batch))


def falling_profile(rng: random.Random, depth: int, ranks: int) -> TreeProfile:
    """Sibling rates that fall with the rank (each a random fraction of the one before): then each rank's
    child is kept less often than the one before, given the walk reached the node."""
    rows = []
    for _ in range(depth):
        rates = [rng.uniform(0.2, 0.95)]
        for _ in range(ranks - 1):
            rates.append(rates[-1] * rng.uniform(0.3, 1.0))
        rows.append(tuple(rates))
    return TreeProfile(tuple(rows))


@pytest.mark.parametrize("seed", range(6))
def test_where_sibling_rates_fall_the_best_first_search_finds_the_exact_programs_best_trees(seed, monkeypatch):
    rng = random.Random(seed)
    depth, nodes = rng.randint(1, 6), rng.randint(2, 20)
    profile = falling_profile(rng, depth, nodes)
    w = node_weights(profile, min(depth, nodes), nodes)
    assert (w[:, 1:] <= w[:, :-1]).all()  # the case the search is exact in
    exact = trees._exact_trees(profile, nodes, min(depth, nodes))
    found = best_trees(profile, nodes, depth)

    def best(candidates, n, cap):
        fits = [c.expected_accepted for c in candidates if c.shape.size <= n and c.shape.depth <= cap]
        return max(fits, default=0.0)

    for cap in range(1, min(depth, nodes) + 1):
        for n in range(1, nodes + 1):
            assert best(found, n, cap) == pytest.approx(best(exact, n, cap), abs=1e-12), (cap, n)
    for c in found:
        assert c.expected_accepted == pytest.approx(expected_accepted(c.shape, profile))
    costs = CostModel(draft_cost=0.05, row_cost=0.01, draft_row_cost=0.02, state_cost=0.01)
    fast = best_tree(profile, costs, nodes, depth)
    monkeypatch.setattr(trees, "_search", lambda p, n, d: (trees._exact_trees(p, n, max(0, min(d, n))), []))
    slow = best_tree(profile, costs, nodes, depth)
    assert (fast is None) == (slow is None) and (fast is None or fast[1] == pytest.approx(slow[1], abs=1e-12))


def test_the_largest_budget_is_searched_best_first_and_a_rising_profile_still_gets_a_tree(monkeypatch):
    """256 nodes and 64 levels: the exact program would fill 10^10 cells. Under -k auto's prior the
    best-first search is exact; a profile whose later siblings are kept more often than earlier ones
    (0.1 then 0.9) is searched best-first on rates capped by the lower ranks', its trees scored under
    the profile itself."""
    monkeypatch.setattr(trees, "_exact_trees", lambda *a: pytest.fail("the exact program ran"))
    prior = TreeProfile(tuple(tuple(0.5 * sibling_prior(r) for r in range(256)) for _ in range(64)))
    found = best_trees(prior, 256, 64)
    assert max(c.shape.size for c in found) == 256
    rising = TreeProfile(((0.5, 0.1, 0.9),) * 64)
    costs = CostModel(draft_cost=0.01, row_cost=0.0, draft_row_cost=0.0)
    shape, rate = best_tree(rising, costs, 256, 64)
    assert shape.size <= 256 and not shape.is_chain
    assert rate == pytest.approx((1 + expected_accepted(shape, rising)) / tree_round_time(costs, shape))
