"""The degenerate cases a sampler under test must get right, one check each (``verify-oracle
--sampler``): an impossible draft (q(d) = 0), a draft the target never emits (p(d) = 0), p == q,
disjoint supports, a row with no drafts, and batches of rows with the same and with different K."""

from __future__ import annotations

from fractions import Fraction

import torch

from specd.errors import SamplerFailed
from specd.oracles.record import Check
from specd.oracles.samplers.checks import U_MAX, Call, call_tensors, exact_token
from specd.oracles.samplers.protocol import SamplerUnderTest


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
        tensors = call_tensors([call])
    try:
        return sampler(*tensors)
    except SamplerFailed as err:  # raising is how a sampler refuses an input
        return err.__cause__ or err


def _raised(x) -> str | None:
    return f"{type(x).__name__}: {x}" if isinstance(x, Exception) else None


def impossible_draft(sampler: SamplerUnderTest, tokens: bool) -> Check:
    """q(d) = 0 while p(d) > 0: a sampler should refuse the draft, not decide it."""
    p = [[0.2, 0.5, 0.3], [0.6, 0.2, 0.2]]
    outcomes = [_single(sampler, p, [[0.5, 0.0, 0.5]], [1], [u], 0.5) for u in (0.0, 0.5, U_MAX)]
    silent = [o for o in outcomes if not isinstance(o, Exception)]
    finding = []
    if silent:
        finding = ["q_zero_accepted_silently" if any(o.accepted[0] > 0 for o in silent) else "q_zero_rejected_silently"]
    return Check(
        "impossible_draft",
        not silent,
        {"refused": len(outcomes) - len(silent), "decided": len(silent)},
        "q(d) = 0 < p(d): the draft cannot have been drawn from q; the ratio p/q is infinite",
        finding,
    )


ZERO_P, ZERO_Q, SURE = [0.5, 0.0, 0.5], [0.2, 0.6, 0.2], [0.25, 0.5, 0.25]  # SURE as p and q: ratio 1, kept
EDGES = (0.0, 2.0**-53, 0.5, U_MAX)


def zero_target_mass(sampler: SamplerUnderTest, tokens: bool) -> Check:
    """p(d) = 0 < q(d): the draft must be rejected for every U, U = 0 included, as the round's first draft
    (``accepted_at``) and as its second and third after sure acceptances (``later``); and a terminal whose
    law starts with a token of no mass (a bonus after two accepted drafts, a correction after one) must not
    be that token at U = 0. (A slip placed past the first draft, a test U <= p/q or an inverse CDF that
    takes the first running sum >= U, passed when only the first was probed.)"""
    accepted_at, later, findings = [], [], set()
    for j in (0, 1, 2):  # the draft of no target mass at position j + 1, after j sure acceptances
        for u in EDGES:
            o = _single(
                sampler, [SURE] * j + [ZERO_P, SURE], [SURE] * j + [ZERO_Q], [1] * (j + 1), [0.5] * j + [u], 0.5
            )
            if j == 0 and isinstance(o, Exception):
                accepted_at.append(f"raised at U={u}: {_raised(o)}")
            elif j == 0 and o.accepted[0] != 0:
                accepted_at.append(u)
            elif isinstance(o, Exception):
                later.append(f"draft {j + 1}, U={u}: raised {_raised(o)}")
            elif o.accepted[0] != j:
                later.append(f"draft {j + 1} (p(d) = 0) at U={u}: {int(o.accepted[0])} kept, the rule keeps {j}")
                findings.add("u_zero_accepts_p_zero" if u == 0.0 else "p_zero_accepted")
    if accepted_at:
        findings.add("u_zero_accepts_p_zero" if 0.0 in accepted_at else "p_zero_accepted")
    later += _zero_mass_terminals(sampler, findings)
    return Check(
        "zero_target_mass",
        not accepted_at and not later,
        {"accepted_at": accepted_at, "later": later},
        "p(d) = 0: the ratio is 0 and U < 0 never holds (first, second and third draft); a terminal at U = 0 is "
        "never a token of no mass",
        sorted(findings),
    )


