"""``dtype_edges``, a check any chain sampler under test is put through (``verify-oracle --sampler``): each
decision at adversarial uniforms (0, the smallest positive, just below 1, the float32, bfloat16 and float16
roundings of p/q and the stream uniforms on both sides of the exact boundary), with rows passed as float64,
float32, bfloat16 and float16 tensors (multiples of 1/256 summing to exactly 1, so every dtype holds the same
distribution exactly, and a bonus row summing to 255/256; and rows exact in float64 only, of ratios a hair below
1), against the rule in exact (Fraction) arithmetic; each decision over five tokens, and the float64 and float32
ones again over WIDE_EDGE_VOCAB, their five tokens the last ids."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import torch

from specd.oracles.record import Check
from specd.oracles.samplers.checks import EDGE_DTYPES, TWO53, U_MAX, Call, answers_to, exact_token
from specd.oracles.samplers.protocol import SamplerUnderTest


def _dyadic(*weights: int) -> list[float]:
    """A row of multiples of 1/256 summing to exactly 1: exact in float64, float32, bfloat16 and float16."""
    assert sum(weights) == 256
    return [w / 256 for w in weights]


# (p_1, p_2, q_1, draft): an ordinary ratio 13/51, a sure accept (p(d) = q(d)), a ratio above 1, a ratio
# a uniform can equal (1/2: ``U <= p/q`` keeps it), a residual (20, 24, 40)/84 whose normalized float64
# weights add up to 1 - 2^-53 before two tokens of no mass (an inverse CDF there runs past its end), and a
# bonus row whose weights sum to 255/256, as a float16 softmax's may (the protocol draws at U times the row's
# total: a draw at U alone takes a later token for U within 1/255 of a boundary, and none from U = 255/256)
EDGE_ROWS = (
    (_dyadic(26, 179, 50, 1, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(102, 90, 38, 26, 0), 0),
    (_dyadic(26, 179, 50, 1, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(51, 179, 13, 13, 0), 1),
    (_dyadic(26, 179, 50, 1, 0), _dyadic(1, 1, 254, 0, 0), _dyadic(100, 100, 38, 18, 0), 2),
    (_dyadic(64, 120, 50, 22, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(128, 60, 40, 28, 0), 0),
    (_dyadic(20, 24, 40, 172, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(0, 0, 0, 196, 60), 3),
    # a draft the target never emits (p(d) = 0, refused at every U; over 257 tokens a lookup in a sparse row's
    # support that does not check the id is there reads its neighbour's p)
    (_dyadic(26, 179, 51, 0, 0), _dyadic(77, 26, 153, 0, 0), _dyadic(102, 90, 38, 0, 26), 4),
    (_dyadic(26, 179, 50, 1, 0), [w / 256 for w in (77, 26, 152, 0, 0)], _dyadic(102, 90, 38, 26, 0), 0),
)


# Rows exact in float64 only: drafts a hair more likely under q than p, of ratio 1 - 2^-e for e = 29 (a test
# decided in float32, where p = q, keeps it always), 40 and 50 (a fast path that keeps a ratio within 1e-9 of
# 1 untested keeps it at U past the ratio), and a residual token of 2^-40 (a threshold on weights drops it)
HALF = _dyadic(128, 64, 64, 0, 0)  # q(d) = 1/2: p(d) = 1/2 - 2^-(e + 1) gives the ratio 1 - 2^-e
EDGE_ROWS_FLOAT64 = tuple(
    ([0.5 - 2.0**-e, 0.25 + 2.0**-e, 0.25, 0.0, 0.0], _dyadic(77, 26, 153, 0, 0), HALF, 0) for e in (30, 41, 51)
) + (([0.25 + 2**-40, 0.5, 0.25 - 2**-40, 0.0, 0.0], _dyadic(77, 26, 153, 0, 0), _dyadic(64, 64, 128, 0, 0), 2),)


# Every float64 and float32 decision again over a vocabulary past 256 (past 16, 32 and 64 too), its five tokens the
# last five ids and every other token of no mass: a path kept for wide rows (a float32 running sum or ratio past 256
# or 16 tokens, a lookup in a sparse row's support, a memo keyed by a row's first 16 weights, all zero there) passed
# every size whose edges had five tokens (a sixth helper's samplers).
WIDE_EDGE_VOCAB = 257
WIDE_DTYPES = (torch.float64, torch.float32)  # the dtypes whose decisions are made again over it


def _at_top(row: list[float], vocab: int) -> list[float]:
    """``row`` as the last ids of a row of ``vocab`` tokens, every other token of no mass."""
    return [0.0] * (vocab - len(row)) + list(row)


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
    """The dtype-edge decisions, each with the exact rule's answer: (what, row dtype, call); in WIDE_DTYPES each
    again over WIDE_EDGE_VOCAB tokens."""
    cases = []
    for dtype in EDGE_DTYPES:
        name = str(dtype).removeprefix("torch.")
        narrow = []
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
                    narrow.append(
                        (f"ratio {float(ratio):.6g}", Call([p1, p2], [q1], (d,), (u,), t, 1, accepted, token, law))
                    )
        wide = [(what, _widened(call)) for what, call in narrow] if dtype in WIDE_DTYPES else []
        for what, call in narrow + wide:
            cases.append((f"{name} rows of {len(call.law)} tokens, {what}", dtype, call))
        cases += [(f"{name} rows, {len(c.drafts)} drafts kept", dtype, c) for c in later_bonus_calls(tokens)]
    return cases


def _widened(call: Call) -> Call:
    """A call of one draft over WIDE_EDGE_VOCAB tokens: its rows' tokens the last ids, every other of no mass."""
    shift = WIDE_EDGE_VOCAB - len(call.law)
    p, q = ([_at_top(r, WIDE_EDGE_VOCAB) for r in rows] for rows in (call.p, call.q))
    drafts, law = tuple(d + shift for d in call.drafts), [Fraction(0)] * shift + list(call.law)
    terminal = None if call.terminal is None else call.terminal + shift
    return replace(call, p=p, q=q, drafts=drafts, terminal=terminal, law=law)


