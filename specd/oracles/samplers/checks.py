"""The checks any sampler under test is put through (``verify-oracle --sampler``).

- ``exact_joint``: one round over seeded tables (the fixture's target and draft
  rows), enumerated cell by cell as in ``specd.oracles.engine.exact``: every draft path,
  every first rejection or all accepted, every terminal token (or the sampler's
  own terminal distribution), each cell at its centre and just inside both ends;
  the emitted block, completed by the target chain, must have the target's joint
  (float64, 1e-12).
- ``exact_rational``: the same on dyadic tables (probabilities k / 32, exact in
  floats), every mass in Fraction arithmetic, rows in four dtypes, at the named size
  and at V = 4, K = 3: the difference must be exactly 0.
  Only for samplers that return tokens (a returned distribution has rounding).
- ``dtype_edges`` (specd.oracles.samplers.edges): each decision at adversarial
  uniforms, with rows passed in four dtypes, against the rule in exact arithmetic.
- degenerate cases, one check each: an impossible draft (q(d) = 0), a draft the
  target never emits (p(d) = 0), p == q, disjoint supports, a row with no drafts,
  and a batch of rows with different K.

A failing check names what it found (``findings``) and gives a minimal
counterexample: the smallest (V, K) where it fails, the rows on the path, the
uniforms, what the rule does and what the sampler did, and the mass that moved.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

import torch

from specd.core.sampler import first_index_above
from specd.errors import SamplerFailed
from specd.oracles.record import EXACT_TOLERANCE, Check, max_abs_diff
from specd.oracles.reference import PROBES, UNUSED, block_branch, branch, cells_of, chain_joint, probe
from specd.oracles.samplers.protocol import SamplerResult, SamplerUnderTest
from specd.oracles.samplers.table_store import completion
from specd.oracles.samplers.tables import DyadicTables, as_table

TWO53 = 2**53
EDGE_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)  # the dtypes rows come in
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


def answers_to(sampler: SamplerUnderTest, calls: list[Call], dtype: torch.dtype, alone: bool = False) -> list:
    """``call_batch`` (``alone``: ``one_at_a_time``) for a check past the ordinary round (the rational and the
    dtype-edge rows) -> a result per call; a refusal is raised naming the rows it met (their dtype, V and K)."""
    try:
        return one_at_a_time(sampler, calls, dtype) if alone else call_batch(sampler, calls, dtype)[0]
    except SamplerFailed as err:
        rows = f"{str(dtype).removeprefix('torch.')} rows of {len(calls[0].p[0])} tokens, K = {len(calls[0].drafts)}"
        raise SamplerFailed(f"{err} ({rows})", err.finding) from err


# The sizes of the first batches a shuffled batch is cut into (the rest in one), as far as its rows go: a path
# kept for small batches (4 <= B <= 32, say) passed where every batch had 1-3 rows or 35 and more, and one kept
# for a captured batch size (a power of two from 64) where none had one. Powers of two from 2 to 128 (the
# batch buckets engines capture or tile at) and odd sizes between them.
CHUNKS = (4, 7, 16, 33, 64, 128, 2, 8, 32)


def shuffled_batch(sampler: SamplerUnderTest, calls: list[Call]) -> tuple[list, bool]:
    """``call_batch`` with the rows in a fixed shuffled order, cut into batches of CHUNKS' sizes and the rest,
    answers put back in the calls' order: a round's cells in order are neighbours with the same rows, so a
    sampler reading its neighbour row's (the last row corrected from the row before it, say) would meet the
    same law there. -> (the results, whether the sampler refused a batch: then each call went alone)."""
    order = list(range(len(calls)))
    random.Random(len(calls)).shuffle(order)
    results, refused, at = [], False, 0
    for size in (*CHUNKS, len(calls)):
        if at < len(order):
            part, gone = call_batch(sampler, [calls[i] for i in order[at : at + size]])
            results, refused, at = results + part, refused or gone, at + size
    out: list = [None] * len(calls)
    for i, result in zip(order, results):
        out[i] = result
    return out, refused


def one_at_a_time(sampler: SamplerUnderTest, calls: list[Call], dtype: torch.dtype = torch.float64, pad: int = 0):
    """Each call in a batch of its own (one row), rows in ``dtype`` -> a result per call (a sampler in a
    process of its own is sent them in turn without waiting between them: ``each``)."""
    each = getattr(sampler, "each", None)
    if each is not None:
        return each([call_tensors([c], dtype, pad) for c in calls])
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


def sampler_joint(
    sampler, rows, prompt, vocab: int, k: int, tokens: bool, exact: bool = False, rule="maximal", shuffled=False
):
    """-> (joint over k + 1 tokens, [(call, result)] where the sampler's outcome is not the rule's, batch refused);
    ``shuffled``: the cells in ``shuffled_batch``'s batches, as the covered tables meet the sampler, not in one."""
    calls = round_calls(rows, prompt, vocab, k, tokens, exact, rule)
    results, refused = (shuffled_batch if shuffled else call_batch)(sampler, calls)
    return (*joint_of(calls, results, rows, prompt, k, exact), refused)