def _zero_mass_terminals(sampler: SamplerUnderTest, findings: set[str]) -> list[str]:
    """``zero_target_mass``'s terminals at U = 0 whose law starts with a token of no mass: the bonus after two
    accepted drafts, and a correction after one ([p - q]_+ = [0, 0.1, 0.3]) -> what went wrong (its findings
    added to ``findings``)."""
    wrong = []
    bonus = ([SURE, SURE, [0.0, 0.5, 0.5]], [SURE, SURE], [1, 1], [0.5, 0.5], 2)
    correction = ([SURE, [0.2, 0.3, 0.5], SURE], [SURE, [0.6, 0.2, 0.2]], [1, 0], [0.5, U_MAX], 1)
    for what, (p, q, drafts, accept_u, kept) in (("bonus", bonus), ("correction", correction)):
        o = _single(sampler, p, q, drafts, accept_u, 0.0)
        if isinstance(o, Exception):
            wrong.append(f"{what} at U = 0: raised {_raised(o)}")
        elif o.accepted[0] != kept:
            wrong.append(f"{what} at U = 0: {int(o.accepted[0])} drafts kept, the rule keeps {kept}")
        elif _drew_token_zero(o):
            wrong.append(f"{what} at U = 0 drew token 0, which has no mass in its law")
            findings.add("zero_mass_emitted")
    return wrong


def _drew_token_zero(result) -> bool:
    """The terminal is token 0 (a sampler returning tokens), or its law gives token 0 mass (one returning laws)."""
    if result.terminal is not None:
        return int(result.terminal[0]) == 0
    return result.terminal_rows is not None and float(result.terminal_rows[0][0]) > 0


def equal_rows(sampler: SamplerUnderTest, tokens: bool) -> Check:
    """p == q: every draft is accepted, for every U < 1."""
    same = [[0.25, 0.5, 0.25]] * 3
    rejected_at = []
    for u in (0.0, 0.5, U_MAX):
        o = _single(sampler, same, same[:2], [1, 0], [u, u], 0.5)
        if isinstance(o, Exception) or o.accepted[0] != 2:
            rejected_at.append(u if not isinstance(o, Exception) else _raised(o))
    return Check(
        "equal_rows",
        not rejected_at,
        {"rejected_at": rejected_at},
        "p == q: ratio 1, every test passes",
        ["equal_rows_rejected"] if rejected_at else [],
    )


def disjoint_supports(sampler: SamplerUnderTest, tokens: bool) -> Check:
    """p and q share no token: every draft is rejected and the correction is p itself."""
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
    return Check(
        "disjoint_supports",
        not wrong,
        {"wrong": wrong},
        "p and q share no token: every draft is rejected, the correction normalize([p - q]_+) is p",
        sorted(findings),
    )


def k_zero_row(sampler: SamplerUnderTest, tokens: bool) -> Check:
    """A row with no drafts: a plain target step, the bonus drawn from p_1."""
    o = _single(sampler, [[0.1, 0.9, 0.0]], [], [], [], 0.5)
    problem = _raised(o) or (
        None
        if o.accepted[0] == 0
        and (o.terminal == [1] if o.terminal is not None else (o.terminal_rows[0][1] - 0.9).abs() < 1e-12)
        else f"accepted {o.accepted[0]}, terminal {o.terminal or o.terminal_rows[0].tolist()}"
    )
    return Check(
        "k_zero_row",
        problem is None,
        {"problem": problem},
        "K = 0: no test, the bonus from p_1",
        (["k_zero_raises"] if isinstance(o, Exception) else ["k_zero_wrong"]) if problem else [],
    )


