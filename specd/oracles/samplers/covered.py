"""The exact check over every case and table a check covers (specd.oracles.samplers.coverage):
``exact_joint`` on the named case's first table, then every other table, each case's in one batch,
and each case's first table again a row at a time (a batch of one row, as a request decoding alone
meets the sampler: its answer for a row must not depend on the rows beside it) and in a batch whose
rows are longer than the round's (as beside a request with more drafts: a row's answer must not
read past its own k)."""

from __future__ import annotations

from dataclasses import replace

from specd.errors import SamplerFailed
from specd.oracles.reference import PROBES
from specd.oracles.samplers.checks import (
    Call,
    call_batch,
    check_exact_on,
    joint_of,
    one_at_a_time,
    round_calls,
    shuffled_batch,
    verdict,
)
from specd.oracles.samplers.protocol import SamplerUnderTest


def check_exact_cases(sampler: SamplerUnderTest, cases: list, tokens: bool, rule: str = "maximal") -> tuple:
    """``exact_joint`` over every case and table a check covers (specd.oracles.samplers.coverage): the named case's
    first table as ``check_exact``, then, where it is exact there, every other table, each case's in one
    batch, then each case's first table a row at a time (``check_alone``; not again where the sampler
    refused the batch and was called a row at a time already). -> (the check, with ``tables`` checked
    and the largest difference of all; the (case, table) where it is not exact, or None)."""
    named = cases[0]
    check, refused = check_exact_on(sampler, named.tables[0], named.k, tokens, rule)
    alone_already = [refused] + [False] * (len(cases) - 1)  # per case: its first table met a row at a time
    check.figures["tables"] = 1
    if not check.passed:
        return check, (named, named.tables[0])
    for i, case in enumerate(cases):
        work = [t for t in case.tables if t is not named.tables[0]]
        if not work:
            continue
        calls = [round_calls(t, t.prompt, case.vocab, case.k, tokens, False, rule) for t in work]
        try:
            results, refused = shuffled_batch(sampler, [c for cs in calls for c in cs])
            alone_already[i] = alone_already[i] or refused
        except SamplerFailed as err:  # it raised where it had not on the named table: which table, alone
            table = next((t for t, cs in zip(work, calls) if _raises(sampler, cs)), None)
            check.passed, check.findings = False, [err.finding]
            where = UNREPEATED if table is None else f"on the table {table.name}"
            check.detail = f"{err} (at {case.label}, {where})"
            return check, (case, table or work[0])
        at = 0
        for table, cs in zip(work, calls):
            joint, mismatches = joint_of(cs, results[at : at + len(cs)], table, table.prompt, case.k)
            at += len(cs)
            passed, diff, _ = verdict(joint, table, case.k)
            check.figures["tables"] += 1
            check.figures["max_abs_diff"] = max(check.figures["max_abs_diff"], diff)
            if not passed:
                check.passed, check.findings = False, ["not_exact"]
                check.figures["not_exact_at"] = {"case": case.label, "table": table.name, "max_abs_diff": diff}
                check.detail = f"not exact at {case.label} on the table {table.name}: " + check.detail
                return check, (case, table)
    alone = check_alone(sampler, [c for c, done in zip(cases, alone_already) if not done], tokens, rule)
    padded = None if alone else check_padded(sampler, cases, tokens, rule)
    failed = alone or padded or check_mixed(sampler, cases, tokens, rule)
    if failed is not None:
        (case, table), finding, why = failed
        check.passed, check.findings = False, [finding]
        where = {"batch": 1} if alone else {"padded_by": PAD} if padded else {"mixed_k": True}
        check.figures["not_exact_at"] = {"case": case.label, "table": table.name, **where}
        check.detail = f"{why} (at {case.label}, on the table {table.name}): " + check.detail
        return check, (case, table)
    check.detail += (
        f", on {check.figures['tables']} tables, and each case's first table a row at a time, with its rows"
        " padded past k, and beside rows of other K"
    )
    return check, None


ALONE = "exact when a round's cells come in one batch, not when each comes alone (a batch of one row)"


# The tables met a row at a time beside each case's first: those whose rows hold a point mass or a zero (a greedy
# target, a greedy or lookup draft, a top-k target, a draft missing a token), where an engine's path for a
# request decoding alone is likeliest to differ: a refused one-hot draft's correction drawn from p, its token
# left in, at B = 1 only, passed every batched table, and so did one drawn from p where p(d) = 0. Every table
# a row at a time costs the check 2.4 times as much (one call a cell, each a round trip to the sampler).
ALONE_TABLES = ("point_mass", "draft_point_mass", "target_top_half", "draft_misses_target")


def check_alone(sampler: SamplerUnderTest, cases: list, tokens: bool, rule: str = "maximal"):
    """Each case's first table again (every cell at its centre) and its ALONE_TABLES (every cell at every
    probe), each cell in a call of its own (B = 1, as a request decoding alone meets the sampler): a
    sampler's answer for a row must not depend on the rows beside it, and the batched checks never call it
    with one row (``_first_tables``)."""
    answer = lambda calls: one_at_a_time(sampler, calls)  # noqa: E731
    failed = ("not_exact_alone", ALONE, "called with one row")
    every_probe = lambda table, vocab, k, tokens, rule: round_calls(table, table.prompt, vocab, k, tokens, False, rule)  # noqa: E731
    alone = lambda _, table: table.kind in ALONE_TABLES  # noqa: E731
    return _first_tables(cases, tokens, rule, answer, failed, alone, every_probe)


PAD = 1  # drafts past a row's k in ``check_padded``'s batch
PADDED = (
    "exact when every row of a batch has the batch's K, not when a row has fewer (past its k: drafts -1, q"
    " zeros, target rows that are not its own), as beside a request with more drafts"
)


