"""Fixed and replayed K, and the K rules checked once."""

import pytest

from specd.core.sources import Offer, Plan
from specd.core.state import History
from specd.errors import KScheduleMismatch, UsageError
from specd.policy.kpolicy import MAX_K, FixedK, ScheduleK, check_k, check_k_max


class State:
    def __init__(self, request_id="a", rounds=0):
        self.request_id, self.rounds, self.history = request_id, rounds, History()


SOURCES = [Offer(0, "suffix"), Offer(1, "model")]


def test_fixed_k_is_the_same_every_round_from_the_first_source_that_proposes():
    assert [FixedK(3).plan(State(rounds=r), SOURCES) for r in range(2)] == [Plan(0, 3)] * 2
    assert FixedK(3).plan(State(), SOURCES[1:]) == Plan(1, 3)  # the lookup found nothing: the model
    assert FixedK(3).plan(State(), []) == Plan(None, 0)


def test_a_schedule_replays_each_requests_source_and_k_round_by_round():
    policy = ScheduleK({"a": ((2, "model"), (0, None), (5, "suffix")), "b": ((1, None),)})
    assert [policy.plan(State("a", r), SOURCES) for r in range(3)] == [Plan(1, 2), Plan(None, 0), Plan(0, 5)]
    assert policy.plan(State("b", 0), SOURCES) == Plan(0, 1)  # no source recorded: the first that proposes


def test_a_schedule_that_lacks_a_request_a_round_or_a_source_is_refused_by_name():
    policy = ScheduleK({"a": ((2, "model"),)})
    with pytest.raises(KScheduleMismatch, match="no schedule for request 'z'"):
        policy.plan(State("z"), SOURCES)
    with pytest.raises(KScheduleMismatch, match="needs a round 2"):
        policy.plan(State("a", 1), SOURCES)
    with pytest.raises(KScheduleMismatch, match="drafted from 'model'"):
        policy.plan(State("a", 0), SOURCES[:1])


@pytest.mark.parametrize("value", ["auto", 1, MAX_K])
def test_k_in_range_passes(value):
    check_k(value)


@pytest.mark.parametrize("value", [0, MAX_K + 1, -3])
def test_k_out_of_range_is_refused_naming_where_it_came_from(value):
    with pytest.raises(UsageError, match=rf"run.yaml: k must be auto or in 1..{MAX_K}"):
        check_k(value, "run.yaml: k")
    with pytest.raises(UsageError, match=f"--k-max must be in 1..{MAX_K}"):
        check_k_max(value)
