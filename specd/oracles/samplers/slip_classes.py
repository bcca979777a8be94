"""The classes of slip a foreign sampler's check covers (``verify-oracle --sampler``), each with the
sizes that hide it and the smallest that shows it (``specd.oracles.samplers.coverage`` picks the sizes): a
tree sampler's here (``SLIPS``), a chain sampler's in specd.oracles.samplers.chain_slip_classes.

A size can hide a slip. Where a node has V - 1 children, refusing them all leaves one token, so the
correction is forced and a correction drawn wrongly gives the right token all the same; at V = 2 a
second sibling's test is decided by the first's outcome; a tree of one level never reads a row past
the root's, one of two levels has no level between two others; a chain round of one draft has no
test after a refusal, one of two drafts no draft between two others; and where a refusal leaves
two tokens or fewer, no correction has three. So each class (``SLIPS`` for trees, ``CHAIN_SLIPS``)
states where it is hidden (``hidden(vocab, shape or K)``: the reason, or None) and where it shows.
"""

from __future__ import annotations

from specd.core.tree_shape import TreeShape
from specd.oracles.samplers.size_classes import DEEP_ROWS_VOCAB, NINTH, WIDE_VOCAB, size_slips
from specd.oracles.samplers.slip import Slip, count

# Why V = 2 hides a class of siblings
DECIDED_AT_TWO = (
    "at V = 2 a second sibling's test is decided by the first's outcome (what a refusal leaves is its token)"
)


def widest(shape: TreeShape) -> int:
    """The most children a node of the static shape has."""
    return max((c[-1] + 1 for c in shape.choices or ()), default=0)


def _siblings(vocab: int, shape) -> str | None:
    if widest(shape) < 2:
        return "no node of the tree has two children: nothing is tested on what an elder sibling left"
    if vocab < 3:
        return DECIDED_AT_TWO
    return None


def _third_sibling(vocab: int, shape) -> str | None:
    if widest(shape) < 3:
        return "no node of the tree has three children: no test follows two refusals"
    if vocab < 4:
        return (
            f"at V = {vocab} two refusals leave one token in what is left of both rows: the third child is kept "
            "whatever its law"
        )
    return None


def _correction(vocab: int, shape) -> str | None:
    w = widest(shape)
    if vocab <= w:
        return (
            f"at V = {vocab} a node's {w} children hold every token: the last is never refused, no correction follows"
        )
    if vocab == w + 1:
        return (
            f"at V = {vocab} a node's {w} children, all refused, leave one token: the correction is forced, and any "
            "draw of it gives that token"
        )
    return None


def _wide_tree_correction(vocab: int, shape) -> str | None:
    counts = [shape.children(c) for c in ((), *shape.choices)] if shape.choices else []
    most = max(counts, default=0)  # a correction at every node, the widest included, needs three tokens left
    if vocab - most < 3:
        left = count(max(vocab - most, 0), "token")
        return (
            f"at V = {vocab} a node has {most} children: drawn without replacement and all refused, they leave "
            f"at most {left} of mass, and no correction there has three"
        )
    return None


def _depth(vocab: int, shape) -> str | None:
    if shape.depth < 2:
        return "a tree of one level reads no row past the root's but the bonus's"
    return None


def _below(vocab: int, shape) -> str | None:
    if not any(shape.children(c) >= 2 for c in shape.choices or ()):
        return "no node below the root has two children: no sibling is tested on a later row, no node is on two paths"
    if vocab < 3:
        return DECIDED_AT_TWO
    return None


def _middle_level(vocab: int, shape) -> str | None:
    if shape.depth < 3:
        return f"a tree of {count(shape.depth, 'level')} has no level between two others"
    return None


def _younger(vocab: int, shape) -> str | None:
    if not any(c[-1] >= 1 and shape.children(c) for c in shape.choices or ()):
        return "no younger sibling has children: no path goes down through a node tried after a refused one"
    return None


_WORDS = {3: "three", 4: "four", 5: "five"}


def _later_sibling(n: int, ordinal: str):
    """Why a size hides the n-th sibling's test: a node of n children, and V > n (at V = n the n - 1 refusals
    before it leave p' all on its token, so it is kept whatever its law)."""

    def hidden(vocab: int, shape) -> str | None:
        if widest(shape) < n:
            return f"no node of the tree has {_WORDS[n]} children: no test follows {_WORDS[n - 1]} refusals"
        if vocab <= n:
            left = f"{_WORDS[n - 1]} refusals leave p' all on the {ordinal} child's token"
            return f"at V = {vocab} {left}: it is kept whatever its law"
        return None

    return hidden


