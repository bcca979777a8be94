"""The tables a foreign sampler is checked over (``verify-oracle --sampler``): the seed's, more seeds,
and adversarial ones.

A verdict on one table is true of that table only: a slip shows where the rows give it room, and a
seeded table may give it none (at V = 4, seed 0, the target exceeds the draft on one token only, so
every correction is that token and a correction drawn wrongly cannot show). So each size is checked
over several tables, each a ``Table``: the target's row ``p(output)`` and the draft's ``q(output)``
after any output (the prompt followed by tokens), float64 lists summing to 1.

- ``seed S``: the fixture's tables at seed S (its policies, the oracle's ``Reference`` rows); the
  run's seed and the two after it;
- adversarial tables, each the run's seed's rows reshaped, row by row (its own choices seeded by the
  output, so every row differs):

  ``draft_misses_target``  the draft has no mass on one token the target has (q = 0 < p)
  ``near_ties``            the draft within 1e-3 of the target, relatively, on every token
  ``point_mass``           the target a point mass (a greedy target)
  ``equal_rows``           the draft the target (p = q: every test passes)
  ``draft_far_below``      the draft 1000 times below the target on half the tokens, so the target
                           exceeds it on several (a correction with several tokens of mass); from a
                           round's second row on, the target exactly flat (1 / V each: a draft kept
                           untested where the target is uniform, and a correction memoized by the
                           target's row alone, which rows that repeat show, passed every table
                           without such rows)
  ``draft_point_mass``     the draft a point mass (a greedy draft's, a lookup's): every draft the same
                           token, a refusal's correction the target without it; at every other
                           position the point is the target's likeliest token (a lookup's guess often is:
                           a path kept for it untested passed where the point missed it)
  ``target_top_half``      the target cut to its ceil(V / 2) likeliest tokens, renormalized (a top-k
                           target), the draft as it was: drafts of target mass 0 whose refusal still
                           moves the residual (a point-mass target's residual is that point again, so
                           a child of no target mass skipped untested, its residual step with it,
                           passed every other table); at every other position the draft exactly flat
                           (1 / V each: a flat draft row taken for "no draft law" and its draft kept
                           untested passed every table without one)
  ``coarse_grid``          both rows multiples of 1 / T (T a power of two, at least 4 V: exact in
                           floats), the target the draft's with a few units moved between tokens: the
                           rows equal on some tokens and not on others, and residual weights that tie
                           exactly (a mask that keeps p where p = q, a correction that collapses tied
                           weights, passed every table whose weights never meet)

and tables of small values, where a guard or a fast path with a tolerance (a division clamped at 1e-5, a
residual floored below 1e-6, a greedy path where p is close to a point mass, an accept-all path where the rows
are ``allclose``) moves mass the seeded tables never put in its way (``SMALL_VALUES``):

  ``nearly_equal_rows``    the draft within 1e-7 of the target, relatively (a residual of about 1e-7 of mass)
  ``ratios_near_one``      each of the draft's weights off the target's by a relative 1e-11 to 1e-8
                           (log-uniform, either way): ratios that close to 1, where a fast path keeping a
                           ratio within a tolerance of 1 (1e-9, say) untested moves mass over the check's
                           1e-12 for any tolerance from about 1e-10 up
  ``nearly_point_mass``    the target 1 - 1e-7 on one token
  ``draft_nearly_misses``  one token 1e-8 under the draft, 1e-6 under the target; one (V > 2) 1e-11 to 1e-6 under both
  ``draft_nearly_point_mass`` the draft 1 - 1e-7 on one token: a refused child of it leaves 1e-7 of draft
                           mass to renormalize (a renormalization skipped below a guard of 1e-3 passed
                           every other table)

and a table shaped for one class of slip (``SHAPED``):

  ``equal_first_row``      the draft the target at a round's first row (its root), every later row the
                           seed's; ``point_mass_first_row``: the target and the draft the same point mass
                           there (every round goes on past it), every later row the seed's. A path
                           that decides a whole round on its first row (greedy where p_1 is a point
                           mass, or where p_1 and q_1 both are, as a greedy request's processors
                           leave them; every draft kept where p_1 = q_1, "the draft is the target")
                           passed every table whose rows were all alike (helpers' samplers)
  ``draft_apart``          the target's mass 0.9 on two tokens drawn, split (s, 1 - s) with s in
                           [0.2, 0.4], the draft's 0.01 on them split (1 - s, s), the rest shared
                           evenly: every other token is refused nine times in ten, and what the
                           refusals leave of both rows is on the two, with p' below q' on one; so a
                           child tested after every other token was refused is tested on rows
                           that tell a right q' (or p') from a wrong one
  ``repeated_target``      the target's row at a round's first position repeated at every row of the
                           round, the draft's rows the seed's (each its own): one token refused at two
                           levels of a path meets the same p' with another q', so a residual or a ratio
                           memoized by p' and the token (q' forgotten) shows (draft_far_below's flat rows
                           repeat too, but on seed 0 no path refuses one token at two of them)
  ``sparse_rows``          the target's mass on two tokens of each row, the draft a point mass on one
                           of them (the target's weight there drawn in [0.25, 0.75]), a different
                           token at each position of a round (token V - 1 - 29 i mod V at position i);
                           a round's joint has 2^(K + 1) sequences at any V, so a round of many rows
                           over a wide vocabulary is cheap: a row read from another position's place
                           (row buffers kept in a ring, rows read at a block's stride, not V's) puts
                           q(d) = 0 under a draft and keeps it untested, which shows
  ``wide_draft``           the draft's mass on every token (no two weights equal), the target's on three:
                           the draft's likeliest token and two of its least likely half (past its 32
                           likeliest at V = 65), every row alike drawn: a draft row kept as its 32
                           likeliest tokens (sparse draft probabilities) gets the residual wrong where
                           the target has mass on a token it dropped; every other table's draft at
                           V > 32 was a point mass. One draft (K = 1, the tree 1) costs its V paths
  ``far_siblings``         the draft's first row on three tokens, 1, 5 V / 8 and V - 1 (40 and 64 at
                           V = 65: past a warp's 32 lanes and a 64-bit mask's bits), about 0.3, 0.3 and
                           0.4, the target's about 0.4, 0.4 and 0.1 on them and 0.1 on token 0, so V - 1
                           alone is refused and a second child is then tested at 2 / 3 on q' without
                           it; every later row as ``sparse_rows``' (a point-mass draft). A q'
                           renormalized over the first 32 tokens, refused tokens kept in a 64-bit mask
                           whose shift wraps, or children drawn without replacement taken as i.i.d.
                           move that test; a tree of many nodes costs the orders of the root's children
  ``deep_rows``            the target and the draft the same point mass (a token drawn) at each of a round's
                           first DEEP_FROM (8) rows, so every round goes on past them; from there on rows of
                           full support, the draft 1000 times below the target on half the tokens: a ninth
                           draft (a ninth level's children) tested and corrected on rows where the correction
                           has three tokens or more and a second sibling's test depends on the first's
                           refusal. A path kept for deep refusals (a correction cut to its two likeliest
                           after four accepted drafts, siblings below the fourth level tested on the parent's
                           unchanged row) passed every size whose deep rounds were all point masses (a sixth
                           helper's samplers); the point masses cost nothing

A table that a size cannot hold is left out (``draft_misses_target`` where the siblings need every
token the draft has, ``draft_point_mass`` where a node has two children or more).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction

from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.reference import Reference
from specd.oracles.samplers.table_store import made

Row = list[float]
Rows = Callable[[tuple[int, ...]], Row]
MORE_SEEDS = 2  # seeded tables after the run's own
ADVERSARIAL = {
    "draft_misses_target": "the draft has no mass on a token the target has",
    "near_ties": "the draft within 1e-3 of the target on every token",
    "point_mass": "the target a point mass",
    "equal_rows": "the draft equal to the target",
    "draft_far_below": "the draft 1000 times below the target on half the tokens, the target flat after the first row",
    "draft_point_mass": "the draft a point mass",
    "target_top_half": "the target cut to its likeliest half of the tokens, the draft flat at every other row",
    "coarse_grid": "both rows on a coarse grid, equal on some tokens, residual weights tied",
}
# Tables shaped for one class of slip, each checked at that class's sizes only (every size would cost the check
# an eighth more a table): ``draft_apart`` for a fourth child (specd.oracles.samplers.coverage.FOURTH_SIBLING),
# the first-row tables for a round decided on its first row (coverage.FIRST_ROW).
SHAPED = {
    "draft_apart": "the target's mass on two tokens, the draft's on the others",
    "equal_first_row": "the draft the target at a round's first row only",
    "point_mass_first_row": "the target and the draft the same point mass at a round's first row only",
    "sparse_rows": "the target's mass on two tokens a row, the draft a point mass on one of them, another each row",
    "repeated_target": "the target's first row repeated at every row of a round, the draft's rows the seed's",
    "wide_draft": "the draft's mass on every token, the target's on its likeliest and two of its least likely half",
    "far_siblings": "the draft's first row on tokens 1, 5 V / 8 and V - 1, every later row a point mass",
    "deep_rows": "the target and the draft one point mass at a round's first 8 rows, rows of full support after",
}
# kinds whose rows owe nothing to the seed's
MADE_ANEW = ("coarse_grid", "draft_apart", "sparse_rows", "wide_draft", "far_siblings", "deep_rows")
DEEP_FROM = 8  # deep_rows' first row of full support: a ninth draft's (a ninth level's children's)
APART, DRAFT_ON_REST = 0.9, 0.99  # draft_apart's shares
SMALL_VALUES = {
    "nearly_equal_rows": "the draft within 1e-7 of the target on every token",
    "ratios_near_one": "the draft off the target by 1e-11 to 1e-8 on every token",
    "nearly_point_mass": "the target 1 - 1e-7 on one token",
    "draft_nearly_misses": "one token 1e-8 under the draft and 1e-6 under the target, one 1e-11 to 1e-6 under both",
    "draft_nearly_point_mass": "the draft 1 - 1e-7 on one token",
}


@dataclass(frozen=True)
class Table:
    """One table: ``p`` and ``q`` give the target's and the draft's row (float64 lists) after an output;
    ``prompt``: the output a round starts from; ``name``: how the report names it; ``seed``: the seed
    of the fixture's tables it is (or was made from)."""

    name: str
    vocab: int
    prompt: tuple[int, ...]
    p: Rows
    q: Rows
    seed: int = 0
    kind: str = ""  # the adversarial (or shaped, or small-value) kind it was made as; "" for a seed's
    # the target's chains after an output computed so far (specd.oracles.samplers.table_store.completion)
    completions: dict = field(default_factory=dict, compare=False, repr=False)


