import pytest
import torch

from specd.core.engine import SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.round import speculative_round
from specd.core.state import Request
from specd.errors import UsageError
from specd.oracles.engine.montecarlo import rng_accounting_error
from tests.helpers import table_engine

BATCH = [Request("a", (0,), 10, seed=1), Request("b", (1, 2, 3, 0), 10, seed=2), Request("c", (2, 2), 7, seed=3)]


@pytest.mark.parametrize("layout", ["replay_frontier", "retained_frontier"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_greedy_speculation_equals_greedy_target_token_for_token(layout, k):
    spec = table_engine(k=k, layout=layout, target_temperature=0)
    base = SpeculativeEngine.baseline(spec.target, SamplingPolicy.build(temperature=0))
    result = spec.run(BATCH)
    assert result.new_tokens() == base.run(BATCH).new_tokens()
    assert result.stats.proposed > 0 and 0 < result.stats.accepted < result.stats.proposed


def test_sampled_output_does_not_depend_on_batch_mates():
    together = table_engine().run(BATCH).new_tokens()
    alone = [table_engine().run([r]).new_tokens()[0] for r in BATCH]
    assert together == alone


def test_stats_and_acceptance_log_agree():
    result = table_engine(k=3, record_log=True).run(BATCH)
    st = result.stats
    assert st.emitted == sum(len(s.new_tokens) for s in result.states)
    figures = st.figures()
    assert figures["mean_accepted_length"] == pytest.approx(st.emitted / st.rounds)
    assert sum(st.k_hist.values()) == st.rounds == len(result.rounds)
    assert sum(st.accepted_hist.values()) == sum(1 for r in result.rounds if r.k > 0)
    by_round = {}
    for rec in result.acceptance:
        by_round.setdefault(rec.round_id, []).append(rec)
    for rnd in result.rounds:
        recs = by_round.get(rnd.round_id, [])
        assert len(recs) == rnd.k
        assert sum(r.accepted for r in recs) == rnd.accepted
        assert sum(r.reached for r in recs) == min(rnd.accepted + 1, rnd.k)
        for r in recs:
            assert (r.uniform is None) == (not r.reached)
            assert r.accept_ratio == pytest.approx(min(1.0, r.p_prob / r.q_prob), rel=1e-5)
            if r.reached and not r.accepted:
                assert r.uniform >= r.accept_ratio and r.correction_distribution_id
    reached = {}
    accepted = {}
    for r in result.acceptance:
        reached[r.draft_index] = reached.get(r.draft_index, 0) + r.reached
        accepted[r.draft_index] = accepted.get(r.draft_index, 0) + r.accepted
    assert figures["acceptance_by_position"] == pytest.approx({j: accepted[j] / reached[j] for j in reached})


def test_target_side_draws_equal_reached_tests_plus_one_terminal():
    result = table_engine(k=4).run([Request(f"r{i}", (0, 1), 9, seed=i) for i in range(30)])
    for commit in result.commits:
        assert rng_accounting_error(commit) is None
        acc = commit.rng_after[1] - commit.rng_before[1]
        term = commit.rng_after[2] - commit.rng_before[2]
        if commit.terminal_kind != "stop":
            assert acc + term == commit.reached_acceptance_tests + 1


def test_greedy_rounds_draw_nothing_on_the_target_side():
    result = table_engine(target_temperature=0, draft_temperature=0).run(BATCH)
    assert all(c.rng_after == c.rng_before for c in result.commits)


def test_caches_hold_exactly_the_published_history():
    engine = table_engine(k=3)
    session = engine.start(BATCH)
    checked = 0
    while not session.done:
        speculative_round(session)
        for s in session.live():
            assert session.cache.committed(s.slot) == s.cache_tokens == s.output[:-1]
            assert session.cache.temporary(s.slot) == ()
            draft_rows = session.draft_cache.caches[0].committed(s.slot)
            assert s.output[: len(draft_rows)] == draft_rows  # no rejected draft rows survive
            checked += 1
        for s in session.states():
            if s.finished:
                assert not session.cache.is_open(s.slot)  # finished requests left the caches
    assert checked > 5


@pytest.mark.parametrize(
    "request_", [Request("x", (), 3), Request("x", (9,), 3), Request("x", (1,), -1)], ids=["empty", "oov", "budget"]
)
def test_bad_requests_are_refused(request_):
    with pytest.raises(UsageError):
        table_engine().run([request_])


def test_mismatched_event_spaces_are_refused():
    from specd.core.proposer import ModelProposer
    from specd.core.table_model import TableModel

    with pytest.raises(UsageError, match="event space"):
        SpeculativeEngine(TableModel(4), ModelProposer(TableModel(5), SamplingPolicy.build()), SamplingPolicy.build())


@pytest.mark.parametrize("draft_stop", [0.0, 0.5])
def test_a_draft_row_with_no_mass_is_refused_in_the_steps_one_read(monkeypatch, draft_stop):
    """A draft whose processed row masks every token cannot be sampled from: EmptyDistribution,
    raised from the draft step's one read (or, with --draft-stop, before its confidence test)."""
    from specd.core.table_model import TableModel
    from specd.errors import EmptyDistribution

    engine = table_engine(k=2)
    engine.proposer.sources[0].draft_stop = draft_stop
    draft = engine.proposer.sources[0].model
    assert isinstance(draft, TableModel)
    monkeypatch.setattr(draft, "raw_logits", lambda prefix: torch.full((draft.vocab_size,), float("-inf")))
    with pytest.raises(EmptyDistribution, match="every logit masked"):
        engine.run([Request("a", (0, 1), 4, seed=1)])
