"""The uniforms a tree sampler reads (``verify-oracle --sampler --tree``): a stream the oracle controls.

A round's uniforms are independent, each uniform on [0, 1), one per key: ``u.node(n)`` is node n's
(n = -1: the root's, for a rule that draws one per expansion), ``u.terminal()`` the terminal
token's, ``u.uniform(key)`` any other (a hashable key; the same key, the same uniform). A sampler
sees a uniform only through comparisons with a number (``U < x``, ``U <= x``, ``U > x``, ``U >= x``,
x a float, int, Fraction or one-element tensor; also after scaling and shifting it, ``a * U + b < x``)
and through ``u.draw(row)``, the inverse-CDF draw of a token from a row of weights at the terminal
uniform (or at ``key``).

Why this makes the oracle's integration exact: the stream sees every comparison. Where a threshold
falls inside the interval a uniform is so far known to lie in, the stream takes one side and the
explorer (``explore``) runs the sampler again with the other side forced, until every side of every
comparison it reached has been run. Each run ends in one outcome whose uniforms lie in a box of
known intervals, and the box's volume is that outcome's exact probability, whatever thresholds the
sampler computes and however often it compares one uniform (SGLang's coin against cumulative sums
is one uniform, several thresholds). A boundary has probability 0, so ``<`` and ``<=`` integrate
alike; ``float(U)`` is refused (a uniform used as a number could be used in any way).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from fractions import Fraction

import torch

from specd.errors import SamplerFailed, SamplerNondeterministic, UniformAsNumber

MAX_OUTCOMES = 20_000  # runs of the sampler on one round: past this it compares without end
_ZERO, _ONE = Fraction(0), Fraction(1)
_UNIT = (_ZERO, _ONE)


def _exact(x, what: str = "a uniform is compared with") -> Fraction | float:
    """A comparison's other side as a Fraction, or one of the floats inf, -inf, nan."""
    if isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise TypeError(f"{what} one number, not a tensor of shape {tuple(x.shape)}")
        x = x.item()
    if isinstance(x, Fraction):
        return x
    if isinstance(x, (bool, int, float)):
        return Fraction(x) if math.isfinite(x) else float(x)
    raise TypeError(f"{what} a number, not {type(x).__name__}")


