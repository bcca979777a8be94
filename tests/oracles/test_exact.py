import pytest

from specd.core.table_model import TableModel
from specd.oracles.engine.exact import Enumerator, speculative_joint
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.lab.chains import VARIANTS
from specd.oracles.record import max_abs_diff
from specd.oracles.reference import target_joint
from tests.helpers import rig

CASES = [(2, 1), (2, 3), (3, 2), (4, 3)]


@pytest.mark.parametrize("vocab,k", CASES)
@pytest.mark.parametrize("layout", ["replay_frontier", "retained_frontier"])
@pytest.mark.parametrize("completion", ["target", "rounds"])
def test_speculative_joint_equals_target_joint(vocab, k, layout, completion):
    r = rig(vocab, k, layout)
    reference = target_joint(r, k + 1)
    joint = speculative_joint(r, k + 1, completion)
    assert len(reference) == vocab ** (k + 1)
    assert max_abs_diff(reference, joint) <= 1e-12
    assert abs(sum(joint.values()) - 1) <= 1e-12


def test_longer_horizon_runs_several_rounds():
    r = rig(2, 2)
    e = Enumerator(r, 6, "rounds")
    assert max_abs_diff(target_joint(r, 6), e.joint()) <= 1e-12
    assert e.rounds_enumerated > 3


@pytest.mark.parametrize("target_t,draft_t", [(0, 0.7), (0.8, 0), (0, 0)])
def test_greedy_sides_stay_exact(target_t, draft_t):
    r = rig(3, 2, target_temperature=target_t, draft_temperature=draft_t)
    assert max_abs_diff(target_joint(r, 3), speculative_joint(r, 3, "rounds")) <= 1e-12


def test_enumeration_is_not_vacuous_a_wrong_target_is_detected():
    r = rig(2, 3)
    other = r.but(target=TableModel(2, seed=99))
    assert max_abs_diff(target_joint(other, 4), speculative_joint(r, 4)) > 1e-3


def test_the_drafts_after_a_rejection_are_integrated_too():
    """The rule never reads the drafts after a first rejection, but a wrong engine may: the lab's
    processor_advanced_over_rejected advances the target's repetition state over them. At V = 3, K
    = 2, seed 21 it moves the state only where the draft after a rejected 0 is 2 (q = 0.0007 there,
    and the first full path through the rejection drafts 0): each full path is its own cell."""
    base = build_rig(OracleConfig(vocab=3, k=2, seed=21), lab=True)
    variant = next(v for v in VARIANTS if v.name == "processor_advanced_over_rejected").build(base)
    assert max_abs_diff(target_joint(base, 3), speculative_joint(variant, 3, "rounds")) > 1e-6
    assert max_abs_diff(target_joint(base, 3), speculative_joint(base, 3, "rounds")) <= 1e-12