# Batches past CHUNKS' sizes, as the rest of a shuffled batch is (thousands of rows where a case has many tables): a
# path kept for batches of more than 256 rows, not exact there, was priced as a law read otherwise (an eighth
# helper's), its one-table comparisons all under 256 rows.
PAST_CHUNKS = (512, 2048)


def batch_difference(sampler, rows, k: int, tokens: bool, rule: str = "maximal") -> dict | None:
    """Where the sampler answers a table's cell (``round_calls``) otherwise in a batch of one of CHUNKS' sizes or
    PAST_CHUNKS' (the
    cells taken in turn, again from the first where they run out) than with all the table's cells in one: the
    batch's size, the cell and both answers (None: alike everywhere; a sampler whose answer for a row depends on
    the batch it came in has no one law to price)."""
    table = as_table(rows)
    calls = round_calls(table, table.prompt, table.vocab, k, tokens, False, rule)
    key = lambda r: (list(r.accepted), r.terminal, None if r.terminal_rows is None else r.terminal_rows.tolist())  # noqa: E731
    whole = call_batch(sampler, calls)[0]
    for size in (*CHUNKS, *PAST_CHUNKS):
        at = [i % len(calls) for i in range(size)]
        for i, result in zip(at, call_batch(sampler, [calls[i] for i in at])[0]):
            if key(result) != key(whole[i]):
                terminal = None if whole[i].terminal is None else int(whole[i].terminal[0])
                one = {"accepted": int(whole[i].accepted[0]), "terminal": terminal}
                return {"batch_size": size, "cell": cell_report(calls[i], result), "answer_in_one_batch": one}
    return None


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
            memo[prefix] = completion(rows, prompt + prefix, rest, exact)
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


def cell_report(call: Call, result: SamplerResult) -> dict:
    """One cell where the sampler's outcome is not the rule's, as a counterexample reports it."""
    return {
        "p_rows": [[round(float(x), 6) for x in row] for row in call.p],
        "q_rows": [[round(float(x), 6) for x in row] for row in call.q],
        "drafts": list(call.drafts),
        "acceptance_uniforms": list(call.accept_u),
        "terminal_uniform": call.terminal_u,
        "cell_mass": float(call.mass),
        "rule": {"accepted": call.accepted, "terminal": call.terminal, "law": [round(float(x), 6) for x in call.law]},
        "sampler": {
            "accepted": int(result.accepted[0]),
            "terminal": None if result.terminal is None else int(result.terminal[0]),
            "law": None if result.terminal_rows is None else [round(x, 6) for x in result.terminal_rows[0].tolist()],
        },
    }


def verdict(joint: dict, rows, k: int) -> tuple[bool, float, float]:
    """(exact, max |diff|, total mass) of a round's joint against the target's on ``rows``."""
    diff, mass = max_abs_diff(completion(rows, rows.prompt, k + 1), joint), sum(joint.values())
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


