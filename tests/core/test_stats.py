"""The raw counters and the one function deriving every figure from them."""

import pytest

from specd.core.stats import RoundCounts, RunStats, StatsAccumulator, acceptance_figures

# (K, A, emitted) per round: a K = 0 round, full acceptance, a rejection at position 2, one at position 1
ROUNDS = [(0, 0, 1), (3, 3, 4), (3, 1, 2), (2, 0, 1)]


def counts() -> RoundCounts:
    c = RoundCounts()
    for k, a, emitted in ROUNDS:
        c.add_round(k, a, emitted)
    return c


def test_figures_by_their_definitions():
    f = acceptance_figures(counts())
    assert (f["rounds"], f["rounds_k0"], f["share_k0"]) == (4, 1, 0.25)
    assert f["mean_accepted_length"] == 8 / 4  # K = 0 rounds included, each emitting one token
    # reach-conditioned: position 1 reached by the three drafting rounds, accepted by two
    assert f["reached_per_position"] == {1: 3, 2: 2, 3: 1} and f["accepted_per_position"] == {1: 2, 2: 1, 3: 1}
    assert f["acceptance_by_position"] == {1: 2 / 3, 2: 1 / 2, 3: 1.0}
    assert f["accepted_histogram"] == {0: 1, 1: 1, 3: 1}  # drafting rounds only: K = 0 rounds left out
    assert f["k_histogram"] == {0: 1, 2: 1, 3: 2}
    # vLLM's: drafts are the rounds with K >= 1; mean acceptance length counts the bonus token
    assert (f["num_drafts"], f["num_draft_tokens"], f["num_accepted_tokens"]) == (3, 8, 4)
    assert f["num_accepted_tokens_per_pos"] == [2, 1, 1]
    assert f["mean_acceptance_length"] == pytest.approx(1 + 4 / 3)
    assert f["draft_acceptance_rate"] == 4 / 8


def test_figures_of_no_rounds_and_of_target_only_rounds_are_undefined_not_zero():
    empty = acceptance_figures(RoundCounts())
    assert empty["mean_accepted_length"] is None and empty["share_k0"] is None and empty["num_drafts"] == 0
    plain = RoundCounts()
    plain.add_round(0, 0, 1)
    f = acceptance_figures(plain)
    assert f["mean_accepted_length"] == 1 and f["share_k0"] == 1.0
    assert f["mean_acceptance_length"] is None and f["draft_acceptance_rate"] is None
    assert f["acceptance_by_position"] == {} and f["accepted_histogram"] == {}


def test_a_position_no_round_reached_has_no_rate():
    c = RoundCounts()
    c.add_round(3, 0, 1)  # only position 1 was tested
    assert acceptance_figures(c)["acceptance_by_position"] == {1: 0.0, 2: None, 3: None}


def test_run_stats_carry_the_same_figures_and_combine_by_adding_counts():
    acc = StatsAccumulator()
    for k, a, emitted in ROUNDS:
        acc.add_round(k, a, emitted)
    one = acc.freeze(0, 0, 0, 1.0)
    assert one.figures() == acceptance_figures(counts())
    both = RunStats.combine([one, one])
    doubled = RoundCounts()
    for k, a, emitted in ROUNDS * 2:
        doubled.add_round(k, a, emitted)
    assert both.figures() == acceptance_figures(doubled) and both.wall_time == 2.0
    assert RunStats.combine([]).figures()["rounds"] == 0
