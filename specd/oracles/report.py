"""``verify-oracle``: build the fixture, run every check, return one JSON-able report."""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache

import torch

from specd.core.layouts import LAYOUTS, make_layout
from specd.core.probability import check_backend, softmax
from specd.core.processors import SamplingPolicy, check_bias, check_penalty, check_temperature
from specd.core.sampler import RejectionSampler
from specd.core.state import Request
from specd.core.table_model import TableModel
from specd.errors import SamplerFailed, SpecdError, UsageError
from specd.oracles import sampler_checks as sc
from specd.oracles.coupling import coupling_matrix
from specd.oracles.exact import Enumerator, Reference, max_abs_diff, speculative_joint, target_joint
from specd.oracles.lab import NGRAM_VARIANTS, VARIANTS, ngram_rig
from specd.oracles.montecarlo import FAILURE_PROBABILITY, bernstein_bound, run_monte_carlo
from specd.oracles.rational import rational_difference
from specd.oracles.rig import Rig
from specd.oracles.samplers import SamplerUnderTest, load_sampler, rule_sampler
from specd.policy.autok import AutoK, FixedCosts
from specd.policy.ledger import CostModel

SCHEMA = "specd.verify-oracle/v1"
EXACT_TOLERANCE = 1e-12
BACKEND_TOLERANCE = {"float64": 1e-12, "float32": 1e-6}
MAX_SEQUENCES = 100_000
MAX_DRAFT_PATHS = 20_000
MAX_SAMPLES = 200_000  # a batch of this many requests through the engine: about a minute
SEQUENCE_TABLE_LIMIT = 32
LAB_MC_SAMPLES = 64
# -k auto's rule under costs that do not move (so the enumeration is deterministic): a draft step
# of 0.15 target steps and 0.05 per extra verified row make K = 0, 1 and 2 each the best for some
# acceptance history.
AUTO_COSTS = FixedCosts(CostModel(draft_cost=0.15, row_cost=0.05, draft_row_cost=0.0, state_cost=0.02))


@dataclass(frozen=True)
class OracleConfig:
    vocab: int = 2
    k: int = 3
    seed: int = 0
    horizon: int | None = None  # default k + 1
    samples: int = 2000
    target_temperature: float = 1.0
    draft_temperature: float = 0.7
    target_bias: dict[int, float] = field(default_factory=dict)
    draft_bias: dict[int, float] = field(default_factory=dict)
    repetition_penalty: float | None = None
    layout: str = "replay_frontier"
    backend: str = "max_shift"
    prompt: tuple[int, ...] = (0, 1)
    lab: bool = True

    def __post_init__(self) -> None:
        """Every value checked once, here: sizes, policies, and that the case can be enumerated."""
        if self.vocab < 2:
            raise UsageError(f"--vocab must be >= 2, got {self.vocab}")
        if self.k < 1:
            raise UsageError(f"--k must be >= 1, got {self.k}")
        if self.horizon is not None and self.horizon < 1:
            raise UsageError(f"--horizon must be >= 1, got {self.horizon}")
        if not 0 <= self.samples <= MAX_SAMPLES:
            raise UsageError(f"--samples must be in 0..{MAX_SAMPLES}, got {self.samples}")
        check_temperature(self.target_temperature, "--target-temperature")
        check_temperature(self.draft_temperature, "--draft-temperature")
        check_penalty(self.repetition_penalty, "--repetition-penalty")
        check_bias(self.target_bias, "--target-bias", self.vocab)
        check_bias(self.draft_bias, "--draft-bias", self.vocab)
        make_layout(self.layout)
        check_backend(self.backend)
        # Compare logarithms: vocab ** k itself would take minutes to compute for k = 10**9.
        log_v = math.log(self.vocab)
        if self.effective_horizon * log_v > math.log(MAX_SEQUENCES) or self.k * log_v > math.log(MAX_DRAFT_PATHS):
            raise UsageError(
                f"case too large to enumerate: vocab^horizon = {self.vocab}^{self.effective_horizon} sequences and "
                f"vocab^k = {self.vocab}^{self.k} draft paths (limits {MAX_SEQUENCES} and {MAX_DRAFT_PATHS})"
            )

    @property
    def effective_horizon(self) -> int:
        return self.horizon if self.horizon is not None else self.k + 1


