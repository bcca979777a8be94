"""Other engines' tree-verification fixtures as tests of the tree protocol and of specd's own tree rules.

Each fixture's rows are point masses (greedy, or a temperature of 0.01), so every rule decides it without
a uniform mattering: the oracle's stream integrates each case and must find one outcome of mass 1. The
cases run through the shipped adapters under the protocol (specd's rule, SGLang's at the fixture's
thresholds, EAGLE's, TensorRT-LLM's) and through production's RejectionSampler (decide on the point-mass
rows, match_targets on the argmax) directly. What is ported and what is rebuilt is said per fixture.
"""

import pytest
import torch

from specd.core.sampler import RejectionSampler
from specd.core.tree import DraftTree
from specd.core.tree_shape import TreeShape
from specd.oracles.tree_rounds import TreeRound, shape_nodes
from specd.oracles.tree_samplers import load_tree_sampler, node_rows
from specd.oracles.tree_uniforms import explore

GREEDY_RULES = ("specd", "sglang", "eagle", "trtllm")


def decide_once(name: str, tree: DraftTree, p: torch.Tensor, q: torch.Tensor | None = None):
    """The one outcome a rule has on point-mass rows -> (accepted path, terminal token); every other
    outcome of its uniforms must have probability 0."""
    sampler = load_tree_sampler(name)
    rnd = TreeRound(tree, p.to(torch.float64), None if q is None else q.to(torch.float64), 1.0, "rank")
    outcomes = [(o, m) for o, m, _ in explore(lambda u: sampler(rnd, u)) if m > 0]
    decided = {
        (o.path, o.terminal if o.law is None else max(range(len(o.law)), key=o.law.__getitem__)) for o, _ in outcomes
    }
    assert len(decided) == 1 and sum(m for _, m in outcomes) == 1, (name, decided)
    (path, terminal), (outcome, _) = decided.pop(), outcomes[0]
    assert outcome.law is None or max(outcome.law) == 1.0  # the terminal law is a point mass too
    return path, terminal


