"""The checks any sampler under test is put through (``verify-oracle --sampler``).

- ``exact_joint``: one round over seeded tables (the fixture's target and draft
  rows), enumerated cell by cell as in ``specd.oracles.engine.exact``: every draft path,
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

from dataclasses import dataclass
from fractions import Fraction

import torch

from specd.core.sampler import first_index_above
from specd.errors import SamplerFailed
from specd.oracles.record import EXACT_TOLERANCE, Check, max_abs_diff
from specd.oracles.reference import PROBES, UNUSED, block_branch, branch, cells_of, chain_joint, probe
from specd.oracles.samplers.protocol import SamplerResult, SamplerUnderTest
from specd.oracles.samplers.tables import DyadicTables, as_table

TWO53 = 2**53
U_MAX = 1 - 2.0**-53  # the largest uniform the streams produce


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
    sampler: SamplerUnderTest, calls: list[Call], dtype: torch.dtype = torch.float64, pad: int = 0, mixed: bool = False
) -> tuple[list[SamplerResult], bool]:
    """Every call in one batch (calls share K; ``mixed``: they need not, ``mixed_tensors``), rows in ``dtype``,
    each ``pad`` drafts longer than its k (``call_tensors``); if the sampler refuses a batch, one call each.
    -> (a result per call, whether the batch was refused)."""
    try:
        tensors = mixed_tensors(calls, dtype) if mixed else call_tensors(calls, dtype, pad)
        return _split(sampler(*tensors), len(calls)), False
    except SamplerFailed:  # a sampler that cannot batch is called row by row
        if len(calls) == 1:
            raise
    return one_at_a_time(sampler, calls, dtype, pad), True


def one_at_a_time(sampler: SamplerUnderTest, calls: list[Call], dtype: torch.dtype = torch.float64, pad: int = 0):
    """Each call in a batch of its own (one row), rows in ``dtype`` -> a result per call."""
    return [sampler(*call_tensors([c], dtype, pad)) for c in calls]


def call_tensors(calls: list[Call], dtype: torch.dtype = torch.float64, pad: int = 0):
    """The protocol's six tensors for ``calls`` (which share k). ``pad``: each row ``pad`` drafts
    longer than its k, as in a batch beside a request with more drafts (``k_lens`` stays k): past k
    its drafts are -1, its q rows zeros, its acceptance uniforms 0 and its target rows past p_{k+1}
    a law of their own (a point mass on p_{k+1}'s least likely token), so that a sampler reading a
    row past its own k gets another answer."""
    k = len(calls[0].drafts)
    p = torch.tensor([c.p for c in calls], dtype=dtype)
    b, vocab = p.shape[0], p.shape[-1]
    q = torch.tensor([c.q for c in calls], dtype=dtype).reshape(b, k, vocab)
    drafts = torch.tensor([c.drafts for c in calls], dtype=torch.int64).reshape(b, k)
    k_lens = torch.full((b,), k, dtype=torch.int64)
    accept_u = torch.tensor([c.accept_u for c in calls], dtype=torch.float64).reshape(b, k)
    terminal_u = torch.tensor([c.terminal_u for c in calls], dtype=torch.float64)
    if pad:
        other = torch.zeros(b, pad, vocab, dtype=dtype)
        other[torch.arange(b), :, p[:, k].argmin(-1)] = 1
        p = torch.cat([p, other], 1)
        q = torch.cat([q, torch.zeros(b, pad, vocab, dtype=dtype)], 1)
        drafts = torch.cat([drafts, torch.full((b, pad), -1, dtype=torch.int64)], 1)
        accept_u = torch.cat([accept_u, torch.zeros(b, pad, dtype=torch.float64)], 1)
    return p, q, drafts, k_lens, accept_u, terminal_u


def mixed_tensors(calls: list[Call], dtype: torch.dtype = torch.float64):
    """The protocol's six tensors for ``calls`` of different k, in the order given: each row padded
    to the largest k as ``call_tensors`` pads (drafts -1, q zeros, acceptance uniforms 0, target rows
    past p_{k+1} a point mass), ``k_lens`` each row's own k."""
    width = max(len(c.drafts) for c in calls)
    by_k: dict[int, list[int]] = {}
    for i, c in enumerate(calls):
        by_k.setdefault(len(c.drafts), []).append(i)
    out: list[torch.Tensor] = []
    for k, rows in by_k.items():  # each K's rows padded to the width, then put in their places
        parts = call_tensors([calls[i] for i in rows], dtype, width - k)
        out = out or [torch.empty((len(calls), *t.shape[1:]), dtype=t.dtype) for t in parts]
        for whole, part in zip(out, parts):
            whole[torch.tensor(rows)] = part
    return tuple(out)


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
    return sampler(*call_tensors([call])).terminal is not None


# -- the exact joint of one round --------------------------------------------------------------
def round_calls(rows, prompt, vocab: int, k: int, tokens: bool, exact: bool, rule: str = "maximal") -> list[Call]:
    """Every cell of one round with k drafts, at each probe: the calls that integrate the rule
    (``maximal``: the token-wise rule; ``block``: block verification, specd.core.block)."""
    one = Fraction(1) if exact else 1.0
    paths = [((), one)]
    for _ in range(k):
        paths = [
            (path + (x,), mass * qx) for path, mass in paths for x, qx in enumerate(rows.q(prompt + path)) if qx > 0
        ]
    calls = []
    for node, full, p_rows, q_rows, found in _branches(rows, prompt, k, one, [path for path, _ in paths], rule):
        intervals, factor, law, accepted = found
        q_mass = one
        for i, d in enumerate(node):  # the drafts whose tests the branch reads (block: all of them)
            q_mass *= q_rows[i][d]
        mass = q_mass * factor
        total = sum(law)
        law = [x / total for x in law]
        terminal_cells = cells_of(law) if tokens else [(None, 0, 1)]
        floats = ([[float(x) for x in r] for r in p_rows], [[float(x) for x in r] for r in q_rows])
        for token, lo, hi in terminal_cells:
            for where in PROBES:
                accept_u = tuple(probe(lo_i, hi_i, where) for lo_i, hi_i in intervals) + (UNUSED,) * (k - len(node))
                terminal_u = probe(lo, hi, where) if token is not None else 0.5
                mass_here = mass * (hi - lo) / len(PROBES)
                calls.append(Call(*floats, full, accept_u, terminal_u, mass_here, accepted, token, law))
    return calls


def _branches(rows, prompt, k: int, one, paths: list, rule: str):
    """(the drafts the branch's tests read, the full path, its p and q rows, (intervals, mass, law, A))
    for every branch of one round with a mass: per path, the first rejection at each position and
    the bonus (token-wise), or every A (block: all k tests read)."""
    out, seen = [], set()
    for full in paths:
        p_rows = [rows.p(prompt + full[:i]) for i in range(k + 1)]
        q_rows = [rows.q(prompt + full[:i]) for i in range(k)]
        if rule == "block":
            for accepted in range(k + 1):
                found = block_branch(p_rows, q_rows, full, accepted, one)
                if found is not None:
                    out.append((full, full, p_rows, q_rows, (*found, accepted)))
            continue
        for j in range(1, k + 1):  # first rejection at draft j: once per drafted prefix
            if full[:j] in seen:
                continue
            seen.add(full[:j])
            found = branch(p_rows, q_rows, full[:j], True, one)
            if found is not None:
                out.append((full[:j], full, p_rows, q_rows, (*found, j - 1)))
        found = branch(p_rows, q_rows, full, False, one)
        if found is not None:
            out.append((full, full, p_rows, q_rows, (*found, k)))
    return out


def sampler_joint(sampler, rows, prompt, vocab: int, k: int, tokens: bool, exact: bool = False, rule="maximal"):
    """-> (joint over k + 1 tokens, [(call, result)] where the sampler's outcome is not the rule's, batch refused)."""
    calls = round_calls(rows, prompt, vocab, k, tokens, exact, rule)
    results, refused = call_batch(sampler, calls)
    return (*joint_of(calls, results, rows, prompt, k, exact), refused)


def joint_of(calls: list[Call], results: list[SamplerResult], rows, prompt, k: int, exact: bool = False):
    """The sampler's answers to one round's cells -> (joint over k + 1 tokens, each emission completed by
    the target chain; [(call, result)] where its outcome is not the rule's)."""
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
            memo[prefix] = chain_joint(rows.p, prompt + prefix, rest, Fraction(1) if exact else 1.0)
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
    return joint, mismatches


def verdict(joint: dict, rows, k: int) -> tuple[bool, float, float]:
    """(exact, max |diff|, total mass) of a round's joint against the target's on ``rows``."""
    diff, mass = max_abs_diff(chain_joint(rows.p, rows.prompt, k + 1), joint), sum(joint.values())
    return diff <= EXACT_TOLERANCE and abs(mass - 1) <= EXACT_TOLERANCE, diff, mass


def check_exact(sampler: SamplerUnderTest, rows, k: int, tokens: bool, rule: str = "maximal") -> Check:
    """``exact_joint`` on one table (a rig's, or a specd.oracles.samplers.tables Table)."""
    return check_exact_on(sampler, rows, k, tokens, rule)[0]


def check_exact_on(sampler: SamplerUnderTest, rows, k: int, tokens: bool, rule: str) -> tuple[Check, bool]:
    """``check_exact``, and whether the sampler refused the batch (then it was called a row at a time)."""
    table = as_table(rows)
    joint, mismatches, refused = sampler_joint(sampler, table, table.prompt, table.vocab, k, tokens, rule=rule)
    passed, diff, mass = verdict(joint, table, k)
    check = Check(
        "exact_joint",
        passed,
        {
            "vocab": table.vocab,
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
    return check, refused


def check_rational(
    sampler: SamplerUnderTest, vocab: int, k: int, seed: int, tokens: bool, rule: str = "maximal"
) -> Check:
    if not tokens:
        return Check(
            "exact_rational",
            None,
            {},
            "not applicable: the sampler returns distributions (float rows), not tokens drawn with a uniform",
        )
    rows = DyadicTables(vocab, seed)
    prompt = (0,)
    joint, mismatches, _ = sampler_joint(sampler, rows, prompt, vocab, k, tokens, exact=True, rule=rule)
    target = chain_joint(rows.p, prompt, k + 1, Fraction(1))
    diff = max_abs_diff(target, joint) if joint or target else Fraction(0)
    return Check(
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


# (p_1, p_2, q_1, draft): an ordinary ratio 13/51, a sure accept (p(d) = q(d)), a ratio above 1, a ratio
# a uniform can equal (1/2: ``U <= p/q`` keeps it), a residual (20, 24, 40)/84 whose normalized float64
# weights add up to 1 - 2^-53 before two tokens of no mass (an inverse CDF there runs past its end)
EDGE_ROWS = (
    (_dyadic(26, 179, 50, 1, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(102, 90, 38, 26, 0), 0),
    (_dyadic(26, 179, 50, 1, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(51, 179, 13, 13, 0), 1),
    (_dyadic(26, 179, 50, 1, 0), _dyadic(1, 1, 254, 0, 0), _dyadic(100, 100, 38, 18, 0), 2),
    (_dyadic(64, 120, 50, 22, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(128, 60, 40, 28, 0), 0),
    (_dyadic(20, 24, 40, 172, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(0, 0, 0, 196, 60), 3),
)


# Rows exact in float64 only: drafts a hair more likely under q than p, of ratio 1 - 2^-e for e = 29 (a test
# decided in float32, where p = q, keeps it always), 40 and 50 (a fast path that keeps a ratio within 1e-9 of
# 1 untested keeps it at U past the ratio), and a residual token of 2^-40 (a threshold on weights drops it)
HALF = _dyadic(128, 64, 64, 0, 0)  # q(d) = 1/2: p(d) = 1/2 - 2^-(e + 1) gives the ratio 1 - 2^-e
EDGE_ROWS_FLOAT64 = tuple(
    ([0.5 - 2.0**-e, 0.25 + 2.0**-e, 0.25, 0.0, 0.0], _dyadic(77, 26, 153, 0, 0), HALF, 0) for e in (30, 41, 51)
) + (([0.25 + 2**-40, 0.5, 0.25 - 2**-40, 0.0, 0.0], _dyadic(77, 26, 153, 0, 0), _dyadic(64, 64, 128, 0, 0), 2),)


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


def edge_cases(tokens: bool) -> list[tuple[str, torch.dtype, Call]]:
    """The dtype-edge decisions, each with the exact rule's answer: (what, row dtype, call)."""
    cases = []
    for dtype in EDGE_DTYPES:
        name = str(dtype).removeprefix("torch.")
        for p1, p2, q1, d in EDGE_ROWS + (EDGE_ROWS_FLOAT64 if dtype is torch.float64 else ()):
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
                    token = exact_token(law, t) if tokens else None
                    call = Call([p1, p2], [q1], (d,), (u,), t, 1, accepted, token, law)
                    cases.append((f"{name} rows, ratio {float(ratio):.6g}", dtype, call))
    return cases


def check_dtype_edges(sampler: SamplerUnderTest, tokens: bool) -> Check:
    """Each decision at adversarial uniforms, rows in four dtypes, against the exact rule."""
    cases = edge_cases(tokens)
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
            failures.append(_edge_failure(what, call, ratio, result, got_token))
    check = Check(
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


def _edge_failure(what: str, call: Call, ratio: Fraction, result, got_token) -> dict:
    """A wrong dtype-edge decision, as the counterexample reports it."""
    return {
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


def exact_token(law: list[Fraction], u: float) -> int:
    """The token a normalized law gives for uniform u (the rule's inverse CDF, target u itself)."""
    return first_index_above(law, Fraction(u))
