"""The oracle's own rule over token trees: every cell of a tree round's uniforms, its mass, and what
the rule emits there, computed from the oracle's rows (float64 lists, or Fractions) and never from
production's.

A tree round (terms: ``specd.core.tree``) reads three kinds of uniform: the proposal uniform of
each child drawn at random (``sampled``: from q with the earlier siblings removed; ``iid``: from
q), the acceptance uniform of each node the walk tests, and one terminal uniform. The walk tests
a node's children in order, descends into the first that passes and emits the terminal where it
stops, so the outcome depends only on the draws of the children it tested: the first child of
each node it stands at, each later one only after its elder siblings were refused. ``TreeWalk``
enumerates exactly those, lazily: at each node it stands at, child r's token (one branch per
token with mass in the row child r is drawn from, weighted by that row's mass on it) and the
test's outcome (pass: U < a, weight a; refusal: weight 1 - a, with a = min(1, p_r(d) / q_r(d)),
p_r the parent's row with what the earlier siblings took removed, ``specd.core.sampler``). A
passed child is descended into; after a refusal the next sibling is tried against
normalize([p_r - q_r]_+); after the last one the correction is drawn from [p_r - q_r]_+, after a
node without children the bonus from its own row. The masses multiply to the probability of the
cell, and the cells partition the round's probability space: the children the walk never tests
(a passed child's later siblings, a refused child's subtree) are drawn by production all the
same, but nothing the rule emits depends on them, so integrating over their draws multiplies
each cell by 1. Production is run with those draws at three different values (``FILL``): an
engine whose output reads them shows it as a disagreement at some probe.

A target at temperature 0 has one-hot rows, on which the same walk is the greedy rule (a child
passes iff it is the target's argmax, the correction is the argmax); such a round reads no
acceptance or terminal uniform.

``drafted`` lays a cell out as production numbers it: the whole tree built level by level, each
node's children after its elder siblings', child r of an expansion reading the proposal uniform
at the expansion's base + r (the base: the children planned for earlier expansions), node n's
acceptance test reading acceptance uniform n.
"""

from __future__ import annotations

from collections.abc import Callable

from specd.core.record import record
from specd.core.sampler import first_index_above
from specd.core.tree_shape import TreeShape
from specd.oracles.reference import PROBES, UNUSED, cells_of, probe

Path = tuple[int, ...]  # a node's rank path: () the root, (0,) its first child, (0, 1) that node's second child
Row = Callable[[tuple[int, ...]], list]  # context (output and the branch's tokens) -> a row of masses
# An untested child's proposal uniform, per probe: the three far apart (0: the first token with mass, just
# below 1: the last), so an engine whose output reads an untested draw disagrees at some probe.
FILL = {"centre": 0.5, "left": 0.0, "right": 1.0 - 2.0**-53}


@record
class TreeCell:
    """One cell of a tree round: the interval of each uniform the walk reads, keyed by the rank path
    of the child it belongs to, the cell's mass and what the rule emits there."""

    proposals: tuple[tuple[Path, object, object], ...]  # (child, lo, hi): the child's token drawn in [lo, hi)
    tokens: tuple[tuple[Path, int], ...]  # (child, its token), every child the walk read
    tests: tuple[tuple[Path, object, object], ...]  # (child, lo, hi): its acceptance uniform in [lo, hi)
    terminal: tuple[object, object]  # the terminal uniform's interval
    mass: object
    emitted: tuple[int, ...]
    path: tuple[Path, ...]  # the accepted children, root down


@record
class Drafted:
    """A cell at one probe, as production lays it out: the uniforms to inject by stream and what a
    correct round publishes (emitted tokens, accepted node indices, stream advances)."""

    proposal: tuple[float, ...]
    acceptance: tuple[float, ...]
    terminal: float
    nodes: int
    path: tuple[int, ...]
    advances: tuple[int, int, int]  # (proposal, acceptance, terminal) uniforms a correct round reads


