"""Prompt sets: results streamed per request, resumable, the same at any batch size."""

import json
import time

import pytest

from tests.helpers import interrupted, run_cli

PROMPTS = [
    "the quick brown fox",
    "hello world, write a haiku",
    "def add(a, b):",
    "a cheap draft proposes",
    "speculative decoding drafts tokens",
    "the target verifies them",
    "an exact rule accepts a prefix",
    "over the lazy dog",
    "write a haiku about the sea",
    "return a + b",
]


@pytest.fixture
def prompt_set(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "tag": f"t{i % 3}"}) + "\n" for i, p in enumerate(PROMPTS)))
    return path


def generate(tiny_models, prompt_set, *extra):
    return [
        "generate",
        "--target",
        tiny_models[0],
        "--draft",
        tiny_models[1],
        "--prompts-file",
        str(prompt_set),
        "--max-new-tokens",
        "24",
        "--temperature",
        "0.8",
        "--seed",
        "5",
        "-k",
        "3",  # a fixed K: with -k auto the K schedule (not the law) follows measured time
        *extra,
    ]


def events(path):
    """An acceptance log's events without the measured probabilities (float32 digits vary with the batch)."""
    keep = ("type", "request_id", "round_index", "draft_index", "draft_token", "accepted", "k", "emitted", "text")
    return [{k: v for k, v in json.loads(x).items() if k in keep} for x in path.read_text().splitlines()[1:]]


def test_the_results_file_is_the_same_at_every_batch_size(tiny_models, prompt_set, tmp_path, capsys):
    files = {}
    for batch_size in (1, 3, 16):
        out, trace = tmp_path / f"r{batch_size}.jsonl", tmp_path / f"t{batch_size}.jsonl"
        code, _, err = run_cli(
            generate(
                tiny_models, prompt_set, "--batch-size", str(batch_size), "--out", str(out), "--trace", str(trace)
            ),
            capsys,
        )
        assert code == 0, err
        files[batch_size] = (out.read_bytes(), events(trace))
    assert files[1] == files[3] == files[16]
    lines = [json.loads(x) for x in files[1][0].splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["schema"] == "specd.results/v1"
    assert [x["prompt"] for x in lines[1:]] == PROMPTS  # input order
    for line in lines[1:]:
        counts = line["acceptance"]
        assert counts["rounds"] == len(counts["k_schedule"]) > 0 and counts["draft_tokens"] == sum(counts["k_schedule"])


@pytest.mark.slow
def test_ctrl_c_keeps_every_finished_request_and_resume_finishes_the_rest(tiny_models, tmp_path, capsys):
    # four times the set: a fast run must still be decoding when Ctrl-C arrives
    prompt_set = tmp_path / "many.jsonl"
    prompt_set.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS * 4))
    full = tmp_path / "full.jsonl"
    code, _, err = run_cli(generate(tiny_models, prompt_set, "--out", str(full), "--batch-size", "2"), capsys)
    assert code == 0, err
    out, trace = tmp_path / "r.jsonl", tmp_path / "t.jsonl"
    args = generate(tiny_models, prompt_set, "--out", str(out), "--trace", str(trace), "--batch-size", "2")

    def three_lines_written(proc):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 3):
            time.sleep(0.05)

    code, err = interrupted(args, three_lines_written)
    assert code == 130 and err.endswith("specd: error: interrupted\n")
    partial = [json.loads(x) for x in out.read_text().splitlines()]  # a valid file: every line parses
    assert 3 <= len(partial) < 4 * len(PROMPTS) + 1
    code, out_text, err = run_cli([*args, "--resume", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out_text)["already_complete"] == len(partial) - 1
    assert out.read_bytes() == full.read_bytes()  # the union is the uninterrupted run, byte for byte
    assert [e["request_id"] for e in events(trace) if e["type"] == "request"] == [
        json.loads(x)["id"] for x in full.read_text().splitlines()[1:]
    ]


@pytest.mark.parametrize(
    "change,field",
    [(["--seed", "6"], "seed"), (["-k", "2"], "k"), (["--temperature", "0.5"], "target_policy")],
)
def test_resuming_into_another_runs_file_is_one_line(tiny_models, prompt_set, tmp_path, capsys, change, field):
    out = tmp_path / "r.jsonl"
    assert run_cli(generate(tiny_models, prompt_set, "--out", str(out)), capsys)[0] == 0
    before = out.read_bytes()
    code, _, err = run_cli([*generate(tiny_models, prompt_set, "--out", str(out)), *change, "--resume"], capsys)
    assert code == 2 and err.count("\n") == 1 and f"its {field} is" in err
    assert out.read_bytes() == before


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--batch-size", "0"], "--batch-size must be in 1..4096"),
        (["--resume"], "--resume needs a results file"),
        (["--ray", "--compare"], "--ray cannot be used with --compare"),
        (["--resume", "--compare", "--out", "x.jsonl"], "--resume cannot be used with --compare"),
        (["--out", "no/such/folder/r.jsonl"], "does not exist"),
        (["--out", "same.jsonl", "--trace", "same.jsonl"], "--out and --trace both name one file"),
    ],
)
def test_bad_prompt_set_options(tiny_models, prompt_set, tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.chdir(tmp_path)
    args = generate(tiny_models, prompt_set, *extra)
    args[args.index("--target") + 1] = "no-such-model"  # found before any model would load
    code, _, err = run_cli(args, capsys)
    assert code == 2 and err.count("\n") == 1 and message in err


def test_a_resume_file_from_another_prompt_set_is_refused(tiny_models, prompt_set, tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert run_cli(generate(tiny_models, prompt_set, "--out", str(out)), capsys)[0] == 0
    prompt_set.write_text(json.dumps({"prompt": "something else entirely"}) + "\n")
    code, _, err = run_cli([*generate(tiny_models, prompt_set, "--out", str(out)), "--resume"], capsys)
    assert code == 2 and "not in this prompt set" in err


def test_a_device_map_split_gives_the_same_greedy_tokens(tiny_models, capsys):
    """On CPU, a small --max-memory makes accelerate split the model between memory and disk."""
    base = ["generate", "--target", tiny_models[0], "--draft", "ngram:2", "-p", "the quick brown", "--json"]
    _, plain, _ = run_cli(base, capsys)
    code, split, err = run_cli([*base, "--device-map", "auto", "--max-memory", "cpu=400KB"], capsys)
    assert code == 0, err
    assert json.loads(split)["results"][0]["tokens"] == json.loads(plain)["results"][0]["tokens"]
    code, _, err = run_cli([*base[:4], "self:bf16", *base[5:], "--device-map", "auto"], capsys)
    assert code == 2 and "separate draft model, ngram:N or suffix" in err
