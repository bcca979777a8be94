"""The round over token trees: every rule's decision over a batch of ragged trees is each request's own;
a chain walked as a tree is the chain; greedy and invariant tree texts are target-only decoding's;
the caches keep exactly the accepted path; what cannot serve a tree is refused in one line."""

import random

import pytest
import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer, NgramProposer
from specd.core.rows import Rows, row_starts
from specd.core.sampler import RejectionSampler
from specd.core.shared_body import SharedBodyProposer
from specd.core.state import Request
from specd.core.table_model import TableModel
from specd.core.tree import DraftTree, TreeBatch
from specd.core.tree_shape import parse_tree
from specd.errors import UsageError
from tests.helpers import table_engine

V = 5


def random_tree(rng: random.Random, nodes: int, drawn: str = "rank") -> DraftTree:
    tokens, parents = [], []
    for n in range(nodes):
        parent = rng.randrange(-1, n)
        taken = {tokens[c] for c in range(n) if parents[c] == parent}
        free = [t for t in range(V) if t not in taken]
        if not free:
            break
        tokens.append(rng.choice(free))
        parents.append(parent)
    return DraftTree(tuple(tokens), tuple(parents), drawn)


def rows_for(trees, p, q_rows=None, argmax=None):
    """Packed rows over ``trees`` (p: every request's rows back to back; q_rows: per request per node a
    q row or None for a point mass)."""
    ks = [len(t) for t in trees]
    k = max(ks, default=0)
    q_list, q_index = [], []
    for b, t in enumerate(trees):
        index = []
        for n in range(len(t)):
            row = q_rows[b][n] if q_rows is not None else None
            index.append(len(q_list) if row is not None else -1)
            if row is not None:
                q_list.append(row)
        q_index.append(index + [-1] * (k - len(t)))
    draft = torch.tensor([list(t.tokens) + [-1] * (k - len(t)) for t in trees]).reshape(len(trees), k)
    q = torch.stack(q_list) if q_list else torch.zeros(0, V, dtype=torch.float64)
    return Rows(
        p,
        None if p is None else row_starts(torch.tensor(ks)),
        q,
        torch.tensor(q_index).reshape(len(trees), k),
        draft,
        torch.tensor(ks),
        V,
        argmax,
        tuple(ks),
        TreeBatch.of(trees, k, "cpu"),
    )


def test_a_batchs_decision_is_each_requests_own_under_every_rule():
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    sampler = RejectionSampler()
    for _ in range(40):
        trees = [
            random_tree(rng, rng.randrange(0, 7), rng.choice(["rank", "sampled"])) for _ in range(rng.randrange(1, 5))
        ]
        ks = [len(t) for t in trees]
        p = torch.softmax(torch.randn(sum(k + 1 for k in ks), V, generator=gen, dtype=torch.float64), -1)
        q_rows = [
            [
                None if t.drawn == "rank" else torch.softmax(torch.randn(V, generator=gen, dtype=torch.float64), -1)
                for _ in t.tokens
            ]
            for t in trees
        ]
        for b, t in enumerate(trees):  # a sampled node's own token must have q mass
            for n, row in enumerate(q_rows[b]):
                if row is not None:
                    row[t.tokens[n]] += 0.1
                    q_rows[b][n] = row / row.sum()
        targets = torch.randint(0, V, (len(trees), max(ks, default=0) + 1), generator=gen)
        u = torch.rand(len(trees), max(ks, default=0), generator=gen, dtype=torch.float64)
        whole = sampler.decide(rows_for(trees, p, q_rows), u)
        greedy = sampler.match_targets(targets, rows_for(trees, None, q_rows, targets))
        start = 0
        for b, t in enumerate(trees):
            k = len(t)
            alone = sampler.decide(rows_for([t], p[start : start + k + 1], [q_rows[b]]), u[b : b + 1, :k])
            one = sampler.match_targets(
                targets[b : b + 1, : k + 1], rows_for([t], None, [q_rows[b]], targets[b : b + 1, : k + 1])
            )
            start += k + 1
            assert (alone.accepted[0], alone.leaf[0]) == (whole.accepted[b], whole.leaf[b])
            assert torch.allclose(alone.terminal_rows[0], whole.terminal_rows[b])
            assert (one.accepted[0], one.leaf[0], one.terminal[0]) == (
                greedy.accepted[b],
                greedy.leaf[b],
                greedy.terminal[b],
            )


