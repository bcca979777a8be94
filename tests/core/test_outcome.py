"""One record per request and round: what a run keeps of a round is a fold of its RoundOutcomes."""

from specd.core.state import History, Request
from specd.core.stats import RoundCounts, acceptance_figures
from tests.helpers import table_engine

REQUESTS = [Request(f"r{i}", (i % 4, 1, 2), 7 + i, seed=i) for i in range(5)]
ROUND_ROW = [
    "type",
    "request_id",
    "round_id",
    "round_index",
    "k",
    "source",
    "accepted",
    "terminal_kind",
    "terminal_token",
    "emitted",
    "start_position",
    "committed_token_count",
    "finish_reason",
    "match",
]


def test_a_round_is_recorded_once_and_the_log_and_audit_trail_hold_the_same_record():
    result = table_engine(k=3, record_log=True).run(REQUESTS)
    assert len(result.commits) == result.stats.rounds == len(result.rounds)
    assert {id(o) for o in result.rounds} == {id(o) for o in result.commits}


def test_the_history_the_k_policy_reads_is_a_fold_of_the_outcomes():
    result = table_engine(k=3, record_log=True).run(REQUESTS)
    for state in result.states:
        folded = History()
        for outcome in (o for o in result.commits if o.request_id == state.request_id):
            folded = folded.add(outcome)
        assert folded == state.history and len(folded.k_schedule) == state.rounds > 0


def test_the_run_counters_are_a_fold_of_the_outcomes():
    result = table_engine(k=3, record_log=True).run(REQUESTS)
    counts = RoundCounts()
    for outcome in result.commits:
        counts.add_outcome(outcome)
    assert acceptance_figures(counts) == result.stats.figures()
    assert counts.emitted == sum(len(s.new_tokens) for s in result.states)


def test_the_logs_round_row_keeps_the_trace_schema_and_agrees_with_the_audit_fields():
    result = table_engine(k=3, record_log=True).run(REQUESTS)
    for o in result.rounds:
        row = o.round_row()
        assert list(row) == ROUND_ROW
        assert row["k"] == len(o.draft_token_ids) and row["emitted"] == list(o.emitted)
        kept = len(o.committed_kv_token_ids)
        assert kept + len(o.discarded_kv_token_ids) == o.k + 1  # replay layout: the frontier and the drafts
        assert row["committed_token_count"] - len(o.emitted) == row["start_position"] - 3  # prompts of 3 tokens
        assert o.terminal_kind in ("correction", "bonus", "stop")
        if o.terminal_kind != "stop":  # the terminal was emitted: a bonus after k accepts, else a correction
            assert o.emitted == o.draft_token_ids[: o.accepted] + (o.terminal_token,)
            assert (o.terminal_kind == "bonus") == (o.accepted == o.k)
