"""What tree a request drafts in a round: ``--tree SPEC`` (``TreeShape``).

Three kinds of shape (the tree's terms are ``specd.core.tree``'s):

- static, by branching per depth: ``3,2,1,1`` gives the root 3 children, each of them 2, then 1
  and 1 (3 + 6 + 6 + 6 = 21 nodes, depth 4); ``1,1,1,1`` is the chain of 4;
- static, by EAGLE's "choices": a list of rank paths in JSON, each a node (``[0]`` the root's first
  child, ``[0, 1]`` that node's second child, ...), given inline (``[[0],[1],[0,0]]``) or as a file
  holding it; every path's prefixes and its lower ranks must be in the list;
- dynamic, at most N nodes: ``nodes=N`` (optionally ``nodes=N,depth=D,width=W``), EAGLE-2's rule:
  level by level the W nodes of highest path probability under the draft (the product of q along
  the path) are expanded with their W most likely children, and the N nodes of highest path
  probability of all drafted are kept (a node's is at most its parent's, so they form a tree).

An optional prefix says how siblings are drawn (``sampled:3,2``, ``rank:3,2``, ``iid:3,2``;
``specd.core.tree``); without it the drafting source decides: a sampled model draft samples
its children without replacement (under the invariant rule, the Gumbel-top-k of its row under
the shared noise, the same law), a greedy draft or a lookup ranks them. A dynamic tree's nodes
are chosen by the draft's probabilities, so its children are ranked, never sampled: keeping a
sampled child for being likely would bias the law it was drawn from.

A request's round drafts at most its K levels (its draft budget): the shape is cut to that depth.
"""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path

from specd.core.record import record
from specd.core.tree import CONSTRUCTIONS
from specd.errors import UsageError, shown
from specd.files import loads_json, read_text

MAX_TREE_NODES = 256  # a verification call's rows per request; past this no tree is worth its call
MAX_TREE_DEPTH = 64
# A choices file of MAX_TREE_NODES paths MAX_TREE_DEPTH deep, written out, is under 100 KB: a larger file is
# refused before it is read (a file given by mistake may be gigabytes).
MAX_CHOICES_BYTES = 1 << 20
MAX_DIGITS = 6  # no width, node count or depth comes near a million: longer numbers are refused unconverted


@record
class TreeShape:
    """A static tree as its nodes' rank paths (``choices``, parents before children), or a dynamic
    one of at most ``nodes`` nodes (``choices`` None); ``drawn``: the construction asked for (None:
    the source's own)."""

    choices: tuple[tuple[int, ...], ...] | None = None
    nodes: int = 0
    max_depth: int = 0  # a dynamic tree's deepest level (0: as deep as its nodes allow)
    width: int = 0  # a dynamic tree's expansions per level and children per expansion
    drawn: str | None = None
    spec: str = ""

    @property
    def dynamic(self) -> bool:
        return self.choices is None

    @cached_property
    def depth(self) -> int:
        if self.choices is None:
            return self.max_depth or self.nodes
        return max((len(c) for c in self.choices), default=0)

    @property
    def size(self) -> int:
        """Most nodes a tree of this shape has."""
        return self.nodes if self.choices is None else len(self.choices)

    @property
    def is_chain(self) -> bool:
        return self.choices is not None and all(max(c) == 0 for c in self.choices)

    def children(self, path: tuple[int, ...]) -> int:
        """How many children the node at rank path ``path`` gets (() is the root) in a static shape."""
        return self._child_counts.get(tuple(path), 0)

    @cached_property
    def _child_counts(self) -> dict[tuple[int, ...], int]:
        """A static shape's rank path -> its number of children (a drafted level asks it per node)."""
        assert self.choices is not None
        out: dict[tuple[int, ...], int] = {}
        for c in self.choices:
            out[c[:-1]] = out.get(c[:-1], 0) + 1
        return out

    def cut(self, depth: int) -> TreeShape:
        """The shape within ``depth`` levels (a request's draft budget); one object per depth."""
        if depth >= self.depth:
            return self
        if depth not in self._cuts:
            if self.choices is None:
                self._cuts[depth] = TreeShape(None, self.nodes, depth, self.width, self.drawn, self.spec)
            else:
                kept = tuple(c for c in self.choices if len(c) <= depth)
                self._cuts[depth] = TreeShape(kept, 0, 0, 0, self.drawn, self.spec)
        return self._cuts[depth]

    @cached_property
    def _cuts(self) -> dict[int, TreeShape]:
        return {}

    def ranks_from(self, first: int) -> TreeShape | None:
        """A static shape's subtrees under the root's children of rank ``first`` on, renumbered from 0
        (what a second draft source adds after a first one's ``first`` root children), or None when
        there is no such child."""
        assert self.choices is not None
        kept = tuple((c[0] - first, *c[1:]) for c in self.choices if c[0] >= first)
        return TreeShape(kept, drawn=self.drawn, spec=self.spec) if kept else None

    @classmethod
    def chain(cls, k: int) -> TreeShape:
        return cls(tuple((0,) * j for j in range(1, k + 1)), spec=",".join(["1"] * k))

    @classmethod
    def branching(cls, widths: list[int], drawn: str | None = None, spec: str = "") -> TreeShape:
        """Each node of depth j gets widths[j] children."""
        paths: list[tuple[int, ...]] = [()]
        choices: list[tuple[int, ...]] = []
        for w in widths:
            paths = [p + (r,) for p in paths for r in range(w)]
            choices.extend(paths)
        return cls(tuple(choices), drawn=drawn, spec=spec)