def production(tree: DraftTree, p: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Production's RejectionSampler on the tree: (decide's path, match_targets' path) on p's rows."""
    rows = node_rows(tree, p.to(torch.float64), None)
    rule = RejectionSampler()
    zeros = torch.zeros(1, len(tree), dtype=torch.float64)  # point masses: every test is sure either way
    decided = rule.decide(rows, zeros)
    greedy = rule.match_targets(p.argmax(-1).unsqueeze(0), rows)
    return tree.path(int(decided.leaf[0])), tree.path(int(greedy.leaf[0]))


def one_hot_rows(targets: list[int], vocab: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(targets), vocab).to(torch.float64)


# -- SGLang: sgl-kernel/tests/speculative/test_speculative_sampling.py ----------------------------------
# Ported from memory of test_tree_speculative_sampling_target_only: two requests, six positions each (the
# root and five draft tokens), the tree as retrive_next_token / retrive_next_sibling, target logits 1
# everywhere but 10 at five (request, position, token) cells and at token 18 of every other position,
# temperature 0.01, draft_probs zeros, and the expected predicts, accept_index and accept_token_num at
# thresholds (1, 1) and (0, 0). Confident of the structure and of every figure below: they were checked
# against the kernel's rule (each expected value follows from it), not against a run of the kernel.
SGLANG_CANDIDATES = [[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]]
SGLANG_RETRIVE_INDEX = [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
SGLANG_NEXT_TOKEN = [[1, 2, -1, 4, 5, -1], [4, 2, 3, -1, 5, -1]]
SGLANG_NEXT_SIBLING = [[-1, 3, -1, -1, -1, -1], [-1, -1, -1, -1, 1, -1]]
SGLANG_CASES = {
    (1, 1): ([3, -1, -1, 4, 5, 18, 11, -1, -1, -1, 12, 18], [[0, 3, 4, 5], [6, 10, 11, -1]], [3, 2]),
    (0, 0): ([1, 2, 18, -1, -1, -1, 11, -1, -1, -1, 12, 18], [[0, 1, 2, -1], [6, 10, 11, -1]], [2, 2]),
}


def sglang_target_probs() -> torch.Tensor:
    logits = torch.full((2, 6, 20), 1.0)
    for b, i, t in ((0, 0, 3), (0, 3, 4), (0, 4, 5), (1, 0, 11), (1, 4, 12)):
        logits[b, i, t] = 10
    for b in range(2):
        for i in range(6):
            if logits[b, i].max() < 10:
                logits[b, i, 18] = 10
    return torch.softmax(logits / 0.01, dim=-1)  # float32, as the test makes them: exact point masses


def sglang_tree(b: int) -> tuple[DraftTree, list[int]]:
    """Request b's linked lists as a DraftTree (breadth first, siblings in their list's order) and each
    node's position in the request's rows."""
    order, parents, queue = [], [], [(0, -1)]
    while queue:
        position, parent = queue.pop(0)
        child = SGLANG_NEXT_TOKEN[b][position]
        while child != -1:
            parents.append(parent)
            order.append(child)
            queue.append((child, len(order) - 1))
            child = SGLANG_NEXT_SIBLING[b][child]
    tokens = tuple(SGLANG_CANDIDATES[b][i] for i in order)
    return DraftTree(tokens, tuple(parents), "rank"), order


@pytest.mark.parametrize("thresholds", list(SGLANG_CASES))
def test_sglang_two_request_six_node_tree(thresholds):
    probs = sglang_target_probs()
    predicts, accept_index, accept_num = [-1] * 12, [], []
    for b in range(2):
        tree, order = sglang_tree(b)
        p = probs[b, [0, *order]]
        name = "sglang@{:g},{:g}".format(*thresholds)
        path, terminal = decide_once(name, tree, p)
        chain = [SGLANG_RETRIVE_INDEX[b][0]] + [SGLANG_RETRIVE_INDEX[b][order[n]] for n in path]
        for at, token in zip(chain, [tree.tokens[n] for n in path] + [terminal]):
            predicts[at] = token
        accept_index.append(chain + [-1] * (4 - len(chain)))
        accept_num.append(len(path))
        if thresholds == (1, 1):  # target sampling: every exact rule, and production, decide the same
            assert {decide_once(rule, tree, p, torch.zeros_like(p)) for rule in GREEDY_RULES} == {(path, terminal)}
            assert production(tree, p) == (path, path)
    assert (predicts, accept_index, accept_num) == SGLANG_CASES[thresholds]


# -- vLLM: tests/v1/sample/test_tree_rejection_sampler.py (greedy) ---------------------------------------
# Rebuilt, not ported: the file's exact trees and token values are not recalled. These are the cases its
# description names, built here with the same shapes and the property each checks: a chain all accepted
# (bonus), a chain rejected at its first and at its second draft, a two-branch tree whose second branch
# matches, and the depth-3 binary tree (14 nodes) with the target's path through both kinds of child.
VOCAB = 10


def tree_of(widths: list[int], tokens: list[int]) -> DraftTree:
    parents, _ = shape_nodes(TreeShape.branching(widths))
    return DraftTree(tuple(tokens), parents, "rank")


VLLM_CASES = {
    # name: (branching, node tokens, the target's argmax at the root and at each node, path, terminal)
    "chain_all_accepted": ([1, 1, 1], [4, 5, 6], [4, 5, 6, 7], (0, 1, 2), 7),
    "chain_first_rejected": ([1, 1, 1], [4, 5, 6], [3, 5, 6, 7], (), 3),
    "chain_early_rejection": ([1, 1, 1], [4, 5, 6], [4, 9, 6, 7], (0,), 9),
    "second_branch_matches": ([2, 1], [1, 2, 3, 4], [2, 0, 4, 0, 8], (1, 3), 8),
    "no_branch_matches": ([2, 1], [1, 2, 3, 4], [5, 0, 0, 0, 0], (), 5),
    # depth 3, binary: nodes 0-1 (depth 1), 2-5 (depth 2: 2,3 under 0; 4,5 under 1), 6-13 (depth 3)
    "binary_depth_3": (
        [2, 2, 2],
        [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 7, 8],
        # root -> 2 (node 1, a second child), node 1 -> 5 (node 4, a first), node 4 -> 6 (node 11, a second), bonus 9
        [2, 0, 5, 0, 0, 6, 0, 0, 0, 0, 0, 0, 9, 0, 0],
        (1, 4, 11),
        9,
    ),
}


@pytest.mark.parametrize("case", list(VLLM_CASES))
def test_vllm_greedy_tree_cases(case):
    widths, tokens, targets, path, terminal = VLLM_CASES[case]
    tree = tree_of(widths, tokens)
    p = one_hot_rows(targets, VOCAB)
    for rule in GREEDY_RULES:
        assert decide_once(rule, tree, p, torch.zeros_like(p)) == (path, terminal), rule
    assert production(tree, p) == (path, path)


# -- TensorRT-LLM: tests/unittest/_torch/speculative/hw_agnostic/test_draft_token_tree_verification.py --
# Rebuilt, not ported: the 12-node tree and three cases are not recalled number for number. This is a
# 12-node EAGLE choices tree (3 + 4 + 5 nodes over three levels) with three cases of the kinds its test
# checks: nothing accepted, a full-depth path through a later root child, and a path that stops at depth 2.
TRT_CHOICES = ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (2, 0), (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0), (2, 0, 0))
TRT_TOKENS = (11, 12, 13, 21, 22, 23, 24, 31, 32, 33, 34, 35)
TRT_CASES = {
    # the target's argmax at the root and at each node (13 rows) -> (path, terminal)
    "none_accepted": ([40] + [0] * 12, (), 40),
    "later_root_child_to_full_depth": ([12, 0, 23, 0, 0, 0, 34, 0, 0, 0, 0, 45, 0], (1, 5, 10), 45),
    "stops_at_depth_2": ([11, 22, 0, 0, 0, 39, 0, 0, 0, 0, 0, 0, 0], (0, 4), 39),
}


@pytest.mark.parametrize("case", list(TRT_CASES))
def test_tensorrt_llm_twelve_node_tree(case):
    shape = TreeShape(TRT_CHOICES)
    parents, _ = shape_nodes(shape)
    tree = DraftTree(TRT_TOKENS, parents, "rank")
    targets, path, terminal = TRT_CASES[case]
    p = one_hot_rows(targets, 50)
    for rule in GREEDY_RULES:
        assert decide_once(rule, tree, p, torch.zeros_like(p)) == (path, terminal), rule
    assert production(tree, p) == (path, path)