def _third_sibling_from(level: int, where: str):
    """Why a size hides the test of a third sibling under a node of ``level`` or deeper (1: below the root):
    no such node ``where``, or V < 4 (two refusals leave one token in what is left of both rows)."""

    def hidden(vocab: int, shape) -> str | None:
        if not any(len(c) >= level and shape.children(c) >= 3 for c in shape.choices or ()):
            return f"no node {where} has three children: no test there follows two refusals"
        if vocab < 4:
            return f"at V = {vocab} two refusals leave one token in what is left of both rows"
        return None

    return hidden


_third_sibling_below = _third_sibling_from(1, "below the root")
third_at_the_third_level = _third_sibling_from(2, "at the second level or below")


def _younger_below(vocab: int, shape) -> str | None:
    if not any(len(c) >= 2 and c[-1] >= 1 and shape.children(c) for c in shape.choices or ()):
        return "no younger sibling below the root has children: no path goes on from one"
    return None


def _siblings_third_level(vocab: int, shape) -> str | None:
    if not any(len(c) >= 2 and shape.children(c) >= 2 for c in shape.choices or ()):
        return "no node at the second level or below has two children: no siblings at the third level"
    if vocab < 3:
        return DECIDED_AT_TWO
    return None


def _fourth_level(vocab: int, shape) -> str | None:
    if shape.depth < 4:
        return f"a tree of {count(shape.depth, 'level')} has no fourth"
    return None


TOP_K_VOCAB = 16  # a refused draft there leaves up to 15 tokens of mass: a cut to a few of them shows


def _tree_top_k(vocab: int, shape) -> str | None:
    if vocab < TOP_K_VOCAB:
        return (
            f"at V = {vocab} a refusal leaves at most {count(vocab - 1, 'token')} of mass: a correction cut to a "
            "few of its likeliest shows only where a table leaves more"
        )
    return None


def _far_siblings(vocab: int, shape) -> str | None:
    if widest(shape) < 2:
        return "no node of the tree has two children: nothing is tested on what an elder sibling left"
    if vocab <= 64:
        return (
            f"at V = {vocab} every token id is below 64: q' renormalized over a warp's 32 lanes shows only past "
            "V = 32, refused tokens kept in a 64-bit mask only past 64"
        )
    return None


DEEP_SIBLINGS_TREE = "1,1,1,1,1,1,1,1,2"  # a chain of eight nodes, two children under the last
MANY_NODES = 16  # a tree of more nodes than this: a path kept for larger trees (a batched kernel's) shows
# The tree that shows far_siblings, many_nodes and ninth_draft at V = WIDE_VOCAB: two children at the root, a chain of
# eight below each (18 nodes).
BIG_TREE = "2,1,1,1,1,1,1,1,1"


def _deep_siblings(vocab: int, shape) -> str | None:
    if not any(len(c) >= NINTH - 1 and shape.children(c) >= 2 for c in shape.choices or ()):
        return f"no node at level {NINTH - 1} or below has two children: no siblings at level {NINTH}"
    if vocab < 5:
        return f"at V = {vocab} two refused siblings leave two tokens or fewer"
    return None


def _many_nodes(vocab: int, shape) -> str | None:
    nodes = len(shape.choices or ())
    if nodes <= MANY_NODES:
        return f"a tree of {nodes} nodes: a path kept for trees of more than {MANY_NODES} nodes is never taken"
    return None


def _chain_shaped(vocab: int, depth: int) -> str:
    """The flags of the chain-shaped tree of ``depth`` levels at ``vocab``: a size class's tree (size_slips)."""
    return f"--tree {TreeShape.chain(depth).spec} --vocab {vocab}"


def widest_shown(w: int) -> int:
    """The width of the sibling groups that show the classes of siblings: the widest named, at least 2."""
    return max(w, 2)


