"""``verify-oracle --sampler ... --tree SPEC``: a tree sampler's checks in one JSON-able report (the
sampler report's schema, with the tree, and the price of each construction it is not exact under)."""

from __future__ import annotations

import time
from dataclasses import replace

from specd.core.tree_shape import parse_tree
from specd.errors import SamplerAborted, UsageError
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.record import Check
from specd.oracles.samplers.coverage import Case, coverage, tree_cases
from specd.oracles.samplers.sandbox import DEFAULT_TIMEOUT, ChildTreeSampler, sampler_session
from specd.oracles.samplers.tree_checks import check_cases, tree_counterexample
from specd.oracles.samplers.tree_degenerate import check_bonus_total, check_no_nodes, check_zero_mass
from specd.oracles.samplers.tree_rounds import DRAWINGS, count_rounds, shape_nodes

PRICE_KEYS = ("tv_horizon", "tv_per_position", "expected_accepted", "exact_rule_expected_accepted")


def tree_drawings(shape) -> tuple[str, ...]:
    """The constructions a shape asks for: its prefix's (rank: with and without the draft's rows), or all."""
    if shape.drawn is None:
        return DRAWINGS
    return ("rank", "lookup") if shape.drawn == "rank" else (shape.drawn,)


def run_tree_sampler_oracle(
    cfg: OracleConfig,
    spec,
    tree: str,
    rule: str = "maximal",
    timeout: float = DEFAULT_TIMEOUT,
    jobs: int = 1,
    exact_size: bool = False,
) -> dict:
    """Every tree-sampler check of the sampler ``spec`` (a shipped rule's name, module:attr, or the
    callable) on the tree ``tree`` over the fixture of ``cfg`` (its K is the tree's depth) and, unless
    ``exact_size``, at the smallest sizes where each class of slip shows, over several tables
    (specd.oracles.samplers.coverage), the sampler in a process of its own where one can be forked
    (specd.oracles.samplers.sandbox; ``timeout``: seconds one round may take; ``jobs``: how many such processes
    share the rounds; the report is the same). Bad input is refused before the sampler's module is
    imported (importing runs its code)."""
    if rule != "maximal":
        raise UsageError(f"--tree with --sampler checks the token-wise rule over trees; --rule {rule} has no tree form")
    shape = parse_tree(tree)
    shape_nodes(shape)  # a static shape
    cfg = replace(cfg, k=shape.depth, horizon=None)
    drawings = tree_drawings(shape)
    for drawing in drawings:
        count_rounds(shape, cfg.vocab, drawing)
    t_start = time.perf_counter()
    cases = tree_cases(cfg, shape, exact_size)
    with sampler_session(spec, 0.0, timeout, tree=True, processes=jobs) as sampler:
        checks, found = _tree_checks(sampler, cfg, cases, drawings)
    failed = [d for d, c in zip(drawings, checks) if c.passed is False and c.findings == [f"not_exact_{d}"]]
    smallest = min(found.values(), key=lambda cx: cx["search_order"], default=None)
    passed = all(c.passed is not False for c in checks)
    price = {
        d: {key: c.figures[key] for key in PRICE_KEYS if key in c.figures}
        for d, c in zip(drawings, checks)
        if d in failed
    }
    return {
        "schema": "specd.verify-oracle/v1",
        "mode": "sampler",
        "passed": passed,
        "sampler": {
            "spec": sampler.name,
            "name": sampler.name,
            "description": sampler.description,
            "returns": "tree",
            "process": "its own" if isinstance(sampler, ChildTreeSampler) else "specd's",
        },
        "config": {"vocab": cfg.vocab, "k": shape.depth, "seed": cfg.seed, "rule": rule},
        "tree": {"spec": tree, "nodes": len(shape.choices or ()), "depth": shape.depth, "drawings": list(drawings)},
        "checks": [c.as_dict(with_findings=True) for c in checks],
        "coverage": _fewer_tables_said(coverage(cases, exact_size, passed), checks),
        "findings": sorted({f for c in checks for f in c.findings}),
        "counterexample": smallest,
        "counterexamples": found,
        "price": price,
        "elapsed_s": time.perf_counter() - t_start,
    }


def _tree_checks(sampler, cfg: OracleConfig, cases: list[Case], drawings) -> tuple[list[Check], dict]:
    """-> (the checks, each failed construction's smallest counterexample). A sampler whose process
    ends, forks or hangs (SamplerAborted) fails the check it was in, and nothing more is asked of it."""
    checks: list[Check] = []
    step = drawings[0]
    try:
        for drawing in drawings:
            step = f"exact_joint_{drawing}"
            checks.append(check_cases(sampler, cases, drawing, refusable=len(drawings) > 1))
        if all(c.passed is None for c in checks):
            detail = "the sampler refused every construction asked"
            checks.append(Check("ordinary_round", False, {}, detail, ["refused_every_tree"]))
        step = "no_nodes"
        checks.append(check_no_nodes(sampler))
        step = "zero_target_mass"
        answered = [d for d, c in zip(drawings, checks) if c.passed is not None]  # a refused one is n/a there
        checks.append(check_zero_mass(sampler, answered))
        step = "bonus_row_total"
        checks.append(check_bonus_total(sampler, answered))
        failed = [(d, c) for d, c in zip(drawings, checks) if c.passed is False and c.findings == [f"not_exact_{d}"]]
        build = lambda v, k, seed: build_rig(replace(cfg, vocab=v, k=k, seed=seed, horizon=None))  # noqa: E731
        step = "minimal_counterexample"
        found = {d: tree_counterexample(sampler, [d], build, failed_at=_failed_at(cases, c)) for d, c in failed}
    except SamplerAborted as err:
        checks.append(Check(step, False, {}, f"{err}; nothing more was asked of it", [err.finding]))
        return checks, {}
    return checks, {d: cx for d, cx in found.items() if cx is not None}


def _failed_at(cases: list[Case], check: Check) -> tuple[Case, object] | None:
    """The case and table a check found the sampler not exact on (its figures' ``not_exact_at``)."""
    at = check.figures.get("not_exact_at")
    for case in cases if at else ():
        for table in case.tables if case.label == at["case"] else ():
            if table.name == at["table"]:
                return case, table
    return None


def _fewer_tables_said(covered: dict, checks: list) -> dict:
    """The claim, naming each construction checked on fewer tables than the rest (tables that cannot
    draw its trees left out: specd.oracles.samplers.tree_checks.drawable)."""
    fewer = [f"{c.name} on {c.figures['tables']}" for c in checks if "undrawable_tables" in c.figures]
    if covered["claim"] is not None and fewer:
        covered["claim"] += f" ({', '.join(fewer)}: the others cannot draw its trees)"
    return covered
