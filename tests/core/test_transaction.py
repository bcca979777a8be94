"""Failure at each injection point leaves S_0 intact; retries reuse the same draws;
publication is idempotent."""

import pytest

from specd.core.round import speculative_round
from specd.core.state import Request
from specd.core.transaction import FAULT_POINTS, Outcome, Phase
from specd.errors import StaleGeneration, TransactionStateError
from tests.helpers import table_engine

REQUESTS = [Request("a", (0, 1), 6, seed=1), Request("b", (2,), 6, seed=2), Request("c", (1, 1, 3), 6, seed=3)]


class Boom(Exception):
    pass


def snapshot(session):
    proposer_cache = session.draft_cache
    return [
        (
            s,
            session.cache.committed(s.slot),
            session.cache.temporary(s.slot),
            proposer_cache.committed(s.slot),
            proposer_cache.temporary(s.slot),
        )
        for s in session.states()
    ]


@pytest.mark.parametrize("layout", ["replay_frontier", "retained_frontier"])
@pytest.mark.parametrize("point", FAULT_POINTS)
def test_failure_at_each_point_leaves_s0_and_retry_matches_clean_run(point, layout):
    clean = table_engine(layout=layout).run(REQUESTS).new_tokens()

    def hook(where, request_id):
        if where == point:
            raise Boom(where)

    engine = table_engine(layout=layout)
    session = engine.start(REQUESTS)
    speculative_round(session)  # a clean first round, so S_0 is mid-generation
    engine.fault_hook = hook
    session.ready()
    before = snapshot(session)
    with pytest.raises(Boom):
        speculative_round(session)
    after = snapshot(session)
    assert after == before  # state vector, committed K/V identities, no temporary rows
    for state, *_ in after:
        assert state.cache_tokens == session.cache.committed(state.slot)
    engine.fault_hook = None
    assert session.run().new_tokens() == clean  # the retry re-read the same draws


def test_failure_of_one_row_before_publish_keeps_other_rows_published():
    engine = table_engine()
    engine.fault_hook = lambda where, rid: (
        (_ for _ in ()).throw(Boom()) if (where, rid) == ("before_publish", "b") else None
    )
    session = engine.start(REQUESTS)
    start = {s.request_id: s for s in session.states()}
    with pytest.raises(Boom):
        speculative_round(session)
    now = {s.request_id: s for s in session.states()}
    assert now["a"].generation == start["a"].generation + 1  # published before the fault
    assert now["b"] == start["b"] and now["c"] == start["c"]
    engine.fault_hook = None
    assert session.run().new_tokens() == table_engine().run(REQUESTS).new_tokens()


def make_txn(engine, session, outcome):
    state = session.states()[0]
    drafts = (1, 2)
    verified = session.verify([state], [drafts])
    txn = engine.transaction_cls(state, engine.layout, frozenset(), None)
    txn.verified(drafts, verified[0], 2)
    txn.decided(outcome)
    txn.stage()
    return txn


def test_publishing_the_same_round_twice_returns_the_same_successor():
    engine = table_engine()
    session = engine.start([Request("a", (0, 1), 6)])
    txn = make_txn(engine, session, Outcome(1, 3, False, True))
    first, new = txn.publish(session.store)
    assert new and txn.phase is Phase.PUBLISHED
    again, new_again = txn.publish(session.store)
    assert again == first and not new_again
    assert len(session.store.commits) == 1
    assert session.store.get("a").output == first.output


def test_compare_and_swap_refuses_a_second_outcome_for_the_same_start():
    engine = table_engine()
    session = engine.start([Request("a", (0, 1), 6)])
    one = make_txn(engine, session, Outcome(1, 3, False, True))
    session.cache.discard(0)
    two = make_txn(engine, session, Outcome(0, 2, False, True))
    one.publish(session.store)
    with pytest.raises(StaleGeneration):
        two.publish(session.store)


def test_phases_must_run_in_order():
    engine = table_engine()
    session = engine.start([Request("a", (0, 1), 6)])
    state = session.states()[0]
    txn = engine.transaction_cls(state, engine.layout, frozenset(), None)
    with pytest.raises(TransactionStateError):
        txn.stage()
    with pytest.raises(TransactionStateError):
        txn.publish(session.store)
    assert txn.abort() and txn.phase is Phase.ABORTED
