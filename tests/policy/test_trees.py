"""When a tree pays: a static tree's E[A] under the acceptance by depth and rank, the best tree per
node count (against brute force), a tree round's time, and a shape written so that --tree reads it."""

import itertools
import random

import pytest

from specd.core.tree_shape import TreeShape, parse_tree
from specd.policy.ledger import CostModel, expected_progress, round_time
from specd.policy.profile import AcceptanceProfile
from specd.policy.trees import TreeProfile, best_trees, expected_accepted, level_rows, shape_spec, tree_round_time


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
