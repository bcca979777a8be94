import pytest

from specd.oracles.engine.checks import cell_batch_difference
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.lab.chains import MULTI_SOURCE_VARIANTS, NGRAM_VARIANTS, SHARED_BODY_VARIANTS, VARIANTS, run_lab
from specd.oracles.rig import ngram_rig


@pytest.mark.parametrize(
    "vocab,k,layout", [(2, 3, "replay_frontier"), (3, 2, "retained_frontier"), (2, 1, "replay_frontier")]
)
def test_every_known_wrong_variant_is_caught(vocab, k, layout):
    results = run_lab(OracleConfig(vocab=vocab, k=k, layout=layout))
    expected = [v.name for v in VARIANTS] + [f"ngram/{v.name}" for v in NGRAM_VARIANTS]
    expected += [f"multi/{v.name}" for v in MULTI_SOURCE_VARIANTS]
    expected += [f"shared/{v.name}" for v in SHARED_BODY_VARIANTS]
    assert [r["variant"] for r in results] == expected
    assert "shared/verify_with_small_head" in expected
    missed = [r["variant"] for r in results if not r["caught"]]
    assert not missed
    assert all(r["caught_by"] and r["detail"] for r in results)


@pytest.mark.parametrize("kind", ["model", "ngram"])
def test_variants_replace_exactly_one_component(kind):
    base = build_rig(OracleConfig(), lab=True)
    variants = VARIANTS
    if kind == "ngram":
        base, variants = ngram_rig(base), NGRAM_VARIANTS
    for variant in variants:
        broken = variant.build(base)
        changed = [
            name
            for name in ("sampler_cls", "layout_factory", "proposer_factory", "transaction_cls", "k_policy_factory")
            if getattr(broken, name) is not getattr(base, name)
        ]
        assert len(changed) == 1, variant.name


def test_the_bugs_other_engines_shipped_are_caught_by_name():
    results = {r["variant"]: r["caught_by"] for r in run_lab(OracleConfig(vocab=3, k=2, layout="retained_frontier"))}
    assert results["q_recorded_in_bfloat16"] == "exact_joint"
    assert results["argmax_drafts_with_soft_q"] == "exact_joint"
    assert results["raw_draft_logits_as_q"] == "exact_joint"
    assert results["lossy_threshold_accept"] == "exact_joint"
    assert results["multi/source_after_target_p"] in ("exact_joint", "exact_joint_rounds")
    assert results["k_from_batch_mean_confidence"] == "batch_invariance"  # a row alone vs in a batch
    assert results["float32_uniform_comparison"] == "dtype_edges"  # invisible to float64 enumeration
    # K rules that are not stopping times of the draft process
    assert results["k_after_target_p"] == "exact_joint"
    assert results["draft_stop_reads_acceptance_uniform"] == "exact_joint"


@pytest.mark.parametrize("vocab,k", [(2, 3), (3, 2)])
def test_this_years_shipped_sampler_bugs_are_caught_by_name(vocab, k):
    """vllm#47386, vllm#40149, mistral.rs#2424, lattice#243 and lattice#388, rebuilt on specd's engine
    (DeepSpec#31 is q_recorded_in_bfloat16 above), each one component replaced."""
    from specd.oracles.lab.shipped import SHIPPED_VARIANTS

    results = {r["variant"]: r for r in run_lab(OracleConfig(vocab=vocab, k=k), SHIPPED_VARIANTS, families=("",))}
    assert list(results) == [v.name for v in SHIPPED_VARIANTS]
    assert all(r["caught"] and r["caught_by"] == "exact_joint" for r in results.values()), results
    base = build_rig(OracleConfig(), lab=True)
    for variant in SHIPPED_VARIANTS:
        broken = variant.build(base)
        changed = [n for n in ("sampler_cls", "proposer_factory") if getattr(broken, n) is not getattr(base, n)]
        assert len(changed) == 1, variant.name


@pytest.mark.parametrize("vocab,k,seed", [(2, 2, 1), (2, 2, 2), (3, 2, 3), (3, 3, 0)])
def test_a_k_read_off_the_batch_is_caught_at_every_seed(vocab, k, seed):
    """k_from_batch_mean_confidence on the exact cells of two prompts, together and apart: whatever
    the seed (the first three were missed by the seeded batch check and the enumeration)."""
    base = build_rig(OracleConfig(vocab=vocab, k=k, seed=seed), lab=True)
    variant = next(v for v in VARIANTS if v.name == "k_from_batch_mean_confidence").build(base)
    differs, cells = cell_batch_difference(variant, base.k + 1)
    assert differs and "alone it drafts" in differs
    assert cell_batch_difference(base, base.k + 1) == (None, cells)
