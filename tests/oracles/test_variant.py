"""When a failure-lab variant can be seen (specd.oracles.lab.variant): each condition gives its reason
exactly where it is unmet, and a variant the lab calls not applicable is one no check catches."""

import pytest

from specd.core.processors import SamplingPolicy
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.lab import chains as lab
from specd.oracles.lab.blocks import BLOCK_VARIANTS
from specd.oracles.lab.invariant import INVARIANT_VARIANTS
from specd.oracles.lab.shipped import SHIPPED_VARIANTS
from specd.oracles.lab.variant import (
    LabCase,
    Variant,
    all_of,
    bfloat16_inexact,
    drafts,
    min_horizon,
    min_vocab,
    processed_draft,
    rejection,
    soft_draft,
    soft_target,
    stateful_target,
)
from specd.oracles.reference import Reference, target_joint
from specd.oracles.rig import ngram_rig

GREEDY = SamplingPolicy(greedy=True)


def self_draft(rig):
    """The target as its own draft (same rows, same policy): nothing is ever rejected."""
    return rig.but(draft=rig.target, draft_policy=rig.target_policy)


def case(vocab=2, k=2, seed=0, horizon=None, family=None, **changes) -> LabCase:
    """The lab's rig at V = ``vocab`` (K = ``k`` exactly, even 1), with ``changes``, to ``horizon``
    (default K + 1); ``family``: a rig builder applied after."""
    rig = build_rig(OracleConfig(vocab=vocab, k=k, seed=seed), lab=True).but(k=k, **changes)
    rig = family(rig) if family else rig
    return LabCase(rig, horizon or k + 1, seed, Reference(rig))


@pytest.mark.parametrize(
    "condition,where,reason",
    [
        (drafts(2), {"k": 1}, "a round drafts at most 1 here (K = 1, horizon 2), and this variant acts only"),
        (drafts(2), {"k": 2, "horizon": 2}, "a round drafts at most 1 here (K = 2, horizon 2)"),
        (drafts(1), {"k": 2, "horizon": 1}, "a round drafts at most 0 here (K = 2, horizon 1)"),
        (drafts(2), {"k": 2}, None),
        (rejection, {"family": self_draft}, "no draft can be rejected here: q(x) <= p(x) for every token"),
        (rejection, {"horizon": 1}, "no draft can be rejected here"),  # no draft is made at all
        (rejection, {}, None),
        (rejection, {"family": ngram_rig}, None),  # a lookup's point mass is rejected where p(d) < 1
        (soft_draft, {"draft_policy": GREEDY}, "every draft here is drawn from a point mass"),
        (soft_draft, {}, None),
        (soft_target, {"target_policy": GREEDY}, "every target row within the horizon is a point mass"),
        (soft_target, {}, None),
        (processed_draft, {"draft_policy": SamplingPolicy()}, "the draft's policy leaves every row it drafts from"),
        (processed_draft, {}, None),
        (stateful_target, {"target_policy": SamplingPolicy.build(temperature=0.9)}, "the target's policy keeps no"),
        (stateful_target, {}, None),
        (bfloat16_inexact, {"draft_policy": GREEDY}, "every draft row here is exact in bfloat16"),
        (bfloat16_inexact, {}, None),
        (min_vocab(3, "one token of mass"), {"vocab": 2}, "V = 2 < 3: one token of mass"),
        (min_vocab(3, "one token of mass"), {"vocab": 3}, None),
        (min_horizon(2, "one position"), {"horizon": 1}, "horizon 1 < 2: one position"),
        (all_of(drafts(1), soft_draft, drafts(2)), {"k": 1, "draft_policy": GREEDY}, "every draft here is drawn"),
        (all_of(drafts(1), soft_draft), {}, None),
    ],
)
def test_a_condition_gives_its_reason_exactly_where_it_is_unmet(condition, where, reason):
    got = condition(case(**where))
    assert got == reason if reason is None else got.startswith(reason), got


def _run_anyway(cfg: OracleConfig, family: str, variant: Variant, edit):
    """The lab's row for ``variant`` in the case of ``cfg`` (its rig changed by ``edit``), and what the
    lab's checks find when it is run regardless."""
    rig = lab.LAB_FAMILIES[family][0](edit(build_rig(cfg, lab=True)))
    horizon = rig.k + 1
    ref = Reference(rig)
    row = lab.lab_family(family, rig, (variant,), horizon, cfg.seed)[0]
    return row, lab._catch(variant.build(rig), horizon, target_joint(rig, horizon, ref=ref), cfg.seed, ref)


