import json

import pytest

from specd.traces.log import SCHEMA, BadTrace, read_trace
from specd.traces.summary import summarize, to_table
from tests.helpers import synthetic_log


def test_reach_conditioned_rates_are_recovered():
    alphas = [0.9, 0.5, 0.8, 0.3]
    requests, proposals, rounds = synthetic_log(alphas)
    s = summarize(requests, rounds)["overall"]
    for j, a in enumerate(alphas, 1):
        assert s["acceptance_by_position"][j] == pytest.approx(a, abs=0.02)
    survival = 1.0
    for j, a in enumerate(alphas, 1):
        survival *= a
        assert s["survival"][j] == pytest.approx(survival, abs=0.02)
    assert sum(s["pr_a"].values()) == pytest.approx(1.0)
    assert s["mean_accepted_length"] == pytest.approx(1 + sum(s["survival"].values()))
    # alpha_j from the rounds equals alpha_j from the log's reached proposals
    for j in range(1, len(alphas) + 1):
        at = [p for p in proposals if p["draft_index"] == j and p["reached"]]
        assert s["acceptance_by_position"][j] == sum(p["accepted"] for p in at) / len(at)
    # the naive per-proposal rate (over unreachable suffixes) is a different, smaller number
    naive = sum(p["accepted"] for p in proposals if p["draft_index"] == 3) / (len(proposals) / 4)
    assert naive < s["acceptance_by_position"][3] - 0.2


def test_grouping_by_a_column_and_table_columns():
    requests, _, rounds = synthetic_log([0.5, 0.5], rounds=300)
    summary = summarize(requests, rounds, by="tag")
    assert set(summary["groups"]) == {"even", "odd"}
    table = to_table(summary)
    assert list(table.columns)[:6] == ["group", "rounds", "rounds_k0", "rounds_full_k", "k_max", "mean_accepted_length"]
    assert {"pr_a_0", "survival_1", "alpha_2"} <= set(table.columns)


def test_log_round_trip_and_refusals(tmp_path):
    path = tmp_path / "log.jsonl"
    header = {"type": "header", "schema": SCHEMA, "manifest": {"k": 2}}
    path.write_text(json.dumps(header) + "\n" + json.dumps({"type": "request", "request_id": "a"}) + "\n")
    header, requests, proposals, rounds = read_trace(path)
    assert header["schema"] == "specd.trace/v1" and requests == [{"type": "request", "request_id": "a"}]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "round"}\n')
    with pytest.raises(BadTrace, match="not a specd trace"):
        read_trace(bad)
    bad.write_text("not json\n")
    with pytest.raises(BadTrace):
        read_trace(bad)
    with pytest.raises(BadTrace, match="not found"):
        read_trace(tmp_path / "missing.jsonl")


def test_k_counts_are_whole_numbers_and_zero_where_a_group_never_chose_that_k():
    requests, proposals, rounds = synthetic_log([0.5, 0.5], rounds=30)
    odd = next(r for r in rounds if r["request_id"] == "req1")
    odd["k"] = 0  # one K = 0 round, in the odd group only: a plain target step
    odd["accepted"], odd["emitted"], odd["terminal_kind"] = 0, [0], "bonus"
    proposals = [p for p in proposals if p["round_id"] != odd["round_id"]]
    table = to_table(summarize(requests, rounds, by="tag")).set_index("group")
    assert table.loc["odd", "rounds_k_0"] == 1 and table.loc["even", "rounds_k_0"] == 0
    assert table["rounds_k_0"].dtype.kind == "i" and table.loc["overall", "rounds_k_2"] == 29