def _integer_row(row) -> tuple[list[int], int]:
    """A draw's row of weights (a sequence or a 1-D tensor) as integers over their common denominator
    -> (the integers, the denominator), or ValueError where they are not finite, non-negative and of
    positive sum."""
    ratios = []
    for w in row.tolist() if isinstance(row, torch.Tensor) else row:
        if type(w) is float and math.isfinite(w):
            ratios.append(w.as_integer_ratio())
            continue
        x = _exact(w, "a draw's row holds")
        if isinstance(x, float):
            raise ValueError("u.draw takes a row of finite, non-negative weights with a positive sum")
        ratios.append((x.numerator, x.denominator))
    common = math.lcm(*(d for _, d in ratios)) if ratios else 1
    nums = [n * (common // d) for n, d in ratios]
    if any(n < 0 for n in nums) or sum(nums) <= 0:
        raise ValueError("u.draw takes a row of finite, non-negative weights with a positive sum")
    return nums, common


_HITS: dict = {}  # a draw's answer by its row and cell: a sampler's replays of a round draw alike many times


def _row_key(plain: list) -> tuple | None:
    """A draw's row as a key of its exact values: a float or an int as it is, a Fraction as its (numerator,
    denominator), not hashed itself (a modular inverse); None for a row of anything else (an object hashed by
    identity could recur with another value)."""
    key = []
    for w in plain:
        kind = type(w)
        if kind is float or kind is int:
            key.append(w)
        elif kind is Fraction:
            key.append((w.numerator, w.denominator))
        else:
            return None
    return tuple(key)


def _hits(row, lo: Fraction | float, hi: Fraction | float) -> tuple[tuple[int, ...], int, list[tuple]]:
    """The tokens a draw from ``row`` can give where its uniform lies in [lo, hi): -> (the row's integer
    weights, their denominator, [(a token whose interval meets the cell, the cell left if it is drawn, its
    ends as floats)])."""
    plain = row.tolist() if isinstance(row, torch.Tensor) else list(row)
    (lo_num, lo_den), (hi_num, hi_den) = lo.as_integer_ratio(), hi.as_integer_ratio()
    # the cell in the key as integers, not as its ends: a Fraction's hash costs a modular inverse
    cell = () if lo is _ZERO and hi is _ONE else (lo_num, lo_den, hi_num, hi_den)
    row_key = _row_key(plain)
    key = None if row_key is None else (row_key, *cell)
    if key is not None and key in _HITS:
        return _HITS[key]
    ints, common = _integer_row(plain)
    total, below, hits = sum(ints), 0, []
    for token, w in enumerate(ints):
        # token's interval [below, below + w) / total meets the cell [lo, hi)
        if w > 0 and below * hi_den < hi_num * total and (below + w) * lo_den > lo_num * total:
            cell = (max(Fraction(below, total), lo), min(Fraction(below + w, total), hi))
            hits.append((token, cell, (float(cell[0]), float(cell[1]))))
        below += w
    out = (tuple(ints), common, hits)
    if key is not None:
        if len(_HITS) > 4096:
            _HITS.clear()
        _HITS[key] = out
    return out


class Uniform:
    """One uniform of a round, scaled and shifted (``scale * U + shift``), seen only through
    comparisons (module docstring)."""

    __slots__ = ("_stream", "_key", "_scale", "_shift", "_plain")

    def __init__(self, stream: Uniforms, key: Hashable, scale: Fraction = _ONE, shift: Fraction = _ZERO):
        self._stream, self._key, self._scale, self._shift = stream, key, scale, shift
        self._plain = scale is _ONE and shift is _ZERO  # U itself: compared without scaling

    def _less(self, x) -> bool:
        """scale * U + shift < x (or <=: the boundary has probability 0)."""
        if self._plain:  # the common cases, without building a Fraction
            if type(x) is float and math.isfinite(x):
                return self._stream.below_float(self._key, x)
            if type(x) is Fraction:
                return self._stream.below(self._key, x)
        t = _exact(x)
        if isinstance(t, float):  # nan: every comparison false, as in IEEE arithmetic
            return t == math.inf
        cut = t if self._scale == 1 and self._shift == 0 else (t - self._shift) / self._scale
        below = self._stream.below(self._key, cut)
        return below if self._scale > 0 else not below

    def _greater(self, x) -> bool:
        t = _exact(x)
        if isinstance(t, float):
            return t == -math.inf
        return not self._less(t)

    __lt__ = __le__ = _less
    __gt__ = __ge__ = _greater

    def _affine(self, scale, shift) -> Uniform | Fraction:
        return Uniform(self._stream, self._key, scale, shift) if scale != 0 else shift

    def _factor(self, c) -> Fraction:
        f = _exact(c, "a uniform is scaled by")
        if isinstance(f, float):
            raise TypeError("a uniform is scaled by a finite number")
        return f

    def __mul__(self, c):
        f = self._factor(c)
        return self._affine(self._scale * f, self._shift * f)

    __rmul__ = __mul__

    def __truediv__(self, c):
        f = self._factor(c)
        if f == 0:
            raise ZeroDivisionError("a uniform divided by 0")
        return self._affine(self._scale / f, self._shift / f)

    def __add__(self, c):
        return self._affine(self._scale, self._shift + self._factor(c))

    __radd__ = __add__

    def __sub__(self, c):
        return self._affine(self._scale, self._shift - self._factor(c))

    def __rsub__(self, c):
        return self._affine(-self._scale, self._factor(c) - self._shift)

    def __neg__(self):
        return self._affine(-self._scale, -self._shift)

    def _as_number(self, *_):
        raise UniformAsNumber(
            f"uniform {self._key!r} used as a number: compare it (U < x) or draw with it (u.draw(row)); the oracle "
            "integrates over where it falls"
        )

    __float__ = __int__ = __index__ = __bool__ = __array__ = item = tolist = _as_number

    def __repr__(self) -> str:
        return f"Uniform({self._key!r})"


class Uniforms:
    """A round's uniforms for one run of the sampler: each read uniform's interval so far, and the
    undecided points it reached (``points``: (what was asked, how many sides, the side taken)).
    ``forced``: the sides to take at the first points, and ``asked`` what was asked there before
    (a run that asks something else there is nondeterministic)."""

    def __init__(self, forced: Sequence[int] = (), asked: Sequence[tuple] = ()):
        self._forced, self._asked = forced, asked
        # each read uniform's cell, its ends exact: a Fraction, or a float (exactly its dyadic value)
        self._cells: dict[Hashable, tuple[Fraction | float, Fraction | float]] = {}
        self._floats: dict[Hashable, tuple[float, float]] = {}  # each cell's ends rounded to floats
        self.points: list[tuple[tuple, int, int]] = []
        self.reads: list[Hashable] = []

    def uniform(self, key: Hashable) -> Uniform:
        hash(key)  # a key must be hashable (TypeError otherwise)
        if key not in self._cells:
            self._cells[key], self._floats[key] = _UNIT, (0.0, 1.0)
            self.reads.append(key)
        return Uniform(self, key)

    def node(self, n) -> Uniform:
        """Node n's uniform (-1: the root's)."""
        return self.uniform(("node", int(n)))

    def terminal(self) -> Uniform:
        return self.uniform("terminal")

    def below(self, key: Hashable, cut: Fraction) -> bool:
        """U_key < cut."""
        if cut.denominator < 1 << 53 and abs(cut.numerator) < 1 << 53:  # a float's rounding is cheap: try it
            return self.below_float(key, cut.numerator / cut.denominator, cut)
        return self._below(key, cut)

    def _below(self, key: Hashable, cut: Fraction) -> bool:
        lo, hi = self._cells[key]
        if cut <= lo:
            return False
        if cut >= hi:
            return True
        return self._split(key, lo, cut, hi)

    def below_float(self, key: Hashable, cut: float, exact: Fraction | None = None) -> bool:
        """U_key < ``exact`` (default: the finite float ``cut``; else ``cut`` is ``exact`` rounded),
        decided on floats where that is exact: rounding is monotone, so cut < float(lo) means
        exact < lo, cut > float(hi) means exact > hi, and strictly between them means strictly
        inside; at a tie, the Fractions decide."""
        flo, fhi = self._floats[key]
        if cut < flo:
            return False
        if cut > fhi:
            return True
        if flo < cut < fhi:
            lo, hi = self._cells[key]
            end = cut if exact is None else exact  # a float is exactly its dyadic value: no Fraction made
            below = self._choose(("below", key, cut), 2) == 0  # asked: the float, cheaper to compare on replays
            self._cells[key], self._floats[key] = ((lo, end), (flo, cut)) if below else ((end, hi), (cut, fhi))
            return below
        return self._below(key, Fraction(cut) if exact is None else exact)

    def _split(self, key: Hashable, lo: Fraction | float, cut: Fraction, hi: Fraction | float) -> bool:
        """lo < cut < hi: a point with two sides, U_key below cut or not."""
        side = self._choose(("below", key, cut), 2)
        self._set(key, (lo, cut) if side == 0 else (cut, hi))
        return side == 0

    def _set(self, key: Hashable, cell: tuple[Fraction | float, Fraction | float]) -> None:
        self._cells[key], self._floats[key] = cell, (float(cell[0]), float(cell[1]))

    def draw(self, row, key: Hashable = "terminal") -> int:
        """The token whose interval of the inverse CDF of ``row`` (weights, any scale; a sequence or a
        1-D tensor) holds U_key: the first token whose cumulative weight exceeds U_key * total. Decided
        in integers: the weights over their common denominator, so every sum is exact and cheap."""
        nums, common, hits = _hits(row, *self._cells.get(key, _UNIT))  # a row that is none raises first
        self.uniform(key)
        side = self._choose(("draw", key, nums, common), len(hits)) if len(hits) > 1 else 0
        token, self._cells[key], self._floats[key] = hits[side]
        return token

    def _choose(self, asked: tuple, sides: int) -> int:
        i = len(self.points)
        if i < len(self._forced):
            if self._asked[i] != asked:
                raise SamplerNondeterministic(
                    f"the sampler is not a function of its uniforms: run again on the same uniforms it asked "
                    f"{asked[:2]} where it had asked {self._asked[i][:2]}"
                )
            side = self._forced[i]
        else:
            side = 0
        self.points.append((asked, sides, side))
        return side

    def mass(self) -> Fraction:
        """The probability of the box of uniforms this run's outcome holds on."""
        return Fraction(*self._mass())

    def mass_float(self) -> float:
        """``float(self.mass())``, without the Fraction: int / int is rounded correctly, as float() is."""
        num, den = self._mass()
        return num / den

    def _mass(self) -> tuple[int, int]:
        num, den = 1, 1  # the product of the widths hi - lo, in integers
        for lo, hi in self._cells.values():
            if lo is not _ZERO or hi is not _ONE:  # a uniform read but never compared: width 1
                (lo_num, lo_den), (hi_num, hi_den) = lo.as_integer_ratio(), hi.as_integer_ratio()
                num *= hi_num * lo_den - lo_num * hi_den
                den *= hi_den * lo_den
        return num, den


def explore(
    run: Callable[[Uniforms], object], limit: int = MAX_OUTCOMES, exact: bool = True
) -> list[tuple[object, Fraction | float, Uniforms]]:
    """Every outcome of ``run`` (one call of the sampler on one round, given its stream) over the
    round's uniforms -> [(what it returned, its exact probability, the run's stream)], the
    probabilities summing to 1 (``exact`` False: each probability rounded to a float). Raises
    SamplerFailed when the sampler does not retrace its own decisions (randomness of its own) or
    reaches more than ``limit`` outcomes."""
    pending: list[tuple[tuple[int, ...], tuple[tuple, ...]]] = [((), ())]
    out = []
    while pending:
        forced, asked = pending.pop()
        stream = Uniforms(forced, asked)
        result = run(stream)
        if len(stream.points) < len(forced):
            raise SamplerNondeterministic(
                "the sampler is not a function of its uniforms: run again on the same uniforms it stopped before a "
                "comparison it had made"
            )
        points = stream.points
        for i in range(len(forced), len(points)):
            taken = tuple(side for _, _, side in points[:i])
            seen = tuple(a for a, _, _ in points[: i + 1])
            pending.extend((taken + (alt,), seen) for alt in range(1, points[i][1]))
        out.append((result, stream.mass() if exact else stream.mass_float(), stream))
        if len(out) > limit:
            raise SamplerFailed(
                f"the sampler reached more than {limit} outcomes on one round (it compares its uniforms without end)",
                "too_many_outcomes",
            )
    return out


class ConcreteUniforms:
    """The same stream with real uniforms (seeded Monte Carlo): each key's uniform drawn once from
    ``rng`` (a random.Random) on first read; comparisons and draws are ordinary."""

    def __init__(self, rng):
        self._rng = rng
        self._values: dict[Hashable, float] = {}

    def uniform(self, key: Hashable) -> float:
        if key not in self._values:
            self._values[key] = self._rng.random()
        return self._values[key]

    def node(self, n) -> float:
        return self.uniform(("node", int(n)))

    def terminal(self) -> float:
        return self.uniform("terminal")

    def draw(self, row, key: Hashable = "terminal") -> int:
        weights = row.tolist() if isinstance(row, torch.Tensor) else list(row)
        target, below = self.uniform(key) * sum(weights), 0.0
        for token, w in enumerate(weights):
            below += w
            if w > 0 and below > target:
                return token
        return max(t for t, w in enumerate(weights) if w > 0)
