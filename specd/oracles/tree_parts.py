"""The tree checks' share of a ``verify-oracle`` run: which of them run under which ``--rule``, and
what the report says about the trees it checked."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from specd.oracles.fixture import OracleConfig
from specd.oracles.tree_checks import (
    TreeCase,
    check_tree_block,
    check_tree_exact,
    check_tree_greedy,
    check_tree_invariant,
    check_tree_rational,
    tree_case,
)
from specd.oracles.tree_engine_lab import TREE_LAB_VOCAB, TREE_VARIANTS, lab_shapes, run_tree_lab

Part = tuple[float, Callable[[], list]]


def tree_parts(cfg: OracleConfig, rules: tuple[str, ...]) -> tuple[TreeCase | None, list[Part], list[Part]]:
    """(the case, the checks' parts, the lab's parts) for the rules run. The case is built here, in
    the calling process, so that a tree too large to enumerate is refused before any work starts.
    The greedy rule's checks and lab variant run with the maximal rule's."""
    case = tree_case(cfg)
    if case is None:
        return None, [], []
    checks: list[Part] = []
    if "maximal" in rules:
        checks.append((0.3, lambda: [check_tree_exact(case)]))
        checks.append((0.05, lambda: [check_tree_greedy(case, cfg)]))
        checks.append((0.01, lambda: [check_tree_rational(case)]))
    if "invariant" in rules:
        checks.append((0.1, lambda: [check_tree_invariant(case)]))
    if "block" in rules:
        checks.append((0.0, lambda: [check_tree_block(case)]))
    ran = {"maximal", "greedy"} if "maximal" in rules else set()
    ran |= {"invariant"} & set(rules)
    variants = tuple(v for v in TREE_VARIANTS if v.rule in ran)
    lab: list[Part] = [(0.2, partial(run_tree_lab, cfg, variants))] if cfg.lab and variants else []
    return case, checks, lab


def tree_config(cfg: OracleConfig, case: TreeCase | None) -> dict | None:
    """The report's account of the trees checked (None: ``--tree none``)."""
    if case is None:
        return None
    return {
        "shapes": case.specs,
        "constructions": list(case.constructions),
        "prompts": [list(p) for p in case.prompts],
        "horizon": case.horizon,
        "lab_vocab": TREE_LAB_VOCAB,
        "lab_shapes": [s.spec for s in lab_shapes(cfg)],
    }
