import pytest

from specd.core.table_model import TableModel
from specd.oracles.exact import Enumerator, speculative_joint, target_joint
from specd.oracles.record import max_abs_diff
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