def as_table(rows, name: str = "the fixture's", seed: int = 0) -> Table:
    """A Table as it is, or a rig's rows (the oracle's ``Reference`` of it) as one."""
    if isinstance(rows, Table):
        return rows
    ref = Reference(rows)
    return Table(name, rows.vocab, rows.prompt, ref.p, ref.q, seed)


def seeded(cfg: OracleConfig, vocab: int, depth: int, seed: int) -> Table:
    """The fixture's tables at ``seed`` over ``vocab`` tokens (its policies, its prompt)."""
    rig_config = replace(cfg, vocab=vocab, k=depth, seed=seed, horizon=None, tree=())

    def make() -> Table:
        rig = build_rig(rig_config)
        ref = Reference(rig)
        return Table(f"seed {seed}", vocab, rig.prompt, ref.p, ref.q, seed)

    return made(("seeded", repr(rig_config)), make)  # every field, a dict's items too


def tables(cfg: OracleConfig, vocab: int, depth: int, widest: int, seeds: int = MORE_SEEDS) -> list[Table]:
    """The run's seed's table, ``seeds`` more, and every adversarial table the size can hold (a round
    of ``depth`` levels whose widest sibling group has ``widest`` children)."""
    base = seeded(cfg, vocab, depth, cfg.seed)
    out = [base] + [seeded(cfg, vocab, depth, cfg.seed + i) for i in range(1, seeds + 1)]
    return out + [adversarial(base, kind, cfg.seed) for kind in ADVERSARIAL if holds(kind, vocab, widest)]


