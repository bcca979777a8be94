"""A round's proposal as a token tree, and the walk every rule takes down it.

Terms (every module that reads a tree uses these). A request's proposal in a round is a tree
of N nodes numbered 0..N-1 so that a parent comes before its children. Node n holds the draft
token ``tokens[n]`` and its parent ``parents[n]``; -1 is the root, the committed frontier F (the
last output token). A node's depth is 1 for the root's children and one more than its parent's
otherwise: with an output of n tokens, F stands at position n - 1 and a node of depth j at
position n - 1 + j, and it is scored by the target attending to the committed prefix and its own
ancestors only. The children of one parent are *siblings*, tried in node order (a node's *rank*
among them: 0 for the first). A chain of k drafts is the tree with one branch, parents
(-1, 0, ..., k - 2); every round is a round over a tree, and a chain round is exactly the
round it always was.

How the siblings were drawn is decided by whoever built the tree and recorded as each node's q
row (``specd.core.rows``: the law the node was drawn from given its earlier siblings); the rules
read nothing else. ``drawn`` names the construction, for checks and reports:

- ``sampled``: each child drawn from the draft's row with its earlier siblings removed and the
  rest renormalized (a sample without replacement; the first child is drawn from q itself, as a
  chain's draft is, and the Gumbel-top-k under shared noise is this same law);
- ``rank``: the children are chosen, not drawn (the draft's top tokens, a lookup's continuations):
  each one's q is the point mass on it;
- ``iid``: each child drawn from the same row independently; only here may two siblings hold the
  same token.

The walk (``walk``): from the root, at each node the rule tests the node's children in order and
descends into the first that passes; when none passes the walk has ended, and the terminal token
(the correction, from what is left of p after every child was refused; or the bonus, after a node
without children) is emitted there.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import field, replace
from functools import cached_property

import torch

from specd.core.record import record
from specd.core.transfer import to_device
from specd.errors import UsageError

CONSTRUCTIONS = ("sampled", "rank", "iid")
ROOT = -1


@record
class DraftTree:
    """One request's proposal (terms in the module docstring)."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    drawn: str = "sampled"
    # int64[N] on the draft's device: the node tokens, where ``tokens`` holds them as PENDING
    # (specd.core.kv: a model draft's chain, read once with the round's decision). None: known.
    ids: torch.Tensor | None = field(default=None, compare=False)

    def __post_init__(self):
        if len(self.tokens) != len(self.parents):
            raise UsageError(f"a draft tree needs one parent per node: {len(self.tokens)} tokens, {len(self.parents)}")
        chain = self.parents == _chain_parents(len(self.parents))  # a round's usual tree: nothing more to check
        if not chain and any(not ROOT <= p < n for n, p in enumerate(self.parents)):
            raise UsageError(f"a draft tree's parent must come before its child: parents {list(self.parents)}")
        if self.drawn not in CONSTRUCTIONS:
            raise UsageError(f"unknown tree construction {self.drawn!r}; choose one of {', '.join(CONSTRUCTIONS)}")
        if self.drawn != "iid" and self.ids is None and not chain:
            for parent, kids in self.children.items():
                tokens = [self.tokens[c] for c in kids]
                if len(set(tokens)) != len(tokens):
                    raise UsageError(
                        f"a draft tree's siblings must be distinct tokens (under node {parent}: {tokens}); only "
                        "children drawn i.i.d. may repeat one"
                    )

    @classmethod
    def chain(cls, tokens: Sequence[int], drawn: str = "sampled", ids: torch.Tensor | None = None) -> DraftTree:
        """The tree with one branch: d_1..d_k, each the child of the one before (``ids``: their
        tokens on the device, ``tokens`` PENDING until read). A known chain is one object per tokens:
        a tree is immutable, and every request of every round builds one."""
        if not tokens and drawn == "sampled" and ids is None:
            return NO_DRAFTS  # most rounds of target-only or -k auto decoding
        if ids is not None or cls is not DraftTree:
            return cls(tuple(tokens), _chain_parents(len(tokens)), drawn, ids)
        return _chain(tuple(tokens), drawn)

    def resolved(self, tokens: Sequence[int]) -> DraftTree:
        """This tree with its pending node tokens read (the same tree where none was pending)."""
        if self.ids is None:
            return self
        return replace(self, tokens=tuple(tokens), ids=None)

    def __len__(self) -> int:
        return len(self.tokens)

    @cached_property
    def is_chain(self) -> bool:
        return all(p == n - 1 for n, p in enumerate(self.parents))

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """Per node: 1 for the root's children, its parent's + 1 otherwise."""
        out: list[int] = []
        for p in self.parents:
            out.append(1 if p == ROOT else out[p] + 1)
        return tuple(out)

    @cached_property
    def depth(self) -> int:
        """The longest path's length (0 for no node)."""
        return max(self.depths, default=0)

    @cached_property
    def children(self) -> dict[int, tuple[int, ...]]:
        """Parent (ROOT or a node) -> its children in rank order; a parent without any is absent."""
        out: dict[int, list[int]] = {}
        for n, p in enumerate(self.parents):
            out.setdefault(p, []).append(n)
        return {p: tuple(kids) for p, kids in out.items()}

    @cached_property
    def ranks(self) -> tuple[int, ...]:
        """Per node: its place among its siblings (0: tried first)."""
        out = [0] * len(self)
        for kids in self.children.values():
            for r, n in enumerate(kids):
                out[n] = r
        return tuple(out)

    def path(self, node: int) -> tuple[int, ...]:
        """The nodes from a child of the root down to ``node`` (ROOT: none)."""
        out = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return tuple(reversed(out))

    def path_tokens(self, node: int) -> tuple[int, ...]:
        return tuple(self.tokens[n] for n in self.path(node))

    def last_child(self, node: int) -> int:
        """The last child of ``node`` (ROOT: of the root), or -1 for a node without children."""
        kids = self.children.get(node)
        return kids[-1] if kids else -1


