"""Other engines' tree-verification fixtures, ported, as tests of the tree protocol and of specd's own tree rules.

Each fixture's rows are point masses (greedy, or a temperature of 0.01), so every rule decides it without
a uniform mattering: the oracle's stream integrates each case and must find one outcome of mass 1. The
cases run through the shipped adapters under the protocol (specd's rule, SGLang's at the fixture's
thresholds, EAGLE's, TensorRT-LLM's as of #15098 and of #12588) and through production's
RejectionSampler (decide on the point-mass rows, match_targets on the argmax) directly, as one batch
where the fixture batches requests. Each port names the file, repository and commit it was read from;
its trees, tokens, target rows and expected outputs are the file's, converted as its comment says.
"""

import pytest
import torch

from specd.core.rows import Rows, row_starts
from specd.core.sampler import RejectionSampler
from specd.core.tree import DraftTree, TreeBatch
from specd.core.tree_shape import TreeShape
from specd.oracles.samplers.tree_protocol import load_tree_sampler
from specd.oracles.samplers.tree_rounds import TreeRound, shape_nodes
from specd.oracles.samplers.tree_uniforms import explore

GREEDY_RULES = ("specd", "sglang", "eagle", "trtllm", "trtllm-12588")


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


def every_rule(tree: DraftTree, p: torch.Tensor) -> tuple[tuple[int, ...], int]:
    """The outcome every greedy-exact rule under the protocol gives (they must agree), q zeros."""
    got = {decide_once(rule, tree, p, torch.zeros_like(p)) for rule in GREEDY_RULES}
    assert len(got) == 1, got
    return got.pop()


def production(trees: list[DraftTree], ps: list[torch.Tensor]) -> list[tuple]:
    """Production's RejectionSampler on a batch of point-mass trees (p: each request's rows, its root's
    first): per request, decide's (path, terminal) and match_targets' (path, terminal)."""
    ks, vocab = [len(t) for t in trees], ps[0].shape[-1]
    k, b = max(ks), len(trees)
    targets = torch.zeros(b, k + 1, dtype=torch.int64)
    for i, p in enumerate(ps):
        targets[i, : len(p)] = p.argmax(-1)
    rows = Rows(
        torch.cat(ps).to(torch.float64),
        row_starts(torch.tensor(ks)),
        torch.zeros(0, vocab, dtype=torch.float64),
        torch.full((b, k), -1, dtype=torch.int64),  # every q a point mass: the children were chosen
        torch.tensor([list(t.tokens) + [-1] * (k - len(t)) for t in trees], dtype=torch.int64),
        torch.tensor(ks),
        vocab,
        None,
        tuple(ks),
        TreeBatch.of(trees, k, "cpu"),
    )
    rule = RejectionSampler()
    decided = rule.decide(rows, torch.zeros(b, k, dtype=torch.float64))  # every test is sure either way
    greedy = rule.match_targets(targets, rows)
    return [
        (
            (t.path(int(decided.leaf[i])), int(decided.terminal_rows[i].argmax())),
            (t.path(int(greedy.leaf[i])), int(greedy.terminal[i])),
        )
        for i, t in enumerate(trees)
    ]


def one_hot_rows(targets: list[int], vocab: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(targets), vocab).to(torch.float64)


def choices_tree(choices, tokens) -> DraftTree:
    """A tree given as rank paths (EAGLE choices, vLLM's spec token tree): each node's parent is the
    node of its path less its last step."""
    parents, _ = shape_nodes(TreeShape(tuple(tuple(c) for c in choices)))
    return DraftTree(tuple(tokens), parents, "rank")


# -- SGLang: sgl-kernel/tests/speculative/test_speculative_sampling.py ----------------------------------
# Ported from sgl-project/sglang sgl-kernel/tests/speculative/test_speculative_sampling.py at 120affb9
# (checked against that file: its inputs and expected figures are these), test_tree_speculative_sampling_
# target_only: two requests, six positions each (the root and five draft tokens), the tree as
# retrive_next_token / retrive_next_sibling, target logits 1 everywhere but 10 at five (request,
# position, token) cells and at token 18 of every other position, temperature 0.01, draft_probs zeros,
# and the expected predicts, accept_index and accept_token_num at thresholds (1, 1) and (0, 0).
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
    trees, rows, outcomes = [], [], []
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
        trees, rows, outcomes = trees + [tree], rows + [p], outcomes + [(path, terminal)]
    assert (predicts, accept_index, accept_num) == SGLANG_CASES[thresholds]
    if thresholds == (1, 1):  # target sampling: every exact rule, and production on the batch, decide the same
        assert [every_rule(t, p) for t, p in zip(trees, rows)] == outcomes
        assert production(trees, rows) == [(o, o) for o in outcomes]


