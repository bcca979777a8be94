import math

import pytest

from specd.errors import (
    AlphaOutOfRange,
    EmptyRange,
    InvalidCost,
    InvalidFixture,
    NotReachConditioned,
    OmitsTerminalToken,
)
from specd.policy.ledger import CostModel, accepted_distribution, expected_progress, survival
from specd.policy.profile import constant_profile, per_position_profile
from specd.sweeps.ledger import ModelShape, ledger_row, optimum, sweep
from specd.sweeps.profile import profile_from_mapping

PAPER = dict(row_cost=0.0, draft_row_cost=0.0, state_cost=0.0, queue_cost=0.0, context_cost=0.0)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("c", [0.0, 0.05, 0.2, 1.0])
@pytest.mark.parametrize("k", [1, 2, 4, 8, 16])
def test_reproduces_leviathan_closed_form(alpha, c, k):
    row = ledger_row(constant_profile(alpha), CostModel(draft_cost=c, **PAPER), k)
    expected = (k + 1 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)) / (1 + k * c)
    assert row.speedup == pytest.approx(expected, rel=1e-12)


def test_survival_distribution_and_progress_agree():
    profile = per_position_profile([0.9, 0.5, 0.8])
    s = survival(profile, 3)
    assert s == pytest.approx([0.9, 0.45, 0.36])
    pr = accepted_distribution(profile, 3)
    assert pr == pytest.approx([0.1, 0.45, 0.09, 0.36]) and sum(pr) == pytest.approx(1.0)
    assert expected_progress(profile, 3) == pytest.approx(1 + sum(s))
    assert expected_progress(profile, 3) == pytest.approx(sum((a + 1) * p for a, p in enumerate(pr)))


def test_front_loaded_beats_back_loaded_with_the_same_mean():
    front = per_position_profile([0.95, 0.90, 0.60, 0.40])
    back = per_position_profile([0.40, 0.60, 0.90, 0.95])
    assert sum(front.alphas) == pytest.approx(sum(back.alphas))
    assert expected_progress(front, 4) > expected_progress(back, 4) + 0.8


def test_stop_model_shortens_progress():
    p = constant_profile(0.9)
    assert expected_progress(p, 4, stop_probability=0.0) > expected_progress(p, 4, stop_probability=0.2)
    assert expected_progress(p, 4, stop_probability=0.0) == pytest.approx(1 + sum(survival(p, 4)))


def test_interior_optimum_is_found_and_batch_pressure_moves_it_down():
    rows = sweep(constant_profile(0.8), CostModel(draft_cost=0.05, row_cost=0.02), range(1, 17), [1, 16])
    best1, interior1 = optimum(rows, 1)
    best16, interior16 = optimum(rows, 16)
    assert interior1 and interior16
    assert best16.k < best1.k
    assert sum(r.optimal for r in rows) == 2
    free = sweep(constant_profile(0.99), CostModel(draft_cost=0.0, **PAPER), range(1, 6), [1])
    assert optimum(free, 1) == (free[-1], False)  # monotone: the edge of the range, flagged as such


def test_time_per_token_is_a_ratio_of_expectations_and_waste_is_k_minus_ea():
    row = ledger_row(
        constant_profile(0.7),
        CostModel(),
        5,
        batch=4,
        context=256,
        shape=ModelShape(layers=30, kv_heads=3, head_dim=64, bytes_per_value=4),
    )
    assert row.time_per_token == pytest.approx(row.round_time / row.expected_progress)
    assert row.discarded_kv_rows == pytest.approx(5 - row.expected_accepted)
    assert row.temporary_kv_bytes_per_token == pytest.approx(6 * 2 * 30 * 3 * 64 * 4 / row.expected_progress)


@pytest.mark.parametrize(
    "build,error",
    [
        (lambda: constant_profile(1.2), AlphaOutOfRange),
        (lambda: per_position_profile([0.9, -0.1]), AlphaOutOfRange),
        (lambda: per_position_profile([0.9, math.nan]), AlphaOutOfRange),
        (lambda: per_position_profile([0.9, 0.8], rates="per_proposal"), NotReachConditioned),
        (lambda: profile_from_mapping({"alpha": 0.8, "counts_terminal_token": False}), OmitsTerminalToken),
        (lambda: profile_from_mapping({"alphas": [0.8], "progress": "accepted_only"}), OmitsTerminalToken),
        (lambda: CostModel(draft_cost=-0.1), InvalidCost),
        (lambda: CostModel(state_cost=math.nan), InvalidCost),
        (lambda: sweep(constant_profile(0.8), CostModel(), [], [1]), EmptyRange),
        (lambda: sweep(per_position_profile([0.9, 0.8]), CostModel(), [1, 2, 3], [1]), InvalidFixture),
    ],
)
def test_invalid_fixtures_are_refused_by_name(build, error):
    with pytest.raises(error):
        build()
