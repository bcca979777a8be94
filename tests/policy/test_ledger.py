"""The ledger's progress rate: every K priced in one pass equals the formula at each K."""

import pytest

from specd.policy.ledger import (
    CostModel,
    MeasuredCosts,
    best_k,
    expected_progress,
    progress_rate,
    progress_rates,
    round_time,
    round_times,
)
from specd.policy.profile import constant_profile, per_position_profile

COSTS = CostModel(draft_cost=0.1, row_cost=0.05, draft_row_cost=0.02, state_cost=0.01, queue_cost=0.002)


@pytest.mark.parametrize("stop", [0.0, 0.1])
@pytest.mark.parametrize("companions", [0, 3])
def test_one_pass_equals_the_formula_at_every_k(stop, companions):
    profile = per_position_profile([0.9, 0.7, 0.95, 0.2, 0.6, 0.99])
    rates = progress_rates(profile, COSTS, range(7), batch=4, context=300, stop_probability=stop, companions=companions)
    assert sorted(rates) == list(range(7))
    for k, rate in rates.items():
        formula = (expected_progress(profile, k, stop) + companions) / round_time(COSTS, k, 4, 300)
        assert rate == pytest.approx(formula, rel=1e-14)
        assert progress_rate(profile, COSTS, k, 4, 300, stop, companions) == rate
    # the round times read once for many requests at one cost record: the same rates
    times = round_times(COSTS, range(7), 4, 300)
    assert times == {k: round_time(COSTS, k, 4, 300) for k in range(7)}
    assert progress_rates(profile, COSTS, range(7), 4, 300, stop, companions, times=times) == rates


def test_best_k_is_the_argmax_and_the_smaller_k_on_a_tie():
    profile = constant_profile(0.8)
    rates = progress_rates(profile, COSTS, range(9))
    assert progress_rates(profile, COSTS, [2, 5]) == {2: rates[2], 5: rates[5]}  # only the K asked
    assert best_k(profile, COSTS, range(0, 9)) == max(range(9), key=lambda k: (rates[k], -k))
    assert best_k(profile, COSTS, [2, 5]) == (2 if rates[2] >= rates[5] else 5)
    free = CostModel(draft_cost=0.0, row_cost=0.0, draft_row_cost=0.0, state_cost=0.0)
    nothing = constant_profile(0.0)  # every K has the rate of K = 0: the tie goes to the smallest
    assert best_k(nothing, free, range(0, 9)) == 0 and best_k(nothing, free, range(3, 9)) == 3


def test_a_measured_cost_is_read_only_at_the_k_it_holds():
    measured = MeasuredCosts(
        draft_step={1: 0.1},
        verify={(0, 1): 1.0, (2, 1): 1.2, (4, 1): 1.5},  # sweep-k --measure --k 2,4: no K = 1 or 3
        baseline={1: 1.0},
        state_cost=0.01,
        source="measured",
    )
    profile = constant_profile(0.9)
    assert best_k(profile, measured, [0, 2, 4]) in (0, 2, 4)
    assert set(progress_rates(profile, measured, [0, 2, 4])) == {0, 2, 4}
