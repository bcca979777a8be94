"""The failure lab: known-wrong variants the oracle must catch.

Each variant is the production engine with exactly one component replaced by a broken subclass
(``specd.oracles.lab.broken``), and declares what it needs to be seen (``specd.oracles.lab.variant``: a
condition on the case, with the reason where it is unmet). ``run_lab`` (in ``report``) runs the
oracle's checks on each variant that can be seen in the lab's case and reports which check caught
it and with what figure; a variant that cannot be seen there is reported as not applicable, with
the reason, and is not run.
"""

from __future__ import annotations

from collections.abc import Callable

from specd.core.layouts import make_layout
from specd.core.proposer import NgramProposer
from specd.core.sampler import RejectionSampler
from specd.errors import SpecdError
from specd.oracles.engine.checks import batch_difference, dtype_edges_of
from specd.oracles.engine.eos import with_eos
from specd.oracles.engine.exact import speculative_joint
from specd.oracles.engine.montecarlo import run_monte_carlo
from specd.oracles.fixture import LAB_MC_SAMPLES, OracleConfig, build_rig
from specd.oracles.lab.broken import (
    AdvanceOverRejected,
    ArgmaxDraftsSoftQ,
    BFloat16RecordedQ,
    BonusFromQ,
    ContinueAfterRejection,
    CorrectionFromP,
    CorrectionFromQ,
    EosDraftIgnored,
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
from specd.oracles.lab.variant import (
    LabCase,
    Variant,
    all_of,
    bfloat16_inexact,
    drafts,
    processed_draft,
    put_to_checks,
    rejection,
    soft_draft,
    stateful_target,
)
from specd.oracles.record import EXACT_TOLERANCE, max_abs_diff
from specd.oracles.reference import Reference, target_joint
from specd.oracles.rig import NGRAM_N, Rig, fold, multi_source_rig, ngram_rig, shared_body_columns, shared_body_rig
from specd.policy.kpolicy import FixedK


def _layout_cls(rig: Rig) -> type:
    return type(make_layout(rig.layout_name))


def lookup_not_always_liked_best(case: LabCase) -> str | None:
    """source_after_target_p's need. The correct engine drafts from the lookup (the first source)
    wherever it has a match; the variant keeps the lookup unless the target likes the model's first
    draft strictly better (ties go to the lookup). So it drafts as the correct engine does at every
    round start where the lookup's token is at least as likely under p as every token the model can
    draft (q > 0): where that holds at every round start the correct engine reaches, the two reach
    the same round starts and draft alike in each, and no check can tell them apart."""
    lookup = NgramProposer(NGRAM_N, case.vocab)
    for output in lookup_round_starts(case, lookup):
        token = lookup.lookup(output, 1)
        p, q = case.ref.p(output), case.ref.q(output)
        if not token or any(qx > 0 and px > p[token[0]] for px, qx in zip(p, q)):
            return None  # without a match the model drafts: the superset is not followed further
    return (
        "at every round start within the horizon the target likes the lookup's token at least as much as every "
        "token the model can draft: the source is the lookup, as in the correct engine"
    )


def lookup_round_starts(case: LabCase, lookup: NgramProposer) -> list[tuple[int, ...]]:
    """Every output a round with a draft budget starts from, within the horizon, when every round
    drafts from ``lookup``: after each draft path's first rejection (then a correction: any token
    but the draft with p > 0) and after its bonus (any token with p > 0)."""
    ref, first = case.ref, len(case.rig.prompt)
    starts: list[tuple[int, ...]] = []
    todo = [case.rig.prompt]
    while todo:
        start = todo.pop()
        budget = case.horizon - 1 - (len(start) - first)
        if budget < 1 or start in starts:
            continue
        starts.append(start)
        drafts = lookup.lookup(start, min(case.k, budget))
        for j in range(len(drafts) + 1):  # d_1..d_j accepted
            p = ref.p(start + drafts[:j])
            refused = drafts[j] if j < len(drafts) else None
            todo += [start + drafts[:j] + (x,) for x, px in enumerate(p) if px > 0 and x != refused]
            if refused is None or p[refused] == 0:
                break
    return starts


def rejected_draft_moves_target_state(case: LabCase) -> str | None:
    """processor_advanced_over_rejected's need. The variant advances the target's state over every
    draft of a round, the correct engine over the tokens emitted only. They differ after a round that
    rejects draft j (j - 1 accepted, then a correction c with p(c) > q(c), never d_j itself) where
    d_j..d_k move the state the correct engine reaches (after d_<j and c), and only a row read after
    that round shows it (the round ends before the horizon). Looked for at every round start within
    the horizon, along every path the draft can take: where there is none (a token already seen
    moves no repetition state), no check can tell the two apart."""
    rig, ref, policy = case.rig, case.ref, case.rig.target_policy
    if stateful_target(case) is not None:
        return stateful_target(case)
    emitted_before = lambda output: len(output) - len(rig.prompt)  # noqa: E731
    for start in case.outputs(case.horizon - 2):
        for path in case.model_paths(start, min(case.k, case.horizon - 1 - emitted_before(start))):
            for j in range(1, len(path) + 1):
                before = start + path[: j - 1]
                p, q = ref.p(before), ref.q(before)
                reached = all(ref.p(start + path[:i])[path[i]] > 0 for i in range(j - 1))
                if not reached or q[path[j - 1]] <= p[path[j - 1]] or emitted_before(before) + 1 >= case.horizon:
                    continue
                for c in (x for x in range(case.vocab) if p[x] > q[x]):
                    correct = fold(policy.initial_state(rig.prompt), (before + (c,))[len(rig.prompt) :])
                    if fold(correct, path[j - 1 :]).digest() != correct.digest():
                        return None
    return (
        "no round within the horizon rejects a draft that would move the target's state: each rejected draft, and "
        "every draft after it, is already in the state the correct engine reaches, or no row is read after its round"
    )


def mass_outside_draft_vocabulary(case: LabCase) -> str | None:
    """verify_with_small_head's need: the restricted head changes a verified row only where the
    target gives a token outside the draft vocabulary some mass."""
    columns = set(shared_body_columns(case.vocab))
    if any(px > 0 and x not in columns for _, p in case.target_rows() for x, px in enumerate(p)):
        return None
    return "no target row within the horizon gives a token outside the draft vocabulary any mass"


# The stop-token bug, put to the token-wise checks here and to the invariant rule's by its lab
# (specd.oracles.lab.invariant): the stop rule is the round's, whatever the rule.
EOS_DRAFT_IGNORED = Variant(
    "eos_draft_ignored",
    "an EOS accepted among the drafts does not end the request, only an EOS correction or bonus does "
    "(transformers #47912, koboldcpp #1276)",
    lambda r: with_eos(r).but(transaction_cls=EosDraftIgnored),  # the lab's rig has no stop token
    drafts(1),  # a round without drafts has no accepted draft to be the EOS
)

VARIANTS: tuple[Variant, ...] = (
    Variant(
        "correction_from_p",
        "correction sampled from p instead of [p - q]_+",
        lambda r: r.but(sampler_cls=CorrectionFromP),
        rejection,  # a correction is drawn only after a rejection
    ),
    Variant("correction_from_q", "correction sampled from q", lambda r: r.but(sampler_cls=CorrectionFromQ), rejection),
    Variant(
        "continue_after_rejection",
        "acceptance tests continue past the first rejection",
        lambda r: r.but(sampler_cls=ContinueAfterRejection),
        all_of(drafts(2), rejection),  # a passed test after a failed one: two drafts, one rejected
    ),
    Variant(
        "bonus_from_q",
        "bonus sampled from the draft's row instead of p_{K+1}",
        lambda r: r.but(sampler_cls=BonusFromQ),
        drafts(1),  # a round without drafts has no q_k to draw from: it keeps p
    ),
    Variant(
        "logit_rows_off_by_one",
        "draft d_i scored with the logit row after its own",
        lambda r: r.but(layout_factory=off_by_one(_layout_cls(r))),
        drafts(1),  # a round without drafts has one row: shifted, it is itself
    ),
    Variant(
        "raw_draft_logits_as_q",
        "q recorded from raw draft logits after sampling from processed q",
        lambda r: r.but(proposer_factory=lambda rig: RawLogitsAsQ(rig.draft, rig.draft_policy)),
        all_of(drafts(1), processed_draft),  # raw and processed rows differ only where the policy changes one
    ),
    Variant(
        "processor_advanced_over_rejected",
        "stateful processor advanced over rejected drafts",
        lambda r: r.but(transaction_cls=AdvanceOverRejected),
        rejected_draft_moves_target_state,
    ),
    Variant(
        "rejected_kv_committed",
        "K/V rows of rejected drafts committed",
        lambda r: r.but(layout_factory=commit_rejected(_layout_cls(r))),
        drafts(1),  # a round without drafts has no draft rows to commit
    ),
    Variant(
        "frontier_replayed_into_cache",
        "frontier replayed into a cache that already holds it",
        lambda r: r.but(layout_factory=ReplayIntoRetainedCache),  # every round replays: always seen
    ),
    # Bugs shipped by other engines (the README names them), each rebuilt on specd's engine.
    EOS_DRAFT_IGNORED,
    Variant(
        "q_recorded_in_bfloat16",
        "q recorded in bfloat16 while the draft token was drawn from float rows (DeepSpec #31)",
        lambda r: r.but(proposer_factory=lambda rig: BFloat16RecordedQ(rig.draft, rig.draft_policy)),
        all_of(drafts(1), bfloat16_inexact),  # a row bfloat16 holds exactly is recorded as it is
    ),
    Variant(
        "argmax_drafts_with_soft_q",
        "greedy (argmax) drafts recorded with the soft q they were not drawn from",
        lambda r: r.but(proposer_factory=lambda rig: ArgmaxDraftsSoftQ(rig.draft, rig.draft_policy)),
        all_of(drafts(1), soft_draft),  # the argmax of a point mass is its draw
    ),
    Variant(
        "lossy_threshold_accept",
        f"accept a draft whenever p(d) > {LossyThreshold.threshold}, with no uniform and no q",
        lambda r: r.but(sampler_cls=LossyThreshold),
        drafts(1),  # every test is replaced
    ),
    Variant(
        "k_from_batch_mean_confidence",
        "K cut to 1 for rows less confident than the batch's mean draft confidence (rows depend on batch-mates)",
        lambda r: r.but(proposer_factory=lambda rig: KFromBatchConfidence(rig.draft, rig.draft_policy)),
        drafts(2),  # it cuts rows to one draft: a batch whose rows draft one is left as it is
    ),
    Variant(
        "k_after_target_p",
        "K chosen after looking at the round's target rows: each draft cut before the first token with p < q",
        lambda r: r.but(proposer_factory=KAfterTargetP),
        rejection,  # it cuts before a token with p < q: where there is none, it cuts nothing
    ),
    Variant(
        "draft_stop_reads_acceptance_uniform",
        "drafting stopped before the first position whose acceptance uniform is >= 1/2",
        lambda r: r.but(proposer_factory=lambda rig: StopOnAcceptanceUniform(rig.draft, rig.draft_policy)),
        drafts(1),
    ),
    Variant(
        "float32_uniform_comparison",
        "the 53-bit acceptance uniform rounded to float32 before the test (U >= 1 - 2^-25 rejects a sure accept)",
        lambda r: r.but(sampler_cls=Float32UniformComparison),  # dtype_edges tests the rule itself: always seen
    ),
)


# Not listed for prompt lookup: the proposer variants need a draft model's rows, which
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
        drafts(1),  # a uniform q is no point mass at any V >= 2
    ),
)

