"""-k auto, --k-max, --draft-stop and --k-schedule through the CLI; the statistics in vLLM's names."""

import json

import pytest

from specd.policy.kpolicy import DEFAULT_K_MAX
from tests.helpers import run_cli


def generate(models, *extra):
    return ["generate", "--target", models[0], "--draft", models[1], "--max-new-tokens", "20", *extra]


PROMPTS = ["-p", "the quick brown fox", "-p", "def add(a, b):", "-p", "once upon a time"]


def test_auto_is_the_default_and_reports_its_k_and_vllm_counters(tiny_models, capsys):
    code, out, err = run_cli(generate(tiny_models, *PROMPTS, "--compare", "--json"), capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["manifest"]["k"] == "auto" and doc["manifest"]["k_max"] == DEFAULT_K_MAX
    assert doc["identical_outputs"] is True  # greedy: auto emits the target's tokens
    stats = doc["stats"]["speculative"]
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"):
        assert name in stats
    assert stats["num_draft_tokens"] == stats["proposed_tokens"]
    assert stats["num_accepted_tokens"] == stats["accepted_tokens"]
    hist = {int(k): n for k, n in stats["k_histogram"].items()}
    assert sum(hist.values()) == stats["rounds"] and stats["num_drafts"] == sum(n for k, n in hist.items() if k)
    assert stats["share_k0"] == pytest.approx(hist.get(0, 0) / stats["rounds"])
    if stats["num_drafts"]:
        assert stats["mean_acceptance_length"] == pytest.approx(1 + stats["accepted_tokens"] / stats["num_drafts"])
    per_request = [sum(r["acceptance"]["k_schedule"]) for r in doc["results"]]
    assert sum(per_request) == stats["proposed_tokens"]  # every request's K schedule is recorded


def test_the_summary_table_shows_the_k_histogram(tiny_models, capsys):
    code, out, err = run_cli(generate(tiny_models, "-p", "hello", "--compare"), capsys)
    assert code == 0, err
    assert "K chosen (rounds)" in out and "vLLM: mean acceptance length" in out and "share of rounds at K = 0" in out


def test_k_schedule_replays_a_sampled_auto_run_token_for_token(tiny_models, tmp_path, capsys):
    sampled = ("--temperature", "0.9", "--seed", "3", *PROMPTS)
    first = tmp_path / "first.json"
    code, out, err = run_cli(generate(tiny_models, *sampled, "--json"), capsys)
    assert code == 0, err
    first.write_text(out)
    recorded = json.loads(out)["results"]
    for source in ("json", "results", "trace"):
        extra = ["--k-schedule", str(first)]
        if source != "json":
            path = tmp_path / f"{source}.jsonl"
            flag = "--out" if source == "results" else "--trace"
            code, _, err = run_cli(generate(tiny_models, *sampled, "--k-schedule", str(first), flag, str(path)), capsys)
            assert code == 0, err
            extra = ["--k-schedule", str(path)]
        code, out, err = run_cli(generate(tiny_models, *sampled, *extra, "--json"), capsys)
        assert code == 0, err
        replay = json.loads(out)["results"]
        assert [r["tokens"] for r in replay] == [r["tokens"] for r in recorded], source
        assert [r["acceptance"]["k_schedule"] for r in replay] == [r["acceptance"]["k_schedule"] for r in recorded]


def test_fixed_k_keeps_seed_for_seed_reproducibility(tiny_models, capsys):
    args = generate(tiny_models, *PROMPTS, "--temperature", "0.9", "--seed", "4", "-k", "3", "--json")
    outs = []
    for _ in range(2):
        code, out, err = run_cli(args, capsys)
        assert code == 0, err
        outs.append([r["tokens"] for r in json.loads(out)["results"]])
    assert outs[0] == outs[1]


def test_draft_stop_shortens_drafts(tiny_models, capsys):
    ks = {}
    for stop in ("0", "0.9"):
        code, out, err = run_cli(generate(tiny_models, *PROMPTS, "-k", "4", "--draft-stop", stop, "--json"), capsys)
        assert code == 0, err
        ks[stop] = json.loads(out)["stats"]["speculative"]["proposed_tokens"]
    assert ks["0.9"] < ks["0"]


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--baseline", "-k", "auto"], "-k needs a draft"),
        (["--baseline", "--draft-stop", "0.5"], "--draft-stop needs a draft"),
        (["--k-max", "0"], "--k-max must be in 1..64, got 0"),
        (["--k-max", "3", "-k", "4"], "--k-max bounds -k auto"),
        (["--draft-stop", "1"], "--draft-stop must be in [0, 1), got 1.0"),
        (["--draft-stop", "-0.1"], "--draft-stop must be in [0, 1)"),
        (["--draft-stop", "nan"], "--draft-stop must be a finite number"),
        (["-k", "sometimes"], "-k must be auto or an integer, got 'sometimes'"),
        (["-k", "4", "--k-schedule", "x.json"], "give -k or --k-schedule, not both"),
        (["--k-schedule", "missing.json"], "not found"),
    ],
)
def test_bad_k_flags_are_one_line(tiny_models, capsys, extra, message):
    code, _, err = run_cli(generate(tiny_models, "-p", "hi", *extra), capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_a_schedule_for_other_prompts_is_refused(tiny_models, tmp_path, capsys):
    doc = tmp_path / "other.json"
    doc.write_text(json.dumps({"results": [{"id": "someone-else", "acceptance": {"k_schedule": [1, 2]}}]}))
    code, _, err = run_cli(generate(tiny_models, "-p", "hi", "--k-schedule", str(doc)), capsys)
    assert code == 2 and "has no schedule for request" in err and err.count("\n") == 1
    doc.write_text("{}")
    code, _, err = run_cli(generate(tiny_models, "-p", "hi", "--k-schedule", str(doc)), capsys)
    assert code == 2 and "no recorded K schedule" in err


def test_trace_summarize_reports_vllm_counters(tiny_models, tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    code, _, err = run_cli(generate(tiny_models, *PROMPTS, "-k", "3", "--trace", str(log)), capsys)
    assert code == 0, err
    code, out, err = run_cli(["trace", "summarize", str(log), "--json"], capsys)
    assert code == 0, err
    overall = json.loads(out)["overall"]
    rounds = [json.loads(x) for x in log.read_text().splitlines() if '"type": "round"' in x]
    drafted = [r for r in rounds if r["k"] > 0]
    assert overall["num_drafts"] == len(drafted)
    assert overall["num_draft_tokens"] == sum(r["k"] for r in drafted)
    assert overall["num_accepted_tokens"] == sum(r["accepted"] for r in drafted)
    assert overall["num_accepted_tokens_per_pos"] == [sum(r["accepted"] >= j for r in drafted) for j in (1, 2, 3)]
    assert overall["mean_acceptance_length"] == pytest.approx(1 + overall["num_accepted_tokens"] / len(drafted))
    assert sum(overall["k_histogram"].values()) == len(rounds)
    code, out, err = run_cli(["trace", "summarize", str(log)], capsys)
    assert code == 0 and "vLLM num_drafts" in out and "rounds at K = 3" in out


def test_k_schedule_replays_source_and_k_of_a_multi_source_run(tiny_models, tmp_path, capsys):
    prompts = ["-p", "the cat sat on the mat. the cat sat on the mat. the cat", "-p", "one two one two one"]
    args = ["generate", "--target", tiny_models[0], "--draft", f"suffix,{tiny_models[1]}", "--max-new-tokens", "24"]
    sampled = [*args, *prompts, "--temperature", "0.9", "--seed", "5"]
    results = tmp_path / "first.jsonl"
    code, out, err = run_cli([*sampled, "--out", str(results), "--json"], capsys)
    assert code == 0, err
    recorded = json.loads(out)["results"]
    schedules = [r["acceptance"]["source_schedule"] for r in recorded]
    assert all(len(s) == len(r["acceptance"]["k_schedule"]) for s, r in zip(schedules, recorded))
    assert json.loads(out)["manifest"]["draft_sources"][0] == "suffix"
    code, out, err = run_cli([*sampled, "--k-schedule", str(results), "--json"], capsys)
    assert code == 0, err
    replay = json.loads(out)["results"]
    assert [r["tokens"] for r in replay] == [r["tokens"] for r in recorded]
    assert [r["acceptance"]["source_schedule"] for r in replay] == schedules
    # a schedule recorded with a source this run does not have is refused by name
    code, _, err = run_cli([*args[:4], tiny_models[1], *args[5:], *prompts, "--k-schedule", str(results)], capsys)
    used = {s for schedule in schedules for s in schedule if s}
    assert "suffix" in used  # (whether the model source drafted too depends on measured time)
    assert code == 2 and "drafted from 'suffix'" in err