def parse_tree(spec: str, where: str = "--tree") -> TreeShape:
    """``--tree SPEC`` (module docstring) -> its TreeShape; bad input is a UsageError naming ``where``.
    Every size is judged before anything is built from it: a branching spec's node count from its
    widths, a choices file's size before it is read (MAX_CHOICES_BYTES), each number by its digits
    (ASCII digits only: ``'²'`` is a digit to ``str.isdigit`` but not to ``int``)."""
    if not isinstance(spec, str):
        kind = type(spec).__name__
        raise UsageError(f"{where} must be a tree spec (a string like 2,2,1), got {shown(spec)} ({kind})")
    drawn, text = _construction(spec)
    if text.startswith("nodes="):
        shape = _dynamic(text, where, spec)
        if drawn == "sampled" or drawn == "iid":
            raise UsageError(
                f"{where} {shown(spec)}: a dynamic tree keeps its likeliest nodes, so its children are ranked"
            )
        return TreeShape(None, shape.nodes, shape.max_depth, shape.width, drawn, spec)
    if _is_branching(text):
        shape = TreeShape.branching(_widths(text, where, spec), drawn, spec)
    else:
        shape = TreeShape(_choices_file(text, where), drawn=drawn, spec=spec)
    if not shape.choices:
        raise UsageError(f"{where} {shown(spec)}: the tree has no node")
    if len(shape.choices) > MAX_TREE_NODES or shape.depth > MAX_TREE_DEPTH:
        raise _too_big(where, spec, len(shape.choices), shape.depth)
    return shape


def tree_file(spec: object) -> str | None:
    """The file a tree spec reads (an EAGLE choices file), or None: branching counts, ``nodes=N``, an
    inline JSON list (or not a spec at all). The path rule (``specd.files.check_paths``) keeps every
    output off it."""
    if not isinstance(spec, str):
        return None
    _, text = _construction(spec)
    if not text or text.startswith(("[", "nodes=")) or _is_branching(text):
        return None
    return str(Path(text).expanduser())


def _construction(spec: str) -> tuple[str | None, str]:
    """(the construction prefix or None, the rest of the spec), both stripped."""
    text = spec.strip()
    head, sep, rest = text.partition(":")
    if sep and head in CONSTRUCTIONS:
        return head, rest.strip()
    return None, text


def _is_branching(text: str) -> bool:
    return bool(text) and all(_count(part) is not None for part in text.split(","))