def small_value_tables(base: Table, seed: int) -> list[Table]:
    """The ``SMALL_VALUES`` tables, made from ``base`` (the run's seed's table) with ``seed``'s choices."""
    return [adversarial(base, kind, seed) for kind in SMALL_VALUES]


def holds(kind: str, vocab: int, widest: int) -> bool:
    """Whether a size can hold the table: a draft without one token must still have a token of
    mass for each sibling drawn without replacement, a point-mass draft has one token for one child, and
    draft_apart needs a token beside its two, target_top_half one past its half, coarse_grid a third token (at
    V = 2 rows equal on one token are equal)."""
    if kind in ("draft_point_mass", "sparse_rows"):
        return widest <= 1
    if kind in SHAPED or kind in ("target_top_half", "coarse_grid"):
        return vocab >= 3  # at V = 2 the top half is a point mass (point_mass)
    return kind != "draft_misses_target" or vocab - 1 >= max(widest, 1)


def adversarial(base: Table, kind: str, seed: int) -> Table:
    """``base`` reshaped as ``kind`` says (module docstring), each row by choices seeded by its output."""
    return made(("adversarial", base, kind, seed), lambda: _reshaped(base, kind, seed))


def _reshaped(base: Table, kind: str, seed: int) -> Table:
    memo: dict[tuple[int, ...], tuple[Row, Row]] = {}

    def rows(output: tuple[int, ...]) -> tuple[Row, Row]:
        if output not in memo:
            rng = random.Random(f"{seed}:{kind}:{output}")
            position = len(output) - len(base.prompt)  # the row's place in a round from the prompt
            if kind == "repeated_target":  # the round's first row's target, this output's draft
                memo[output] = (base.p(base.prompt), base.q(output))
                return memo[output]
            # a kind made anew reads no row of the base (the seed's rows over a wide vocabulary cost)
            base_rows = ([0.0] * base.vocab,) * 2 if kind in MADE_ANEW else (base.p(output), base.q(output))
            memo[output] = reshape(kind, *base_rows, rng, position)
        return memo[output]

    p, q = (lambda o: rows(o)[0]), (lambda o: rows(o)[1])
    return Table(f"{kind} (seed {seed})", base.vocab, base.prompt, p, q, seed, kind)