def build_rig(cfg: OracleConfig, lab: bool = False) -> Rig:
    v = min(cfg.vocab, LAB_MAX_VOCAB) if lab else cfg.vocab
    target = TableModel(v, seed=2 * cfg.seed + 1, name="target")
    draft = TableModel(v, seed=2 * cfg.seed + 2, name="draft")
    if lab:  # fixed policies that exercise every processor kind (documented in the report)
        target_policy = SamplingPolicy.build(temperature=0.9, logit_bias={0: 0.4}, repetition_penalty=1.5)
        draft_policy = SamplingPolicy.build(temperature=0.6, top_k=v - 1 if v >= 3 else None)
    else:
        target_policy = SamplingPolicy.build(
            temperature=cfg.target_temperature, logit_bias=cfg.target_bias, repetition_penalty=cfg.repetition_penalty
        )
        draft_policy = SamplingPolicy.build(temperature=cfg.draft_temperature, logit_bias=cfg.draft_bias)
    # The lab's one-token prompt leaves tokens unseen, so a repetition state that
    # wrongly absorbs a rejected draft changes later rows.
    prompt = (0,) if lab else tuple(t % v for t in cfg.prompt)
    k = lab_k(cfg) if lab else cfg.k
    return Rig(target, draft, target_policy, draft_policy, k, prompt, cfg.layout, cfg.backend, torch.float64)


LAB_MAX_VOCAB = 3
LAB_MAX_K = 3


def lab_k(cfg: OracleConfig) -> int:
    """The lab needs a position after a rejection to exist (K >= 2); catching a known-wrong
    variant needs no bigger case than V = 3, K = 3, however large the checked one is."""
    return min(max(cfg.k, 2), LAB_MAX_K)


@dataclass
class Check:
    name: str
    passed: bool
    figures: dict
    detail: str = ""
    empirical: dict | None = None  # Monte Carlo frequencies, for the sequence table


@dataclass(frozen=True)
class Fixture:
    """What every check of one oracle run shares."""

    cfg: OracleConfig
    rig: Rig
    horizon: int
    reference: dict  # the target joint over V^H sequences
    speculative: dict  # the exact speculative joint (one round, target completion)


def exact_check(name: str, reference: dict, joint: dict, detail: str) -> Check:
    """Equal joints, and both whole: a joint that lost its mass (NaN rows, every branch
    refused) must fail even where each remaining cell happens to agree."""
    diff = max_abs_diff(reference, joint)
    mass, reference_mass = sum(joint.values()), sum(reference.values())
    whole = abs(mass - 1.0) <= EXACT_TOLERANCE and abs(reference_mass - 1.0) <= EXACT_TOLERANCE
    return Check(
        name,
        diff <= EXACT_TOLERANCE and whole and len(reference) > 0,
        {
            "max_abs_diff": diff,
            "tolerance": EXACT_TOLERANCE,
            "sequences": len(reference),
            "total_mass": mass,
            "target_total_mass": reference_mass,
        },
        detail if whole else f"total mass {mass!r} (target {reference_mass!r}) is not 1: " + detail,
    )


def _exact(rig: Rig, horizon: int, reference, completion: str, name: str) -> tuple[Check, dict]:
    joint = speculative_joint(rig, horizon, completion)
    detail = (
        "one speculative round, completed by target steps"
        if completion == "target"
        else "speculative rounds to the horizon from each published successor"
    )
    return exact_check(name, reference, joint, detail), joint


def check_rounds(fx: Fixture) -> Check:
    return _exact(fx.rig, fx.horizon, fx.reference, "rounds", "exact_joint_rounds")[0]


