"""``verify-oracle``: run the checks and put one JSON-able report together (the engine oracle with
its failure lab, chains and trees, or the sampler oracle for ``--sampler``). The one module above the
oracle's three parts (specd.oracles.engine, .samplers, .lab): it chooses which of their parts a run
runs, and assembles what they return."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from functools import partial

import torch

from specd.errors import SamplerAborted, SamplerFailed, UsageError
from specd.oracles.engine.block_checks import block_checks
from specd.oracles.engine.checks import CHECKS, Fixture, _backend_parity, _exact, _ngram_exact, check_monte_carlo
from specd.oracles.engine.invariant import invariant_checks
from specd.oracles.engine.tree_checks import (
    TreeCase,
    check_tree_block,
    check_tree_eos,
    check_tree_exact,
    check_tree_greedy,
    check_tree_invariant,
    check_tree_rational,
    tree_case,
)
from specd.oracles.fixture import LAB_MAX_K, OracleConfig, build_rig
from specd.oracles.lab.blocks import run_block_lab
from specd.oracles.lab.chains import LAB_FAMILIES, run_lab
from specd.oracles.lab.invariant import invariant_lab
from specd.oracles.lab.shipped import SHIPPED_VARIANTS
from specd.oracles.lab.trees import TREE_LAB_VOCAB, TREE_VARIANTS, lab_shapes, run_tree_lab
from specd.oracles.parallel import processes, run_parts
from specd.oracles.record import EXACT_TOLERANCE, Check
from specd.oracles.reference import target_joint
from specd.oracles.samplers import checks as sc
from specd.oracles.samplers.counterexample import minimal_counterexample
from specd.oracles.samplers.coverage import chain_cases, coverage
from specd.oracles.samplers.covered import check_exact_cases
from specd.oracles.samplers.degenerate import CASES as DEGENERATE_CASES
from specd.oracles.samplers.edges import check_dtype_edges
from specd.oracles.samplers.low_precision import check_low_precision
from specd.oracles.samplers.price import priced
from specd.oracles.samplers.sandbox import DEFAULT_TIMEOUT, ChildSampler, sampler_session
from specd.oracles.samplers.tree_report import run_tree_sampler_oracle

SCHEMA = "specd.verify-oracle/v1"
RULE_SETS = {"both": ("maximal", "invariant"), "all": ("maximal", "invariant", "block")}  # --rule's groups
SAMPLER_RULES = {"maximal": "maximal", "both": "maximal", "block": "block"}  # --sampler's --rule


SEQUENCE_TABLE_LIMIT = 32


@contextmanager
def oracle_running(one_thread: bool = False):
    """The conditions an oracle run runs in (each restored after):
    - the cyclic collector paused: the oracle makes millions of short-lived objects and no cycles
      worth chasing, reference counting frees them, and pausing it saves about a third;
    - torch in inference mode: no autograd books kept on those objects' small tensors (the same
      values, a run about a tenth sooner; a tensor made there is read-only outside it, and no report
      holds one), in the processes it forks too (a sampler's among them);
    - ``one_thread``: torch on one thread: the sampler oracle calls the sampler on rows of a few
      tokens, where a second thread only waits, and on a busy machine a two-thread softmax of 2 x 3
      values took 16 ms instead of 1 us."""
    was, threads = gc.isenabled(), torch.get_num_threads()
    gc.disable()
    if one_thread:
        torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            yield
    finally:
        if was:
            gc.enable()
        if one_thread:
            torch.set_num_threads(threads)


def run_oracle(cfg: OracleConfig, jobs: int | None = None) -> dict:
    """Every check on the fixture of ``cfg`` (and the failure lab) -> one JSON-able report. ``jobs``:
    processes the independent parts run on (default: ``usable_cores``; the report is the same)."""
    jobs = processes(jobs)
    with oracle_running():
        return _run_oracle(cfg, jobs)


# A part of the run: (its rough share of a run's time, to start the longest first; the part).
Part = tuple[float, Callable[[], list]]


def _parts(cfg: OracleConfig, fx: Fixture, exact: Check) -> tuple[list[Part], list[Part]]:
    """The run's independent parts, in the report's order: (the checks', the failure lab's)."""
    rig, horizon = fx.rig, fx.horizon
    rules = RULE_SETS.get(cfg.rule, (cfg.rule,))
    checks: list[Part] = []
    lab: list[Part] = []
    if "maximal" in rules:  # the token-wise rule's proofs
        checks.append((0.0, lambda: [exact]))
        for check in CHECKS:
            if check is not check_monte_carlo or cfg.samples:
                weight = 0.2 * cfg.samples / 1000 if check is check_monte_carlo else 0.05
                checks.append((weight, partial(_as_list, check, fx)))
        checks.append((0.01, lambda: [_backend_parity(rig, fx.reference, horizon)]))
        checks.append((0.02, lambda: [_ngram_exact(rig, horizon)]))
        if cfg.lab:
            lab += [(0.1, partial(run_lab, cfg, families=(family,))) for family in LAB_FAMILIES]
            lab.append((0.06, partial(run_lab, cfg, SHIPPED_VARIANTS, families=("",))))
    if "invariant" in rules:  # the invariant rule's: pointwise, against the oracle's own chain, in law
        checks.append((0.3, partial(invariant_checks, rig, horizon)))
        if cfg.lab:
            # at the lab's largest K: its variants show on a few noise draws, and a longer text has more
            # positions to show on (at K = 2, V = 2 tables 68 and 98 of 100 hide two from 128 draws)
            deep = replace(cfg, k=LAB_MAX_K)
            lab.append((0.15, lambda: invariant_lab(build_rig(deep, lab=True), cfg.seed)))
    if "block" in rules:  # block verification's: the shared exact checks under it, rationals, Theorem 2
        checks.append((0.2, partial(block_checks, fx)))
        if cfg.lab:
            lab.append((0.2, partial(run_block_lab, cfg)))
    return checks, lab


# -- the trees' share of the run: which tree checks run under which --rule --------------------------
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
        checks.append((0.1, lambda: [check_tree_eos(case)]))
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


def _as_list(check: Callable[[Fixture], Check], fx: Fixture) -> list[Check]:
    return [check(fx)]


def _run_oracle(cfg: OracleConfig, jobs: int) -> dict:
    t_start = time.perf_counter()
    # the trees' checks (every rule's, and the lab's tree bugs); a tree too large is refused before any work
    tree, tree_checks, tree_lab = tree_parts(cfg, RULE_SETS.get(cfg.rule, (cfg.rule,)))
    horizon = cfg.effective_horizon
    rig = build_rig(cfg)
    reference = target_joint(rig, horizon)
    exact, spec_joint = _exact(rig, horizon, reference, "target", "exact_joint")
    fx = Fixture(cfg, rig, horizon, reference, spec_joint)
    check_parts, lab_parts = _parts(cfg, fx, exact)
    check_parts, lab_parts = check_parts + tree_checks, lab_parts + tree_lab
    parts = check_parts + lab_parts
    start = sorted(range(len(parts)), key=lambda i: -parts[i][0])  # the longest first
    results: list[list] = [[] for _ in parts]
    for i, result in zip(start, run_parts([parts[i][1] for i in start], jobs)):
        results[i] = result
    checks: list[Check] = [c for r in results[: len(check_parts)] for c in r]
    lab: list[dict] = [row for r in results[len(check_parts) :] for row in r]
    if cfg.lab:
        checks.append(lab_verdict(lab))
    empirical = next((c.empirical for c in checks if c.empirical is not None), None)
    return {
        "schema": SCHEMA,
        "passed": all(ch.passed is not False for ch in checks),  # None: not applicable at this size
        "config": {
            "vocab": cfg.vocab,
            "k": cfg.k,
            "horizon": horizon,
            "seed": cfg.seed,
            "samples": cfg.samples,
            "layout": cfg.layout,
            "backend": cfg.backend,
            "rule": cfg.rule,
            "prompt": list(rig.prompt),
            "target_policy": rig.target_policy.describe(),
            "draft_policy": rig.draft_policy.describe(),
            "lab": _lab_config(cfg),
            "tree": tree_config(cfg, tree),
        },
        "checks": [{"name": c.name, "passed": c.passed, "figures": c.figures, "detail": c.detail} for c in checks],
        "failure_lab": lab,
        "sequences": _sequence_table(reference, spec_joint, empirical),
        "elapsed_s": time.perf_counter() - t_start,
    }


def lab_verdict(lab: list[dict]) -> Check:
    """The failure lab's check: every variant that can be seen at this size caught (those that
    cannot are counted apart, each with its reason). A lab where none can be seen proves nothing:
    not applicable, never passed."""
    seen = [v for v in lab if v["applicable"]]
    caught = sum(bool(v["caught"]) for v in seen)
    apart = len(lab) - len(seen)
    figures = {"variants": len(lab), "caught": caught, "applicable": len(seen), "not_applicable": apart}
    detail = "every known-wrong variant that can be seen at this size must be caught"
    if apart:
        detail += f"; {apart} not applicable at this size (each with its reason)"
    return Check("failure_lab", caught == len(seen) if seen else None, figures, detail)


def _sequence_table(reference: dict, speculative: dict, empirical: dict | None) -> list[dict]:
    if len(reference) > SEQUENCE_TABLE_LIMIT:
        return []
    return [
        {
            "tokens": list(seq),
            "target": reference[seq],
            "speculative": speculative.get(seq, 0.0),
            "monte_carlo": None if empirical is None else empirical.get(seq, 0.0),
        }
        for seq in sorted(reference)
    ]


def _lab_config(cfg: OracleConfig) -> dict:
    rig = build_rig(cfg, lab=True)
    return {
        "vocab": rig.vocab,
        "k": rig.k,
        "horizon": rig.k + 1,
        "prompt": list(rig.prompt),
        "target_policy": rig.target_policy.describe(),
        "draft_policy": rig.draft_policy.describe(),
    }


def run_sampler_oracle(
    cfg: OracleConfig,
    spec,
    input_rounding: float = 0.0,
    timeout: float = DEFAULT_TIMEOUT,
    tree: str | None = None,
    jobs: int | None = None,
    exact_size: bool = False,
) -> dict:
    """Every sampler-level check on the sampler ``spec`` (a shipped adapter's name or module:attr, or
    the callable itself, whose rows suffer ``input_rounding`` on their way in), run in a process of
    its own where one can be forked (specd.oracles.samplers.sandbox; ``timeout``: seconds a call may take)
    -> one report. The exact check covers the sizes where each class of slip shows, over several tables
    (specd.oracles.samplers.coverage; ``exact_size``: the named size only, over those tables). With ``tree`` (a
    --tree SPEC), ``spec`` is a tree sampler (specd.oracles.samplers.tree_report), loaded in ``jobs`` processes
    that share its rounds (default: ``usable_cores``; the report is the same)."""
    if jobs is not None and tree is None:
        raise UsageError(
            "--jobs with --sampler shares a tree sampler's rounds among processes (give --tree); "
            "a chain sampler is checked in one"
        )
    # the rule the sampler claims: block verification, or the token-wise rule (at K = 1, as in
    # dtype_edges and the degenerate cases, the two decide alike); "both", the default, is the latter.
    # Refused before the sampler's module is imported (importing runs its code).
    if cfg.rule not in SAMPLER_RULES:
        raise UsageError(
            f"--sampler checks a sampler against one rule: --rule maximal or block, not {cfg.rule} "
            "(the invariant rule has no sampler protocol)"
        )
    rule = SAMPLER_RULES[cfg.rule]
    if tree is not None:
        with oracle_running(one_thread=True):
            return run_tree_sampler_oracle(cfg, spec, tree, rule, timeout, processes(jobs), exact_size)
    with oracle_running(one_thread=True):
        t_start = time.perf_counter()
        cases = chain_cases(cfg, exact_size)
        with sampler_session(spec, input_rounding, timeout) as sampler:
            checks, tokens, counterexample, price = _sampler_checks(sampler, cfg, rule, cases, exact_size)
        document = _sampler_document(sampler, cfg, rule, checks, tokens)
        document["coverage"] = coverage(cases, exact_size, document["passed"])
        document |= {"counterexample": counterexample, "price": price, "elapsed_s": time.perf_counter() - t_start}
        return document


def _sampler_document(sampler, cfg: OracleConfig, rule: str, checks: list[Check], tokens: bool | None) -> dict:
    """A chain sampler's report, its checks and findings (the coverage, counterexample, price and time
    follow)."""
    return {
        "schema": SCHEMA,
        "mode": "sampler",
        "passed": all(c.passed is not False for c in checks),
        "sampler": {
            "spec": sampler.name,
            "name": sampler.name,
            "description": sampler.description,
            "returns": {True: "tokens", False: "distributions", None: None}[tokens],
            "process": "its own" if isinstance(sampler, ChildSampler) else "specd's",
        },
        "config": {"vocab": cfg.vocab, "k": cfg.k, "seed": cfg.seed, "rule": rule},
        "checks": [
            {"name": c.name, "passed": c.passed, "figures": c.figures, "detail": c.detail, "findings": c.findings}
            for c in checks
        ],
        "findings": sorted({f for c in checks for f in c.findings}),
    }


def _sampler_checks(
    sampler, cfg: OracleConfig, rule: str, cases: list, exact_size: bool = False
) -> tuple[list[Check], bool | None, dict | None, dict]:
    """-> (the checks, whether it returns tokens, the counterexample, what a sampler that is not exact
    costs). A sampler that raises or returns what the protocol does not allow on an ordinary round has
    nothing else checked, nor one that does so later in the rational, the dtype-edge or the low-precision rows
    (that check fails, saying where, and the checks before it stand); one whose process ends, forks or hangs
    (SamplerAborted) fails the check it was in, and nothing more is asked."""
    checks: list[Check] = []
    tokens, counterexample, price, step, failed_at = None, None, {}, "ordinary_round", None
    try:
        try:
            tokens = sc.returns_tokens(sampler)
            step = "exact_joint"
            exact, failed_at = check_exact_cases(sampler, cases, tokens, rule)
            checks.append(exact)
            step = "exact_rational"
            checks.append(sc.check_rational(sampler, cfg.vocab, cfg.k, cfg.seed, tokens, rule, exact_size))
            step = "dtype_edges"
            checks.append(check_dtype_edges(sampler, tokens))
            step = "exact_low_precision"
            checks.append(check_low_precision(sampler, cases, tokens, rule))
        except SamplerFailed as err:  # raised or returned what the protocol does not allow: nothing else to check
            if step in ("ordinary_round", "exact_joint"):  # the named size's first table (a later case says its own)
                detail, step = f"{err} (on an ordinary round, V={cfg.vocab}, K={cfg.k})", "ordinary_round"
            else:  # the rational, the dtype-edge or the low-precision rows, which say where
                detail = f"{err} (in {step})"
            return [*checks, Check(step, False, {}, detail, [err.finding])], tokens, None, {}
        for case in DEGENERATE_CASES:
            step = case.__name__
            checks.append(case(sampler, tokens))
        if checks[0].passed is False:
            if rule == "maximal" and failed_at is not None and checks[0].findings == ["not_exact"]:
                step = "price"
                case, table = failed_at  # what the lossy sampler costs, exactly, where it is not exact
                differs = sc.batch_difference(sampler, table, case.k, tokens, rule)
                if differs is None:  # a law of its own, to price
                    price = {"chain": priced(sampler, table, case.k, tokens)}
                    checks[0].figures["tv_horizon"] = price["chain"].get("tv_horizon")
                    read_otherwise(checks[0], price["chain"], table.name)
                else:  # a row's answer depends on the batch it came in: no one law to price
                    checks[0].findings.append(BATCH_DEPENDENT)
                    counterexample = {"vocab": case.vocab, "k": case.k, "table": table.name, **differs}
            if checks[0].findings != [READ_OTHERWISE]:  # its cells' masses are the rule's reading: none to show
                step = "minimal_counterexample"
                build = lambda v, k, seed: build_rig(OracleConfig(vocab=v, k=k, seed=seed, lab=False))  # noqa: E731
                found = minimal_counterexample(sampler, tokens, build, rule=rule, failed_at=failed_at)
                counterexample = found or counterexample  # else the cell its batch changed
        elif checks[1].passed is False:  # exact in float64 on the seeded tables, not on the dyadic ones
            counterexample = checks[1].counterexample
        elif checks[2].passed is False:
            counterexample = checks[2].counterexample
        elif checks[3].passed is False:  # exact in float64, not with the same weights in a low precision
            counterexample = checks[3].counterexample
    except SamplerAborted as err:
        where = f" (on an ordinary round, V={cfg.vocab}, K={cfg.k})" if step == "ordinary_round" else ""
        checks.append(Check(step, False, {}, f"{err}{where}; nothing more was asked of it", [err.finding]))
    return checks, tokens, counterexample, price


READ_OTHERWISE = "uniforms_read_otherwise"
BATCH_DEPENDENT = "answers_depend_on_the_batch"  # a table's cells answered otherwise in one batch than in several


def read_otherwise(exact: Check, price: dict, table: str) -> None:
    """``exact_joint`` failed, yet the sampler's own cells, integrated on the uniforms' grid (``price``,
    specd.oracles.samplers.price), give the target's law on that table: it reads the uniforms otherwise
    than the protocol (``1 - u``, tokens sorted by weight before the inverse CDF), which the check,
    comparing outcomes uniform by uniform, cannot integrate. Still not passed: its law is not proven on
    the other tables and sizes. Renamed from ``not_exact``, which would claim a law it does not have."""
    tv = price.get("tv_horizon")
    if tv is None or tv > EXACT_TOLERANCE or not price.get("threshold_shaped"):
        return
    exact.findings = [READ_OTHERWISE]
    exact.detail = (
        "its outcomes are not the rule's uniform by uniform, yet its own "
        f"cells, integrated on the uniforms' grid, give the target's law on the table {table} (TV {tv:.1e}): "
        "it reads the uniforms otherwise than the protocol (a draft kept while U < p(d)/q(d); the token the "
        "inverse CDF at terminal_u in token order), so its law is proven on no other table or size; draw "
        "as the protocol does, or return the distribution"
    )
