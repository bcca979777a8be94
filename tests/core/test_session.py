"""The session: admission and prefill, continuous batching, requests ended between rounds, a failed
round rolled back, and copies of a request admitted mid-generation."""

import pytest

from specd.core.round import RoundClock, decode, materialize_frontiers, speculative_round, verify
from specd.core.state import Request
from specd.core.transaction import RoundTransaction
from specd.errors import UsageError
from tests.helpers import table_engine

REQUESTS = [Request("a", (0, 1, 2), 6, seed=1), Request("b", (3,), 4, seed=2), Request("c", (1, 1), 5, seed=3)]


def test_admission_prefills_all_but_the_frontier_and_opens_a_slot_per_request():
    session = table_engine().start(REQUESTS)
    for s, r in zip(session.states(), REQUESTS):
        assert s.output == r.prompt and s.cache_tokens == r.prompt[:-1] and s.frontier == r.prompt[-1]
        assert session.cache.committed(s.slot) == r.prompt[:-1] and session.draft_cache.caches[0].is_open(s.slot)
    assert len({s.slot for s in session.states()}) == 3 and session.stats.target_forwards == 1


@pytest.mark.parametrize(
    "requests,message",
    [
        ([Request("a", (0,), 3), Request("a", (1,), 3)], "unique"),
        ([Request("a", (), 3)], "empty prompt"),
        ([Request("a", (0,), -1)], "max_new_tokens"),
        ([Request("a", (7,), 3)], "outside the vocabulary"),
    ],
)
def test_bad_requests_are_refused_before_anything_is_admitted(requests, message):
    session = table_engine().start()
    with pytest.raises(UsageError, match=message):
        session.admit(requests)
    assert session.states() == [] and session.done


def test_fill_admits_up_to_the_batch_size_and_the_next_join_as_others_finish():
    session = table_engine().start()
    session.submit(REQUESTS)
    assert [s.request_id for s in session.fill(2)] == ["a", "b"] and session.fill(2) == []
    while session.store.get("b").finished is False:
        speculative_round(session)
    finished = session.take_finished()
    assert [s.request_id for s in finished] == ["b"] and not session.draft_cache.caches[0].is_open(finished[0].slot)
    assert [s.request_id for s in session.fill(2)] == ["c"] and session.take_finished() == []


def test_a_zero_budget_request_finishes_at_admission():
    session = table_engine().start([Request("z", (1, 2), 0)])
    assert session.done and [s.request_id for s in session.take_finished()] == ["z"]
    assert not session.cache.is_open(session.store.get("z").slot)


def test_finish_ends_a_request_between_rounds_once():
    session = table_engine().start(REQUESTS)
    done = session.finish("a", "stop_string")
    assert done.finish_reason == "stop_string" and done.generation == 1
    assert session.finish("a", "other") == done  # a finished request stays as it finished
    assert [s.request_id for s in session.live()] == ["b", "c"] and not session.cache.is_open(done.slot)


def test_abort_drops_the_rounds_temporary_rows_and_keeps_s0():
    engine = table_engine()
    session = engine.start(REQUESTS)
    active = materialize_frontiers(session, RoundClock(None))
    before = session.states()
    verify(session, active, [(1, 2)] * len(active))
    assert all(session.cache.temporary(s.slot) for s in active)
    session.abort([RoundTransaction(s, engine.layout) for s in active])
    assert session.states() == before and all(session.cache.temporary(s.slot) == () for s in active)


def test_copies_admitted_mid_generation_continue_as_the_original_would():
    engine = table_engine(seed=4)
    session = engine.start([Request("r", (0, 1), 8, seed=5)])
    speculative_round(session)
    state = session.store.get("r")
    original = decode(session).states[0].new_tokens
    fresh = engine.start()
    (copies,) = fresh.admit_at([(state, ["c1", "c2"])])
    assert [c.output for c in copies] == [state.output] * 2
    assert all(fresh.cache.committed(c.slot) == state.cache_tokens for c in copies)
    assert all(c.rng.counters == state.rng.counters and c.rng.request_id == c.request_id for c in copies)
    # the copies' streams are keyed by their own ids: their tokens differ from the original's in general,
    # but a copy under the original's id continues it exactly
    again = engine.start()
    again.admit_at([(state, ["r"])])
    assert decode(again).states[0].new_tokens == original