def construction(shape: TreeShape, draft_greedy: bool) -> str:
    """How the children of a round of ``shape`` are drawn (``specd.core.tree_draft.construction``,
    stated again here: the shape's prefix, ranked for a greedy draft, sampled otherwise)."""
    if draft_greedy:
        return "rank"
    return shape.drawn or "sampled"


def ranked(row: list) -> list[int]:
    """The tokens with mass, likeliest first, ties to the lower id (a ranked tree's children)."""
    return sorted((t for t, x in enumerate(row) if x > 0), key=lambda t: (-row[t], t))


class TreeWalk:
    """The rule over one request's tree rounds: ``p`` and ``q`` give the target's and the draft's
    rows after a context, ``order`` a ranked tree's children (default: ``ranked`` of q), ``one``
    the arithmetic (1.0 or Fraction(1)), ``greedy`` the target at temperature 0."""

    def __init__(self, p: Row, q: Row, order: Row | None = None, one=1.0, greedy: bool = False):
        self.p, self.q, self.one, self.greedy = p, q, one, greedy
        self.limit: int | None = None
        self.order = order or (lambda ctx: ranked(self.q(ctx)))

    def cells(self, context: tuple[int, ...], shape: TreeShape, drawn: str, limit: int | None = None) -> list[TreeCell]:
        """Every cell of one round from ``context`` (the output) drafting ``shape`` (already cut to
        the round's depth) with children drawn as ``drawn`` says; past ``limit`` cells the walk stops
        early (what it returns is then more than ``limit`` cells, not all of them)."""
        out: list[TreeCell] = []
        self.limit = limit
        self._node(Round(context, shape, drawn), context, (), Trail(self.one), out)
        return out

    def count(self, ctx: tuple[int, ...], shape: TreeShape, drawn: str, path: Path) -> int:
        """How many children the node at ``path`` has: the shape's, but a row runs out of tokens to
        draw without replacement or to rank."""
        planned = shape.children(path)
        if planned == 0 or drawn == "iid":
            return planned
        return min(planned, len(self.order(ctx)) if drawn == "rank" else sum(1 for x in self.q(ctx) if x > 0))

    def _node(self, rnd: Round, ctx, path: Path, trail: Trail, out: list) -> None:
        count = self.count(ctx, rnd.shape, rnd.drawn, path)
        p = self.p(ctx)
        if self.limit is not None and len(out) > self.limit:
            return
        if count == 0:  # the bonus, from the node's own row
            out.extend(trail.ended(cells_of(p)))
            return
        self._child(rnd, ctx, path, 0, count, (), list(p), trail, out)

    def _child(self, rnd, ctx, path, r: int, count: int, taken: tuple, p_r: list, trail: Trail, out: list) -> None:
        """Child r of the node at ``path``, tested against p_r (what its elder siblings left)."""
        one, me = self.one, path + (r,)
        for d, interval, width, q_r in self._draws(rnd.drawn, ctx, r, taken):
            drew = trail.drew(me, d, interval, width)
            a = min(one, p_r[d] / q_r[d])
            if a > 0:
                self._node(rnd, ctx + (d,), me, drew.tested(me, 0 * one, a, a).accepted(me, d), out)
            if a < one:
                residual = [max(0 * one, x - y) for x, y in zip(p_r, q_r)]
                refused = drew.tested(me, a, one, one - a)
                if r + 1 < count:
                    left = sum(residual)
                    self._child(rnd, ctx, path, r + 1, count, taken + (d,), [x / left for x in residual], refused, out)
                else:  # every child refused: the correction
                    out.extend(refused.ended(cells_of(residual)))

    def _draws(self, drawn: str, ctx, r: int, taken: tuple):
        """Child r's possible tokens -> [(token, its proposal interval or None, the cell's weight, the
        row q_r it was drawn from, normalized)]."""
        one = self.one
        if drawn == "rank":
            d = self.order(ctx)[r]
            return [(d, None, one, [one if t == d else 0 * one for t in range(len(self.q(ctx)))])]
        row = list(self.q(ctx))
        if drawn == "sampled":
            for t in taken:
                row[t] = 0 * one
        total = sum(row)
        normal = [x / total for x in row]
        return [(d, (lo, hi), hi - lo, normal) for d, lo, hi in cells_of(row)]

    # -- production's layout of a cell ---------------------------------------------------------
    def drafted(self, context, shape: TreeShape, drawn: str, cell: TreeCell, where: str) -> Drafted:
        """``cell`` at probe ``where`` as production lays it out (module docstring)."""
        chosen = {path: probe(lo, hi, where) for path, lo, hi in cell.proposals}
        known = dict(cell.tokens)
        index: dict[Path, int] = {}
        uniforms: list[float] = []
        level: list[tuple[Path, tuple[int, ...]]] = [((), context)]
        while level:
            grown = []
            for path, ctx in level:
                planned = shape.children(path)
                if planned == 0:
                    continue
                base = len(uniforms)
                if drawn != "rank":
                    uniforms += [chosen.get(path + (r,), FILL[where]) for r in range(planned)]
                tokens = self._children(ctx, drawn, self.count(ctx, shape, drawn, path), uniforms[base:], path, known)
                for r, token in enumerate(tokens):
                    index[path + (r,)] = len(index)
                    grown.append((path + (r,), ctx + (token,)))
            level = grown
        acceptance = [UNUSED] * len(index)
        for path, lo, hi in cell.tests:
            acceptance[index[path]] = probe(lo, hi, where)
        reached = max((index[path] for path, _, _ in cell.tests), default=-1) + 1
        reads = 0 if self.greedy else 1
        return Drafted(
            tuple(uniforms),
            tuple(acceptance),
            probe(*cell.terminal, where),
            len(index),
            tuple(index[path] for path in cell.path),
            (len(uniforms), reached * reads, reads),
        )

    def _children(self, ctx, drawn: str, count: int, u: list[float], path: Path, known: dict) -> list[int]:
        """The tokens of a node's children: the cell's where the walk read them, else drawn at the
        fill uniforms as production draws them. An untested child's token reaches the round only
        through how many children its own subtree gets (the numbering of the nodes after it), the
        same for every token wherever a draft row's support does not move (full rows, top-k): the
        rows' float arithmetic suffices."""
        if drawn == "rank":
            return self.order(ctx)[:count]
        tokens: list[int] = []
        for r in range(count):
            if path + (r,) in known:
                tokens.append(known[path + (r,)])
                continue
            row = list(self.q(ctx))
            if drawn == "sampled":
                for t in tokens:
                    row[t] = 0 * row[t]
            tokens.append(first_index_above(row, u[r] * sum(row)))
        return tokens


