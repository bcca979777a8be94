"""The article's worked snapshot ("Worked Immutable Snapshot") and layout equivalence, by token identity."""

import pytest
import torch

from specd.core.layouts import ReplayFrontier, RetainedFrontier, make_layout
from specd.core.round import RoundClock, materialize_frontiers, stage, verify
from specd.core.rules import MaximalRule
from specd.core.sampler import RejectionSampler
from specd.core.state import Request
from specd.core.tree import DraftTree
from specd.errors import UnknownLayout
from tests.helpers import table_engine

PROMPT = (1, 4, 7, 9, 3, 12)
DRAFTS = (8, 6, 2)


def run_snapshot(layout: str):
    engine = table_engine(vocab=16, k=3, layout=layout)
    session = engine.start([Request("r", PROMPT, 8)])
    state = materialize_frontiers(session, RoundClock(None))[0]
    verified = verify(session, [state], [DRAFTS])
    txn = engine.transaction_cls(state, engine.layout)
    txn.verified(DRAFTS, verified[0], 3)
    txn.decided(accepted=2, terminal=11, is_bonus=False)
    stage(txn, frozenset(), MaximalRule(RejectionSampler()))
    successor = txn.successor
    txn.publish(session.store)
    session.cache.commit(state.slot, txn.kv_keep)
    return engine, session, state, verified[0], txn, successor


def test_replay_snapshot_inputs_positions_and_offsets():
    engine = table_engine(vocab=16, layout="replay_frontier")
    session = engine.start([Request("r", PROMPT, 8)])
    state = session.states()[0]
    assert state.cache_tokens == PROMPT[:5] and state.frontier == 12
    row = ReplayFrontier().verification_input(state, DraftTree.chain(DRAFTS))
    assert row.tokens == (12, 8, 6, 2)
    assert row.positions == (5, 6, 7, 8)
    _, _, _, verified, _, _ = run_snapshot("replay_frontier")
    # logit row j scores the token after input j: p_1..p_4 are the target rows at these prefixes
    for i in range(4):
        expected = engine.target.raw_logits(PROMPT + DRAFTS[:i])
        assert torch.equal(verified.p_raw[i], expected)
    assert verified.kv_frontier.tokens == (12,) and verified.kv_frontier.positions == (5,)
    assert verified.kv_draft.tokens == DRAFTS and verified.kv_draft.positions == (6, 7, 8)


def test_replay_snapshot_commit_and_discard():
    _, session, _, _, txn, successor = run_snapshot("replay_frontier")
    assert txn.outcome.committed_kv_token_ids == (12, 8, 6)  # positions 5, 6, 7
    assert txn.outcome.discarded_kv_token_ids == (2,)  # position 8
    assert successor.output[len(PROMPT) :] == (8, 6, 11)
    assert len(successor.output) == 9 and len(successor.cache_tokens) == 8
    assert successor.cache_tokens == successor.output[:-1] and successor.frontier == 11
    assert session.cache.committed(0) == successor.cache_tokens


def test_retained_layout_feeds_only_drafts_and_reuses_p1():
    engine, session, state, verified, txn, successor = run_snapshot("retained_frontier")
    assert state.cache_tokens == PROMPT  # READY materialized the frontier
    row = RetainedFrontier().verification_input(state, DraftTree.chain(DRAFTS))
    assert row.tokens == DRAFTS and row.positions == (6, 7, 8)
    for i in range(4):
        assert torch.equal(verified.p_raw[i], engine.target.raw_logits(PROMPT + DRAFTS[:i]))
    assert txn.outcome.committed_kv_token_ids == (8, 6)
    assert txn.outcome.discarded_kv_token_ids == (2,)


def test_both_layouts_publish_the_same_logical_successor():
    a = run_snapshot("replay_frontier")[5]
    b = run_snapshot("retained_frontier")[5]
    assert (a.output, a.cache_tokens, a.frontier) == (b.output, b.cache_tokens, b.frontier)


def test_unknown_layout():
    with pytest.raises(UnknownLayout):
        make_layout("sideways")
