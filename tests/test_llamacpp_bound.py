"""benchmarks/llamacpp_bound.py's ceilings: the cost curve, the perfect draft and the best lookup's
dynamic program, on texts whose answer is known by hand."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from llamacpp_bound import curve, lookup_speedup, perfect_speedup, policy_speedup, tier_speedups  # noqa: E402

LINEAR = [0.0] + [0.5 + 0.5 * n for n in range(1, 18)]  # c(n) = (1 + n) / 2 one-row calls, n = 1..17


def test_the_curve_is_in_one_row_units_and_linear_between_measured_counts():
    assert curve({1: 10.0, 2: 14.0, 4: 22.0}, 4) == pytest.approx([0.0, 1.0, 1.4, 1.8, 2.2])


def test_a_perfect_draft_fills_the_call_whose_rows_are_cheapest_per_token():
    assert perfect_speedup(LINEAR) == pytest.approx(17 / 9)
    assert perfect_speedup([0.0, 1.0, 2.0, 3.0]) == 1.0  # rows cost as much as calls: no draft pays


def test_a_copied_text_is_drafted_whole_and_a_new_one_not_at_all():
    prompt = list(range(1, 21)) + [1]
    # the output copies the prompt after its last token: every proposal is right, so the best rounds
    # are one of 17 rows (17 tokens for 9 units) and one of 1 row for the 18th token
    assert lookup_speedup(prompt, list(range(2, 20)), LINEAR) == pytest.approx(18 / 10)
    assert lookup_speedup(prompt, list(range(2, 20)), LINEAR) <= perfect_speedup(LINEAR)
    # tokens never seen before: nothing to look up, one token a call
    assert lookup_speedup(prompt, list(range(100, 130)), LINEAR) == 1.0


def test_a_wrong_proposal_is_not_drafted_where_it_costs_more_than_it_keeps():
    # after "5 6" the prompt went on "7 8 9", the output goes "5 6 40 41": drafting at 6 would pay a
    # row for a refused token, so the best plan drafts only where the proposal is right
    prompt = [5, 6, 7, 8, 9, 3]
    text = [5, 6, 40, 41]
    cost = [0.0, 1.0, 1.5, 2.0, 2.5, 3.0]
    # by hand: at t = 0 the prompt's last token (3) never occurred before: no proposal, one row. At
    # t = 1 ("... 3 5") it proposes 6 7 8 9: K = 1 keeps 6 and emits the correction 40 for c(2) = 1.5,
    # where two one-row rounds cost 2 (K = 2.. keeps no more for more). At t = 3, 41 is one row.
    # In all 1 + 1.5 + 1 = 3.5 units for 4 tokens.
    assert lookup_speedup(prompt, text, cost) == pytest.approx(4 / 3.5)


def test_k_auto_replayed_drafts_a_copy_far_and_never_drafts_without_a_match():
    points = {n: 1.0 + 0.4 * (n - 1) for n in (1, 2, 3, 5, 9, 17, 33)}  # a drafted row: 0.4 of a call
    prompt = list(range(1, 41)) + [1]
    copied, ks = policy_speedup(prompt, list(range(2, 40)), points, 32, 38)  # the budget ends with the text
    assert 1.5 < copied <= 38 / (1.0 + 0.4 * 37)  # no better than the whole copy in one call
    assert max(ks) >= 8
    novel, ks = policy_speedup(prompt, list(range(100, 130)), points, 32, 96)
    assert novel == 1.0 and ks == {0: 30}


def test_the_best_k_by_match_tier_drafts_the_copy_and_leaves_a_new_text_alone():
    prompt = list(range(1, 41)) + [1]
    # the second prompt ends on a token it never had before, and its text is all new: never a match
    texts = [(prompt, list(range(2, 40))), (list(range(1, 41)) + [50], list(range(100, 130)))]
    speedups, k_of = tier_speedups(texts, [LINEAR, LINEAR], 16, 38)
    assert speedups[1] == 1.0  # no match, no draft
    assert 1.0 < speedups[0] <= perfect_speedup(LINEAR) and max(k_of.values()) > 0
    assert speedups[0] >= lookup_speedup(prompt, list(range(2, 40)), LINEAR) * 0.8  # near the hindsight plan
