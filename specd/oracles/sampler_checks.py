"""The checks any sampler under test is put through (``verify-oracle --sampler``).

- ``exact_joint``: one round over seeded tables (the fixture's target and draft
  rows), enumerated cell by cell as in ``specd.oracles.exact``: every draft path,
  every first rejection or all accepted, every terminal token (or the sampler's
  own terminal distribution), each cell at its centre and just inside both ends;
  the emitted block, completed by the target chain, must have the target's joint
  (float64, 1e-12).
- ``exact_rational``: the same on dyadic tables (probabilities k / 32, exact in
  floats), every mass in Fraction arithmetic: the difference must be exactly 0.
  Only for samplers that return tokens (a returned distribution has rounding).
- ``dtype_edges``: each decision at adversarial uniforms (0, the smallest positive,
  just below 1, the float32, bfloat16 and float16 roundings of p/q and the stream
  uniforms on both sides of the exact boundary), with rows passed as float64,
  float32, bfloat16 and float16 tensors (multiples of 1/256 summing to exactly 1,
  so every dtype holds the same distribution exactly), against the rule in exact
  (Fraction) arithmetic.
- degenerate cases, one check each: an impossible draft (q(d) = 0), a draft the
  target never emits (p(d) = 0), p == q, disjoint supports, a row with no drafts,
  and a batch of rows with different K.

A failing check names what it found (``findings``) and gives a minimal
counterexample: the smallest (V, K) where it fails, the rows on the path, the
uniforms, what the rule does and what the sampler did, and the mass that moved.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from fractions import Fraction

import torch

from specd.core.sampler import first_index_above
from specd.errors import SamplerFailed
from specd.oracles.exact import PROBES, Reference, max_abs_diff, probe
from specd.oracles.samplers import SamplerResult, SamplerUnderTest

EXACT_TOLERANCE = 1e-12
TWO53 = 2**53
U_MAX = 1 - 2.0**-53  # the largest uniform the streams produce
UNUSED = 0.0


@dataclass
class SamplerCheck:
    name: str
    passed: bool | None  # None: not applicable to this sampler
    figures: dict
    detail: str = ""
    findings: list[str] = field(default_factory=list)
    counterexample: dict | None = None


@dataclass(frozen=True)
class Call:
    """One row of a call to the sampler, with the rule's own outcome for it."""

    p: list[list[float]]  # K+1 rows
    q: list[list[float]]  # K rows
    drafts: tuple[int, ...]
    accept_u: tuple[float, ...]
    terminal_u: float
    mass: object  # float or Fraction
    accepted: int  # what the rule accepts
    terminal: int | None  # the rule's terminal token at terminal_u (None when the sampler gives rows)
    law: list  # the rule's terminal distribution (normalized)


def call_batch(
    sampler: SamplerUnderTest, calls: list[Call], dtype: torch.dtype = torch.float64
) -> tuple[list[SamplerResult], bool]:
    """Every call in one batch (calls share K), rows in ``dtype``; if the sampler refuses a batch,
    one call each. -> (a result per call, whether the batch was refused)."""
    try:
        return _split(sampler(*_tensors(calls, dtype)), len(calls)), False
    except SamplerFailed:  # a sampler that cannot batch is called row by row
        if len(calls) == 1:
            raise
    return [sampler(*_tensors([c], dtype)) for c in calls], True


def _tensors(calls: list[Call], dtype: torch.dtype = torch.float64):
    k = len(calls[0].drafts)
    p = torch.tensor([c.p for c in calls], dtype=dtype)
    q = torch.tensor([c.q for c in calls], dtype=dtype).reshape(len(calls), k, p.shape[-1])
    drafts = torch.tensor([c.drafts for c in calls], dtype=torch.int64).reshape(len(calls), k)
    k_lens = torch.full((len(calls),), k, dtype=torch.int64)
    accept_u = torch.tensor([c.accept_u for c in calls], dtype=torch.float64).reshape(len(calls), k)
    terminal_u = torch.tensor([c.terminal_u for c in calls], dtype=torch.float64)
    return p, q, drafts, k_lens, accept_u, terminal_u


def _split(result: SamplerResult, n: int) -> list[SamplerResult]:
    rows = result.terminal_rows
    return [
        SamplerResult(
            [result.accepted[i]],
            None if result.terminal is None else [result.terminal[i]],
            None if rows is None else rows[i : i + 1],
        )
        for i in range(n)
    ]