# On the two-source rig (a lookup and the model draft, chosen per round).
MULTI_SOURCE_VARIANTS: tuple[Variant, ...] = (
    Variant(
        "source_after_target_p",
        "the draft source picked after reading the round's target row (the lookup where p likes its token)",
        lambda r: r.but(proposer_factory=lambda rig: SourceAfterTargetP(rig, r.proposer())),
        lookup_not_always_liked_best,
    ),
)


# On the shared-body rig (the target's own rows, a head restricted to half the vocabulary).
SHARED_BODY_VARIANTS: tuple[Variant, ...] = (
    Variant(
        "verify_with_small_head",
        "drafted positions verified with the draft's restricted head instead of the full head",
        lambda r: shared_body_rig(r, VerifyWithSmallHead),
        all_of(drafts(1), mass_outside_draft_vocabulary),
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
    """Each variant built on ``rig`` and put to the checks where it can be seen: one report row each,
    named prefix + name."""
    ref = Reference(rig)  # the variants replace engine components, never the rows: computed once
    case = LabCase(rig, horizon, seed, ref)
    reference = target_joint(rig, horizon, ref=ref)
    catch = lambda broken: _catch(broken, horizon, reference, seed, ref)  # noqa: E731
    return [put_to_checks(v, case, prefix + v.name, catch, rule_seen_anywhere) for v in variants]


def rule_seen_anywhere(rig: Rig) -> bool:
    """Whether dtype_edges, which puts the rule to adversarial rows of its own whatever the case,
    sees the rig's sampler decide otherwise than the exact rule: such a variant is applicable at
    every size, whatever its own needs say of the case."""
    return rig.sampler_cls is not RejectionSampler and not dtype_edges_of(rig.sampler_cls).passed


def _catch(rig: Rig, horizon: int, reference, seed: int, ref: Reference) -> tuple[bool, str | None, str]:
    """The first check that catches the variant -> (caught, check name, evidence). Cheapest first. A
    variant with a stop token is held to the target's chain stopped at it."""
    if rig.eos_ids:
        reference = target_joint(rig, horizon, ref=ref)
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
