"""Token trees: their structure, the walk every rule takes, the uniforms a walk reads, a lookup's trie,
and the shapes --tree parses."""

import json

import pytest
import torch

from specd.core.tree import DraftTree, TreeBatch, leaf_of, trie, uniforms_reached, walk
from specd.core.tree_shape import TreeShape, parse_tree
from specd.errors import UsageError

# root -> 0 (5), 1 (6); 0 -> 2 (7), 3 (8); 1 -> 4 (7); 3 -> 5 (9)
TREE = DraftTree((5, 6, 7, 8, 7, 9), (-1, -1, 0, 0, 1, 3))


def test_structure_of_a_tree():
    assert TREE.depths == (1, 1, 2, 2, 2, 3) and TREE.depth == 3
    assert TREE.children == {-1: (0, 1), 0: (2, 3), 1: (4,), 3: (5,)}
    assert TREE.ranks == (0, 1, 0, 1, 0, 0)
    assert TREE.path(5) == (0, 3, 5) and TREE.path_tokens(5) == (5, 8, 9) and TREE.path(-1) == ()
    assert TREE.last_child(-1) == 1 and TREE.last_child(0) == 3 and TREE.last_child(2) == -1
    assert not TREE.is_chain
    chain = DraftTree.chain((3, 4, 5))
    assert chain.is_chain and chain.parents == (-1, 0, 1) and chain.depths == (1, 2, 3)


@pytest.mark.parametrize(
    "tokens, parents, drawn, message",
    [
        ((1, 2), (-1,), "sampled", "one parent per node"),
        ((1, 2), (-1, 1), "sampled", "parent must come before"),
        ((1, 1), (-1, -1), "sampled", "siblings must be distinct"),
        ((1, 1), (-1, -1), "rank", "siblings must be distinct"),
        ((1,), (-1,), "uniform", "unknown tree construction"),
    ],
)
def test_a_malformed_tree_is_refused_by_name(tokens, parents, drawn, message):
    with pytest.raises(UsageError, match=message):
        DraftTree(tokens, parents, drawn)


def test_only_children_drawn_iid_may_repeat_a_token():
    assert DraftTree((1, 1), (-1, -1), "iid").children == {-1: (0, 1)}


def batch(*trees):
    k = max(len(t) for t in trees)
    return TreeBatch.of(trees, k, "cpu"), k


def test_the_walk_descends_into_the_first_child_that_passed():
    tree, k = batch(TREE)
    valid = torch.ones(1, k, dtype=torch.bool)
    # node 0 refused, node 1 passed; under 1, node 4 refused: A = 1, the last accepted is 1
    passed = torch.tensor([[False, True, True, True, False, True]])
    level, along = walk(passed, valid, tree)
    assert level.tolist() == [[True, False, False]] and along[0, :2].tolist() == [1, 4]
    accepted = level.to(torch.int64).cumprod(-1).sum(-1)
    assert leaf_of(along, accepted).tolist() == [1]
    # both root children pass: the first is taken; then 3 after 2 refused, then 5
    passed = torch.tensor([[True, True, False, True, True, True]])
    level, along = walk(passed, valid, tree)
    assert level.tolist() == [[True, True, True]] and along.tolist() == [[0, 3, 5]]


def test_on_a_chain_the_general_walk_is_the_chains():
    chains = [DraftTree.chain((1, 2, 3, 4)), DraftTree.chain((1, 2)), DraftTree.chain(())]
    shortcut, k = batch(*chains)
    general = TreeBatch(shortcut.parent, shortcut.last_child, shortcut.depth, False, tuple(chains))
    valid = torch.tensor([[True] * 4, [True, True, False, False], [False] * 4])
    for bits in range(1 << 4):
        passed = torch.tensor([[bool(bits >> i & 1) for i in range(4)]] * 3)
        a1, along1 = walk(passed, valid, shortcut)
        a2, along2 = walk(passed, valid, general)
        c1, c2 = (x.to(torch.int64).cumprod(-1).sum(-1) for x in (a1, a2))
        assert c1.tolist() == c2.tolist()
        assert leaf_of(along1, c1).tolist() == leaf_of(along2, c2).tolist()


def test_the_uniforms_a_walk_reads():
    # accepted 1 (after 0 was refused), then 4 refused: read up to node 4
    assert uniforms_reached(TREE, (1,), 1, True) == 5
    # accepted 0 then 3 (2 refused) then 5, no correction: up to node 5
    assert uniforms_reached(TREE, (0, 3, 5), 3, False) == 6
    # nothing accepted, every root child refused: nodes 0 and 1
    assert uniforms_reached(TREE, (), 0, True) == 2
    # a chain: A accepted, plus the refused one
    chain = DraftTree.chain((1, 2, 3, 4))
    assert [uniforms_reached(chain, (0, 1), 2, c) for c in (True, False)] == [3, 2]


def test_a_lookup_trie_holds_the_first_chain_whole_and_shares_prefixes():
    t = trie([(1, 2, 3), (1, 2, 4), (5, 6)], nodes=10)
    assert t.path_tokens(2) == (1, 2, 3) and t.tokens == (1, 2, 3, 4, 5, 6)
    assert t.parents == (-1, 0, 1, 1, -1, 4) and t.drawn == "rank"
    assert trie([(1, 2, 3), (5, 6)], nodes=4).tokens == (1, 2, 3, 5)


def test_shapes_parse(tmp_path):
    s = parse_tree("3,2")
    assert s.size == 3 + 6 and s.depth == 2 and s.children(()) == 3 and s.children((2,)) == 2
    assert s.cut(1).size == 3 and parse_tree("1,1,1").is_chain
    assert parse_tree("rank:2,1").drawn == "rank" and parse_tree("iid:2").drawn == "iid"
    d = parse_tree("nodes=8")
    assert d.dynamic and d.size == 8 and d.width == 4 and parse_tree("nodes=8,depth=3,width=2").depth == 3
    f = tmp_path / "choices.json"
    f.write_text(json.dumps([[0], [1], [0, 0], [0, 1], [1, 0]]))
    c = parse_tree(str(f))
    assert c.choices == ((0,), (1,), (0, 0), (0, 1), (1, 0)) and c.children((0,)) == 2
    assert TreeShape.chain(3).is_chain


@pytest.mark.parametrize(
    "spec, message",
    [
        ("0,2", "at least one child"),
        ("2,x", "not branching counts"),
        ("nodes=0", "nodes must be in"),
        ("nodes=4,height=2", "expected nodes=N"),
        ("sampled:nodes=8", "ranked"),
        ("300", "at most 256 nodes"),
        ("", "not branching counts"),
    ],
)
def test_a_bad_shape_is_one_usage_error(spec, message):
    with pytest.raises(UsageError, match=message):
        parse_tree(spec)


@pytest.mark.parametrize(
    "content, message",
    [
        ("[[0], [1], [1, 1]]", "lacks its parent or an earlier sibling"),
        ("[[0], [0, 0, 0]]", "lacks its parent"),
        ('{"a": 1}', "JSON list of rank paths"),
        ("[[0], [-1]]", "JSON list of rank paths"),
        ("not json", "cannot read a JSON choices list"),
    ],
)
def test_a_bad_choices_file_is_one_usage_error(tmp_path, content, message):
    f = tmp_path / "c.json"
    f.write_text(content)
    with pytest.raises(UsageError, match=message):
        parse_tree(str(f))