def _count(text: str) -> int | None:
    """A whole number written in ASCII digits -> its value (-1 past MAX_DIGITS significant digits,
    which no size here comes near), else None."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()):
        return None
    significant = text.lstrip("0") or "0"
    return int(significant) if len(significant) <= MAX_DIGITS else -1


def _too_big(where: str, spec: str, nodes: int | str, depth: int) -> UsageError:
    limits = f"at most {MAX_TREE_NODES} nodes and depth {MAX_TREE_DEPTH}"
    return UsageError(f"{where} {shown(spec)}: {nodes} nodes, depth {depth}; {limits}")


def _widths(text: str, where: str, spec: str) -> list[int]:
    """Branching counts -> widths, refused by the size of the tree they make before any node is built."""
    widths = [_count(part) or 0 for part in text.split(",")]  # every part is a count (_is_branching)
    if 0 in widths:
        raise UsageError(f"{where} {shown(spec)}: every depth needs at least one child per node")
    if -1 in widths or len(widths) > MAX_TREE_DEPTH:
        raise _too_big(where, spec, f"more than {MAX_TREE_NODES}", len(widths))
    nodes = sum(math.prod(widths[: j + 1]) for j in range(len(widths)))  # at most 64 factors below 10^6
    if nodes > MAX_TREE_NODES:
        raise _too_big(where, spec, nodes, len(widths))
    return widths


def _dynamic(text: str, where: str, spec: str) -> TreeShape:
    fields: dict[str, int] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        number = _count(value)
        if not eq or key.strip() not in ("nodes", "depth", "width") or number is None:
            raise UsageError(f"{where} {shown(spec)}: expected nodes=N[,depth=D][,width=W] with whole numbers")
        fields[key.strip()] = number
    nodes, depth, width = fields["nodes"], fields.get("depth", 0), fields.get("width", 0)
    if not 1 <= nodes <= MAX_TREE_NODES or not 0 <= depth <= MAX_TREE_DEPTH or width < 0:
        raise UsageError(f"{where} {shown(spec)}: nodes must be in 1..{MAX_TREE_NODES}, depth at most {MAX_TREE_DEPTH}")
    return TreeShape(None, nodes, depth, width or min(nodes, 4))


def _choices_file(text: str, where: str) -> tuple[tuple[int, ...], ...]:
    """An EAGLE choices list, inline JSON or a JSON file (at most MAX_CHOICES_BYTES, judged before it
    is read): rank paths, each one's prefixes and lower ranks present."""
    path = Path(text).expanduser()
    if not text.startswith("[") and not path.is_file():
        if odd := next((ch for ch in text if ch.isdigit() and not ch.isascii()), None):
            raise UsageError(f"{where} {shown(text)}: {odd!r} is not a digit here; write numbers in 0-9")
        raise UsageError(f"{where} {shown(text)}: not branching counts like 3,2,1, nodes=N, or a choices list or file")
    if text.startswith("["):
        if len(text) > MAX_CHOICES_BYTES:
            raise UsageError(f"{where}: a choices list of {len(text)} characters; at most {MAX_CHOICES_BYTES}")
        content = text
    else:
        content = read_text(path, f"{where} choices file", limit=MAX_CHOICES_BYTES)
    raw = loads_json(content, f"{where} {shown(text)}", what="cannot read a JSON choices list")
    ok = isinstance(raw, list) and all(
        isinstance(c, list)
        and 0 < len(c) <= MAX_TREE_DEPTH
        and all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < MAX_TREE_NODES for r in c)
        for c in raw
    )
    if not ok:
        raise UsageError(
            f"{where} {shown(text)}: a choices file is a JSON list of rank paths like [[0], [1], [0, 0]] (at most "
            f"{MAX_TREE_DEPTH} ranks a path, each below {MAX_TREE_NODES})"
        )
    choices = sorted({tuple(c) for c in raw}, key=lambda c: (len(c), c))
    if len(choices) > MAX_TREE_NODES:
        raise _too_big(where, text, len(choices), max(len(c) for c in choices))
    have = set(choices)
    for c in choices:
        if (len(c) > 1 and c[:-1] not in have) or (c[-1] > 0 and c[:-1] + (c[-1] - 1,) not in have):
            missing = "lacks its parent or an earlier sibling in the list"
            raise UsageError(f"{where} {shown(text)}: node {list(c)} {missing}")
    return tuple(choices)
