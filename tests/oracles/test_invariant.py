"""The oracle's proof of the invariant rule, and its lab, on several fixtures."""

import pytest

from specd.oracles.engine.invariant import invariant_checks
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.lab.invariant import INVARIANT_VARIANTS, invariant_lab
from specd.oracles.report import run_oracle


@pytest.mark.parametrize(
    "cfg",
    [
        OracleConfig(vocab=2, k=3),
        OracleConfig(vocab=3, k=2, layout="retained_frontier", repetition_penalty=1.3),
        OracleConfig(vocab=4, k=3, target_temperature=0.6, draft_temperature=1.2, seed=4),
    ],
)
def test_the_invariant_rule_passes_every_check(cfg):
    rig = build_rig(cfg)
    checks = {c.name: c for c in invariant_checks(rig, cfg.effective_horizon)}
    assert set(checks) == {
        "invariant_reference",
        "invariant_pointwise",
        "invariant_eos",
        "invariant_shared_noise",
        "invariant_law",
    }
    assert all(c.passed for c in checks.values()), [c.detail for c in checks.values() if not c.passed]
    assert checks["invariant_pointwise"].figures["texts_compared"] >= 1000
    assert checks["invariant_shared_noise"].figures["drafted"] > 0


def test_every_invariant_variant_is_caught_by_name():
    cfg = OracleConfig(vocab=3, k=2)
    found = {v["variant"]: v for v in invariant_lab(build_rig(cfg, lab=True), cfg.seed)}
    expected = {
        "invariant/noise_keyed_by_round": "invariant_reference",
        "invariant/draft_with_independent_noise": "invariant_shared_noise",
        "invariant/ratio_test_with_shared_noise": "invariant_pointwise",
        "invariant/eos_draft_ignored": "invariant_pointwise",
    }
    assert len(found) == len(INVARIANT_VARIANTS)
    assert {name: v["caught_by"] for name, v in found.items()} == expected


def test_verify_oracle_rule_selects_the_proofs():
    invariant = run_oracle(OracleConfig(vocab=2, k=2, rule="invariant", lab=False))
    names = [c["name"] for c in invariant["checks"]]
    assert invariant["passed"] and all(n.startswith(("invariant_", "tree_invariant")) for n in names)
    maximal = run_oracle(OracleConfig(vocab=2, k=2, rule="maximal", lab=False))
    assert maximal["passed"] and not any("invariant" in c["name"] for c in maximal["checks"])


@pytest.mark.parametrize(
    "controls",
    [
        {"min_p": 0.3},
        {"presence_penalty": 0.5, "frequency_penalty": 0.7},
        {"presence_penalty": -1.5, "frequency_penalty": -2.0},  # vLLM's range: negative favours repeats
        {"no_repeat_ngram_size": 2},
        {"bad_words_ids": [[2, 1]]},
        {"min_new_tokens": 2, "eos_ids": (0,)},
    ],
)
def test_every_sampling_control_is_exact_under_both_rules(controls):
    """Each control is stateful along the drafted branch and rolled back on rejection: the exact
    joints (one round, several rounds, -k auto), the rational check, Monte Carlo and the invariant
    rule's pointwise and reference checks all pass with it on the target."""
    cfg = OracleConfig(vocab=3, k=2, samples=300, lab=False, controls=controls)
    report = run_oracle(cfg)
    failed = [(c["name"], c["detail"]) for c in report["checks"] if not c["passed"]]
    assert report["passed"], failed
    names = {c["name"] for c in report["checks"]}
    assert {"exact_joint", "exact_joint_rounds", "invariant_pointwise", "invariant_reference"} <= names


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("seed", [68, 98])
def test_the_lab_runs_at_its_largest_k_where_the_variants_show(seed, k):
    """On these V = 2 tables ratio_test_with_shared_noise's text differs from target-only decoding's
    on fewer than 1 in 128 noise draws at K = 2: the invariant lab runs at K = 3 whatever the K."""
    report = run_oracle(OracleConfig(vocab=2, k=k, seed=seed, rule="invariant"))
    assert report["passed"] and [v["caught_by"] for v in report["failure_lab"]] == [
        "invariant_reference",
        "invariant_shared_noise",
        "invariant_pointwise",
        "invariant_pointwise",
        "tree_invariant",
    ]
