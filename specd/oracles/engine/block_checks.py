"""The block rule's proofs (``verify-oracle --rule block``): the engine's exact checks re-run on the
fixture with ``--rule block`` (one round, rounds to the horizon, -k auto, two sources, the shared-body
draft, a lookup, both layouts, ragged batches, Monte Carlo), the rule in exact rational arithmetic,
and Sun et al.'s Theorem 2 (E[A] under block verification >= E[A] token-wise) checked exactly.
Each check's name is the shared check's with ``block_`` in front."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from itertools import product

from specd.oracles.engine.checks import (
    CHECKS,
    Fixture,
    _exact,
    _ngram_exact,
    check_coupling,
    check_dtype_edges,
    check_monte_carlo,
    check_rational,
)
from specd.oracles.engine.rational import RationalTable, rational_block_difference
from specd.oracles.record import Check
from specd.oracles.reference import Reference, block_branch
from specd.oracles.rig import Rig

# The token-wise rule's own checks, which say nothing of block verification.
TOKEN_WISE_ONLY = (check_rational, check_coupling, check_dtype_edges)


def block_checks(fx: Fixture) -> list[Check]:
    """Every block-rule check on the fixture ``fx`` (its rig's rule is replaced by ``block``)."""
    rig = fx.rig.but(rule="block")
    exact, joint = _exact(rig, fx.horizon, fx.reference, "target", "exact_joint")
    bx = replace(fx, rig=rig, speculative=joint)
    shared = [exact] + [
        c(bx) for c in CHECKS if c not in TOKEN_WISE_ONLY and (c is not check_monte_carlo or fx.cfg.samples)
    ]
    shared.append(_ngram_exact(rig, fx.horizon))
    checks = [replace(c, name="block_" + c.name) for c in shared]
    return checks + [check_block_rational(fx), check_theorem_2(fx)]


def check_block_rational(fx: Fixture) -> Check:
    cfg = fx.cfg
    diff = rational_block_difference(cfg.vocab, cfg.k, fx.horizon, cfg.seed, prompt=fx.rig.prompt)
    return Check("block_exact_rational", diff == 0, {"difference": str(diff)}, "Fraction tables, no processors")


def expected_accepted(p_rows: list, q_rows: list, drafts: tuple[int, ...], one) -> tuple:
    """E[A | drafts] under the token-wise rule and under block verification, in ``one``'s arithmetic."""
    token, reach = one * 0, one
    for i, d in enumerate(drafts):
        reach *= min(one, p_rows[i][d] / q_rows[i][d])
        token += reach  # P(A >= i + 1)
    blocked = one * 0
    for accepted in range(1, len(drafts) + 1):
        found = block_branch(p_rows, q_rows, drafts, accepted, one)
        blocked += accepted * found[1] if found else 0
    return token, blocked


def acceptance_margin(p, q, k: int, one=Fraction(1), lookup: bool = False) -> tuple:
    """(E[A] token-wise, E[A] block) from one state, over every draft path: p(prefix) and q(prefix)
    give rows after a draft prefix (Fractions). ``lookup``: each path proposed deterministically
    (q the point mass on its tokens), every path weighted alike (each is some lookup's proposal)."""
    vocab = len(p(()))
    token_sum, block_sum = one * 0, one * 0
    for path in product(range(vocab), repeat=k):
        if lookup:
            weight = one / vocab**k
            q_rows = [[one * (x == d) for x in range(vocab)] for d in path]
        else:
            q_rows = [q(path[:i]) for i in range(k)]
            weight = one
            for i, d in enumerate(path):
                weight *= q_rows[i][d]
            if not weight:
                continue
        token, blocked = expected_accepted([p(path[:i]) for i in range(k + 1)], q_rows, path, one)
        token_sum += weight * token
        block_sum += weight * blocked
    return token_sum, block_sum


def check_theorem_2(fx: Fixture) -> Check:
    """Sun et al.'s Theorem 2, exactly (the rows as exact distributions, no sampling): on every table the
    oracle enumerates (the fixture's processed target and draft at the prompt and after each first
    token, and the rational tables), E[A] under block verification is at least the token-wise rule's;
    for lookups (point-mass drafts) the two are equal."""
    rig = fx.rig
    tables = _fixture_tables(rig) + [_rational_tables(fx)]
    margins, lookup_margins = [], []
    for name, p, q in tables:
        token, blocked = acceptance_margin(p, q, fx.cfg.k)
        margins.append((blocked - token, name, token, blocked))
        token_l, blocked_l = acceptance_margin(p, q, fx.cfg.k, lookup=True)
        lookup_margins.append(blocked_l - token_l)
    worst = min(margins)
    figures = {
        "tables": len(tables),
        "min_margin": float(worst[0]),
        "max_margin": float(max(m[0] for m in margins)),
        "worst_table": worst[1],
        "worst_expected_accepted_token_wise": float(worst[2]),
        "worst_expected_accepted_block": float(worst[3]),
        "lookup_margins_all_zero": all(m == 0 for m in lookup_margins),
    }
    passed = worst[0] >= 0 and figures["lookup_margins_all_zero"]
    return Check(
        "block_acceptance_theorem_2",
        passed,
        figures,
        "E[A] block - E[A] token-wise over every draft path, exact; lookups (point masses) gain exactly 0",
    )


def exactly_normalized(row: list[float]) -> list[Fraction]:
    """A float row as the distribution it stands for: its entries as Fractions, divided by their exact
    sum (a float row sums to 1 only up to rounding, and the theorem is about distributions)."""
    exact = [Fraction(x) for x in row]
    total = sum(exact)
    return [x / total for x in exact]


def _fixture_tables(rig: Rig) -> list:
    ref = Reference(rig)
    states = [rig.prompt] + [rig.prompt + (x,) for x in range(rig.vocab)]
    out = []
    for state in states:

        def p(prefix, state=state):
            return exactly_normalized(ref.p(state + prefix))

        def q(prefix, state=state):
            return exactly_normalized(ref.q(state + prefix))

        out.append((f"fixture after {list(state)}", p, q))
    return out


def _rational_tables(fx: Fixture) -> tuple:
    cfg = fx.cfg
    p_table, q_table = RationalTable(cfg.vocab, cfg.seed), RationalTable(cfg.vocab, cfg.seed + 7919)
    prompt = tuple(fx.rig.prompt)
    return ("rational", lambda prefix: p_table(prompt + prefix), lambda prefix: q_table(prompt + prefix))