SLIPS = (
    Slip(
        "siblings",
        "a sibling tested on what its elder siblings left",
        _siblings,
        lambda w: f"--tree {widest_shown(w)} --vocab {widest_shown(w) + 1}",
    ),
    Slip(
        "third_sibling",
        "a third sibling tested on what two refused elders left (without replacement: both their tokens gone)",
        _third_sibling,
        lambda w: f"--tree {max(w, 3)} --vocab {max(w, 3) + 1}",
    ),
    Slip(
        "correction_draw",
        "a correction after every child is refused, drawn from two or more tokens",
        _correction,
        lambda w: f"--tree {widest_shown(w)} --vocab {widest_shown(w) + 2}",
    ),
    Slip(
        "wide_correction",
        "a correction drawn from three or more tokens (a first, a middle and a last token of its law), at every node",
        _wide_tree_correction,
        lambda w: "--tree 2 --vocab 5",
    ),
    Slip(
        "second_depth",
        "rows past the root's: a child's test and bonus on its own row",
        _depth,
        lambda w: f"--tree 1,{widest_shown(w)} --vocab {widest_shown(w) + 2}",
    ),
    Slip(
        "siblings_below_the_root",
        "siblings under a node below the root: tested on that node's row, the node on two paths",
        _below,
        lambda w: f"--tree 1,{widest_shown(w)} --vocab {widest_shown(w) + 2}",
    ),
    Slip(
        "middle_level",
        "a level between two others: children of a node with a parent, tested and refused with a level below",
        _middle_level,
        lambda w: "--tree 1,1,1 --vocab 3",
    ),
    Slip(
        "younger_sibling_subtree",
        "a path through a younger sibling into its children",
        _younger,
        lambda w: "--tree 2,1 --vocab 3",
    ),
    Slip(
        "fourth_sibling",
        "a fourth sibling (and each later one, up to the named tree's widest node's last) tested on what the refused "
        "elders left (without replacement: their tokens gone)",
        _later_sibling(4, "fourth"),
        lambda w: f"--tree {max(w, 4)} --vocab {max(w, 4) + 1}",
    ),
    Slip(
        "fifth_sibling",
        "a fifth sibling tested on what four refused elders left (without replacement: their tokens gone, q' "
        "renormalized); children drawn i.i.d. only where the named tree has a node of five",
        _later_sibling(5, "fifth"),
        lambda w: "--tree 5 --vocab 6",
    ),
    Slip(
        "third_sibling_below_the_root",
        "a third sibling below the root, tested on what two refused elders left of that node's rows",
        _third_sibling_below,
        lambda w: "--tree 1,3 --vocab 4",
    ),
    Slip(
        "younger_sibling_below_the_root",
        "a path through a younger sibling below the root into its children",
        _younger_below,
        lambda w: "--tree 1,2,1 --vocab 3",
    ),
    Slip(
        "siblings_at_the_third_level",
        "siblings under a node of the second level: tested on that node's rows",
        _siblings_third_level,
        lambda w: "--tree 1,1,2 --vocab 3",
    ),
    Slip(
        "third_sibling_at_the_third_level",
        "a third sibling under a node of the second level, tested on what two refused elders left (drawn without "
        "replacement, ranked or a lookup's, where the named tree has no such node)",
        third_at_the_third_level,
        lambda w: "--tree 1,1,3 --vocab 4",
    ),
    Slip("fourth_level", "a fourth level: rows read four nodes down", _fourth_level, lambda w: "--tree 1,1,1,1"),
    Slip(
        "top_k_correction",
        "a correction cut to a few of its likeliest tokens (a top-k of its law)",
        _tree_top_k,
        lambda w: f"--tree 1 --vocab {TOP_K_VOCAB}",
    ),
    *size_slips(_chain_shaped, lambda shape: shape.depth),
    Slip(
        "far_siblings",
        "siblings drawn without replacement whose ids are past 32 and 64: q' renormalized over a warp's 32 lanes, "
        "refused tokens kept in a 64-bit mask",
        _far_siblings,
        lambda w: f"--tree {BIG_TREE} --vocab {WIDE_VOCAB}",
    ),
    Slip(
        "many_nodes",
        f"a tree of more than {MANY_NODES} nodes: a path kept for larger trees (children drawn without replacement "
        "taken as i.i.d.)",
        _many_nodes,
        lambda w: f"--tree {BIG_TREE} --vocab {WIDE_VOCAB}",
    ),
    Slip(
        "deep_siblings",
        "siblings at a ninth level, tested on what an elder sibling left of their parent's rows (a path kept for deep "
        "nodes with the parent's row unchanged)",
        _deep_siblings,
        lambda w: f"--tree {DEEP_SIBLINGS_TREE} --vocab {DEEP_ROWS_VOCAB}",
    ),
)