def test_a_chain_walked_as_a_tree_decides_as_the_chain():
    gen = torch.Generator().manual_seed(1)
    sampler = RejectionSampler()
    trees = [DraftTree.chain((1, 2, 3)), DraftTree.chain((4,)), DraftTree.chain(())]
    p = torch.softmax(torch.randn(4 + 2 + 1, V, generator=gen, dtype=torch.float64), -1)
    q_rows = [[torch.softmax(torch.randn(V, generator=gen, dtype=torch.float64), -1) for _ in t.tokens] for t in trees]
    for _ in range(50):
        u = torch.rand(3, 3, generator=gen, dtype=torch.float64)
        as_tree = rows_for(trees, p, q_rows)
        general = TreeBatch(as_tree.tree.parent, as_tree.tree.last_child, as_tree.tree.depth, False, tuple(trees))
        from dataclasses import replace

        forced = sampler.decide(replace(as_tree, tree=general), u)
        plain = sampler.decide(replace(as_tree, tree=None), u)
        assert forced.accepted.tolist() == plain.accepted.tolist() and forced.leaf.tolist() == plain.leaf.tolist()
        assert torch.equal(forced.terminal_rows, plain.terminal_rows)


# [[0],[1],[0,0],[1,0],[1,0,0]]: a level whose one expanded node is not on the branch of every row before it
SHAPES = ["2,2", "3,1,1", "rank:2,2,1", "nodes=5", "[[0],[1],[0,0],[1,0],[1,0,0]]"]


@pytest.mark.parametrize("layout", ["replay_frontier", "retained_frontier"])
def test_greedy_tree_text_is_target_only_greedy(layout):
    requests = [Request(f"r{i}", (1 + i % 3, 2), 9) for i in range(6)]
    base = table_engine(vocab=V, k=0, layout=layout, target_temperature=0.0)
    expected = SpeculativeEngine.baseline(base.target, base.target_policy, base.config).run(requests).new_tokens()
    for spec in SHAPES:
        engine = table_engine(vocab=V, k=3, layout=layout, target_temperature=0.0, tree=parse_tree(spec))
        result = engine.run(requests, batch_size=4)
        assert result.new_tokens() == expected, spec
        assert any(r.draft_parents for r in result.rounds), spec  # trees were verified


def test_the_invariant_rules_tree_text_is_target_only_sampling_for_200_requests():
    requests = [Request(f"id-{i}", (i % V, (3 * i) % V), 7, seed=i % 7) for i in range(200)]
    base = table_engine(vocab=V, k=0, rule="invariant")
    expected = SpeculativeEngine.baseline(base.target, base.target_policy, base.config).run(requests).new_tokens()
    for spec in SHAPES:
        engine = table_engine(vocab=V, k=3, rule="invariant", tree=parse_tree(spec))
        assert engine.run(requests, batch_size=64).new_tokens() == expected, spec


@pytest.mark.parametrize("rule", ["maximal", "invariant"])
def test_the_caches_keep_the_accepted_path_and_the_streams_move_over_what_was_read(rule):
    engine = table_engine(vocab=V, k=3, rule=rule, tree=parse_tree("2,2,1"), target_temperature=0.8)
    session = engine.start([Request(f"r{i}", (1, 2, 3), 10, seed=i) for i in range(5)])
    from specd.core.round import decode
    from specd.core.tree import uniforms_reached

    seen = {}
    session.cache.close = lambda slot, close=session.cache.close: (
        seen.setdefault(slot, session.cache.committed(slot)),
        close(slot),
    )[1]
    result = decode(session)
    for state in result.states:
        assert seen[state.slot] == state.output[:-1]  # the target's cache: exactly the published output minus F
    for r in result.rounds:
        if r.draft_parents is None:
            continue
        tree = DraftTree(r.draft_token_ids, r.draft_parents)
        assert r.emitted[: len(r.accepted_path)] == tree.path_tokens(r.accepted_path[-1]) if r.accepted_path else True
        moved = r.rng_after[1] - r.rng_before[1]
        correction = r.terminal_kind == "correction"
        want = uniforms_reached(tree, r.accepted_path, r.accepted, correction) if rule == "maximal" else 0
        if r.finish_reason is None:
            assert moved == want