def check_padded(sampler: SamplerUnderTest, cases: list, tokens: bool, rule: str = "maximal"):
    """Each case's first table again in a batch whose rows are PAD drafts longer than the round's,
    ``k_lens`` still k (``call_tensors``): a request meets that beside one with more drafts, and the
    batched checks never pad. A sampler must read a row's own k drafts, k uniforms and k + 1 target rows
    only (a bonus from the batch's last target row, say, is drawn from another law; ``_first_tables``)."""
    answer = lambda calls: call_batch(sampler, calls, pad=PAD)[0]  # noqa: E731
    return _first_tables(
        cases, tokens, rule, answer, ("not_exact_padded", PADDED, "called with its rows padded past k")
    )


MIXED = (
    "exact when every row of a batch has one K, not when rows of different K share a batch: in an order"
    " that sorting by K does not undo by itself, and again reversed (another call of that shape)"
)


def check_mixed(sampler: SamplerUnderTest, cases: list, tokens: bool, rule: str = "maximal"):
    """The first tables of the vocabulary whose cases have the most different K, and rounds of K = 1 (where
    none of them has it) and K = 0 (the bonus alone) on its first, every cell at its centre, in one batch:
    the rows dealt in turn from each K
    (so K changes from row to row, and the order sorting by K gives is not its own inverse), each padded
    to the largest K (``mixed_tensors``) with its own ``k_lens``; then the same rows reversed, a call of the
    same shape with other ``k_lens``. A sampler must answer each row from its own k, its own uniforms and
    its own rows only: one that puts sorted rows back with the sort's order instead of its inverse, keeps
    what it read of a shape's first call, or hands the terminal uniforms out among the rows with drafts
    only, answers some row from another's. Each K's joint is judged as ``_first_tables`` judges it. A
    sampler that raises on the batch is asked again without the K = 0 rows (``k_zero_row`` reports
    those); -> None where every joint is exact, else ((case, table), finding, why)."""
    if rule != "maximal":
        return None
    ks: dict[int, set[int]] = {}
    for case in cases:
        ks.setdefault(case.vocab, set()).add(case.k)
    vocab = min(ks, key=lambda v: (-len(ks[v]), v))
    group = [c for c in cases if c.vocab == vocab]
    first = (group[0], group[0].tables[0])
    one = [(*first, 1)] if 1 not in ks[vocab] else []  # a row of one draft: its bonus is p_2 (read as p_1, it passed)
    rounds = [(case, case.tables[0], case.k) for case in group] + one + [(*first, 0)]
    calls = [centres(table, vocab, k, tokens, rule) for _, table, k in rounds]
    try:
        return _mixed(sampler, rounds, calls)
    except SamplerFailed:
        pass
    try:
        return _mixed(sampler, rounds[:-1], calls[:-1]) if len({k for *_, k in rounds[:-1]}) > 1 else None
    except SamplerFailed as err:
        case, table, _ = rounds[0]
        return (case, table), err.finding, f"{err}, called with rows of different K in one batch"


def _mixed(sampler: SamplerUnderTest, rounds: list, calls: list[list[Call]]):
    """``check_mixed``'s two calls over ``rounds`` ((case, table, K)) and their cells ``calls``."""
    order = [(r, i) for i in range(max(len(cs) for cs in calls)) for r, cs in enumerate(calls) if i < len(cs)]
    for dealt in (order, order[::-1]):
        answers = call_batch(sampler, [calls[r][i] for r, i in dealt], mixed=True)[0]
        results: list[list] = [[None] * len(cs) for cs in calls]
        for (r, i), answer in zip(dealt, answers):
            results[r][i] = answer
        for (case, table, k), cs, rs in zip(rounds, calls, results):
            joint, _ = joint_of(cs, rs, table, table.prompt, k)
            if not verdict(joint, table, k)[0]:
                return (case, table), "not_exact_mixed_k", MIXED
    return None


def centres(table, vocab: int, k: int, tokens: bool, rule: str) -> list[Call]:
    """Every cell of one round of ``k`` drafts on ``table`` at its centre (PROBES[0]), with the cell's
    whole mass: what a cell's ends test, the batched check has."""
    every = round_calls(table, table.prompt, vocab, k, tokens, False, rule)
    return [replace(c, mass=c.mass * len(PROBES)) for c in every[:: len(PROBES)]]


def _first_tables(cases: list, tokens: bool, rule: str, answer, failed: tuple[str, str, str], more=None, cells=None):
    """Each case's first table, every cell at its centre (``centres``), and its tables ``more(case, table)``
    names, the calls ``cells`` makes of them; the sampler's answers from ``answer(calls)`` -> None where
    each joint is exact, else ((case, table), finding, why) at the first that is not; ``failed``: (the
    finding, why, how it was called: said where it raised)."""
    finding, why, called = failed
    cells = cells or centres
    every = [(c, t) for c in cases for t in c.tables if t is c.tables[0] or more is not None and more(c, t)]
    for case, table in every:
        calls = (centres if table is case.tables[0] else cells)(table, case.vocab, case.k, tokens, rule)
        try:
            results = answer(calls)
        except SamplerFailed as err:
            return (case, table), err.finding, f"{err}, {called}"
        joint, _ = joint_of(calls, results, table, table.prompt, case.k)
        if not verdict(joint, table, case.k)[0]:
            return (case, table), finding, why
    return None


# A sampler that raised on a batch of rounds and on none of them alone: its answers are not a function of its inputs.
UNREPEATED = "on a batch of its tables, and on none of them alone: it does not answer a round the same way twice"


def _raises(sampler, calls: list[Call]) -> bool:
    try:
        call_batch(sampler, calls)
    except SamplerFailed:
        return True
    return False