def returns_tokens(sampler: SamplerUnderTest) -> bool:
    """Does the sampler return tokens (rather than distributions)? Asked on one ordinary call."""
    p = [[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]]
    call = Call(p, [[0.2, 0.5, 0.3]], (1,), (0.9,), 0.5, 1.0, 0, 2, [0.5, 0.0, 0.5])
    return sampler(*_tensors([call])).terminal is not None


# -- rows of a fixture ----------------------------------------------------------------------
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


def _target_joint(rows, prompt: tuple[int, ...], horizon: int) -> dict:
    out = {}

    def walk(seq, mass):
        if len(seq) == horizon:
            out[seq] = out.get(seq, 0) + mass
            return
        for x, px in enumerate(rows.p(prompt + seq)):
            if px > 0:
                walk(seq + (x,), mass * px)

    walk((), 1)
    return out


# -- the exact joint of one round --------------------------------------------------------------
def round_calls(rows, prompt, vocab: int, k: int, tokens: bool, exact: bool) -> list[Call]:
    """Every cell of one round with k drafts, at each probe: the calls that integrate the rule."""
    as_number = Fraction if exact else float
    paths = [((), as_number(1))]
    for _ in range(k):
        paths = [
            (path + (x,), mass * as_number(qx))
            for path, mass in paths
            for x, qx in enumerate(rows.q(prompt + path))
            if qx > 0
        ]
    nodes: dict = {}
    for path, _ in paths:  # (path through the first rejection, a full path through it)
        for j in range(1, k + 1):
            nodes.setdefault(path[:j], path)
    cells = [(node, full, True) for node, full in nodes.items()] + [(path, path, False) for path, _ in paths]
    calls = []
    for node, full, rejected in cells:
        p_rows = [[float(x) for x in rows.p(prompt + full[:i])] for i in range(k + 1)]
        q_rows = [[float(x) for x in rows.q(prompt + full[:i])] for i in range(k)]
        accepted = len(node) - 1 if rejected else len(node)
        mass, intervals = as_number(1), []
        for i, d in enumerate(node):
            qi = rows.q(prompt + node[:i])
            mass *= as_number(qi[d])
            pd, qd = as_number(rows.p(prompt + node[:i])[d]), as_number(qi[d])
            r = min(as_number(1), pd / qd)
            intervals.append((0, r) if i < accepted else (r, 1))
            mass *= r if i < accepted else 1 - r
        if mass <= 0:
            continue
        p_next = [as_number(x) for x in rows.p(prompt + node[:accepted])]
        if rejected:
            q_rej = rows.q(prompt + node[:accepted])
            law = [max(as_number(0), a - as_number(b)) for a, b in zip(p_next, q_rej)]
        else:
            law = p_next
        total = sum(law)
        law = [x / total for x in law]
        terminal_cells = _law_cells(law) if tokens else [(None, 0, 1)]
        for token, lo, hi in terminal_cells:
            for where in PROBES:
                accept_u = tuple(_probe(lo_i, hi_i, where) for lo_i, hi_i in intervals) + (UNUSED,) * (k - len(node))
                calls.append(
                    Call(
                        p_rows,
                        q_rows,
                        full,
                        accept_u,
                        _probe(lo, hi, where) if token is not None else 0.5,
                        mass * (hi - lo) / len(PROBES),
                        accepted,
                        token,
                        law,
                    )
                )
    return calls


def _law_cells(law: list) -> list[tuple[int, object, object]]:
    out, below = [], 0
    for x, m in enumerate(law):
        if m > 0:
            out.append((x, below, below + m))
        below += m
    return out


def _probe(lo, hi, where: str) -> float:
    """A float uniform inside [lo, hi) (Fraction or float ends) at the probe ``where``."""
    if isinstance(lo, Fraction) or isinstance(hi, Fraction):
        width = Fraction(hi) - Fraction(lo)
        if where == "centre":
            point = Fraction(lo) + width / 2
        else:
            margin = min(width / 4, max(width * Fraction(1, 10**6), Fraction(1, 10**13)))
            point = Fraction(lo) + margin if where == "left" else Fraction(hi) - margin
        return float(point)
    return probe(float(lo), float(hi), where)