def test_what_cannot_serve_a_tree_is_refused_in_one_line():
    target, draft = TableModel(V, seed=1), TableModel(V, seed=2)
    policy = SamplingPolicy.build(temperature=1.0)
    with pytest.raises(UsageError, match="block verification .* has no tree form"):
        SpeculativeEngine(
            target, ModelProposer(draft, policy), policy, EngineConfig(k=2, rule="block", tree=parse_tree("2,2"))
        )
    with pytest.raises(UsageError, match="drafts chains only"):
        SpeculativeEngine(
            target, SharedBodyProposer(target, [0, 1], policy), policy, EngineConfig(k=2, tree=parse_tree("2"))
        )
    # a chain shape is a chain: block verification takes it
    SpeculativeEngine(
        target, ModelProposer(draft, policy), policy, EngineConfig(k=2, rule="block", tree=parse_tree("1,1"))
    )


def test_a_lookups_tree_holds_its_chain_proposal_and_its_other_continuations():
    prompt = (1, 2, 3, 1, 2, 4, 1, 2, 0, 1, 2)  # "1 2" was followed by 3, 4 and 0
    engine = SpeculativeEngine(
        TableModel(V, seed=1),
        NgramProposer(2, V),
        SamplingPolicy.build(temperature=0.0),
        EngineConfig(k=2, tree=parse_tree("3,1")),
    )
    result = engine.run([Request("r", prompt, 3)])
    first = result.rounds[0]
    assert first.draft_parents is not None
    roots = [t for t, parent in zip(first.draft_token_ids, first.draft_parents) if parent == -1]
    assert roots == [0, 4, 3]  # the most recent continuation first: the chain's proposal


def test_several_sources_fill_one_trees_root_in_turn():
    """--draft ngram:1,<model> --tree 3,1: the lookup's continuation first, then the model's children
    for the rest of the root, never a token the lookup put there; greedy text is target-only's."""
    target, draft = TableModel(V, seed=5, name="t"), TableModel(V, seed=6, name="d")
    prompt = (1, 2, 0, 1, 2, 1, 1, 2)
    requests = [Request(f"r{i}", prompt[: 5 + i % 4], 8, seed=i) for i in range(8)]
    greedy = SamplingPolicy.build(temperature=0.0)
    sources = [NgramProposer(1, V), ModelProposer(draft, SamplingPolicy.build(temperature=0.7))]
    engine = SpeculativeEngine(target, sources, greedy, EngineConfig(k=2, tree=parse_tree("3,1")))
    result = engine.run(requests, batch_size=3)
    expected = SpeculativeEngine.baseline(target, greedy, EngineConfig()).run(requests).new_tokens()
    assert result.new_tokens() == expected
    merged = 0
    for r in result.rounds:
        if r.draft_parents is None:
            continue
        tree = DraftTree(r.draft_token_ids, r.draft_parents)
        roots = [tree.tokens[n] for n in tree.children[-1]]
        assert len(roots) == len(set(roots)) and len(roots) <= 3
        merged += r.source == "ngram:1" and len(roots) > 1
    assert merged  # some rounds took the lookup's branch and the model's beside it


def test_a_lookup_after_a_model_fills_the_rest_of_the_root():
    """--draft <model>,ngram:1 --tree 3,1: the model's children first, then the lookup's continuations that
    start with another token."""
    target, draft = TableModel(V, seed=5, name="t"), TableModel(V, seed=6, name="d")
    prompt = (1, 2, 0, 1, 2, 1, 1, 2)
    requests = [Request(f"r{i}", prompt[: 5 + i % 4], 8, seed=i) for i in range(8)]
    greedy = SamplingPolicy.build(temperature=0.0)
    sources = [ModelProposer(draft, SamplingPolicy.build(temperature=0.0)), NgramProposer(1, V)]
    engine = SpeculativeEngine(target, sources, greedy, EngineConfig(k=2, tree=parse_tree("2,1")))
    result = engine.run(requests, batch_size=3)
    assert result.new_tokens() == SpeculativeEngine.baseline(target, greedy, EngineConfig()).run(requests).new_tokens()
    for r in result.rounds:
        if r.draft_parents is not None:
            roots = [t for t, p in zip(r.draft_token_ids, r.draft_parents) if p == -1]
            assert len(roots) == len(set(roots)) <= 2
