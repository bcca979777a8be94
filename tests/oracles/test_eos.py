"""The exact joint with a stop token (specd.oracles.engine.eos): EOS ends a text wherever it lands, an
accepted draft included, and production's joint is the target's chain stopped at its first EOS; an
engine that checks the stop token on the correction or bonus only fails it. The invariant rule's
stop-token check (specd.oracles.engine.invariant.stop_token) the same way, seed by seed, and the tree
rounds' (specd.oracles.engine.tree_checks.check_tree_eos)."""

from dataclasses import replace

import pytest

from specd.oracles.engine.eos import check_eos, eos_token, stopped_at
from specd.oracles.engine.invariant import each_invariant_check
from specd.oracles.engine.tree_checks import check_tree_eos, tree_case
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.lab.broken import EosDraftIgnored
from specd.oracles.reference import Reference, chain_joint


def test_the_target_chain_stops_at_its_first_eos():
    half = lambda output: [0.5, 0.5]  # noqa: E731
    assert chain_joint(half, (), 3, eos=frozenset({0})) == {(0,): 0.5, (1, 0): 0.25, (1, 1, 0): 0.125, (1, 1, 1): 0.125}
    assert len(chain_joint(half, (), 3)) == 8  # without one, every text runs to the horizon


@pytest.mark.parametrize("vocab, k, seed", [(2, 3, 0), (3, 2, 1), (4, 2, 2)])
def test_production_stops_where_the_target_does(vocab, k, seed):
    cfg = OracleConfig(vocab=vocab, k=k, seed=seed)
    rig = build_rig(cfg)
    check = check_eos(rig, cfg.effective_horizon)
    assert check.passed and 0 < check.figures["target_stop_mass"] < 1
    assert check.figures["max_abs_diff"] <= check.figures["tolerance"]
    p, q = Reference(rig).p(rig.prompt), Reference(rig).q(rig.prompt)
    assert min(p[check.figures["eos"]], q[check.figures["eos"]]) == max(map(min, p, q)) > 0
    assert check.figures["eos"] == eos_token(Reference(rig), rig.prompt)


@pytest.mark.parametrize("vocab, k", [(2, 1), (2, 3), (3, 2)])
def test_an_eos_accepted_among_the_drafts_that_does_not_stop_the_request_fails(vocab, k):
    cfg = OracleConfig(vocab=vocab, k=k)
    check = check_eos(build_rig(cfg).but(transaction_cls=EosDraftIgnored), cfg.effective_horizon)
    assert check.passed is False and check.figures["max_abs_diff"] > 0.01


def test_a_text_is_cut_after_its_first_eos():
    assert stopped_at((1, 0, 1, 0), frozenset({0})) == (1, 0)
    assert stopped_at((1, 1), frozenset({0})) == (1, 1) and stopped_at((1, 0), frozenset()) == (1, 0)


@pytest.mark.parametrize("vocab, k", [(2, 3), (3, 2)])
def test_under_the_invariant_rule_every_set_up_stops_where_the_chain_does(vocab, k):
    cfg = OracleConfig(vocab=vocab, k=k)
    rig = build_rig(cfg)
    check = next(c for c in each_invariant_check(rig, cfg.effective_horizon, 64) if c.name == "invariant_eos")
    assert check.passed and 0 < check.figures["seeds_stopped"] < 64 and check.figures["configurations"] == 5
    broken = rig.but(transaction_cls=EosDraftIgnored)
    check = next(c for c in each_invariant_check(broken, cfg.effective_horizon, 64) if c.name == "invariant_eos")
    assert check.passed is False and "the stopped chain" in check.detail


@pytest.mark.parametrize("vocab, k, seed", [(2, 3, 0), (3, 2, 1)])
def test_tree_rounds_stop_where_the_target_does_and_an_engine_that_decodes_past_an_accepted_eos_fails(vocab, k, seed):
    """The default trees (a node with siblings, three levels at V = 2), every cell of every round: the joint
    is the stopped chain and each probe emits the rule's tokens cut at the EOS; the broken engine moves
    mass (0.37 and 0.91 here)."""
    case = tree_case(OracleConfig(vocab=vocab, k=k, seed=seed))
    check = check_tree_eos(case)
    assert check.passed and 0 < check.figures["target_stop_mass"] < 1 and check.figures["differ_sampled"] == 0
    assert check.figures["cells_sampled"] > 0 and check.figures["max_abs_diff_sampled"] <= 1e-12
    broken = check_tree_eos(replace(case, rig=case.rig.but(transaction_cls=EosDraftIgnored)))
    assert broken.passed is False and broken.figures["max_abs_diff_sampled"] > 0.1
