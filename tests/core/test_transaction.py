"""Failure at each injection point leaves S_0 intact; retries reuse the same draws;
publication is idempotent."""

import pytest

from specd.core.round import RoundClock, decode, materialize_frontiers, speculative_round, stage, verify
from specd.core.rules import MaximalRule
from specd.core.sampler import RejectionSampler
from specd.core.state import Request
from specd.core.transaction import CHECKPOINTS, Phase, RoundTransaction
from specd.errors import StaleGeneration, TransactionStateError
from tests.helpers import table_engine

REQUESTS = [Request("a", (0, 1), 6, seed=1), Request("b", (2,), 6, seed=2), Request("c", (1, 1, 3), 6, seed=3)]


class Boom(Exception):
    pass


class FaultyTransaction(RoundTransaction):
    """A test double through the transaction's extension point: raises at a chosen checkpoint."""

    fault: tuple[str, str | None] | None = None  # (checkpoint, request id or None for every request)

    def checkpoint(self, point):
        if self.fault is not None and self.fault[0] == point and self.fault[1] in (None, self.start.request_id):
            raise Boom(point)


def faulty_engine(**kw):
    engine = table_engine(**kw)
    engine.transaction_cls = type("Faulty", (FaultyTransaction,), {})
    return engine


def snapshot(session):
    proposer_cache = session.draft_cache.caches[0]
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
@pytest.mark.parametrize("point", CHECKPOINTS)
def test_failure_at_each_point_leaves_s0_and_retry_matches_clean_run(point, layout):
    clean = table_engine(layout=layout).run(REQUESTS).new_tokens()
    engine = faulty_engine(layout=layout)
    session = engine.start(REQUESTS)
    speculative_round(session)  # a clean first round, so S_0 is mid-generation
    engine.transaction_cls.fault = (point, None)
    materialize_frontiers(session, RoundClock(None))  # the retained layout's pre-round step, done once
    before = snapshot(session)
    with pytest.raises(Boom):
        speculative_round(session)
    before_retry = snapshot(session)
    assert before_retry == before  # state vector, committed K/V identities, no temporary rows
    with pytest.raises(Boom):  # the retry fails the same way and leaves the same state
        speculative_round(session)
    assert snapshot(session) == before_retry
    for state, committed, temporary, _, draft_temporary in before_retry:
        assert state.cache_tokens == committed and temporary == () and draft_temporary == ()
        assert state.rounds == 1  # only the clean round was published
    engine.transaction_cls.fault = None
    assert decode(session).new_tokens() == clean  # the retry re-read the same draws


def test_failure_of_one_row_before_publish_keeps_other_rows_published():
    engine = faulty_engine()
    engine.transaction_cls.fault = ("before_publish", "b")
    session = engine.start(REQUESTS)
    start = {s.request_id: s for s in session.states()}
    with pytest.raises(Boom):
        speculative_round(session)
    now = {s.request_id: s for s in session.states()}
    assert now["a"].generation == start["a"].generation + 1  # published before the fault
    assert now["b"] == start["b"] and now["c"] == start["c"]
    engine.transaction_cls.fault = None
    assert decode(session).new_tokens() == table_engine().run(REQUESTS).new_tokens()


def make_txn(engine, session, outcome):
    state = session.states()[0]
    drafts = (1, 2)
    verified = verify(session, [state], [drafts])
    txn = engine.transaction_cls(state, engine.layout)
    txn.verified(drafts, verified[0], 2)
    txn.decided(*outcome)
    stage(txn, frozenset(), MaximalRule(RejectionSampler()))
    return txn


def test_publishing_the_same_round_twice_returns_the_same_successor():
    engine = table_engine()
    session = engine.start([Request("a", (0, 1), 6)])
    txn = make_txn(engine, session, (1, 3, False))
    first, new = txn.publish(session.store)
    assert new and txn.phase is Phase.PUBLISHED
    again, new_again = txn.publish(session.store)
    assert again == first and not new_again
    assert len(session.store.commits) == 1
    assert session.store.get("a").output == first.output


def test_compare_and_swap_refuses_a_second_outcome_for_the_same_start():
    engine = table_engine()
    session = engine.start([Request("a", (0, 1), 6)])
    one = make_txn(engine, session, (1, 3, False))
    session.cache.discard(0)
    two = make_txn(engine, session, (0, 2, False))
    one.publish(session.store)
    with pytest.raises(StaleGeneration):
        two.publish(session.store)


def test_phases_must_run_in_order():
    engine = table_engine()
    session = engine.start([Request("a", (0, 1), 6)])
    state = session.states()[0]
    txn = engine.transaction_cls(state, engine.layout)
    with pytest.raises(TransactionStateError):
        txn.decided(0, 1, False)
    with pytest.raises(TransactionStateError):
        txn.publish(session.store)
    assert txn.abort() and txn.phase is Phase.ABORTED