@record
class Round:
    context: tuple[int, ...]
    shape: TreeShape
    drawn: str


@record
class Trail:
    """What a walk has read so far (the fields of the TreeCell it ends in)."""

    mass: object
    proposals: tuple = ()
    tokens: tuple = ()
    tests: tuple = ()
    emitted: tuple[int, ...] = ()
    path: tuple[Path, ...] = ()

    def drew(self, child: Path, token: int, interval, width) -> Trail:
        proposals = self.proposals + ((child, *interval),) if interval is not None else self.proposals
        return Trail(self.mass * width, proposals, self.tokens + ((child, token),), self.tests, self.emitted, self.path)

    def tested(self, child: Path, lo, hi, weight) -> Trail:
        tests = self.tests + ((child, lo, hi),)
        return Trail(self.mass * weight, self.proposals, self.tokens, tests, self.emitted, self.path)

    def accepted(self, child: Path, token: int) -> Trail:
        return Trail(self.mass, self.proposals, self.tokens, self.tests, self.emitted + (token,), self.path + (child,))

    def ended(self, terminal_cells) -> list[TreeCell]:
        """The cells of the terminal draw from a row's inverse-CDF cells [(token, lo, hi)]."""
        return [
            TreeCell(
                self.proposals, self.tokens, self.tests, (lo, hi), self.mass * (hi - lo), self.emitted + (x,), self.path
            )
            for x, lo, hi in terminal_cells
            if self.mass * (hi - lo) > 0
        ]


__all__ = ["FILL", "PROBES", "Drafted", "TreeCell", "TreeWalk", "construction", "ranked"]