@functools.lru_cache(maxsize=64)
def _chain_parents(n: int) -> tuple[int, ...]:
    return tuple(range(-1, n - 1))


@functools.lru_cache(maxsize=4096)
def _chain(tokens: tuple[int, ...], drawn: str) -> DraftTree:
    return DraftTree(tokens, _chain_parents(len(tokens)), drawn)


NO_DRAFTS = DraftTree((), ())  # the empty proposal


def walked(tree: DraftTree, path: tuple[int, ...], accepted: int, refused_all: bool) -> list[int]:
    """The nodes a walk tested, in the order it tested them: along the first ``accepted`` nodes of
    ``path`` each parent's children up to the one it accepted, and with ``refused_all`` every child of
    the node it stopped at (a chain's: d_1..d_A, and d_{A+1} when it was refused)."""
    out: list[int] = []
    at = ROOT
    for node in path[:accepted]:
        kids = tree.children[at]
        out.extend(kids[: kids.index(node) + 1])
        at = node
    if refused_all:
        out.extend(tree.children.get(at, ()))
    return out


def uniforms_reached(tree: DraftTree, path: tuple[int, ...], accepted: int, refused_all: bool) -> int:
    """How far into a request's acceptance uniforms (one per node, in node order) a walk read: one
    past the last node it tested (``walked``)."""
    return max(walked(tree, path, accepted, refused_all), default=-1) + 1


def trie(branches: Sequence[Sequence[int]], nodes: int) -> DraftTree:
    """Token chains merged into one tree of chosen children (a shared prefix is one branch), at most
    ``nodes`` nodes, taken chain by chain in order: the first chain whole first, so the tree holds
    the proposal the first chain alone would be (a lookup's several continuations)."""
    tokens: list[int] = []
    parents: list[int] = []
    child: dict[tuple[int, int], int] = {}
    for branch in branches:
        at = ROOT
        for token in branch:
            nxt = child.get((at, token))
            if nxt is None:
                if len(tokens) >= nodes:
                    break
                nxt = child[(at, token)] = len(tokens)
                tokens.append(token)
                parents.append(at)
            at = nxt
    return DraftTree(tuple(tokens), tuple(parents), "rank")