def batch_of_two(sampler: SamplerUnderTest, tokens: bool) -> Check:
    """Two ordinary rows with the same K in one call, each decided as it would be alone."""
    p = [[0.2, 0.5, 0.3], [0.6, 0.2, 0.2]]
    calls = [
        Call(p, [[0.3, 0.4, 0.3]], (1,), (0.3,), 0.5, 1, 1, 0, []),  # p >= q: accepted, bonus from p_2
        Call(p, [[0.5, 0.2, 0.3]], (0,), (0.9,), 0.5, 1, 0, 2, []),  # ratio 0.4 < U: rejected, residual [0, .3, 0]
    ]
    try:
        out = sampler(*call_tensors(calls))
    except SamplerFailed as err:
        err = err.__cause__ or err
        return Check("batch_of_two", False, {"raised": _raised(err)}, "two rows, K = 1 each", ["batch_raises"])
    wrong = [i for i, c in enumerate(calls) if out.accepted[i] != c.accepted]
    return Check(
        "batch_of_two",
        not wrong,
        {"wrong_rows": wrong},
        "two rows, K = 1 each: each row as the rule decides it alone",
        ["batch_rows_wrong"] if wrong else [],
    )


def batch_rows(sampler: SamplerUnderTest, tokens: bool) -> Check:
    """Rows with different K in one call, each row's outcome the rule's: three rows with K = 2, 0, 1, then the
    same K = 2 row beside two rows without drafts (one row speculating in a batch decoding plainly: a path for
    that batch passed every other). Past a row's p_{k+1} its target rows are a law of their own (a point mass
    on token 1, which no row's own outcome is), so a sampler reading another row's K there draws another
    token. ``wrong_rows`` counts the second call's rows on from 3."""
    zero, other = [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    p = [
        [[0.2, 0.5, 0.3], [0.6, 0.2, 0.2], [0.3, 0.3, 0.4]],  # both drafts pass, bonus from p_3
        [[0.7, 0.2, 0.1], other, other],  # no drafts: bonus from p_1
        [[0.1, 0.1, 0.8], [0.5, 0.25, 0.25], other],  # d_1 = 0: ratio 0.5, U = 0.95 rejects
    ]
    q = [[[0.3, 0.4, 0.3], [0.6, 0.2, 0.2]], [zero, zero], [[0.2, 0.1, 0.7], zero]]
    drafts, k_lens = [[1, 0], [-1, -1], [0, -1]], [2, 0, 1]
    accept_u, terminal_u = [[0.1, 0.5], [1.0, 1.0], [0.95, 1.0]], [0.5, 0.5, 0.05]
    rule = [(2, [0.3, 0.3, 0.4]), (0, [0.7, 0.2, 0.1]), (0, [0.0, 0.0, 1.0])]  # accepted, terminal law
    wrong = []
    for first, rows in enumerate(((0, 1, 2), (0, 1, 1))):
        pick = lambda values, rows=rows: [values[r] for r in rows]  # noqa: E731
        try:
            out = sampler(
                torch.tensor(pick(p), dtype=torch.float64),
                torch.tensor(pick(q), dtype=torch.float64),
                torch.tensor(pick(drafts)),
                torch.tensor(pick(k_lens)),
                torch.tensor(pick(accept_u), dtype=torch.float64),
                torch.tensor(pick(terminal_u), dtype=torch.float64),
            )
        except SamplerFailed as err:
            err = err.__cause__ or err
            detail = f"a batch of 3 rows with K = {', '.join(str(k_lens[r]) for r in rows)}"
            return Check("batch_rows", False, {"raised": _raised(err)}, detail, ["batch_raises"])
        for i, r in enumerate(rows):
            accepted, law = rule[r]
            if out.accepted[i] != accepted:
                wrong.append(3 * first + i)
            elif out.terminal is not None:
                if out.terminal[i] != exact_token([Fraction(x) for x in law], terminal_u[r]):
                    wrong.append(3 * first + i)
            elif (out.terminal_rows[i] - torch.tensor(law, dtype=torch.float64)).abs().max() > 1e-12:
                wrong.append(3 * first + i)
    return Check(
        "batch_rows",
        not wrong,
        {"rows": 3, "k": k_lens, "wrong_rows": wrong},
        "a batch of 3 rows with K = 2, 0, 1, and one of K = 2, 0, 0: each row as the rule decides it alone",
        ["batch_rows_wrong"] if wrong else [],
    )


CASES = (impossible_draft, zero_target_mass, equal_rows, disjoint_supports, k_zero_row, batch_of_two, batch_rows)