def check_auto_k(fx: Fixture) -> Check:
    """-k auto's rule (K from the request's own past acceptances, fixed costs) with --draft-stop
    (the draft cut where its own q is flat), over several rounds, in both layouts."""
    stop = _median_confidence(fx.rig, fx.horizon)
    figures, ok = {"tolerance": EXACT_TOLERANCE, "draft_stop": stop}, True
    k_seen: set[int] = set()
    for layout in LAYOUTS:
        rig = fx.rig.but(
            layout_name=layout,
            draft_stop=stop,
            k_policy_factory=lambda r: AutoK(max(r.k, 2), 1, AUTO_COSTS),
        )
        enumerator = Enumerator(rig, fx.horizon, "rounds")
        check = exact_check(layout, fx.reference, enumerator.joint(), "")
        figures[f"max_abs_diff_{layout}"] = check.figures["max_abs_diff"]
        figures[f"total_mass_{layout}"] = check.figures["total_mass"]
        ok &= check.passed
        k_seen |= enumerator.k_seen
    figures["k_values_seen"] = sorted(k_seen)
    varied = len(k_seen) >= 2  # a policy that never changed K would prove nothing about data-dependent K
    return Check(
        "exact_joint_auto_k",
        ok and varied,
        figures,
        "K per round from the request's acceptance history (the ledger with fixed costs) and drafts stopped by "
        "the draft's own confidence, speculative rounds to the horizon"
        + ("" if varied else f"; K never varied (saw {sorted(k_seen)}): nothing data-dependent was checked"),
    )


