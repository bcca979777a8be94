"""Block verification's proofs: the production round under --rule block is exact on every small
vocabulary and K, in rational arithmetic, Theorem 2 holds exactly, and every peer bug is caught."""

from fractions import Fraction

import pytest

from specd.oracles.engine.block_checks import acceptance_margin
from specd.oracles.engine.exact import speculative_joint
from specd.oracles.engine.rational import rational_block_difference
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.lab.blocks import run_block_lab
from specd.oracles.record import EXACT_TOLERANCE, max_abs_diff
from specd.oracles.reference import target_joint
from specd.oracles.report import run_oracle
from specd.oracles.rig import ngram_rig


# V = 2..4, K = 1..4 but (4, 4), which takes 4 s here (measured exact too: max |diff| 1.9e-16)
@pytest.mark.parametrize(
    "vocab,k", [(2, 1), (2, 2), (2, 3), (2, 4), (3, 1), (3, 2), (3, 3), (3, 4), (4, 1), (4, 2), (4, 3)]
)
def test_block_rounds_are_exact_for_model_drafts_and_lookups(vocab, k):
    rig = build_rig(OracleConfig(vocab=vocab, k=k, lab=False)).but(rule="block")
    horizon = k + 1
    for case in (rig, ngram_rig(rig)):
        reference = target_joint(case, horizon)
        for completion in ("target", "rounds"):
            joint = speculative_joint(case, horizon, completion)
            assert max_abs_diff(reference, joint) <= EXACT_TOLERANCE
            assert abs(sum(joint.values()) - 1) <= EXACT_TOLERANCE


@pytest.mark.parametrize("vocab,k", [(2, 3), (3, 2), (4, 2), (3, 4)])
def test_block_rule_in_rationals_is_exactly_the_target(vocab, k):
    assert rational_block_difference(vocab, k, k + 1, seed=vocab + k) == 0


def test_theorem_2_exactly_on_the_papers_example_and_zero_gain_for_lookups():
    p = [Fraction(1, 3), Fraction(2, 3)]
    q = [Fraction(2, 3), Fraction(1, 3)]
    token, blocked = acceptance_margin(lambda prefix: p, lambda prefix: q, 2)
    assert (token, blocked) == (Fraction(10, 9), Fraction(11, 9))  # Sun et al., section 2
    token, blocked = acceptance_margin(lambda prefix: p, lambda prefix: q, 2, lookup=True)
    assert token == blocked


def test_verify_oracle_rule_block_passes_and_its_lab_catches_every_variant_by_name():
    report = run_oracle(OracleConfig(vocab=2, k=2, samples=400, rule="block"))
    assert report["passed"], [c for c in report["checks"] if not c["passed"]]
    names = {c["name"] for c in report["checks"]}
    assert {"block_exact_joint", "block_exact_rational", "block_acceptance_theorem_2", "block_monte_carlo"} <= names
    assert not names & {"exact_joint", "invariant_law"}  # only the block rule's checks
    theorem = next(c for c in report["checks"] if c["name"] == "block_acceptance_theorem_2")
    assert theorem["figures"]["min_margin"] > 0 and theorem["figures"]["lookup_margins_all_zero"]
    caught = {v["variant"]: v["caught_by"] for v in report["failure_lab"]}
    assert caught["block/block_stops_at_first_failure"] == "exact_joint"
    assert caught["block/block_acceptance_token_residual"] == "exact_joint"
    assert all(caught.values()), caught


def test_the_token_wise_residual_is_no_bug_for_a_lookup():
    """For a point-mass draft both residuals are p without the draft: the variant is exact there,
    so the lab does not list it, and its model-draft twin is caught."""
    variants = {v["variant"] for v in run_block_lab(OracleConfig(vocab=2, k=2))}
    assert "block/block_acceptance_token_residual" in variants
    assert "block/ngram/block_acceptance_token_residual" not in variants


def test_the_sampler_oracle_checks_a_block_sampler_against_the_block_rule():
    from specd.oracles.lab.blocks import BlockStopsAtFirstFailure
    from specd.oracles.report import run_sampler_oracle
    from specd.oracles.samplers import checks as sc
    from specd.oracles.samplers.protocol import SamplerUnderTest, rule_sampler

    block_cfg = OracleConfig(vocab=3, k=3, rule="block")
    assert run_sampler_oracle(block_cfg, "specd-block")["passed"]
    # a block sampler is not the token-wise rule, and the token-wise rule is not block verification
    assert not run_sampler_oracle(OracleConfig(vocab=3, k=3, rule="maximal"), "specd-block")["passed"]
    assert not run_sampler_oracle(block_cfg, "specd")["passed"]
    wrong = SamplerUnderTest("first-failure", rule_sampler(BlockStopsAtFirstFailure(), block=True), "")
    check = sc.check_exact(wrong, build_rig(block_cfg), 3, tokens=True, rule="block")
    assert not check.passed and check.findings == ["not_exact"]