def sampler_joint(sampler, rows, prompt, vocab: int, k: int, tokens: bool, exact: bool = False):
    """-> (joint over k + 1 tokens, [(call, result)] where the sampler's outcome is not the rule's, batch refused)."""
    calls = round_calls(rows, prompt, vocab, k, tokens, exact)
    results, refused = call_batch(sampler, calls)
    horizon = k + 1
    joint: dict = {}
    memo: dict = {}
    mismatches = []

    def complete(prefix, mass):
        rest = horizon - len(prefix)
        if rest <= 0:
            joint[prefix[:horizon]] = joint.get(prefix[:horizon], 0) + mass
            return
        if prefix not in memo:
            memo[prefix] = _target_joint(rows, prompt + prefix, rest)
        for tail, m in memo[prefix].items():
            joint[prefix + tail] = joint.get(prefix + tail, 0) + mass * m

    for call, result in zip(calls, results):
        a = int(result.accepted[0])
        if not 0 <= a <= k:
            mismatches.append((call, result))
            continue
        head = call.drafts[:a]
        if result.terminal is not None:
            token = int(result.terminal[0])
            if (a, token) != (call.accepted, call.terminal):
                mismatches.append((call, result))
            complete(head + (token,), call.mass)
        else:
            row = result.terminal_rows[0].tolist()
            law = [float(x) for x in call.law]
            if a != call.accepted or max(abs(x - y) for x, y in zip(row, law)) > 1e-9:
                mismatches.append((call, result))
            for x, px in enumerate(row):
                if px > 0:
                    complete(head + (x,), call.mass * (Fraction(px) if exact else px))
    return joint, mismatches, refused


def check_exact(sampler: SamplerUnderTest, rig, k: int, tokens: bool) -> SamplerCheck:
    ref = Reference(rig)
    joint, mismatches, refused = sampler_joint(sampler, ref, rig.prompt, rig.vocab, k, tokens)
    target = _target_joint(ref, rig.prompt, k + 1)
    diff = max_abs_diff(target, joint)
    mass = sum(joint.values())
    passed = diff <= EXACT_TOLERANCE and abs(mass - 1) <= EXACT_TOLERANCE
    check = SamplerCheck(
        "exact_joint",
        passed,
        {
            "vocab": rig.vocab,
            "k": k,
            "max_abs_diff": diff,
            "tolerance": EXACT_TOLERANCE,
            "total_mass": mass,
            "cells_where_the_outcome_is_not_the_rule's": len(mismatches),
        },
        "one round over the fixture's tables, each cell at three points"
        + ("; the sampler refused a batch and was called row by row" if refused else ""),
    )
    if not passed:
        check.findings.append("not_exact")
    return check


def check_rational(sampler: SamplerUnderTest, vocab: int, k: int, seed: int, tokens: bool) -> SamplerCheck:
    if not tokens:
        return SamplerCheck(
            "exact_rational",
            None,
            {},
            "not applicable: the sampler returns distributions (float rows), not tokens drawn with a uniform",
        )
    rows = DyadicTables(vocab, seed)
    prompt = (0,)
    joint, mismatches, _ = sampler_joint(sampler, rows, prompt, vocab, k, tokens, exact=True)
    target = _target_joint(rows, prompt, k + 1)
    diff = max((abs(target.get(s, 0) - joint.get(s, 0)) for s in set(target) | set(joint)), default=Fraction(0))
    return SamplerCheck(
        "exact_rational",
        diff == 0,
        {"vocab": vocab, "k": k, "difference": str(diff), "cells_where_the_outcome_is_not_the_rule's": len(mismatches)},
        "dyadic tables (k / 32), every mass a Fraction",
        [] if diff == 0 else ["not_exact_in_rational_arithmetic"],
    )


# -- dtype edges -------------------------------------------------------------------------------
EDGE_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def _dyadic(*weights: int) -> list[float]:
    """A row of multiples of 1/256 summing to exactly 1: exact in float64, float32, bfloat16 and float16."""
    assert sum(weights) == 256
    return [w / 256 for w in weights]