def reshape(kind: str, p: Row, q: Row, rng: random.Random, position: int = 0) -> tuple[Row, Row]:
    """One output's rows (p, q) reshaped as ``kind`` (module docstring); ``position``: the row's place in a
    round (0: its first row; what some kinds reshape depends on it)."""
    v = len(p)
    if kind == "draft_misses_target":
        gone = rng.randrange(v)
        missing = [0.0 if x == gone else w for x, w in enumerate(q)]
        return p, _normalized(missing) if sum(missing) > 0 else q  # a point-mass draft (greedy) has no token to lose
    if kind == "near_ties":
        return p, _jittered(p, 1e-3, rng)
    if kind == "point_mass":
        top = rng.randrange(v)
        return [float(x == top) for x in range(v)], q
    if kind == "equal_rows":
        return p, list(p)
    if kind == "draft_point_mass":
        top = max(range(v), key=lambda x: (p[x], -x)) if position % 2 == 0 else rng.randrange(v)
        return p, [float(x == top) for x in range(v)]
    if kind == "coarse_grid":
        return _grid(v, rng)
    if kind == "target_top_half":
        kept = set(sorted(range(v), key=lambda x: (-p[x], rng.random()))[: (v + 1) // 2])
        flat = [1 / v] * v  # at every other position: a path that takes a flat draft row for no draft law
        return _normalized([w if x in kept else 0.0 for x, w in enumerate(p)]), (flat if position % 2 else q)
    if kind == "draft_far_below":
        p = [1 / v] * v if position else p  # flat from the second row on: rows that repeat, uniform ones
        low = set(rng.sample(range(v), max(1, v // 2)))
        small = [w * 1e-3 for w in p]
        rest = sum(w for x, w in enumerate(q) if x not in low)
        spare = 1 - sum(small[x] for x in low)
        if rest == 0:  # the draft's mass all in ``low`` (a greedy draft's point mass): the rest shared evenly
            return p, [small[x] if x in low else spare / (v - len(low)) for x in range(v)]
        return p, [small[x] if x in low else w * spare / rest for x, w in enumerate(q)]
    if kind == "equal_first_row":
        return p, list(p if position == 0 else q)
    if kind == "point_mass_first_row":  # the draft's point too: a round always goes on past it
        top = rng.choice([x for x in range(v) if q[x] > 0])
        point = [float(x == top) for x in range(v)]
        return (point, list(point)) if position == 0 else (p, q)
    if kind == "sparse_rows":
        return _sparse(v, rng, position)
    if kind == "draft_apart":
        return _apart(v, rng)
    if kind == "wide_draft":
        return _wide_draft(v, rng)
    if kind == "far_siblings":
        return _far_siblings(v, rng) if position == 0 else _sparse(v, rng, position)
    if kind == "deep_rows":
        return _deep(v, rng, position)
    if kind in SMALL_VALUES:
        return _small_values(kind, p, q, rng, position)
    raise ValueError(f"no adversarial table {kind!r}")


def _small_values(kind: str, p: Row, q: Row, rng: random.Random, position: int) -> tuple[Row, Row]:
    """One output's rows reshaped as a ``SMALL_VALUES`` kind (module docstring)."""
    v = len(p)
    if kind == "nearly_equal_rows":
        return p, _jittered(p, 1e-7, rng)
    if kind == "ratios_near_one":  # each weight moved by a relative 10^-u, u uniform in [8, 11], either way
        return p, _normalized([w * (1 + rng.choice((-1, 1)) * 10 ** -rng.uniform(8, 11)) for w in p])
    if kind == "nearly_point_mass":
        return _with(p, rng.randrange(v), 1 - 1e-7), q
    if kind == "draft_nearly_point_mass":
        return p, _with(q, rng.randrange(v), 1 - 1e-7)
    x, y = rng.sample(range(v), 2) if v > 2 else (rng.randrange(v), None)  # draft_nearly_misses (y: 10^-u)
    tiny = {} if y is None else {y: 10 ** -rng.uniform(10.3 if position == 0 else 6, 11)}  # below 5e-11 first
    return _with(p, x, 1e-6, {t: w * rng.uniform(0.1, 0.9) for t, w in tiny.items()}), _with(q, x, 1e-8, tiny)


def _apart(v: int, rng: random.Random) -> tuple[Row, Row]:
    """``draft_apart``'s rows over ``v`` tokens (made anew, v >= 3): two tokens drawn, the target's APART of mass
    on them split (s, 1 - s) with s drawn in [0.2, 0.4], the draft's 1 - DRAFT_ON_REST split (1 - s, s);
    the rest shared evenly."""
    pair, s = rng.sample(range(v), 2), rng.uniform(0.2, 0.4)
    target, draft = [(1 - APART) / (v - 2)] * v, [DRAFT_ON_REST / (v - 2)] * v
    for x, share in zip(pair, (s, 1 - s)):
        target[x], draft[x] = APART * share, (1 - DRAFT_ON_REST) * (1 - share)
    return target, draft


SPARSE_STEP = 29  # sparse_rows' draft token moves by this many a position: prime, so V = 65 meets no repeat


def _sparse(v: int, rng: random.Random, position: int) -> tuple[Row, Row]:
    """``sparse_rows``' rows over ``v`` tokens (made anew, v >= 2): the draft's point at token V - 1 - 29 i
    (mod V) at position i, the target's weight w there drawn in [0.25, 0.75] and 1 - w on one other token
    drawn."""
    point = (v - 1 - SPARSE_STEP * position) % v
    other, w = rng.choice([x for x in range(v) if x != point]), rng.uniform(0.25, 0.75)
    target = [0.0] * v
    target[point], target[other] = w, 1 - w
    return target, [float(x == point) for x in range(v)]


def _deep(v: int, rng: random.Random, position: int) -> tuple[Row, Row]:
    """``deep_rows``' rows over ``v`` tokens (made anew): below DEEP_FROM both one point mass drawn; from it on the
    target's weights drawn in [1, 2), the draft's a thousandth of the target's on half the tokens drawn and drawn
    in [1, 2) on the rest, each normalized (a refusal leaves the target's mass on at least that half)."""
    if position < DEEP_FROM:
        point = rng.randrange(v)
        row = [float(x == point) for x in range(v)]
        return row, list(row)
    target = _normalized([1 + rng.random() for _ in range(v)])
    low = set(rng.sample(range(v), v // 2))
    return target, _normalized([target[x] * 1e-3 if x in low else 1 + rng.random() for x in range(v)])


def _wide_draft(v: int, rng: random.Random) -> tuple[Row, Row]:
    """``wide_draft``'s rows over ``v`` tokens (made anew, v >= 3): the draft's weight on every token, each drawn
    in [1, 2) (none equal); the target's on three, drawn in [0.2, 1) and normalized: the draft's likeliest and two
    of its least likely half (below its 32 likeliest where v > 64)."""
    draft = _normalized([1 + rng.random() for _ in range(v)])
    ranked = sorted(range(v), key=lambda x: -draft[x])
    chosen = [ranked[0], *rng.sample(ranked[(v + 1) // 2 :], min(2, v // 2))]
    target = [0.0] * v
    for x in chosen:
        target[x] = rng.uniform(0.2, 1.0)
    return _normalized(target), draft


# far_siblings' first row: token -> (the target's weight, the draft's), each within 5% drawn (5 V / 8 and V - 1
# stand for the ids past 32 and 64)
FAR_SIBLINGS = {"0": (0.1, 0.0), "1": (0.4, 0.3), "5V/8": (0.4, 0.3), "V-1": (0.1, 0.4)}


def _far_siblings(v: int, rng: random.Random) -> tuple[Row, Row]:
    """``far_siblings``' first row over ``v`` tokens (made anew, v >= 4): FAR_SIBLINGS' weights. The draft's token
    V - 1 alone is ever refused (the target is above the draft on 1 and 5 V / 8), and what its refusal leaves,
    p' a third on each of 0, 1 and 5 V / 8, q' a half on each of 1 and 5 V / 8, tests a second child at 2 / 3: a
    q' left with V - 1 in it, or renormalized by another total, moves that test."""
    ids = {"0": 0, "1": 1, "5V/8": v * 5 // 8, "V-1": v - 1}
    target, draft = [0.0] * v, [0.0] * v
    for name, (p_x, q_x) in FAR_SIBLINGS.items():
        target[ids[name]] = p_x * rng.uniform(0.95, 1.05)
        draft[ids[name]] = q_x * rng.uniform(0.95, 1.05)
    return _normalized(target), _normalized(draft)


def _grid(v: int, rng: random.Random) -> tuple[Row, Row]:
    """``coarse_grid``'s rows over ``v`` tokens (made anew): the draft T units (T the power of two at or above
    4 v), at least one on each token; the target the draft's with 1 to v moves of one unit from a token that
    has one to another (more where they undo each other)."""
    units = 1 << (4 * v - 1).bit_length()
    cuts = sorted(rng.sample(range(1, units), v - 1))
    draft = [b - a for a, b in zip([0, *cuts], [*cuts, units])]
    target, moves = list(draft), rng.randint(1, v)
    while moves > 0 or target == draft:  # moves that undo each other: one more
        src = rng.choice([x for x in range(v) if target[x] > 0])
        target[src] -= 1
        target[rng.choice([x for x in range(v) if x != src])] += 1
        moves -= 1
    return [w / units for w in target], [w / units for w in draft]


def _with(row: Row, x: int, w: float, more: dict[int, float] | None = None) -> Row:
    """``row`` with x at weight w (and ``more``'s at theirs), the rest scaled to what is left (evenly where none)."""
    at = {x: w, **(more or {})}
    rest, left, others = sum(r for t, r in enumerate(row) if t not in at), 1 - sum(at.values()), len(row) - len(at)
    return [at[t] if t in at else left * (r / rest if rest else 1 / others) for t, r in enumerate(row)]


def _jittered(row: Row, by: float, rng: random.Random) -> Row:
    """``row`` with each weight moved by a relative amount drawn in [-by, by], normalized (a draft close to
    the target: near_ties at 1e-3, nearly_equal_rows at 1e-7)."""
    return _normalized([w * (1 + by * rng.uniform(-1, 1)) for w in row])


def _normalized(row: Row) -> Row:
    total = sum(row)
    return [x / total for x in row]


def search_tables(build_rig, vocab: int, depth: int, widest: int, seeds) -> list[Table]:
    """The tables a smallest-counterexample search tries at one size, in order: each seed's
    (``build_rig(vocab, depth, seed)``), then the adversarial and shaped ones the size holds and those of
    small values, made from the first seed's."""
    seeded_ = [as_table(build_rig(vocab, depth, seed), f"seed {seed}", seed) for seed in seeds]
    kinds = [kind for kind in {**ADVERSARIAL, **SHAPED} if holds(kind, vocab, widest)] + list(SMALL_VALUES)
    return seeded_ + [adversarial(seeded_[0], kind, min(seeds)) for kind in kinds]


class DyadicTables:
    """Seeded rows whose probabilities are multiples of 1/32: exact in floats and in Fractions."""

    def __init__(self, vocab: int, seed: int):
        self.vocab, self.seed = vocab, seed
        self._rows: dict = {}

    def _row(self, kind: str, output: tuple[int, ...]) -> list[Fraction]:
        key = (kind, output)
        if key not in self._rows:
            rng = random.Random(f"{self.seed}:{kind}:{output}")
            cuts = sorted(rng.randint(0, 32) for _ in range(self.vocab - 1))
            parts = [b - a for a, b in zip([0, *cuts], [*cuts, 32])]
            self._rows[key] = [Fraction(x, 32) for x in parts]
        return self._rows[key]

    def p(self, output):
        return self._row("p", output)

    def q(self, output):
        return self._row("q", output)