def _named(variants, name):
    return next(v for v in variants if v.name == name)


def _as_is(rig):
    return rig


@pytest.mark.parametrize(
    "cfg,family,name,edit,reason",
    [
        # the tables: the lookup's token is the target's favourite at every round start it reaches
        (OracleConfig(vocab=3, k=2, seed=1), "multi/", "source_after_target_p", _as_is, "at every round start"),
        (OracleConfig(vocab=2, k=2, seed=28), "multi/", "source_after_target_p", _as_is, "at every round start"),
        # the tables: each draft the target may reject is already in its repetition state (V = 2)
        (OracleConfig(vocab=2, k=2, seed=37), "", "processor_advanced_over_rejected", _as_is, "no round within"),
        # the sizes: a round of one draft, or of none
        (OracleConfig(vocab=2), "", "continue_after_rejection", lambda r: r.but(k=1), "a round drafts at most 1"),
        (OracleConfig(vocab=3), "", "k_from_batch_mean_confidence", lambda r: r.but(k=1), "a round drafts at most 1"),
        (OracleConfig(vocab=2), "ngram/", "continue_after_rejection", lambda r: r.but(k=1), "a round drafts at most 1"),
        # the policies
        (OracleConfig(), "", "raw_draft_logits_as_q", lambda r: r.but(draft_policy=SamplingPolicy()), "the draft's"),
        (OracleConfig(), "", "model_draft_as_point_mass", lambda r: r.but(draft_policy=GREEDY), "every draft here"),
        (OracleConfig(), "", "argmax_drafts_with_soft_q", lambda r: r.but(draft_policy=GREEDY), "every draft here"),
        (OracleConfig(), "", "k_after_target_p", self_draft, "no draft can be rejected"),
    ],
)
def test_a_variant_not_applicable_is_one_no_check_catches(cfg, family, name, edit, reason):
    variant = _named(lab.LAB_FAMILIES[family][1] + SHIPPED_VARIANTS, name)
    row, found = _run_anyway(cfg, family, variant, edit)
    assert row["applicable"] is False and row["caught"] is None and row["caught_by"] is None
    assert row["detail"].startswith("not applicable at this size: " + reason), row["detail"]
    assert found == (False, None, "not caught"), found


@pytest.mark.parametrize(
    "name,edit",
    [
        ("correction_from_p", self_draft),  # no rejection in the case, but dtype_edges has its own rows
        ("first_draft_without_test", self_draft),
        ("sampling_returns_argmax", lambda r: r.but(target_policy=GREEDY)),
        ("correction_from_q", self_draft),
    ],
)
def test_a_rule_that_dtype_edges_sees_is_applicable_at_every_size(name, edit):
    """A variant of the rule itself is put to dtype_edges' rows whatever the case: where its own
    needs are unmet in the case, it is still applicable, and caught by dtype_edges."""
    variant = _named(lab.VARIANTS + SHIPPED_VARIANTS, name)
    rig = edit(build_rig(OracleConfig(), lab=True))
    assert variant.needs(LabCase(rig, rig.k + 1, 0, Reference(rig))) is not None
    row, _ = _run_anyway(OracleConfig(), "", variant, edit)
    assert row["applicable"] and row["caught"] and row["caught_by"] == "dtype_edges", row


def test_block_verification_s_residual_scale_is_not_applicable_at_two_tokens():
    """At V = 2 both residuals put their mass on one token: the lab runs block's at V = 3."""
    variant = _named(BLOCK_VARIANTS, "block_acceptance_token_residual")
    rig = build_rig(OracleConfig(vocab=2, k=3), lab=True).but(rule="block")
    row = lab.lab_family("block/", rig, (variant,), rig.k + 1, 0)[0]
    assert row["detail"] == (
        "not applicable at this size: V = 2 < 3: a residual has at most one token of mass, the same whatever its "
        "scale rho_A"
    )
    ref = Reference(rig)
    assert lab._catch(variant.build(rig), 4, target_joint(rig, 4, ref=ref), 0, ref)[0] is False


def test_every_variant_of_every_family_declares_what_it_needs():
    families = [vs for _, vs in lab.LAB_FAMILIES.values()] + [SHIPPED_VARIANTS, BLOCK_VARIANTS, INVARIANT_VARIANTS]
    for variant in (v for vs in families for v in vs):
        assert isinstance(variant, Variant) and callable(variant.needs), variant