def _median_confidence(rig: Rig, horizon: int) -> float:
    """A --draft-stop that cuts about half the drafts: the median of the draft's largest probability
    over every output within the horizon."""
    ref = Reference(rig)
    outputs, frontier = [rig.prompt], [rig.prompt]
    for _ in range(horizon - 1):
        frontier = [o + (x,) for o in frontier for x in range(rig.vocab)]
        outputs += frontier
    values = sorted(max(ref.q(o)) for o in outputs)
    return min(values[len(values) // 2], 0.999)


def check_rational(fx: Fixture) -> Check:
    cfg = fx.cfg
    diff = rational_difference(cfg.vocab, cfg.k, fx.horizon, cfg.seed, prompt=fx.rig.prompt)
    return Check("exact_rational", diff == 0, {"difference": str(diff)}, "Fraction tables, no processors")


def check_monte_carlo(fx: Fixture) -> Check:
    cfg = fx.cfg
    mc = run_monte_carlo(fx.rig, fx.horizon, cfg.samples, cfg.seed)
    worst_ratio, worst_dev, worst_bound = 0.0, 0.0, 0.0
    for seq in set(fx.reference) | set(mc.empirical):
        p = fx.reference.get(seq, 0.0)
        dev = abs(mc.empirical.get(seq, 0.0) - p)
        bound = bernstein_bound(p, cfg.samples, len(fx.reference))
        if dev / bound > worst_ratio:
            worst_ratio, worst_dev, worst_bound = dev / bound, dev, bound
    return Check(
        "monte_carlo",
        worst_ratio <= 1.0 and not mc.accounting_errors,
        {
            "samples": cfg.samples,
            "rounds": mc.rounds,
            "max_abs_deviation": worst_dev,
            "bound_at_worst_cell": worst_bound,
            "worst_deviation_over_bound": worst_ratio,
            "failure_probability": FAILURE_PROBABILITY,
            "rng_accounting_errors": len(mc.accounting_errors),
            "k_per_row": f"1..{cfg.k} mixed in one batch",
        },
        mc.accounting_errors[0] if mc.accounting_errors else "Bernstein bound per cell, union over cells",
        empirical=mc.empirical,
    )


def check_coupling(fx: Fixture) -> Check:
    rig = fx.rig
    c = coupling_matrix(_first_row(rig.target, rig.target_policy, rig), _first_row(rig.draft, rig.draft_policy, rig))
    return Check(
        "coupling",
        abs(c.diagonal - c.one_minus_tv) <= EXACT_TOLERANCE and c.column_error <= EXACT_TOLERANCE,
        {
            "diagonal": c.diagonal,
            "one_minus_tv": c.one_minus_tv,
            "column_sum_error": c.column_error,
            "row_sum_error": c.row_error,
            "matrix": [[round(x, 6) for x in row] for row in c.matrix.tolist()],
        },
        "position 1: rows X ~ q, columns Y ~ p",
    )


def check_layout_parity(fx: Fixture) -> Check:
    cfg, rig = fx.cfg, fx.rig
    other = next(name for name in LAYOUTS if name != cfg.layout)
    other_rig = rig.but(layout_name=other)
    layout_diff = max_abs_diff(fx.speculative, speculative_joint(other_rig, fx.horizon, "target"))
    requests = min(cfg.samples, 128) or 64
    trace_a = run_monte_carlo(rig, fx.horizon, requests, cfg.seed, audit=True, trace=True)
    trace_b = run_monte_carlo(other_rig, fx.horizon, requests, cfg.seed, audit=True, trace=True)
    same = trace_a.published_trace == trace_b.published_trace
    audit_errors = trace_a.audit_errors + trace_b.audit_errors
    return Check(
        "layout_parity",
        layout_diff <= EXACT_TOLERANCE and same and not audit_errors,
        {
            "layouts": [cfg.layout, other],
            "exact_joint_max_abs_diff": layout_diff,
            "requests": requests,
            "published_successors_compared": len(trace_a.published_trace),
            "identical_successors": same,
            "audit_errors": len(audit_errors),
        },
        audit_errors[0] if audit_errors else "output, committed K/V identities and frontier after every round",
    )


def check_batch_invariance(fx: Fixture) -> Check:
    differs = batch_difference(fx.rig, fx.horizon, fx.cfg.seed)
    return Check(
        "batch_invariance",
        differs is None,
        {"requests": BATCH_ROWS},
        differs or "every request's tokens are the same alone and in a batch with different prompts",
    )


@cache
def dtype_edges_of(sampler_cls: type[RejectionSampler]):
    """dtype_edges depends on the rule alone: once per rule class (production, or a lab variant)."""
    return sc.check_dtype_edges(SamplerUnderTest(sampler_cls.__name__, rule_sampler(sampler_cls()), ""), tokens=True)


def check_dtype_edges(fx: Fixture) -> Check:
    c = dtype_edges_of(RejectionSampler)
    detail = c.detail if c.passed else f"{c.detail}; first: {c.counterexample}"
    return Check("dtype_edges", c.passed, c.figures, detail)


CHECKS = (
    check_rounds,
    check_auto_k,
    check_rational,
    check_monte_carlo,
    check_coupling,
    check_layout_parity,
    check_batch_invariance,
    check_dtype_edges,
)


@contextmanager
def collector_paused():
    """The oracle makes millions of short-lived objects and no cycles worth chasing: reference
    counting frees them, and pausing the cyclic collector (restored after) saves about a third."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def run_oracle(cfg: OracleConfig) -> dict:
    """Every check on the fixture of ``cfg`` (and the failure lab) -> one JSON-able report."""
    with collector_paused():
        return _run_oracle(cfg)


def _run_oracle(cfg: OracleConfig) -> dict:
    t_start = time.perf_counter()
    horizon = cfg.effective_horizon
    rig = build_rig(cfg)
    reference = target_joint(rig, horizon)
    exact, spec_joint = _exact(rig, horizon, reference, "target", "exact_joint")
    fx = Fixture(cfg, rig, horizon, reference, spec_joint)
    checks = [exact] + [check(fx) for check in CHECKS if check is not check_monte_carlo or cfg.samples]
    checks += [_backend_parity(rig, reference, horizon), _ngram_exact(rig, horizon)]
    lab = run_lab(cfg) if cfg.lab else []
    if cfg.lab:
        checks.append(
            Check(
                "failure_lab",
                all(v["caught"] for v in lab),
                {"variants": len(lab), "caught": sum(v["caught"] for v in lab)},
                "every known-wrong variant must be caught",
            )
        )
    empirical = next((c.empirical for c in checks if c.empirical is not None), None)
    return {
        "schema": SCHEMA,
        "passed": all(ch.passed for ch in checks),
        "config": {
            "vocab": cfg.vocab,
            "k": cfg.k,
            "horizon": horizon,
            "seed": cfg.seed,
            "samples": cfg.samples,
            "layout": cfg.layout,
            "backend": cfg.backend,
            "prompt": list(rig.prompt),
            "target_policy": rig.target_policy.describe(),
            "draft_policy": rig.draft_policy.describe(),
            "lab": _lab_config(cfg),
        },
        "checks": [{"name": c.name, "passed": c.passed, "figures": c.figures, "detail": c.detail} for c in checks],
        "failure_lab": lab,
        "sequences": _sequence_table(reference, spec_joint, empirical),
        "elapsed_s": time.perf_counter() - t_start,
    }


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


def _ngram_exact(rig: Rig, horizon: int) -> Check:
    """Prompt-lookup drafting (q = point mass) under the same exact checks."""
    ng = ngram_rig(rig)
    reference = target_joint(ng, horizon)
    one = max_abs_diff(reference, speculative_joint(ng, horizon, "target"))
    rounds = max_abs_diff(reference, speculative_joint(ng, horizon, "rounds"))
    return Check(
        "exact_joint_ngram",
        max(one, rounds) <= EXACT_TOLERANCE,
        {"max_abs_diff": one, "max_abs_diff_rounds": rounds, "tolerance": EXACT_TOLERANCE, "prompt": list(ng.prompt)},
        "ngram:2 prompt lookup, q = point mass on each proposed token",
    )


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


def _first_row(model, policy, rig: Rig) -> torch.Tensor:
    """The processed row at the prompt: float64[V]."""
    raw = model.raw_logits(rig.prompt).unsqueeze(0)
    return policy.probabilities(raw, [policy.initial_state(rig.prompt)], rig.backend, torch.float64)[0]


def _backend_parity(rig: Rig, reference, horizon: int) -> Check:
    rows = []
    for table in (rig.target, rig.draft):
        rows.extend(table._rows.values())
    raw = torch.stack(rows)
    figures = {}
    ok = True
    for dtype, name in ((torch.float64, "float64"), (torch.float32, "float32")):
        diff = (softmax(raw, "online", dtype) - softmax(raw, "max_shift", dtype)).abs().max().item()
        figures[f"max_abs_diff_{name}"] = diff
        figures[f"tolerance_{name}"] = BACKEND_TOLERANCE[name]
        ok &= diff <= BACKEND_TOLERANCE[name]
    other = "online" if rig.backend == "max_shift" else "max_shift"
    joint_diff = max_abs_diff(reference, speculative_joint(rig.but(backend=other), horizon, "target"))
    figures["exact_joint_other_backend_diff"] = joint_diff
    figures["rows_compared"] = len(rows)
    ok &= joint_diff <= EXACT_TOLERANCE
    return Check("backend_parity", ok, figures, "max_shift vs online (m, l) softmax on every table row used")


def run_lab(cfg: OracleConfig) -> list[dict]:
    base = build_rig(cfg, lab=True)
    horizon = base.k + 1
    results = []
    for prefix, rig, variants in (("", base, VARIANTS), ("ngram/", ngram_rig(base), NGRAM_VARIANTS)):
        reference = target_joint(rig, horizon)
        for variant in variants:
            caught, by, detail = _catch(variant.build(rig), horizon, reference, cfg.seed)
            results.append(
                {
                    "variant": prefix + variant.name,
                    "description": variant.description,
                    "caught": caught,
                    "caught_by": by,
                    "detail": detail,
                }
            )
    return results


def _catch(rig: Rig, horizon: int, reference, seed: int) -> tuple[bool, str | None, str]:
    """The first check that catches the variant -> (caught, check name, evidence). Cheapest first."""
    try:
        diff = max_abs_diff(reference, speculative_joint(rig, horizon, "target"))
        if diff > EXACT_TOLERANCE:
            return True, "exact_joint", f"max |speculative - target| = {diff:.3g} > {EXACT_TOLERANCE:g}"
        edges = dtype_edges_of(rig.sampler_cls)
        if not edges.passed:
            cx = edges.counterexample
            return (
                True,
                "dtype_edges",
                (
                    f"{edges.figures['wrong']} of {edges.figures['decisions']} decisions differ from the exact rule, "
                    f"e.g. {cx['case']}, U = {cx['acceptance_uniform']!r}: rule accepts {cx['rule']['accepted']}, "
                    f"variant {cx['sampler']['accepted']}"
                ),
            )
        diff = max_abs_diff(reference, speculative_joint(rig, horizon, "rounds"))
        if diff > EXACT_TOLERANCE:
            return True, "exact_joint_rounds", f"max |speculative - target| = {diff:.3g} > {EXACT_TOLERANCE:g}"
        mc = run_monte_carlo(rig, horizon, LAB_MC_SAMPLES, seed, audit=True)
        if mc.audit_errors:
            return True, "state_audit", mc.audit_errors[0]
        if mc.accounting_errors:
            return True, "rng_accounting", mc.accounting_errors[0]
        differs = batch_difference(rig, horizon, seed)
        if differs:
            return True, "batch_invariance", differs
    except SpecdError as err:
        return True, err.code, str(err)
    return False, None, "not caught"


BATCH_ROWS = 12


def batch_difference(rig: Rig, horizon: int, seed: int) -> str | None:
    """Run requests with different prompts in one batch and each alone: a request's tokens must not
    depend on its batch-mates (its random streams are its own). -> what differs, or None."""
    v = rig.vocab
    requests = [
        Request(f"b{i}", rig.prompt + tuple((i * (j + 1)) % v for j in range(i % 3)), horizon, seed=seed)
        for i in range(BATCH_ROWS)
    ]
    together = rig.engine().run(requests).new_tokens()
    for request, tokens in zip(requests, together):
        alone = rig.engine().run([request]).new_tokens()[0]
        if alone != tokens:
            return f"{request.request_id}: {list(alone)} alone, {list(tokens)} in a batch of {BATCH_ROWS}"
    return None


def run_sampler_oracle(cfg: OracleConfig, spec: str) -> dict:
    """Every sampler-level check on the sampler ``spec`` (shipped adapter or module:attr) -> one report."""
    with collector_paused():
        t_start = time.perf_counter()
        sampler = load_sampler(spec)
        try:
            tokens = sc.returns_tokens(sampler)
            rig = build_rig(cfg)
            checks = [
                sc.check_exact(sampler, rig, cfg.k, tokens),
                sc.check_rational(sampler, cfg.vocab, cfg.k, cfg.seed, tokens),
                sc.check_dtype_edges(sampler, tokens),
            ]
        except SamplerFailed as err:
            raise SamplerFailed(f"{err} (on an ordinary round, V={cfg.vocab}, K={cfg.k})") from None
        checks += sc.check_degenerate(sampler, tokens)
        counterexample = None
        if checks[0].passed is False:
            counterexample = sc.minimal_counterexample(
                sampler, tokens, lambda v, k, seed: build_rig(OracleConfig(vocab=v, k=k, seed=seed, lab=False))
            )
        elif checks[2].passed is False:
            counterexample = checks[2].counterexample
        return {
            "schema": SCHEMA,
            "mode": "sampler",
            "passed": all(c.passed is not False for c in checks),
            "sampler": {
                "spec": spec,
                "name": sampler.name,
                "description": sampler.description,
                "returns": ("tokens" if tokens else "distributions"),
            },
            "config": {"vocab": cfg.vocab, "k": cfg.k, "seed": cfg.seed},
            "checks": [
                {"name": c.name, "passed": c.passed, "figures": c.figures, "detail": c.detail, "findings": c.findings}
                for c in checks
            ],
            "findings": sorted({f for c in checks for f in c.findings}),
            "counterexample": counterexample,
            "elapsed_s": time.perf_counter() - t_start,
        }
