"""Every draft tree of one round, with its probability, for the tree-sampler oracle.

A static tree shape (``specd.core.tree_shape``: rank paths, parents before children) is filled
with tokens from the draft's rows as a construction says (the terms are ``specd.core.tree``'s):

- ``sampled``: the child of rank r drawn from its parent's draft row with its r earlier siblings
  removed and the rest renormalized (without replacement);
- ``iid``: every child drawn from its parent's draft row (siblings may repeat);
- ``rank``: the children are the parent's draft row's top tokens in rank order (ties to the
  lower token), probability 1; the sampler is given the draft's rows (a model draft's top-k);
- ``lookup``: the same tree, the draft's rows withheld (``q`` None: children chosen by something
  that has no row, a lookup's continuations).

Each round carries the target's processed row at the root and at every node and the draft's
(``TreeRound``); ``draft_trees`` enumerates them all, each with its exact probability, so the
rounds' probabilities sum to 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch

from specd.core.tree import ROOT, DraftTree
from specd.core.tree_shape import TreeShape
from specd.errors import UsageError

DRAWINGS = ("sampled", "iid", "rank", "lookup")
MAX_TREE_ROUNDS = 20_000  # draft trees of one check: each is a few runs of the sampler
Rows = Callable[[tuple[int, ...]], list[float]]  # the row after an output (a Reference's p or q)


@dataclass(frozen=True)
class TreeRound:
    """One round's input to a tree sampler (N nodes, V tokens):

    tree   DraftTree              tokens, parents (-1: the root), ``drawn`` (sampled, iid or rank)
    p      float64[N + 1, V]      the target's processed rows: row 0 the root's, row n + 1 node n's
    q      float64[N + 1, V]      the draft's rows, the same way (None: withheld, a lookup's tree)
    mass   float                  the probability of drafting this tree
    drawing str                   the construction as the oracle names it (``DRAWINGS``)
    uniforms_at float | None      every uniform of the round at this value, one run (None: integrated over)
    """

    tree: DraftTree
    p: torch.Tensor
    q: torch.Tensor | None
    mass: float
    drawing: str
    uniforms_at: float | None = None

    @cached_property
    def index(self) -> torch.Tensor:
        """int64[3, N]: the tree's tokens, parents and depths, built once a round (a check runs the
        sampler on one round many times, under every stream of uniforms); callers hand out copies."""
        tree = self.tree
        return torch.tensor((tree.tokens, tree.parents, tree.depths), dtype=torch.int64).reshape(3, -1)


def children_of(parents) -> dict[int, list[int]]:
    """Parent (-1: the root) -> its children in node order, from a sampler's parents int64[N] or a sequence."""
    out: dict[int, list[int]] = {}
    for n, parent in enumerate(parents.tolist() if isinstance(parents, torch.Tensor) else parents):
        out.setdefault(int(parent), []).append(n)
    return out


def path_to(parents, node: int) -> list[int]:
    """The nodes from a child of the root down to ``node``, from parents int64[N] or a sequence."""
    out = []
    while node != ROOT:
        out.append(node)
        node = int(parents[node])
    return out[::-1]


