"""Every size a chain sampler's check covers, again with its rows in float32, bfloat16 and float16
(``verify-oracle --sampler``: ``exact_low_precision``).

An engine may keep a path of its own for rows in a low precision (a fused half-precision kernel, a
cast before a float32 routine): a slip there shows only in that dtype, and only at the size where
its class shows. Such slips passed every check whose low-precision rows were at three sizes (a
correction cut to its eight likeliest tokens where V >= 10, a bonus read from the row before after
four accepted drafts, a bonus read at the batch's K instead of the row's own in a batch of mixed K:
each only where the rows were not float64). So each case's first table is made again with every
weight a multiple of 1/256 (``in_units``; exact in every one of those dtypes, so the law is the same
in each), and its cells, at their centres, are met in each dtype, the cases of one vocabulary in one
batch whose rows have different K.
"""

from __future__ import annotations

import torch

from specd.errors import SamplerFailed
from specd.oracles.record import Check
from specd.oracles.samplers.checks import call_batch, joint_of, moved_most, verdict
from specd.oracles.samplers.covered import centres
from specd.oracles.samplers.protocol import SamplerUnderTest
from specd.oracles.samplers.table_store import completion, made
from specd.oracles.samplers.tables import Row, Table

UNITS = 256  # every weight a multiple of 1 / UNITS: exact in float32, bfloat16 and float16
LOW_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
NAME = "exact_low_precision"
LOW = f"exact with its rows in float64, not in {{dtype}} (the same weights: multiples of 1/{UNITS}, exact in {{dtype}})"


def in_units(row: Row) -> Row:
    """``row`` (weights summing to 1) rounded to multiples of 1 / UNITS summing to exactly 1: each weight
    its share of UNITS rounded down, the units left given to the largest remainders (ties to the lower id)."""
    shares = [w * UNITS for w in row]
    units = [int(s) for s in shares]
    by_remainder = sorted(range(len(row)), key=lambda t: (units[t] - shares[t], t))
    for t in by_remainder[: UNITS - sum(units)]:
        units[t] += 1
    return [u / UNITS for u in units]


def units_table(table: Table) -> Table:
    """``table`` with every row ``in_units`` (the same support, up to weights below 1 / (2 UNITS))."""

    def make() -> Table:
        memo: dict[tuple[int, ...], tuple[Row, Row]] = {}

        def rows(output: tuple[int, ...]) -> tuple[Row, Row]:
            if output not in memo:
                memo[output] = (in_units(table.p(output)), in_units(table.q(output)))
            return memo[output]

        p, q = (lambda o: rows(o)[0]), (lambda o: rows(o)[1])
        return Table(f"{table.name} in multiples of 1/{UNITS}", table.vocab, table.prompt, p, q, table.seed, table.kind)

    return made(("in_units", table), make)


def check_low_precision(sampler: SamplerUnderTest, cases: list, tokens: bool, rule: str = "maximal") -> Check:
    """``exact_low_precision``: each case's first table ``units_table``, every cell at its centre (``centres``),
    the cases of one vocabulary in one batch (``mixed_tensors``: rows of different K), in each of LOW_DTYPES;
    it fails at the first joint that is not the target's (its counterexample: the sequence that moved most).
    A refusal (SamplerFailed) is raised naming the rows it met: it is this check's failure."""
    by_vocab: dict[int, list] = {}
    for case in cases:
        by_vocab.setdefault(case.vocab, []).append((case, units_table(case.tables[0])))
    worst, runs = 0.0, 0
    for dtype in LOW_DTYPES:
        name = str(dtype).removeprefix("torch.")
        for vocab, group in by_vocab.items():
            calls = [centres(table, vocab, case.k, tokens, rule) for case, table in group]
            try:
                answers = call_batch(sampler, [c for cs in calls for c in cs], dtype, mixed=True)[0]
            except SamplerFailed as err:
                ks = ", ".join(str(k) for k in dict.fromkeys(case.k for case, _ in group))
                raise SamplerFailed(f"{err} ({name} rows of {vocab} tokens, K = {ks})", err.finding) from err
            at = 0
            for (case, table), cs in zip(group, calls):
                joint, mismatches = joint_of(cs, answers[at : at + len(cs)], table, table.prompt, case.k)
                at += len(cs)
                passed, diff, _ = verdict(joint, table, case.k)
                worst, runs = max(worst, diff), runs + 1
                if not passed:
                    where = {"case": case.label, "table": table.name, "dtype": name, "max_abs_diff": diff}
                    check = Check(NAME, False, {"not_exact_at": where}, LOW.format(dtype=name) + f" (at {case.label})")
                    check.findings.append("not_exact_low_precision")
                    target = completion(table, table.prompt, case.k + 1)
                    moved = moved_most(target, joint, mismatches)
                    check.counterexample = {"vocab": vocab, "k": case.k, "dtype": name, "table": table.name} | moved
                    return check
    detail = f"each case's first table in multiples of 1/{UNITS}, rows in float32, bfloat16 and float16, the cases"
    return Check(NAME, True, {"runs": runs, "max_abs_diff": worst}, detail + " of one V in one batch of mixed K")