# Beside the named size, the rational check runs at V = 4, K = 3 (a second and a middle draft, a correction of
# three tokens after two accepted drafts, a bonus after three), in each of EDGE_DTYPES: a path kept for rows in a
# low precision (a correction from p after an accepted draft, a bonus from the row before) passed where only
# dtype_edges' rounds of one draft had such rows. And at V = 9, K = 1: rows read as vectors of 4 or 8 (a float4 or
# 16 bytes of halves) whose last V mod 4 (mod 8) tokens a loop without its tail drops passed where every row in a low
# precision had V <= 5 with no mass on its last token; there float16's cells go a row at a time (B = 1: a request
# decoding alone, whose path for half-precision rows drew its correction from p, passed every batch).
RATIONAL_SIZES = ((4, 3), (9, 1))
RATIONAL_ALONE = ((9, 1), torch.float16)


def check_rational(
    sampler: SamplerUnderTest, vocab: int, k: int, seed: int, tokens: bool, rule: str = "maximal", exact_size=False
) -> Check:
    """``exact_rational``: one round on dyadic tables at the named size and (unless ``exact_size``) RATIONAL_SIZES,
    rows in each of EDGE_DTYPES (multiples of 1/32: the same law in each; RATIONAL_ALONE's a row at a time),
    every mass a Fraction: each difference exactly 0."""
    if not tokens:
        return Check(
            "exact_rational",
            None,
            {},
            "not applicable: the sampler returns distributions (float rows), not tokens drawn with a uniform",
        )
    runs, worst, wrong, found = [], Fraction(0), 0, None
    for v, depth in dict.fromkeys(((vocab, k),) + (() if exact_size else RATIONAL_SIZES)):
        rows, prompt = DyadicTables(v, seed), (0,)
        calls = round_calls(rows, prompt, v, depth, tokens, True, rule)
        target = chain_joint(rows.p, prompt, depth + 1, Fraction(1))
        for dtype in EDGE_DTYPES:
            alone = not exact_size and ((v, depth), dtype) == RATIONAL_ALONE
            answers = answers_to(sampler, calls, dtype, alone)
            joint, mismatches = joint_of(calls, answers, rows, prompt, depth, True)
            diff = max_abs_diff(target, joint) if joint or target else Fraction(0)
            name = str(dtype).removeprefix("torch.")
            runs.append({"vocab": v, "k": depth, "dtype": name, "difference": str(diff)})
            worst, wrong = max(worst, diff), wrong + len(mismatches)
            if diff and found is None:
                found = {"vocab": v, "k": depth, "dtype": name} | _rational_counterexample(target, joint, mismatches)
    check = Check(
        "exact_rational",
        worst == 0,
        {"vocab": vocab, "k": k, "difference": str(worst), "cells_where_the_outcome_is_not_the_rule's": wrong}
        | {"runs": runs},
        "dyadic tables (k / 32), every mass a Fraction, at the named size"
        + ("" if exact_size else "".join(f" and V = {v}, K = {d}" for v, d in RATIONAL_SIZES))
        + ", rows in float64, float32, bfloat16 and float16"
        + ("" if exact_size else f" (float16's a row at a time at V = {RATIONAL_ALONE[0][0]})"),
        [] if worst == 0 else ["not_exact_in_rational_arithmetic"],
    )
    check.counterexample = found
    return check


def _rational_counterexample(target: dict, joint: dict, mismatches: list) -> dict:
    """Where a rational run differs (``moved_most``), its masses as floats and the exact difference."""
    out = moved_most(target, joint, mismatches, Fraction(0))
    exact, got = out["exact_mass"], out["sampler_mass"]
    out |= {"exact_mass": float(exact), "sampler_mass": float(got), "moved_exactly": str(got - exact)}
    return {"table": "dyadic (k / 32)", **out}


def moved_most(target: dict, joint: dict, mismatches: list, zero=0.0) -> dict:
    """The sequence whose mass differs most between the target's joint and the sampler's, with both masses
    (``zero`` where a joint lacks it), and the heaviest cell where the sampler's outcome is not the rule's."""
    worst = max(set(target) | set(joint), key=lambda s: abs(target.get(s, zero) - joint.get(s, zero)))
    out = {"sequence": list(worst), "exact_mass": target.get(worst, zero), "sampler_mass": joint.get(worst, zero)}
    if mismatches:
        out["cell"] = cell_report(*max(mismatches, key=lambda m: m[0].mass))
    return out


def exact_token(law: list[Fraction], u: float) -> int:
    """The token a normalized law gives for uniform u (the rule's inverse CDF, target u itself)."""
    return first_index_above(law, Fraction(u))