# (p_1, p_2, q_1, draft): an ordinary ratio 13/51, a sure accept (p(d) = q(d)), a ratio above 1
EDGE_ROWS = (
    (_dyadic(26, 179, 50, 1, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(102, 90, 38, 26, 0), 0),
    (_dyadic(26, 179, 50, 1, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(51, 179, 13, 13, 0), 1),
    (_dyadic(26, 179, 50, 1, 0), _dyadic(1, 1, 254, 0, 0), _dyadic(100, 100, 38, 18, 0), 2),
)


def grid_neighbours(x: Fraction) -> list[float]:
    """The stream uniforms (multiples of 2^-53 in [0, 1)) just below and at or above x."""
    below = (x * TWO53).__ceil__() - 1
    return [float(Fraction(n, TWO53)) for n in (below, below + 1) if 0 <= n < TWO53]


def acceptance_uniforms(ratio: Fraction) -> list[float]:
    """Adversarial acceptance uniforms for an exact ratio p/q."""
    points = {0.0, 2.0**-53, 0.5, U_MAX, 1 - 2.0**-25, 1 - 2.0**-26, 1 - 2.0**-30}
    points.update(grid_neighbours(min(ratio, Fraction(1))))
    for dtype in (torch.float32, torch.bfloat16, torch.float16):  # where a low-precision ratio lands
        rounded = Fraction(torch.tensor(float(ratio)).to(dtype).item())
        points.update(grid_neighbours(rounded))
    return sorted(u for u in points if 0 <= u < 1)


def check_dtype_edges(sampler: SamplerUnderTest, tokens: bool) -> SamplerCheck:
    """Each decision at adversarial uniforms, rows in four dtypes, against the exact rule."""
    cases = []  # (what, dtype, call)
    for dtype in EDGE_DTYPES:
        name = str(dtype).removeprefix("torch.")
        for p1, p2, q1, d in EDGE_ROWS:
            ratio = min(Fraction(1), Fraction(p1[d]) / Fraction(q1[d]))
            residual = [max(Fraction(0), Fraction(a) - Fraction(b)) for a, b in zip(p1, q1)]
            # every acceptance edge with a middling terminal uniform, then every terminal edge in both
            # branches (U = 0 accepts whenever the ratio is positive, the largest U rejects unless it is 1)
            pairs = [(u, None) for u in acceptance_uniforms(ratio)] + [(u, "edges") for u in (0.0, U_MAX)]
            for u, terminal in pairs:
                accepted = 1 if Fraction(u) < ratio else 0
                law = residual if accepted == 0 else [Fraction(x) for x in p2]
                total = sum(law)
                law = [x / total for x in law]
                for t in terminal_uniforms(law) if (terminal and tokens) else [0.5]:
                    token = _exact_token(law, t) if tokens else None
                    call = Call([p1, p2], [q1], (d,), (u,), t, 1, accepted, token, law)
                    cases.append((f"{name} rows, ratio {float(ratio):.6g}", dtype, call))
    failures, inconclusive = [], 0
    results = []
    for dtype in EDGE_DTYPES:
        results += call_batch(sampler, [c for _, dt, c in cases if dt is dtype], dtype)[0]
    slack = Fraction(sampler.input_rounding)
    for (what, _, call), result in zip(cases, results):
        got_token = None if result.terminal is None else int(result.terminal[0])
        ratio = _ratio(call)
        wrong = int(result.accepted[0]) != call.accepted or (tokens and got_token != call.terminal)
        if not tokens and not wrong:
            wrong = max(abs(x - float(y)) for x, y in zip(result.terminal_rows[0].tolist(), call.law)) > 1e-12
        if wrong and slack and abs(Fraction(call.accept_u[0]) - ratio) <= slack * max(ratio, Fraction(1, 10**300)):
            inconclusive += 1  # within the rounding of the sampler's own inputs
            continue
        if wrong:
            failures.append(
                {
                    "case": what,
                    "p_row": call.p[0],
                    "q_row": call.q[0],
                    "draft": call.drafts[0],
                    "acceptance_uniform": call.accept_u[0],
                    "exact_ratio": float(ratio),
                    "terminal_uniform": call.terminal_u,
                    "rule": {"accepted": call.accepted, "terminal": call.terminal},
                    "sampler": {"accepted": int(result.accepted[0]), "terminal": got_token},
                }
            )
    check = SamplerCheck(
        "dtype_edges",
        not failures,
        {
            "decisions": len(cases),
            "wrong": len(failures),
            "inconclusive": inconclusive,
            "dtypes": [str(d).removeprefix("torch.") for d in EDGE_DTYPES],
        },
        "adversarial uniforms and rows in four dtypes vs the rule in exact (Fraction) arithmetic"
        + (
            f"; {inconclusive} decisions within the rounding of the sampler's inputs ({float(slack):g}) are not counted"
            if inconclusive
            else ""
        ),
    )
    if failures:
        at_ratio = any(
            f["sampler"]["accepted"] and Fraction(f["acceptance_uniform"]) == Fraction(f["exact_ratio"])
            for f in failures
        )
        check.findings.append("accepts_u_equal_to_ratio" if at_ratio else "decision_differs_from_the_exact_rule")
        check.counterexample = failures[0]
    return check


def _ratio(call: Call) -> Fraction:
    d = call.drafts[0]
    return min(Fraction(1), Fraction(call.p[0][d]) / Fraction(call.q[0][d]))


def terminal_uniforms(law: list[Fraction]) -> list[float]:
    """0, the smallest positive, just below 1, and the stream uniforms around every interval boundary."""
    points = {0.0, 2.0**-53, U_MAX}
    below = Fraction(0)
    for m in law[:-1]:
        below += m
        points.update(grid_neighbours(below))
    return sorted(u for u in points if 0 <= u < 1)


def _exact_token(law: list[Fraction], u: float) -> int:
    """The token a normalized law gives for uniform u (the rule's inverse CDF, target u itself)."""
    return first_index_above(law, Fraction(u))


# -- degenerate cases ---------------------------------------------------------------------------
def _single(sampler, p, q, drafts, accept_u, terminal_u):
    """One call with explicit rows (K = len(drafts)) -> SamplerResult, or the exception it raised."""
    k = len(drafts)
    call = Call(p, q, tuple(drafts), tuple(accept_u), terminal_u, 1, 0, None, [])
    if k == 0:
        tensors = (
            torch.tensor([p], dtype=torch.float64),
            torch.zeros(1, 0, len(p[0]), dtype=torch.float64),
            torch.zeros(1, 0, dtype=torch.int64),
            torch.zeros(1, dtype=torch.int64),
            torch.zeros(1, 0, dtype=torch.float64),
            torch.tensor([terminal_u], dtype=torch.float64),
        )
    else:
        tensors = _tensors([call])
    try:
        return sampler(*tensors)
    except SamplerFailed as err:  # raising is how a sampler refuses an input
        return err.__cause__ or err


def _raised(x) -> str | None:
    return f"{type(x).__name__}: {x}" if isinstance(x, Exception) else None


def check_degenerate(sampler: SamplerUnderTest, tokens: bool) -> list[SamplerCheck]:
    checks = []
    p = [[0.2, 0.5, 0.3], [0.6, 0.2, 0.2]]
    # an impossible draft: q(d) = 0 while p(d) > 0; a sampler should refuse it, not decide it
    outcomes = [_single(sampler, p, [[0.5, 0.0, 0.5]], [1], [u], 0.5) for u in (0.0, 0.5, U_MAX)]
    silent = [o for o in outcomes if not isinstance(o, Exception)]
    finding = []
    if silent:
        finding = ["q_zero_accepted_silently" if any(o.accepted[0] > 0 for o in silent) else "q_zero_rejected_silently"]
    checks.append(
        SamplerCheck(
            "impossible_draft",
            not silent,
            {"refused": len(outcomes) - len(silent), "decided": len(silent)},
            "q(d) = 0 < p(d): the draft cannot have been drawn from q; the ratio p/q is infinite",
            finding,
        )
    )
    # a draft the target never emits: p(d) = 0 < q(d) must be rejected for every U, U = 0 included
    zero = [[0.5, 0.0, 0.5], [0.3, 0.3, 0.4]]
    accepted_at = []
    for u in (0.0, 2.0**-53, 0.5, U_MAX):
        o = _single(sampler, zero, [[0.2, 0.6, 0.2]], [1], [u], 0.5)
        if isinstance(o, Exception):
            accepted_at.append(f"raised at U={u}: {_raised(o)}")
        elif o.accepted[0] != 0:
            accepted_at.append(u)
    checks.append(
        SamplerCheck(
            "zero_target_mass",
            not accepted_at,
            {"accepted_at": accepted_at},
            "p(d) = 0: the ratio is 0 and U < 0 never holds",
            (["u_zero_accepts_p_zero"] if 0.0 in accepted_at else ["p_zero_accepted"]) if accepted_at else [],
        )
    )
    # p == q: every draft is accepted, for every U < 1
    same = [[0.25, 0.5, 0.25]] * 3
    rejected_at = []
    for u in (0.0, 0.5, U_MAX):
        o = _single(sampler, same, same[:2], [1, 0], [u, u], 0.5)
        if isinstance(o, Exception) or o.accepted[0] != 2:
            rejected_at.append(u if not isinstance(o, Exception) else _raised(o))
    checks.append(
        SamplerCheck(
            "equal_rows",
            not rejected_at,
            {"rejected_at": rejected_at},
            "p == q: ratio 1, every test passes",
            ["equal_rows_rejected"] if rejected_at else [],
        )
    )
    # disjoint supports: every draft is rejected and the correction is p itself
    pd = [[0.6, 0.4, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]]
    wrong, findings = [], set()
    for u, t in ((0.0, 0.3), (0.7, 0.9), (U_MAX, 0.0)):
        o = _single(sampler, pd, [[0.0, 0.0, 0.5, 0.5]], [2], [u], t)
        expected_token = 0 if t < 0.6 else 1
        if isinstance(o, Exception):
            wrong.append(_raised(o))
            findings.add("disjoint_raises")
        elif o.accepted[0] != 0:
            wrong.append(f"accepted the draft (p(d) = 0) at U={u}")
            findings.add("u_zero_accepts_p_zero" if u == 0.0 else "p_zero_accepted")
        elif o.terminal is not None and o.terminal[0] != expected_token:
            wrong.append(f"correction {o.terminal[0]} at u={t}, the rule draws {expected_token} from p")
            findings.add("disjoint_correction_wrong")
        elif o.terminal_rows is not None:
            if (o.terminal_rows[0] - torch.tensor(pd[0], dtype=torch.float64)).abs().max() > 1e-12:
                wrong.append(f"correction law {o.terminal_rows[0].tolist()}, the rule's is p = {pd[0]}")
                findings.add("disjoint_correction_wrong")
    checks.append(
        SamplerCheck(
            "disjoint_supports",
            not wrong,
            {"wrong": wrong},
            "p and q share no token: every draft is rejected, the correction normalize([p - q]_+) is p",
            sorted(findings),
        )
    )
    # a row with no drafts: a plain target step, the bonus drawn from p_1
    o = _single(sampler, [[0.1, 0.9, 0.0]], [], [], [], 0.5)
    problem = _raised(o) or (
        None
        if o.accepted[0] == 0
        and (o.terminal == [1] if o.terminal is not None else (o.terminal_rows[0][1] - 0.9).abs() < 1e-12)
        else f"accepted {o.accepted[0]}, terminal {o.terminal or o.terminal_rows[0].tolist()}"
    )
    checks.append(
        SamplerCheck(
            "k_zero_row",
            problem is None,
            {"problem": problem},
            "K = 0: no test, the bonus from p_1",
            (["k_zero_raises"] if isinstance(o, Exception) else ["k_zero_wrong"]) if problem else [],
        )
    )
    checks.append(_check_batch_of_two(sampler))
    checks.append(_check_batch(sampler, tokens))
    return checks


def _check_batch_of_two(sampler: SamplerUnderTest) -> SamplerCheck:
    """Two ordinary rows with the same K in one call, each decided as it would be alone."""
    p = [[0.2, 0.5, 0.3], [0.6, 0.2, 0.2]]
    calls = [
        Call(p, [[0.3, 0.4, 0.3]], (1,), (0.3,), 0.5, 1, 1, 0, []),  # p >= q: accepted, bonus from p_2
        Call(p, [[0.5, 0.2, 0.3]], (0,), (0.9,), 0.5, 1, 0, 2, []),  # ratio 0.4 < U: rejected, residual [0, .3, 0]
    ]
    try:
        out = sampler(*_tensors(calls))
    except SamplerFailed as err:
        err = err.__cause__ or err
        return SamplerCheck("batch_of_two", False, {"raised": _raised(err)}, "two rows, K = 1 each", ["batch_raises"])
    wrong = [i for i, c in enumerate(calls) if out.accepted[i] != c.accepted]
    return SamplerCheck(
        "batch_of_two",
        not wrong,
        {"wrong_rows": wrong},
        "two rows, K = 1 each: each row as the rule decides it alone",
        ["batch_rows_wrong"] if wrong else [],
    )


def _check_batch(sampler: SamplerUnderTest, tokens: bool) -> SamplerCheck:
    """Three rows with different K in one call: each row's outcome must be the rule's."""
    zero = [0.0, 0.0, 0.0]
    p = [
        [[0.2, 0.5, 0.3], [0.6, 0.2, 0.2], [0.3, 0.3, 0.4]],  # both drafts pass, bonus from p_3
        [[0.7, 0.2, 0.1], zero, zero],  # no drafts: bonus from p_1
        [[0.1, 0.1, 0.8], [0.5, 0.25, 0.25], zero],  # d_1 = 0: ratio 0.5, U = 0.95 rejects
    ]
    q = [[[0.3, 0.4, 0.3], [0.6, 0.2, 0.2]], [zero, zero], [[0.2, 0.1, 0.7], zero]]
    drafts, k_lens = [[1, 0], [-1, -1], [0, -1]], [2, 0, 1]
    accept_u, terminal_u = [[0.1, 0.5], [1.0, 1.0], [0.95, 1.0]], [0.5, 0.5, 0.05]
    rule = [(2, [0.3, 0.3, 0.4]), (0, [0.7, 0.2, 0.1]), (0, [0.0, 0.0, 1.0])]  # accepted, terminal law
    try:
        out = sampler(
            torch.tensor(p, dtype=torch.float64),
            torch.tensor(q, dtype=torch.float64),
            torch.tensor(drafts),
            torch.tensor(k_lens),
            torch.tensor(accept_u, dtype=torch.float64),
            torch.tensor(terminal_u, dtype=torch.float64),
        )
    except SamplerFailed as err:
        err = err.__cause__ or err
        return SamplerCheck(
            "batch_rows", False, {"raised": _raised(err)}, "a batch of 3 rows with K = 2, 0, 1", ["batch_raises"]
        )
    wrong = []
    for i, (accepted, law) in enumerate(rule):
        if out.accepted[i] != accepted:
            wrong.append(i)
        elif out.terminal is not None:
            if out.terminal[i] != _exact_token([Fraction(x) for x in law], terminal_u[i]):
                wrong.append(i)
        elif (out.terminal_rows[i] - torch.tensor(law, dtype=torch.float64)).abs().max() > 1e-12:
            wrong.append(i)
    return SamplerCheck(
        "batch_rows",
        not wrong,
        {"rows": 3, "k": k_lens, "wrong_rows": wrong},
        "a batch of 3 rows with K = 2, 0, 1: each row as the rule decides it alone",
        ["batch_rows_wrong"] if wrong else [],
    )


# -- minimal counterexample ------------------------------------------------------------------------
SEARCH = [(2, 1), (2, 2), (3, 1), (2, 3), (3, 2), (4, 1), (4, 2), (3, 3)]


def minimal_counterexample(sampler: SamplerUnderTest, tokens: bool, build_rig, seeds=range(3)) -> dict | None:
    """The smallest (V, K) and seed where the joint is not the target's, with the cell that shows it."""
    for (vocab, k), seed in itertools.product(SEARCH, seeds):
        rig = build_rig(vocab, k, seed)
        ref = Reference(rig)
        joint, mismatches, _ = sampler_joint(sampler, ref, rig.prompt, vocab, k, tokens)
        target = _target_joint(ref, rig.prompt, k + 1)
        diff = max_abs_diff(target, joint)
        if diff <= EXACT_TOLERANCE:
            continue
        worst = max(set(target) | set(joint), key=lambda s: abs(target.get(s, 0) - joint.get(s, 0)))
        out = {
            "vocab": vocab,
            "k": k,
            "seed": seed,
            "sequence": list(worst),
            "exact_mass": target.get(worst, 0.0),
            "sampler_mass": joint.get(worst, 0.0),
        }
        if mismatches:
            call, result = max(mismatches, key=lambda m: m[0].mass)
            out["cell"] = {
                "p_rows": [[round(x, 6) for x in row] for row in call.p],
                "q_rows": [[round(x, 6) for x in row] for row in call.q],
                "drafts": list(call.drafts),
                "acceptance_uniforms": list(call.accept_u),
                "terminal_uniform": call.terminal_u,
                "cell_mass": float(call.mass),
                "rule": {
                    "accepted": call.accepted,
                    "terminal": call.terminal,
                    "law": [round(float(x), 6) for x in call.law],
                },
                "sampler": {
                    "accepted": int(result.accepted[0]),
                    "terminal": None if result.terminal is None else int(result.terminal[0]),
                    "law": None
                    if result.terminal_rows is None
                    else [round(x, 6) for x in result.terminal_rows[0].tolist()],
                },
            }
        return out
    return None
