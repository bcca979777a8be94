"""The degenerate rounds a tree sampler must get right (``verify-oracle --sampler ... --tree SPEC``),
one check each:

- ``no_nodes``: a round without drafts: no path, and the terminal drawn from the root's row.
- ``zero_target_mass``: rounds whose drafts include tokens the target gives no mass (p = 0 < q) and
  whose rows start with such a token, on the trees 1,2, 1,1,1 and 3 (``ZERO_MASS_TREES``), run once with
  every uniform at 0 and once just below 1 (the protocol's uniforms lie on [0, 1): a test U < p'/q'
  refuses p' = 0 at U = 0, and the first token of an inverse CDF is drawn there only if it has mass):
  nothing emitted may have target probability 0, and nothing may raise (a run can draw these rounds).
  The exact enumeration cannot see this (a single point of the uniforms has probability 0).
- ``bonus_row_total``: a bonus drawn from a row whose weights sum to 255/256, as a float16 softmax's
  may (``TOTAL_BONUS``), after no drafts and after an accepted leaf of the trees 1 and 1,1: the protocol draws
  the first token whose running sum exceeds U times the row's total, so the round's joint is the
  target's with that row normalized. Every table's rows sum to 1, where a draw at U alone is exact.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from specd.core.tree import DraftTree
from specd.core.tree_shape import parse_tree
from specd.errors import SamplerFailed
from specd.oracles.record import EXACT_TOLERANCE, NOT_APPLICABLE, Check, max_abs_diff
from specd.oracles.reference import chain_joint
from specd.oracles.samplers.tree_checks import TreeJoint, round_law, round_laws
from specd.oracles.samplers.tree_protocol import TreeSamplerUnderTest
from specd.oracles.samplers.tree_rounds import TreeRound, draft_trees


def check_no_nodes(sampler: TreeSamplerUnderTest) -> Check:
    """A round without drafts: the terminal is the root's row, nothing accepted."""
    p0 = [0.125, 0.625, 0.25]
    rnd = TreeRound(
        DraftTree((), ()),
        torch.tensor([p0], dtype=torch.float64),
        torch.tensor([p0], dtype=torch.float64),
        1.0,
        "sampled",
    )
    try:
        law, accepted, _, _ = round_law(sampler, rnd)
    except SamplerFailed as err:
        return Check("no_nodes", False, {}, f"a round without drafts: {err}", [err.finding])
    got = [law.get((x,), 0.0) for x in range(3)]
    wrong = accepted != 0 or sum(law.values()) < 1 - EXACT_TOLERANCE or max(abs(a - b) for a, b in zip(got, p0)) > 1e-12
    return Check(
        "no_nodes",
        not wrong,
        {"terminal_law": got, "expected_accepted": accepted},
        "N = 0: nothing to test, the terminal drawn from the root's row",
        ["no_nodes_wrong"] if wrong else [],
    )


# A table where the target gives no mass to the first token and to a middle one, both of draft mass (a
# draft of either has p = 0 < q, and each refusal's residual starts with a token of no mass), and the
# uniforms that probe it: 0, and the largest below 1 (1 - 2^-53).
ZERO_MASS_P, ZERO_MASS_Q = (0.0, 0.4, 0.0, 0.6), (0.3, 0.3, 0.4, 0.0)
# The trees: siblings below the root (1,2), a third level (1,1,1) and a third sibling (3): a test U <= p'/q' or a
# draw that takes the first running sum >= U placed at the third level or the third child only passed 1,2.
ZERO_MASS_TREES, EDGE_UNIFORMS = ("1,2", "1,1,1", "3"), (0.0, 1 - 2**-53)


def check_zero_mass(sampler, drawings) -> Check:
    """``zero_target_mass`` (module docstring), over the trees ``drawings`` draw on the table: the
    constructions the sampler answered in the exact check (one it refused there is not passed here), so a
    sampler that raises on one of these rounds fails: the rounds are ones a run can draw."""
    wrong, findings, checked = [], set(), 0
    for drawing, spec in ((d, spec) for d in drawings for spec in ZERO_MASS_TREES):
        shape = parse_tree(spec)
        rounds = draft_trees(shape, drawing, lambda _: list(ZERO_MASS_P), lambda _: list(ZERO_MASS_Q), ())
        for value in EDGE_UNIFORMS:
            try:
                laws = round_laws(sampler, [replace(r, uniforms_at=value) for r in rounds])
            except SamplerFailed as err:
                detail = f"{drawing} tree {spec}, every uniform at {value}: {err}"
                return Check("zero_target_mass", False, {}, detail, [err.finding])
            checked += len(rounds)
            for rnd, (law, _, _, _) in zip(rounds, laws):
                for emitted in law:
                    if finding := _zero_mass_finding(emitted, value):
                        findings.add(finding)
                        wrong.append(
                            f"{drawing} tree {spec} {list(rnd.tree.tokens)}, uniforms at {value}: "
                            f"emitted {list(emitted)}"
                        )
    if not drawings:
        return Check("zero_target_mass", None, {}, f"{NOT_APPLICABLE}the sampler refuses every construction asked")
    return Check(
        "zero_target_mass",
        not wrong,
        {"rounds": checked, "wrong": wrong[:5], "cases": len(wrong)},
        "drafts of target mass 0 (p = 0 < q), rows that start with such a token, every uniform at 0 and just "
        "below 1: no token of target mass 0 kept or drawn",
        sorted(findings),
    )


