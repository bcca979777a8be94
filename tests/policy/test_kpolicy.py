"""Fixed and replayed K, and the K rules checked once."""

import pytest

from specd.core.state import History
from specd.errors import KScheduleMismatch, UsageError
from specd.policy.kpolicy import MAX_K, FixedK, ScheduleK, check_k, check_k_max


class State:
    def __init__(self, request_id="a", rounds=0):
        self.request_id, self.rounds, self.history = request_id, rounds, History()


def test_fixed_k_is_the_same_every_round():
    assert [FixedK(3).choose(State(rounds=r)) for r in range(4)] == [3, 3, 3, 3]


def test_a_schedule_replays_each_requests_k_round_by_round():
    policy = ScheduleK({"a": (2, 0, 5), "b": (1,)})
    assert [policy.choose(State("a", r)) for r in range(3)] == [2, 0, 5]
    assert policy.choose(State("b", 0)) == 1


def test_a_schedule_that_lacks_a_request_or_a_round_is_refused_by_name():
    policy = ScheduleK({"a": (2,)})
    with pytest.raises(KScheduleMismatch, match="no schedule for request 'z'"):
        policy.choose(State("z"))
    with pytest.raises(KScheduleMismatch, match="needs a round 2"):
        policy.choose(State("a", 1))


@pytest.mark.parametrize("value", ["auto", 1, MAX_K])
def test_k_in_range_passes(value):
    check_k(value)


@pytest.mark.parametrize("value", [0, MAX_K + 1, -3])
def test_k_out_of_range_is_refused_naming_where_it_came_from(value):
    with pytest.raises(UsageError, match=rf"run.yaml: k must be auto or in 1..{MAX_K}"):
        check_k(value, "run.yaml: k")
    with pytest.raises(UsageError, match=f"--k-max must be in 1..{MAX_K}"):
        check_k_max(value)