def chains(drafts: Sequence[Sequence[int]]) -> tuple[DraftTree, ...]:
    """Every row's drafts as the tree with one branch."""
    return tuple(DraftTree.chain(d) for d in drafts)


@record
class TreeBatch:
    """The structure of a round's trees, as the rules read it (B requests, K the most nodes of any;
    every tensor on the rows' device):

        parent      int64[B, K]     each node's parent (-1: the root; -1 past k_b)
        last_child  int64[B, K + 1] the last child of the root (column 0) and of each node (column n + 1),
                                    -1 where there is none
        depth       int             the deepest node of any request

    ``chain``: every request's tree is a chain (the walk is then the nodes in order); ``trees``: the
    trees themselves, as the host knows them (empty for chains)."""

    parent: torch.Tensor
    last_child: torch.Tensor
    depth: int
    chain: bool
    trees: tuple[DraftTree, ...] = ()

    def row_depths(self, b: int, k: int) -> tuple[int, ...]:
        """Request b's target rows' depths (k nodes): the root's 0, then each node's."""
        return (0, *(self.trees[b].depths if self.trees else range(1, k + 1)))

    @classmethod
    def of(cls, trees: Sequence[DraftTree], k_max: int, device) -> TreeBatch:
        parent = [list(t.parents) + [ROOT] * (k_max - len(t)) for t in trees]
        last = [[t.last_child(n) for n in range(ROOT, len(t))] + [-1] * (k_max - len(t)) for t in trees]
        return cls(
            to_device(parent, torch.int64, device).reshape(len(trees), k_max),
            to_device(last, torch.int64, device).reshape(len(trees), k_max + 1),
            max((t.depth for t in trees), default=0),
            all(t.is_chain for t in trees),
            tuple(trees),
        )


def walk(passed: torch.Tensor, valid: torch.Tensor, trees: TreeBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The rule's walk down each request's tree: passed bool[B, K] (each node's acceptance test),
    valid bool[B, K] (the node exists) -> (level_passed bool[B, D], along int64[B, D]).

    At level j the walk stands at a node of depth j (the root at level 0) and looks at its children:
    ``along[:, j]`` is the first child that passed, or when none did the first child (-1: there is
    none), and ``level_passed[:, j]`` whether one passed. A correct rule stops at the first level that
    did not pass (``RejectionSampler.count_accepted``), so the accepted path is along[:, :A]. On a
    chain the walk is the nodes in order and level_passed is ``passed``."""
    b, k = passed.shape
    if trees.chain:
        return passed & valid, torch.arange(k, device=passed.device).expand(b, k)
    index = torch.arange(k, device=passed.device).expand(b, k)
    cur = torch.full((b,), ROOT, dtype=torch.int64, device=passed.device)
    levels, along = [], []
    for _ in range(trees.depth):
        kids = valid & (trees.parent == cur.unsqueeze(1))
        hits = kids & passed
        first_hit = torch.where(hits, index, k).amin(dim=1)
        first_kid = torch.where(kids, index, k).amin(dim=1)
        chosen = torch.where(first_hit < k, first_hit, first_kid)
        levels.append(first_hit < k)
        cur = torch.where(chosen < k, chosen, torch.full_like(chosen, -2))  # -2: past the tree, no child
        along.append(torch.where(chosen < k, chosen, torch.full_like(chosen, ROOT)))
    if not levels:
        return passed[:, :0], index[:, :0]
    return torch.stack(levels, 1), torch.stack(along, 1)


def leaf_of(along: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor:
    """The last accepted node of each request, int64[B] (-1: none accepted): along int64[B, D] (``walk``),
    accepted int64[B] (A <= D)."""
    if along.shape[1] == 0:
        return torch.full_like(accepted, ROOT)
    at = (accepted - 1).clamp_min(0).unsqueeze(1)
    return torch.where(accepted > 0, along.gather(1, at).squeeze(1), torch.full_like(accepted, ROOT))
