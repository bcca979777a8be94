"""The published tree rules do what their sources do (specd/oracles/samplers/tree_published.py names each file and
commit): each test is a round on which following the source and following its intent differ, with the
source's outcome computed by hand."""

import pytest
import torch

from specd.core.tree import DraftTree
from specd.core.tree_shape import TreeShape
from specd.oracles.samplers.tree_protocol import load_tree_sampler
from specd.oracles.samplers.tree_rounds import TreeRound, shape_nodes
from specd.oracles.samplers.tree_uniforms import explore


def outcomes(name: str, tree: DraftTree, p, q=None) -> dict:
    """(path, terminal token, or the terminal law rounded) -> its exact probability, over the rule's uniforms."""
    rows = lambda x: None if x is None else torch.tensor(x, dtype=torch.float64)  # noqa: E731
    p, q = rows(p), rows(q)
    rnd = TreeRound(tree, p, q, 1.0, tree.drawn)
    sampler, out = load_tree_sampler(name), {}
    for o, mass, _ in explore(lambda u: sampler(rnd, u)):
        key = (o.path, o.terminal if o.law is None else tuple(round(x, 12) for x in o.law))
        out[key] = out.get(key, 0.0) + float(mass)
    return {k: m for k, m in out.items() if m > 0}


def law(*xs: float) -> tuple[float, ...]:
    """A terminal law as ``outcomes`` keys it."""
    return tuple(round(x, 12) for x in xs)


def test_sglang_caps_threshold_acc_at_1e_9_as_its_launcher_does():
    """threshold_acc = 0 is 1e-9 in the kernel: a child of target mass 1e-10 is kept one time in ten,
    not always (0 / 0 or p / 0 in the rule as written)."""
    got = outcomes("sglang@1,0", DraftTree((0,), (-1,), "rank"), [[1e-10, 1 - 1e-10], [0.5, 0.5]])
    kept = sum(m for (path, _), m in got.items() if path == (0,))
    assert abs(kept - 0.1) < 1e-12


def test_sglang_emits_the_last_token_where_its_residual_has_no_mass():
    """threshold_acc 2: both children refused once the coin passes 1/2, every token with mass refused,
    relu(target - draft) zero: the kernel's sampled_id falls back to d - 1."""
    got = outcomes("sglang@1,2", DraftTree((0, 1), (-1, -1), "rank"), [[0.5, 0.5, 0.0], [1, 0, 0], [1, 0, 0]])
    assert got[((), (0.0, 0.0, 1.0))] == 0.5


def test_eagle_matches_candidates_by_their_tokens():
    """Two siblings holding token 0 (drawn iid): EAGLE's is_eq compares tokens, so after the first 0 is
    kept the next level tries the children of both, and keeps the second one's child."""
    tree = DraftTree((0, 0, 1, 2), (-1, -1, 0, 1), "iid")
    p = [[1, 0, 0], [0, 0, 1], [0, 0, 1], [1, 0, 0], [1, 0, 0]]  # rows depend on tokens only: 0 -> 2
    assert outcomes("eagle", tree, p) == {((1, 3), (1.0, 0.0, 0.0)): 1.0}


def test_trtllm_15098_corrects_from_the_target_without_the_tried_tokens():
    """One coin against the cumulative target mass; every child refused: the target row with the tried
    tokens zeroed, scanned to u * (1 - probAcc). A repeated sibling counts twice in probAcc, so the scan
    stops short of the last token's mass."""
    tree = DraftTree((0, 0), (-1, -1), "iid")
    got = outcomes("trtllm", tree, [[0.2, 0.3, 0.5], [1, 0, 0], [1, 0, 0]])
    assert got[((0,), (1.0, 0.0, 0.0))] == pytest.approx(0.2)
    assert got[((1,), (1.0, 0.0, 0.0))] == pytest.approx(0.2)
    assert got[((), (0.0, 0.5, 0.5))] == pytest.approx(0.6)  # the row without 0 would be 0.375, 0.625


def test_llamacpp_tests_a_refused_node_again_for_each_sequence_through_it():
    """One node a on two sequences: refused for the first, the second stays in active_seqs (the loop
    erases s, not i), is picked, refused (p_tgt 0 by then) and subtracts q once more."""
    tree = DraftTree((2, 0, 1), (-1, 0, 0), "iid")
    p = [[0.5, 0.3, 0.2]] + [[1 / 3] * 3] * 3
    q = [[0.2, 0.2, 0.6]] + [[1 / 3] * 3] * 3
    got = outcomes("llamacpp", tree, p, q)
    # kept with p/q = 1/3; refused: [.5 .3 .2] - q -> [.75 .25 0], minus q again -> [.55 .05 0] / .6
    assert got[((), law(0.55 / 0.6, 0.05 / 0.6, 0.0))] == pytest.approx(2 / 3)


def test_llamacpp_may_keep_a_token_drafted_under_another_branch():
    """After a is kept, the sequence through b was never tested and stays active: picked first at the
    next depth (1/2 of the time a was tried first, 1/2), its token, drafted under b, is kept against a's
    row. The protocol cannot state that path: the rule returns [a] and that token."""
    tree = DraftTree((0, 1, 1, 2), (-1, -1, 0, 1), "rank")
    p = [[1, 0, 0], [0, 0.5, 0.5], [1, 0, 0], [1, 0, 0], [1, 0, 0]]
    q = [[1 / 3] * 3] * 5
    got = outcomes("llamacpp", tree, p, q)
    assert got[((0,), 2)] == pytest.approx(0.25)
    assert got[((0, 2), (1.0, 0.0, 0.0))] == pytest.approx(0.75)


def test_medusa_takes_the_argmax_next_and_the_last_candidate_on_ties():
    """fast=True (medusa_generate's default): the next token is the argmax of the last accepted row;
    two candidates of one length and likelihood: the first in retrieve_indices, the later leaf."""
    got = outcomes("medusa-typical", DraftTree((0, 1), (-1, -1), "rank"), [[0.5, 0.5, 0], [0.2, 0.8, 0], [0.6, 0.4, 0]])
    assert got == {((1,), 0): 1.0}


def test_medusa_may_accept_the_padding_of_a_short_candidate():
    """Choices (0), (1), (0, 0): the candidate ending at (1) is padded with token 0, scored by (1)'s row;
    it passes, so that candidate accepts 2 tokens, the second not in the tree."""
    parents, _ = shape_nodes(TreeShape(((0,), (1,), (0, 0))))
    tree = DraftTree((2, 1, 0), parents, "rank")
    p = [[0.0, 0.95, 0.05], [1, 0, 0], [0.9, 0.1, 0], [1, 0, 0]]
    assert outcomes("medusa-typical", tree, p) == {((1,), 0): 1.0}
