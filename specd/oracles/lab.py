"""The failure lab: known-wrong variants the oracle must catch.

Each variant is the production engine with exactly one component replaced by a
broken subclass (``specd.oracles.broken``), through the engine's extension points
(listed in ``specd/core/engine.py``): a sampler method, a layout method, the
proposer, or the transaction's processor staging. ``run_lab`` (in ``report``) runs
the oracle's checks on each and reports which check caught it and with what figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specd.core.layouts import make_layout
from specd.errors import SpecdError
from specd.oracles.broken import (
    AdvanceOverRejected,
    ArgmaxDraftsSoftQ,
    BFloat16RecordedQ,
    BonusFromQ,
    ContinueAfterRejection,
    CorrectionFromP,
    CorrectionFromQ,
    Float32UniformComparison,
    KAfterTargetP,
    KFromBatchConfidence,
    LossyThreshold,
    NgramUniformQ,
    RawLogitsAsQ,
    ReplayIntoRetainedCache,
    SourceAfterTargetP,
    StopOnAcceptanceUniform,
    VerifyWithSmallHead,
    commit_rejected,
    off_by_one,
)
from specd.oracles.engine_checks import batch_difference, dtype_edges_of
from specd.oracles.exact import Reference, speculative_joint, target_joint
from specd.oracles.fixture import LAB_MC_SAMPLES, OracleConfig, build_rig
from specd.oracles.montecarlo import run_monte_carlo
from specd.oracles.record import EXACT_TOLERANCE, max_abs_diff
from specd.oracles.rig import NGRAM_N, Rig, multi_source_rig, ngram_rig, shared_body_rig
from specd.policy.kpolicy import FixedK


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    build: Callable[[Rig], Rig]


def _layout_cls(rig: Rig) -> type:
    return type(make_layout(rig.layout_name))


VARIANTS: tuple[Variant, ...] = (
    Variant(
        "correction_from_p",
        "correction sampled from p instead of [p - q]_+",
        lambda r: r.but(sampler_cls=CorrectionFromP),
    ),
    Variant("correction_from_q", "correction sampled from q", lambda r: r.but(sampler_cls=CorrectionFromQ)),
    Variant(
        "continue_after_rejection",
        "acceptance tests continue past the first rejection",
        lambda r: r.but(sampler_cls=ContinueAfterRejection),
    ),
    Variant(
        "bonus_from_q", "bonus sampled from the draft's row instead of p_{K+1}", lambda r: r.but(sampler_cls=BonusFromQ)
    ),
    Variant(
        "logit_rows_off_by_one",
        "draft d_i scored with the logit row after its own",
        lambda r: r.but(layout_factory=off_by_one(_layout_cls(r))),
    ),
    Variant(
        "raw_draft_logits_as_q",
        "q recorded from raw draft logits after sampling from processed q",
        lambda r: r.but(proposer_factory=lambda rig: RawLogitsAsQ(rig.draft, rig.draft_policy)),
    ),
    Variant(
        "processor_advanced_over_rejected",
        "stateful processor advanced over rejected drafts",
        lambda r: r.but(transaction_cls=AdvanceOverRejected),
    ),
    Variant(
        "rejected_kv_committed",
        "K/V rows of rejected drafts committed",
        lambda r: r.but(layout_factory=commit_rejected(_layout_cls(r))),
    ),
    Variant(
        "frontier_replayed_into_cache",
        "frontier replayed into a cache that already holds it",
        lambda r: r.but(layout_factory=ReplayIntoRetainedCache),
    ),
    # Bugs shipped by other engines (the README names them), each rebuilt on specd's engine.
    Variant(
        "q_recorded_in_bfloat16",
        "q recorded in bfloat16 while the draft token was drawn from float rows (DeepSpec #31)",
        lambda r: r.but(proposer_factory=lambda rig: BFloat16RecordedQ(rig.draft, rig.draft_policy)),
    ),
    Variant(
        "argmax_drafts_with_soft_q",
        "greedy (argmax) drafts recorded with the soft q they were not drawn from",
        lambda r: r.but(proposer_factory=lambda rig: ArgmaxDraftsSoftQ(rig.draft, rig.draft_policy)),
    ),
    Variant(
        "lossy_threshold_accept",
        f"accept a draft whenever p(d) > {LossyThreshold.threshold}, with no uniform and no q",
        lambda r: r.but(sampler_cls=LossyThreshold),
    ),
    Variant(
        "k_from_batch_mean_confidence",
        "K cut to 1 for rows less confident than the batch's mean draft confidence (rows depend on batch-mates)",
        lambda r: r.but(proposer_factory=lambda rig: KFromBatchConfidence(rig.draft, rig.draft_policy)),
    ),
    Variant(
        "k_after_target_p",
        "K chosen after looking at the round's target rows: each draft cut before the first token with p < q",
        lambda r: r.but(proposer_factory=KAfterTargetP),
    ),
    Variant(
        "draft_stop_reads_acceptance_uniform",
        "drafting stopped before the first position whose acceptance uniform is >= 1/2",
        lambda r: r.but(proposer_factory=lambda rig: StopOnAcceptanceUniform(rig.draft, rig.draft_policy)),
    ),
    Variant(
        "float32_uniform_comparison",
        "the 53-bit acceptance uniform rounded to float32 before the test (U >= 1 - 2^-25 rejects a sure accept)",
        lambda r: r.but(sampler_cls=Float32UniformComparison),
    ),
)


# Not applicable to prompt lookup: the proposer variants need a draft model's rows, which
# the n-gram proposer has none of; and processor_advanced_over_rejected is harmless there
# (n-gram drafts are copied from the output, so a seen-set state such as the repetition
# penalty already holds them: not a bug the oracle could or should flag).
MODEL_DRAFT_ONLY = (
    "raw_draft_logits_as_q",
    "processor_advanced_over_rejected",
    "q_recorded_in_bfloat16",
    "argmax_drafts_with_soft_q",
    "k_from_batch_mean_confidence",
    "k_after_target_p",
    "draft_stop_reads_acceptance_uniform",
)
NGRAM_VARIANTS: tuple[Variant, ...] = tuple(v for v in VARIANTS if v.name not in MODEL_DRAFT_ONLY) + (
    Variant(
        "ngram_uniform_q",
        "n-gram draft recorded with a uniform q instead of its point mass",
        lambda r: r.but(proposer_factory=lambda rig: NgramUniformQ(NGRAM_N, rig.vocab)),
    ),
)

# On the two-source rig (a lookup and the model draft, chosen per round).
MULTI_SOURCE_VARIANTS: tuple[Variant, ...] = (
    Variant(
        "source_after_target_p",
        "the draft source picked after reading the round's target row (the lookup where p likes its token)",
        lambda r: r.but(proposer_factory=lambda rig: SourceAfterTargetP(rig, r.proposer())),
    ),
)


# On the shared-body rig (the target's own rows, a head restricted to half the vocabulary).
SHARED_BODY_VARIANTS: tuple[Variant, ...] = (
    Variant(
        "verify_with_small_head",
        "drafted positions verified with the draft's restricted head instead of the full head",
        lambda r: shared_body_rig(r, VerifyWithSmallHead),
    ),
    *(v for v in VARIANTS if v.name in ("rejected_kv_committed", "logit_rows_off_by_one", "correction_from_p")),
)


# prefix -> (its rig, built on the lab's base rig; its variants): a model draft, a lookup, two sources, shared body
LAB_FAMILIES: dict[str, tuple[Callable[[Rig], Rig], tuple[Variant, ...]]] = {
    "": (lambda base: base, VARIANTS),
    "ngram/": (ngram_rig, NGRAM_VARIANTS),
    "multi/": (lambda base: multi_source_rig(base, lambda r: FixedK(max(r.k, 2))), MULTI_SOURCE_VARIANTS),
    "shared/": (lambda base: shared_body_rig(base.but(layout_name="replay_frontier")), SHARED_BODY_VARIANTS),
}


def run_lab(cfg: OracleConfig, variants: tuple[Variant, ...] | None = None, families=None) -> list[dict]:
    """The lab's families (LAB_FAMILIES), each with its variants; ``variants``: these instead, on the
    families named in ``families`` ("" the model draft)."""
    base = build_rig(cfg, lab=True)
    horizon = base.k + 1
    results: list[dict] = []
    for prefix in families or LAB_FAMILIES:
        family_rig, variants_here = LAB_FAMILIES[prefix]
        results += lab_family(prefix, family_rig(base), variants or variants_here, horizon, cfg.seed)
    return results


def lab_family(prefix: str, rig: Rig, variants, horizon: int, seed: int) -> list[dict]:
    """Each variant built on ``rig`` and put to the checks: one report row each, named prefix + name."""
    ref = Reference(rig)  # the variants replace engine components, never the rows: computed once
    reference = target_joint(rig, horizon, ref=ref)
    rows = []
    for variant in variants:
        caught, by, detail = _catch(variant.build(rig), horizon, reference, seed, ref)
        row = {"variant": prefix + variant.name, "description": variant.description, "caught": caught}
        rows.append({**row, "caught_by": by, "detail": detail})
    return rows


def _catch(rig: Rig, horizon: int, reference, seed: int, ref: Reference) -> tuple[bool, str | None, str]:
    """The first check that catches the variant -> (caught, check name, evidence). Cheapest first."""
    try:
        diff = max_abs_diff(reference, speculative_joint(rig, horizon, "target", ref))
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
        diff = max_abs_diff(reference, speculative_joint(rig, horizon, "rounds", ref))
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