# The rows of ``bonus_row_total``, at V = 2 (a refusal's correction forced: the check is the bonus's): the root's
# (its test reads it) a distribution, the bonus row's weights multiples of 1/256 summing to 255/256 (exact in every
# float dtype): a draw at U alone takes the second token for U in [128/256, 128/255), where the rule takes the
# first, and finds none from U = 255/256.
TOTAL_ROOT_P, TOTAL_ROOT_Q = (0.75, 0.25), (0.5, 0.5)
TOTAL_BONUS = (128 / 256, 127 / 256)
TOTAL_DEPTHS = ("1", "1,1")  # a leaf one level down and two (a bonus path kept for deeper leaves passed the first)


def check_bonus_total(sampler, drawings) -> Check:
    """``bonus_row_total`` (module docstring): the round without drafts on the bonus row, then every tree 1 and
    1,1 each construction in ``drawings`` drafts, its leaf's row the bonus row (TOTAL_DEPTHS); each joint over
    what the round emits, completed by the target's rows (the bonus row normalized), against the target's
    (1e-12). Each is run first with the bonus row normalized: one not exact there (a rule inexact for that
    construction: its exact check says so) says nothing about the row's total and is left out, said in the
    detail (every one: n/a)."""
    cases = [("no drafts", None, None)]
    cases += [(f"{drawing} tree {spec}", drawing, spec) for drawing in drawings for spec in TOTAL_DEPTHS]
    normalized = tuple(x / sum(TOTAL_BONUS) for x in TOTAL_BONUS)
    worst, left_out = 0.0, []
    for what, drawing, spec in cases:
        try:
            exact_there, scaled = (_total_diff(sampler, drawing, spec, row) for row in (normalized, TOTAL_BONUS))
        except SamplerFailed as err:
            detail = f"{what}, the bonus row normalized or summing to 255/256: {err}"
            return Check("bonus_row_total", False, {}, detail, [err.finding])
        if exact_there > EXACT_TOLERANCE:
            left_out.append(what)
            continue
        worst = max(worst, scaled)
    if len(left_out) == len(cases):
        detail = f"{NOT_APPLICABLE}the sampler is not exact on these rounds with a bonus row that sums to 1"
        return Check("bonus_row_total", None, {}, detail)
    passed = worst <= EXACT_TOLERANCE
    detail = (
        "a bonus row whose weights sum to 255/256, after no drafts and after an accepted leaf one level and two "
        "down: drawn at U times the row's total"
    )
    if left_out:
        detail += f"; left out, not exact with that row normalized either: {', '.join(left_out)}"
    figures = {"max_abs_diff": worst, "left_out": left_out}
    return Check("bonus_row_total", passed, figures, detail, [] if passed else ["terminal_ignores_row_total"])


def _total_diff(sampler, drawing: str | None, spec: str | None, row) -> float:
    """The largest difference from the target's of the joint of what the rounds of ``check_bonus_total`` emit
    with the bonus row ``row`` (``drawing`` None: the round without drafts, else every tree ``spec`` it drafts,
    whose rows above the leaf are TOTAL_ROOT_P's), each emission completed by the target's rows (``TreeJoint``);
    and of its mass from 1."""
    depth = 0 if spec is None else parse_tree(spec).depth
    target_rows = [TOTAL_ROOT_P] * depth + [tuple(x / sum(row) for x in row)]  # the target's law at each depth
    target_of = lambda prefix: list(target_rows[len(prefix)])  # noqa: E731
    if drawing is None:
        rows = torch.tensor([row], dtype=torch.float64), torch.tensor([TOTAL_ROOT_Q], dtype=torch.float64)
        rounds = [TreeRound(DraftTree((), ()), *rows, 1.0, "sampled")]
    else:
        p_of = lambda prefix: list(row if len(prefix) == depth else TOTAL_ROOT_P)  # noqa: E731
        rounds = draft_trees(parse_tree(spec), drawing, p_of, lambda _: list(TOTAL_ROOT_Q), ())
    joint = TreeJoint(sampler, rounds, target_of, (), depth + 1).joint
    return max(max_abs_diff(chain_joint(target_of, (), depth + 1), joint), abs(sum(joint.values()) - 1))


def _zero_mass_finding(emitted: tuple[int, ...], value: float) -> str | None:
    """What a round that emitted ``emitted`` (the path's tokens, then the terminal) with every uniform at
    ``value`` shows on the zero-mass table: nothing (every token has target mass), a draft of none kept,
    or a terminal of none."""
    at = next((i for i, t in enumerate(emitted) if ZERO_MASS_P[t] == 0), None)
    if at is None:
        return None
    if at == len(emitted) - 1:
        return "zero_mass_emitted"
    return "u_zero_accepts_p_zero" if value == 0 else "p_zero_accepted"