# -- vLLM: tests/v1/sample/test_tree_rejection_sampler.py ------------------------------------------------
# Ported from vllm-project/vllm tests/v1/sample/test_tree_rejection_sampler.py at 41d9d55b (it tests the
# TreeRejectionSampler of vLLM PR #22752, which was closed unmerged; greedy throughout): every case, with
# its spec token trees, drafted nodes, target sample maps and expected accepted and bonus nodes, and its
# conventions. A node's token is its index in [()] + tree + the bonus level (each leaf of the last level
# with (0,) appended); a node the case does not draft holds a token from [len(that list), 100), drawn at
# random by the file and here from a seeded permutation (distinct, so siblings stay distinct; no target
# picks one); the target's logits are 100 at its sampled node's token and -100 elsewhere, a row the sample
# map leaves out all -100 (argmax 0, the root's token, never a draft), and greedy takes the argmax; the
# expected output is the file's: each accepted node's token at its draft index, the bonus last,
# PLACEHOLDER_TOKEN_ID (-1) elsewhere.
VLLM_VOCAB = 100
BINARY_2 = [(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]
BINARY_3 = BINARY_2 + [(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)]
CHAIN_3 = [(0,), (0, 0), (0, 0, 0)]
VLLM_CASES = {
    # name: (tree, per request: (drafted nodes, target sample map, expected accepted nodes, expected bonus))
    "single_node": ([(0,)], [([(0,)], {(): (0,), (0,): (0, 0)}, [(0,)], (0, 0))]),
    "chain_full_acceptance": (
        CHAIN_3,
        [(CHAIN_3, {(): (0,), (0,): (0, 0), (0, 0): (0, 0, 0), (0, 0, 0): (0, 0, 0, 0)}, CHAIN_3, (0, 0, 0, 0))],
    ),
    "chain_partial_acceptance": (
        CHAIN_3,
        [([(0,), (0, 0), (0, 0)], {(): (0,), (0,): (0, 0), (0, 0): (0, 0, 0)}, [(0,), (0, 0)], (0, 0, 0))],
    ),
    "tree_full_acceptance": (
        BINARY_2,
        [([(1,), (1, 1)], {(): (1,), (1,): (1, 1), (1, 1): (1, 1, 0)}, [(1,), (1, 1)], (1, 1, 0))],
    ),
    "tree_partial_acceptance": (BINARY_2, [([(0,), (0, 0)], {(): (0,), (0,): (0, 1)}, [(0,)], (0, 1))]),
    "tree_early_rejection": (
        BINARY_2,
        [([(1,), (0, 1)], {(): (0,), (0,): (0, 0), (0, 0): (0, 0, 0)}, [], (0,))],
    ),
    "tree_full_acceptance_multiple_sequences": (
        BINARY_2,
        [
            ([(0,), (0, 1)], {(): (0,), (0,): (0, 1), (0, 1): (0, 1, 0)}, [(0,), (0, 1)], (0, 1, 0)),
            ([(1,), (1, 0)], {(): (1,), (1,): (1, 0), (1, 0): (1, 0, 0)}, [(1,), (1, 0)], (1, 0, 0)),
        ],
    ),
    "tree_partial_acceptance_multiple_sequences": (
        BINARY_2,
        [
            ([(0,), (0, 0)], {(): (0,), (0,): (0, 1)}, [(0,)], (0, 1)),
            ([(0,), (0, 1)], {(): (1,), (1,): (1, 0)}, [], (1,)),
        ],
    ),
    "deep_tree_full_acceptance": (
        BINARY_3,
        [
            (
                [(1,), (1, 1), (1, 1, 0)],
                {(): (1,), (0,): (0, 1), (1,): (1, 1), (0, 0): (0, 0, 0), (1, 1): (1, 1, 0), (1, 1, 0): (1, 1, 0, 0)},
                [(1,), (1, 1), (1, 1, 0)],
                (1, 1, 0, 0),
            )
        ],
    ),
}


def vllm_request(draft_tree, drafted, sample_map, seed: int):
    """One request of a case as (DraftTree, target rows float64[N + 1, 100]), as the file builds its input."""
    leaves = [n + (0,) for n in draft_tree if len(n) == len(draft_tree[-1])]
    tree = [(), *draft_tree, *leaves]
    order = torch.randperm(VLLM_VOCAB - len(tree), generator=torch.Generator().manual_seed(seed))
    filler = (len(tree) + order).tolist()
    tokens = [tree.index(n) if n in drafted else filler[i] for i, n in enumerate(draft_tree)]
    logits = torch.full((len(draft_tree) + 1, VLLM_VOCAB), -100.0)
    for i, node in enumerate(tree[: len(draft_tree) + 1]):
        if node in sample_map:
            logits[i, tree.index(sample_map[node])] = 100.0
    greedy = torch.nn.functional.one_hot(logits.argmax(-1), VLLM_VOCAB).to(torch.float64)
    return choices_tree(draft_tree, tokens), greedy, tree


def vllm_output(tree_nodes, num_drafts: int, accepted: list, bonus) -> list[int]:
    """The file's expected output row: accepted tokens at their draft index, the bonus last, -1 elsewhere."""
    out = [-1] * (num_drafts + 1)
    for node in accepted:
        out[tree_nodes.index(node) - 1] = tree_nodes.index(node)
    out[-1] = tree_nodes.index(bonus)
    return out


def as_output(tree: DraftTree, path, terminal: int) -> list[int]:
    out = [-1] * (len(tree) + 1)
    for n in path:
        out[n] = tree.tokens[n]
    out[-1] = terminal
    return out


@pytest.mark.parametrize("case", list(VLLM_CASES))
@pytest.mark.parametrize("seed", [0, 1])
def test_vllm_greedy_tree_cases(case, seed):
    draft_tree, requests = VLLM_CASES[case]
    trees, rows, expected = [], [], []
    for drafted, sample_map, accepted, bonus in requests:
        tree, p, nodes = vllm_request(draft_tree, drafted, sample_map, seed)
        trees, rows = trees + [tree], rows + [p]
        expected.append(vllm_output(nodes, len(draft_tree), accepted, bonus))
    assert [as_output(t, *every_rule(t, p)) for t, p in zip(trees, rows)] == expected
    for t, want, (decided, greedy) in zip(trees, expected, production(trees, rows)):
        assert as_output(t, *decided) == want and as_output(t, *greedy) == want


# -- TensorRT-LLM: tests/unittest/_torch/speculative/hw_agnostic/test_draft_token_tree_verification.py --
# Ported from NVIDIA/TensorRT-LLM tests/unittest/_torch/speculative/hw_agnostic/
# test_draft_token_tree_verification.py at e2ef8874, test_static_tree_verification_for_target_model: the
# 12-node eagle_choices tree (max_draft_len 3; [0, 1, 1] without a [0, 1, 0]: a second child alone),
# draft tokens 11..22 in choices order, and its three cases' new tokens (the target's greedy token at the
# root, then at each node) with the expected accepted count and the tokens after the prompt
# (ref_mtokens less the ten prompt tokens 0..9).
TRT_CHOICES = [[0], [1], [2], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [0, 0, 0], [0, 1, 1], [1, 0, 0]]
TRT_DRAFTS = list(range(11, 23))
TRT_CASES = {
    # case: (input_new_tokens, ref_num_accepted_draft_tokens, ref_mtokens after the prompt)
    "no_draft_token_accepted": ([31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 0], 0, [31]),
    "one_path_not_the_longest": ([11, 15, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112], 2, [11, 15, 105]),
    "one_path_the_longest": ([11, 14, 102, 103, 20, 105, 106, 107, 108, 109, 110, 111, 112], 3, [11, 14, 20, 110]),
}


@pytest.mark.parametrize("case", list(TRT_CASES))
def test_tensorrt_llm_twelve_node_tree(case):
    new_tokens, accepted, emitted = TRT_CASES[case]
    tree = choices_tree(TRT_CHOICES, TRT_DRAFTS)
    p = one_hot_rows(new_tokens, 128)
    path, terminal = every_rule(tree, p)
    assert (len(path), [tree.tokens[n] for n in path] + [terminal]) == (accepted, emitted)
    [(decided, greedy)] = production([tree], [p])
    assert decided == greedy == (path, terminal)
