"""What a lossy sampler costs in distribution, exactly: the total variation between the joint it
emits and the target's, over the horizon and per position, beside its expected accepted length.

``tv_figures`` prices a joint. A tree sampler's joint is exact by construction (its uniforms are
integrated where it compares them, ``specd.oracles.samplers.tree_uniforms``). A chain sampler takes its
uniforms as tensors (``specd.oracles.samplers.protocol``), so ``chain_price`` finds its own cells: draft
i is kept for acceptance uniforms on one side of a threshold and refused on the other (below it,
U_i < t_i, as the protocol reads U_i; or at and above it, as a sampler reading 1 - U_i does: the side
is the one it passes on at U_i = 0), and the terminal token is constant on intervals of terminal_u
(the inverse CDF's, in whatever order); each threshold, and each terminal token's interval, is found
exactly on the streams' grid (multiples of 2^-53) by bisection, 53 calls each, batched over every
draft path. A sampler whose outcome is not
of that form (checked at both inner ends of every cell) is reported as such and its price is not
claimed exact.
"""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

from specd.errors import SamplerFailed
from specd.oracles.reference import chain_joint
from specd.oracles.samplers.checks import Call, call_batch, shuffled_batch
from specd.oracles.samplers.protocol import SamplerUnderTest, rule_sampler
from specd.oracles.samplers.tables import as_table

GRID = 2**53  # the streams' uniforms are multiples of 1/GRID in [0, 1)


def tv_figures(joint: dict, target: dict, horizon: int) -> dict:
    """{"tv_horizon": TV of the joints over every sequence, "tv_per_position": TV of each position's
    marginal}, both in [0, 1]."""
    seqs = set(joint) | set(target)
    tv = 0.5 * sum(abs(joint.get(s, 0.0) - target.get(s, 0.0)) for s in seqs)
    per_position = []
    for j in range(horizon):
        marginal: dict[int, float] = defaultdict(float)
        for s in seqs:
            marginal[s[j]] += joint.get(s, 0.0) - target.get(s, 0.0)
        per_position.append(0.5 * sum(abs(x) for x in marginal.values()))
    return {"tv_horizon": tv, "tv_per_position": per_position}


def _call(p_rows, q_rows, path, accept_u, terminal_u) -> Call:
    return Call(p_rows, q_rows, path, tuple(accept_u), terminal_u, 1.0, 0, None, [])


class _Batches:
    """call_batch, remembering a sampler that refuses a batch (then called row by row at once)."""

    def __init__(self, sampler):
        self.sampler, self.refused = sampler, False

    def __call__(self, calls: list[Call]):
        if self.refused:
            return [r for c in calls for r in call_batch(self.sampler, [c])[0]]
        results, self.refused = shuffled_batch(self.sampler, calls)
        return results


# Where a guess of an index is verified, the farthest probes beside it: a threshold computed in another float
# order than the guess's lies within a few grid points of it, and these bound a bisection to 13 steps there.
NEAR = 1 << 12


