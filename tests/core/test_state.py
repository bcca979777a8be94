"""The request state: budget, frontier, and the acceptance history a round leaves behind."""

from specd.core.processors import SamplingPolicy
from specd.core.rng import RngState
from specd.core.state import History, RequestState, match_tier, positions_reached


def state(output=(1, 2, 3), prompt_len=2, cache=(1, 2), max_new_tokens=4, **kw) -> RequestState:
    proc = SamplingPolicy.build().initial_state(output)
    return RequestState("r", 0, prompt_len, output, cache, proc, proc, RngState(0, "r"), 0, max_new_tokens, **kw)


def test_budget_and_draft_budget():
    s = state()
    assert (s.generated, s.remaining, s.draft_budget, s.finished) == (1, 3, 2, False)
    assert state(output=(1, 2, 3, 4, 5, 6)).finished and state(output=(1, 2, 3, 4, 5, 6)).draft_budget == 0
    assert state(finish_reason="eos").finished


def test_the_frontier_is_the_last_token_while_its_row_is_not_cached():
    assert state().frontier == 3
    assert state(cache=(1, 2, 3)).frontier is None


def test_positions_reached_stop_at_the_first_rejection():
    assert [positions_reached(3, a) for a in range(4)] == [1, 2, 3, 3]
    assert positions_reached(0, 0) == 0


def test_history_counts_reached_and_accepted_per_position_and_the_k_schedule():
    h = History().after(3, 1).after(0, 0).after(2, 2)
    assert h.reached == (2, 2, 0) and h.accepted_at == (2, 1, 0)
    assert (h.draft_tokens, h.accepted_tokens, h.k_schedule) == (5, 3, (3, 0, 2))
    assert h.as_dict()["rounds"] == 3


def test_evolve_copies_without_touching_the_original():
    s = state()
    t = s.evolve(output=(1, 2, 3, 4), generation=1)
    assert s.output == (1, 2, 3) and s.generation == 0 and t.output == (1, 2, 3, 4) and t.request_id == "r"


def test_a_lookups_rounds_are_pooled_by_the_tier_of_their_match_length():
    assert [match_tier(n) for n in (1, 2, 3, 4, 7, 8, 15, 16, 500)] == [0, 1, 1, 2, 2, 3, 3, 4, 4]
    h = History().after(4, 4, "suffix", match=9).after(4, 1, "suffix", match=12).after(2, 0, "suffix", match=1)
    h = h.after(3, 3, "model")  # a model's rounds have no match length: no tier
    assert h.matched("suffix", match_tier(9)) == (4 + 2, 4 + 1)  # reached 4 then 2; accepted 4 then 1
    assert h.matched("suffix", match_tier(1)) == (1, 0)
    assert h.matched("suffix", match_tier(4)) == (0, 0) and h.matched("model", 0) == (0, 0)
    assert h.after(0, 0, "suffix", match=9).at_match == h.at_match  # a round without drafts is no evidence


def test_a_round_without_drafts_changes_no_count_and_lengthens_the_schedules():
    """``History.after(0, 0)``, whatever the history before it (several sources, lookups' tiers, tree
    ranks): every count, every source's own history and every tier as they were, one more round."""
    import random

    rng = random.Random(0)
    histories = [History()]
    for _ in range(200):
        k = rng.randint(0, 4)
        walk = ((2, False), (1, True))[: min(k, 2)] if rng.random() < 0.3 else None
        accepted = sum(passed for _, passed in walk) if walk else rng.randint(0, k)
        source = rng.choice(["suffix", "hf:draft", "ngram:3", None])
        histories.append(rng.choice(histories).after(k, accepted, source, rng.choice([None, 1, 5]), walk))
    for h in histories:
        for source in ("suffix", None):
            after = h.after(0, 0, source)
            assert after.k_schedule == (*h.k_schedule, 0) and after.source_schedule == (*h.source_schedule, "")
            assert (after.draft_tokens, after.accepted_tokens, after.reached, after.accepted_at) == (
                h.draft_tokens,
                h.accepted_tokens,
                h.reached,
                h.accepted_at,
            )
            sources = (after.solo, after.by_source, after.at_match, after.ranks)
            assert sources == (h.solo, h.by_source, h.at_match, h.ranks)