def shape_nodes(shape: TreeShape) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A static shape's (parents, ranks), node by node in the shape's order."""
    if shape.choices is None:
        raise UsageError(
            "--tree for --sampler takes a static shape (branching like 2,2 or a choices file), not nodes=N"
        )
    index = {c: i for i, c in enumerate(shape.choices)}
    parents = tuple(index[c[:-1]] if len(c) > 1 else ROOT for c in shape.choices)
    return parents, tuple(c[-1] for c in shape.choices)


def count_rounds(shape: TreeShape, vocab: int, drawing: str) -> int:
    """How many draft trees the construction can give (at most; a token with q = 0 gives fewer),
    or a UsageError where the vocabulary cannot fill the shape."""
    _, ranks = shape_nodes(shape)
    if drawing != "iid" and max(ranks, default=0) >= vocab:
        raise UsageError(
            f"--tree {shape.spec or 'shape'}: {max(ranks) + 1} siblings of distinct tokens need --vocab "
            f"{max(ranks) + 1} or more (or iid: children)"
        )
    if drawing in ("rank", "lookup"):
        return 1
    return math.prod(vocab - (r if drawing == "sampled" else 0) for r in ranks)


def draft_trees(shape: TreeShape, drawing: str, p_of: Rows, q_of: Rows, prompt: tuple[int, ...]) -> list[TreeRound]:
    """Every tree the construction drafts after ``prompt``, with its probability (module docstring). Counted as
    they are drafted, not by the bound ``count_rounds``: a draft with few tokens of mass (a point mass) drafts few
    trees of a shape whose bound is far past MAX_TREE_ROUNDS."""
    parents, ranks = shape_nodes(shape)
    out: list[TreeRound] = []
    drawn = "rank" if drawing == "lookup" else drawing

    def grow(tokens: tuple[int, ...], mass: float) -> None:
        n = len(tokens)
        if n == len(parents):
            if len(out) == MAX_TREE_ROUNDS:
                raise UsageError(
                    f"--tree {shape.spec}: more than {MAX_TREE_ROUNDS} draft trees ({drawing}) to enumerate at this "
                    "--vocab; take a smaller tree or vocabulary"
                )
            out.append(_round(DraftTree(tokens, parents, drawn), p_of, q_of, prompt, mass, drawing))
            return
        at = DraftTree(tokens, parents[:n], drawn)
        q = q_of(prompt + (at.path_tokens(parents[n]) if parents[n] != ROOT else ()))
        earlier = [tokens[m] for m in range(n) if parents[m] == parents[n]]
        for token, chance in _options(q, earlier, drawing, ranks[n]):
            grow(tokens + (token,), mass * chance)

    grow((), 1.0)
    return out


def depth_first(rnd: TreeRound) -> TreeRound:
    """``rnd`` with its nodes in depth-first order (each node followed by its descendants, siblings in
    their order): the same tree, rows and mass. The protocol allows any order with parents first; the
    rounds are built breadth-first, where a node's children are always next to each other."""
    tree, kids = rnd.tree, rnd.tree.children
    order: list[int] = []
    stack = list(reversed(kids.get(ROOT, [])))
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(reversed(kids.get(n, [])))
    place = {n: i for i, n in enumerate(order)}
    parents = tuple(ROOT if tree.parents[n] == ROOT else place[tree.parents[n]] for n in order)
    rows = torch.tensor([0] + [n + 1 for n in order])  # row 0 the root's, row i + 1 node i's
    relaid = DraftTree(tuple(tree.tokens[n] for n in order), parents, tree.drawn)
    return TreeRound(relaid, rnd.p[rows], None if rnd.q is None else rnd.q[rows], rnd.mass, rnd.drawing)


def _options(q: list[float], earlier: list[int], drawing: str, rank: int) -> list[tuple[int, float]]:
    """(token, its probability) for the next child of a parent with draft row q, after ``earlier``."""
    if drawing in ("rank", "lookup"):
        order = sorted(range(len(q)), key=lambda t: (-q[t], t))
        return [(order[rank], 1.0)]
    if drawing == "iid":
        return [(t, x) for t, x in enumerate(q) if x > 0]
    # what is left, summed over the tokens left (1 - the refused mass rounds to 0 where q is near a point
    # mass, as at a low temperature, while tokens of mass remain)
    rest = [(t, x) for t, x in enumerate(q) if x > 0 and t not in earlier]
    left = sum(x for _, x in rest)
    return [(t, x / left) for t, x in rest]


def _round(tree: DraftTree, p_of: Rows, q_of: Rows, prompt, mass: float, drawing: str) -> TreeRound:
    outputs = [prompt] + [prompt + tree.path_tokens(n) for n in range(len(tree))]
    p = torch.tensor([p_of(o) for o in outputs], dtype=torch.float64)
    q = None if drawing == "lookup" else torch.tensor([q_of(o) for o in outputs], dtype=torch.float64)
    return TreeRound(tree, p, q, mass, drawing)