def _bisect(items: list, passes, lows: list[int] | None = None, guesses: list[int | None] | None = None) -> list[int]:
    """Per item, the smallest grid index m in [its low, GRID] where ``passes(items, ms)`` (batched, each
    item at its m) is False, given it is True from its low up to it and False from it on (GRID: never).
    ``guesses``: per item, where the exact rule's threshold lies (or None); the first batch asks at it, a
    point or two either side (a threshold rounded once more) and NEAR either side, and each answer bounds
    the bisection as any probe does: a right guess is proved in one call, not 53; a wrong one costs that
    call and no error."""
    bounds = [[lo, GRID] for lo in (lows or [0] * len(items))]
    probes = [
        (i, m)
        for i, g in enumerate(guesses or [])
        if g is not None
        for m in (g - NEAR, g - 2, g - 1, g, g + 1, g + NEAR)
        if bounds[i][0] <= m < GRID
    ]
    if probes:
        for (i, m), ok in zip(probes, passes([items[i] for i, _ in probes], [m for _, m in probes])):
            bounds[i] = [max(bounds[i][0], m + 1), bounds[i][1]] if ok else [bounds[i][0], min(bounds[i][1], m)]
    while any(a < b for a, b in bounds):
        live = [i for i, (a, b) in enumerate(bounds) if a < b]
        mids = [(bounds[i][0] + bounds[i][1]) // 2 for i in live]
        for i, mid, ok in zip(live, mids, passes([items[i] for i in live], mids)):
            bounds[i] = [mid + 1, bounds[i][1]] if ok else [bounds[i][0], mid]
    return [a for a, _ in bounds]


def chain_price(sampler, rig, k: int, tokens: bool) -> dict:
    """The exact joint of a chain sampler over one round with K = k on the rig's tables (or a Table,
    specd.oracles.samplers.tables; its own cells, module docstring), priced: tv_figures, expected accepted
    length, whether every cell held one outcome (``threshold_shaped``)."""
    ref = as_table(rig)
    prompt = ref.prompt
    batch = _Batches(sampler)
    paths = [((), 1.0)]
    for _ in range(k):
        paths = [(pa + (x,), m * qx) for pa, m in paths for x, qx in enumerate(ref.q(prompt + pa)) if qx > 0]
    rows = {
        pa: ([ref.p(prompt + pa[:i]) for i in range(k + 1)], [ref.q(prompt + pa[:i]) for i in range(k)])
        for pa, _ in paths
    }

    def accepted(points: list[tuple[tuple, tuple]]) -> list[int]:
        calls = [_call(*rows[pa], pa, us, 0.5) for pa, us in points]
        return [int(r.accepted[0]) for r in batch(calls)] if calls else []

    thresholds, below = _thresholds(paths, accepted, k, rows)
    cells = _cells(paths, thresholds, below, k)
    shaped = accepted([(c[0], c[4]) for c in cells] + [(c[0], c[5]) for c in cells]) == [c[1] for c in cells] * 2
    laws = _terminal_laws(batch, rows, cells, tokens)
    joint: dict[tuple, float] = defaultdict(float)
    expected_accepted = 0.0
    for (pa, a, width, *_), law in zip(cells, laws):
        expected_accepted += width * a
        for x, px in law.items():
            head = pa[:a] + (x,)
            for tail, m in chain_joint(ref.p, prompt + head, k - a).items():
                joint[head + tail] += width * px * m
    target = chain_joint(ref.p, prompt, k + 1)
    return {**tv_figures(joint, target, k + 1), "expected_accepted": expected_accepted, "threshold_shaped": shaped}


def _thresholds(paths: list, accepted, k: int, rows: dict) -> tuple[dict, dict]:
    """Per draft path, each test's threshold on the grid and its side: a test passes on one side of its
    threshold, below it (U < t, the rule's reading) or at and above it (a sampler reading 1 - U), the side
    it passes on at U = 0 with every earlier test passed. -> (thresholds, below: per path, per test).
    ``rows``: per path, its (p rows, q rows), where the rule's own threshold is guessed first."""
    below: dict[tuple, list[bool]] = {pa: [] for pa, _ in paths}

    def earlier(pa, i: int) -> tuple:  # the first i uniforms, each inside its test's pass side
        return tuple(0.0 if low else (GRID - 1) / GRID for low in below[pa][:i])

    def passes_test(i: int):  # the i-th test at U_i = m / GRID: True on the side where it does not pass yet
        def passes(items, ms):
            points = [(pa, earlier(pa, i) + (m / GRID,) + (0.5,) * (k - i - 1)) for pa, m in zip(items, ms)]
            return [(a > i) == below[pa][i] for pa, a in zip(items, accepted(points))]

        return passes

    thresholds: dict[tuple, list[int]] = {pa: [] for pa, _ in paths}
    for i in range(k):
        live = [pa for pa, _ in paths if all(_points(_split(t, low)[0]) for t, low in zip(thresholds[pa], below[pa]))]
        at_zero = accepted([(pa, earlier(pa, i) + (0.0,) + (0.5,) * (k - i - 1)) for pa in live])
        for pa, a in zip(live, at_zero):
            below[pa].append(a > i)
        rule = [_rule_threshold(rows[pa][0][i][pa[i]], rows[pa][1][i][pa[i]]) for pa in live]
        guesses = [t if below[pa][i] else None for pa, t in zip(live, rule)]
        for pa, t in zip(live, _bisect(live, passes_test(i), guesses=guesses)):
            thresholds[pa].append(t)
    return thresholds, below


def _rule_threshold(p_d: float, q_d: float) -> int:
    """The first grid index where the token-wise rule refuses a draft (U < p(d) / q(d) keeps it), exactly."""
    ratio = Fraction(p_d) / Fraction(q_d)
    return GRID if ratio >= 1 else math.ceil(ratio * GRID)


def _rule_end(weights: list[Fraction], token: int) -> int | None:
    """The first grid index past ``token``'s interval of the inverse CDF of ``weights`` (any scale: the first
    token whose running sum exceeds U times the total), exactly; None where it has no mass. One division, not
    ``reference.cells_of``'s one per token: it runs per token of every cell's law."""
    total = sum(weights)
    if total <= 0 or weights[token] <= 0:
        return None
    return math.ceil(sum(weights[: token + 1]) * GRID / total)


def _cells(paths: list, thresholds: dict, below: dict, k: int) -> list[tuple]:
    """Each path's cells of the acceptance uniforms -> [(path, A, the cell's mass, a point inside, its
    lowest and highest grid points)], A the drafts kept."""
    cells = []
    for pa, mass in paths:
        passing, refusing = zip(*map(_split, thresholds[pa], below[pa])) if thresholds[pa] else ((), ())
        for a in range(len(refusing) + 1):
            if a < len(refusing) and _points(refusing[a]) == 0:
                continue  # the test always passes: no refusal there
            width = mass
            for cell in passing[:a]:
                width *= _points(cell) / GRID
            width *= _points(refusing[a]) / GRID if a < len(refusing) else 1.0
            if width <= 0:
                continue
            inner = list(passing[:a]) + ([refusing[a]] if a < len(refusing) else [])
            pad = (0.5,) * (k - len(inner))
            corner = lambda pick, inner=inner, pad=pad: tuple(pick(lo, hi) / GRID for lo, hi in inner) + pad  # noqa: E731
            cells.append((pa, a, width, corner(lambda lo, hi: (lo + hi) // 2), corner(min), corner(max)))
    return cells


def _split(t: int, low: bool) -> tuple[tuple[int, int], tuple[int, int]]:
    """A test's threshold ``t`` (a grid index) and side (``low``: it passes below t, else from t up) ->
    (the grid points where it passes, where it refuses), each (first, last): empty where last < first."""
    return ((0, t - 1), (t, GRID - 1)) if low else ((t, GRID - 1), (0, t - 1))


def _points(cell: tuple[int, int]) -> int:
    return cell[1] - cell[0] + 1


def _terminal_laws(batch, rows, cells, tokens: bool) -> list[dict[int, float]]:
    """Each cell's terminal law: as returned, or (a sampler that draws tokens) each token's interval
    of terminal_u, found by bisection."""
    if not tokens:
        results = batch([_call(*rows[c[0]], c[0], c[3], 0.5) for c in cells])
        return [{x: px for x, px in enumerate(r.terminal_rows[0].tolist()) if px > 0} for r in results]

    def token_at(items, ms):
        calls = [_call(*rows[cells[c][0]], cells[c][0], cells[c][3], m / GRID) for c, m in zip(items, ms)]
        return [int(r.terminal[0]) for r in batch(calls)]

    def rule_law(c: int) -> list[Fraction]:  # the rule's terminal law at cell c: its residual, or its bonus row
        pa, a = cells[c][0], cells[c][1]
        p_rows, q_rows = rows[pa]
        p = [Fraction(x) for x in p_rows[a]]
        return [max(Fraction(0), x - Fraction(y)) for x, y in zip(p, q_rows[a])] if a < len(q_rows) else p

    rule_laws = [rule_law(c) for c in range(len(cells))]
    laws: list[dict[int, float]] = [{} for _ in cells]
    start = {c: 0 for c in range(len(cells))}  # where each cell's next token interval begins
    while start:
        live = sorted(start)
        here = dict(zip(live, token_at(live, [start[c] for c in live])))
        ends = _bisect(
            live,
            lambda items, ms, here=here: [t == here[c] for c, t in zip(items, token_at(items, ms))],
            [start[c] + 1 for c in live],
            [_rule_end(rule_laws[c], here[c]) for c in live],
        )
        for c, end in zip(live, ends):
            laws[c][here[c]] = laws[c].get(here[c], 0.0) + (end - start[c]) / GRID
            if end < GRID:
                start[c] = end
            else:
                del start[c]
    return laws


def priced(sampler, rig, k: int, tokens: bool) -> dict:
    """``chain_price`` of a chain sampler that failed its exact check, with specd's exact rule's expected
    accepted length on the same tables beside it (or why it could not be priced)."""
    try:
        price = chain_price(sampler, rig, k, tokens)
    except SamplerFailed as err:
        return {"not_priced": str(err)}
    exact = chain_price(SamplerUnderTest("specd", rule_sampler(), ""), rig, k, True)
    return {**price, "exact_rule_expected_accepted": exact["expected_accepted"]}
