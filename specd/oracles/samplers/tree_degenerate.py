"""The degenerate rounds a tree sampler must get right (``verify-oracle --sampler ... --tree SPEC``),
one check each:

- ``no_nodes``: a round without drafts: no path, and the terminal drawn from the root's row.
- ``zero_target_mass``: rounds whose drafts include tokens the target gives no mass (p = 0 < q) and
  whose rows start with such a token, on the trees 1,2, 1,1,1 and 3 (``ZERO_MASS_TREES``), run once with
  every uniform at 0 and once just below 1 (the protocol's uniforms lie on [0, 1): a test U < p'/q'
  refuses p' = 0 at U = 0, and the first token of an inverse CDF is drawn there only if it has mass):
  nothing emitted may have target probability 0, and nothing may raise (a run can draw these rounds).
  The exact enumeration cannot see this (a single point of the uniforms has probability 0).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from specd.core.tree import DraftTree
from specd.core.tree_shape import parse_tree
from specd.errors import SamplerFailed
from specd.oracles.record import EXACT_TOLERANCE, NOT_APPLICABLE, Check
from specd.oracles.samplers.tree_checks import round_law, round_laws
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