# A bonus after every draft of two and of three kept (each draft row the target's: every test passes), from the
# bonus row of EDGE_ROWS whose weights sum to 255/256: a bonus path of its own past one draft (a multi-draft
# kernel's) that draws at U alone passed where only the rounds of one draft had such a row (a fifth helper's).
LATER_BONUS_ROW, LATER_BONUS_KS = EDGE_ROWS[-1][1], (2, 3)


def later_bonus_calls(tokens: bool) -> list[Call]:
    """LATER_BONUS_KS' rounds: every draft kept (U = 1/2 below a ratio of 1, read either way), the bonus at each
    edge of LATER_BONUS_ROW's law."""
    row, out = _dyadic(64, 120, 50, 22, 0), []
    law = [Fraction(x) / sum(Fraction(y) for y in LATER_BONUS_ROW) for x in LATER_BONUS_ROW]
    for k in LATER_BONUS_KS:
        for t in terminal_uniforms(law) if tokens else [0.5]:
            token = exact_token(law, t) if tokens else None
            out.append(Call([row] * k + [LATER_BONUS_ROW], [row] * k, (1,) * k, (0.5,) * k, t, 1, k, token, law))
    return out


def check_dtype_edges(sampler: SamplerUnderTest, tokens: bool) -> Check:
    """Each decision at adversarial uniforms, rows in four dtypes, against the exact rule."""
    cases = edge_cases(tokens)
    failures, inconclusive = [], 0
    results: list = []
    for dtype in EDGE_DTYPES:  # a batch per dtype, K and V
        of_dtype = [c for _, dt, c in cases if dt is dtype]
        for size in dict.fromkeys(_size(c) for c in of_dtype):
            batch = [c for c in of_dtype if _size(c) == size]
            results += zip(batch, answers_to(sampler, batch, dtype))
    answer = {id(call): result for call, result in results}
    slack = Fraction(sampler.input_rounding)
    for what, _, call in cases:
        result = answer[id(call)]
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
        at_ratio = all(  # every wrong decision a draft kept at U = p/q (a test read as U <= p/q)
            f["sampler"]["accepted"] and Fraction(f["acceptance_uniform"]) == Fraction(f["exact_ratio"])
            for f in failures
        )
        check.findings.append("accepts_u_equal_to_ratio" if at_ratio else "decision_differs_from_the_exact_rule")
        check.counterexample = failures[0]
    return check


def _size(call: Call) -> tuple[int, int]:
    return len(call.drafts), len(call.p[0])


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
