"""--tree SPEC read as a user may type it: every size judged before anything is built from it, only
ASCII digits taken as numbers, a choices file capped before it is read, and anything else one
UsageError naming where the spec came from."""

import json

import pytest

from specd.core import tree_shape
from specd.core.tree_shape import MAX_CHOICES_BYTES, TreeShape, parse_tree, tree_file
from specd.errors import UsageError


@pytest.mark.parametrize(
    "spec, message",
    [
        ("1000,1000,1000", "1001001000 nodes, depth 3; at most 256 nodes"),
        ("2," * 64 + "1", "depth 65"),
        ("1" + "0" * 5000, "more than 256 nodes"),
        ("16,16,2", "784 nodes"),
    ],
)
def test_a_branching_tree_too_big_is_refused_from_its_widths_before_any_node_is_built(monkeypatch, spec, message):
    def never(*args, **kwargs):
        raise AssertionError("a node was built")

    monkeypatch.setattr(TreeShape, "branching", classmethod(never))
    with pytest.raises(UsageError, match=message):
        parse_tree(spec)


def test_the_largest_tree_allowed_is_built():
    assert parse_tree("16,15").size == 256 and parse_tree("1," * 63 + "1").depth == 64


@pytest.mark.parametrize("spec", ["²,2", "2,²", "²", "٣", "nodes=²", "nodes=8,depth=٣", "rank:¹"])
def test_a_digit_that_is_not_ascii_is_one_usage_error(spec):
    with pytest.raises(UsageError, match="--tree"):
        parse_tree(spec)


def test_a_superscript_in_a_branching_spec_is_named():
    with pytest.raises(UsageError, match="'²' is not a digit here; write numbers in 0-9"):
        parse_tree("²,2")


@pytest.mark.parametrize("value", [5, b"2,2", None, ["2,2"], 2.0])
def test_a_spec_that_is_not_a_string_is_refused_naming_where(value):
    with pytest.raises(UsageError, match=r"^tree must be a tree spec \(a string like 2,2,1\), got "):
        parse_tree(value, "tree")


@pytest.mark.parametrize(
    "content, message",
    [
        ("[[0], [1" + "0" * 5000 + "]]", "a number with too many digits"),
        ("[[0], [" + "1" * 4000 + "]]", "each below 256"),
        ("[[0], [300]]", "each below 256"),
        ("[" + ",".join(["[0]"] + [str([0] * d) for d in range(2, 67)]) + "]", "at most 64 ranks a path"),
        ("[" + ",".join(f"[{r}]" for r in range(256)) + ", [0, 0]]", "257 nodes"),
        ("[" * 300 + "]" * 300, "nested deeper than 200"),
    ],
)
def test_a_hostile_choices_file_is_one_usage_error(tmp_path, content, message):
    f = tmp_path / "c.json"
    f.write_text(content)
    with pytest.raises(UsageError, match=message):
        parse_tree(str(f))


def test_a_choices_file_past_its_cap_is_refused_without_being_read(tmp_path, monkeypatch):
    f = tmp_path / "huge.json"
    with open(f, "wb") as fh:
        fh.truncate(3 << 30)  # 3 GiB, sparse: reading it whole would take that much memory
    reads = []
    real_read = tree_shape.read_text
    monkeypatch.setattr(tree_shape, "read_text", lambda *a, **kw: reads.append(kw.get("limit")) or real_read(*a, **kw))
    with pytest.raises(UsageError, match="larger than 1 MiB"):
        parse_tree(str(f))
    assert reads == [MAX_CHOICES_BYTES]
    with pytest.raises(UsageError, match="a choices list of"):
        parse_tree("[[0]" + ", [0]" * MAX_CHOICES_BYTES + "]")


def test_a_choices_file_at_its_largest_reads(tmp_path):
    f = tmp_path / "c.json"
    choices = [[r] for r in range(16)] + [[r, s] for r in range(16) for s in range(15)]
    f.write_text(json.dumps(choices, indent=8))
    assert parse_tree(str(f)).size == 256


@pytest.mark.parametrize(
    "spec, file",
    [
        ("trees/c.json", "trees/c.json"),
        ("rank: ./c.json", "c.json"),
        ("2,2", None),
        ("nodes=8", None),
        ("[[0],[1]]", None),
        ("iid:3", None),
        (5, None),
    ],
)
def test_the_file_a_spec_reads(spec, file):
    assert tree_file(spec) == file
