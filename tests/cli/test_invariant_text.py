"""The seed decides the text: under the invariant rule a sampled run prints the same text with any
K, draft, batch size, layout, target-only, resumed, and on Ray (tests/models/test_distributed.py)."""

import json

import pytest

from tests.helpers import run_cli

PROMPTS = ["the quick brown fox", "hello world, write a haiku", "def add(a, b):", "a cheap draft proposes"]
SAMPLED = ["--temperature", "0.7", "--seed", "3", "--max-new-tokens", "16", "--rule", "invariant"]


def texts(tiny_models, capsys, *extra, draft=None):
    args = ["generate", "--target", tiny_models[0], "--draft", draft or tiny_models[1], *SAMPLED, "--json"]
    for p in PROMPTS:
        args += ["-p", p]
    code, out, err = run_cli([*args, *extra], capsys)
    assert code == 0, err
    doc = json.loads(out)
    return [r["text"] for r in doc["results"]], doc


def test_a_sampled_text_does_not_depend_on_k_draft_batch_layout_or_speculation(tiny_models, capsys):
    reference, doc = texts(tiny_models, capsys, "--baseline")
    assert doc["manifest"]["rule"] == "invariant" and len(set(reference)) == len(PROMPTS)
    variations = {
        "k=1": ["-k", "1"],
        "k=4": ["-k", "4"],
        "k=8": ["-k", "8"],
        "auto": ["-k", "auto"],
        "batch 1": ["--batch-size", "1"],
        "batch 16": ["--batch-size", "16", "-k", "3"],
        "retained": ["--layout", "retained_frontier", "-k", "2"],
        "draft-stop": ["--draft-stop", "0.3"],
    }
    for name, extra in variations.items():
        assert texts(tiny_models, capsys, *extra)[0] == reference, name
    for draft in ("ngram:2", "suffix", "suffix:run", f"suffix,{tiny_models[1]}"):
        assert texts(tiny_models, capsys, "-k", "3", draft=draft)[0] == reference, draft


def test_the_maximal_rule_is_exact_but_its_text_moves_with_k(tiny_models, capsys):
    """Why invariant is the default: under maximal the same seed gives another sample at another K."""
    one = texts(tiny_models, capsys, "--rule", "maximal", "-k", "1")[0]
    four = texts(tiny_models, capsys, "--rule", "maximal", "-k", "4")[0]
    assert one != four


@pytest.mark.parametrize("k", ["3", "auto"])
def test_a_resumed_run_writes_the_uninterrupted_runs_texts(tiny_models, tmp_path, capsys, k):
    """With a fixed K the resumed file is the uninterrupted one byte for byte; under -k auto the
    recorded K schedules may differ (they follow measured time), the texts may not."""
    full, part = tmp_path / "full.jsonl", tmp_path / "part.jsonl"
    texts(tiny_models, capsys, "--out", str(full), "-k", k)
    lines = full.read_bytes().split(b"\n")
    part.write_bytes(b"\n".join(lines[:3]) + b"\n")  # stopped after two requests
    _, doc = texts(tiny_models, capsys, "--out", str(part), "--resume", "-k", k, "--batch-size", "1")
    assert doc["already_complete"] == 2
    if k != "auto":
        assert part.read_bytes() == full.read_bytes()
    read = [[json.loads(x).get("text") for x in f.read_text().split("\n")[1:] if x] for f in (full, part)]
    assert read[0] == read[1] and len(read[0]) == len(PROMPTS)


@pytest.mark.parametrize("greedy_flag", [["--temperature", "0"]])
def test_greedy_is_the_same_under_both_rules(tiny_models, capsys, greedy_flag):
    a = texts(tiny_models, capsys, *greedy_flag, "--rule", "maximal")[0]
    b = texts(tiny_models, capsys, *greedy_flag, "--rule", "invariant")[0]
    assert a == b


def test_an_unknown_rule_is_one_line(tiny_models, capsys):
    args = ["generate", "--target", tiny_models[0], "--draft", tiny_models[1], "-p", "hi", "--rule", "fastest"]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and err.count("\n") == 1 and "unknown rule 'fastest'" in err


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--rule", "both"], "unknown rule 'both'"),
        (["--min-p", "1.5"], "--min-p must be in [0, 1]"),
        (["--min-p", "nan"], "--min-p must be"),
        (["--presence-penalty", "-2.1"], "--presence-penalty must be in [-2, 2]"),
        (["--frequency-penalty", "inf"], "--frequency-penalty must be a finite number"),
        (["--no-repeat-ngram-size", "-1"], "--no-repeat-ngram-size must be an integer >= 0"),
        (["--bad-words", ""], "encodes to no token"),
        (["--min-new-tokens", "20", "--max-new-tokens", "8"], "--min-new-tokens 20 is above --max-new-tokens 8"),
    ],
)
def test_bad_sampling_controls_are_one_line(tiny_models, capsys, extra, message):
    args = ["generate", "--target", tiny_models[0], "--draft", tiny_models[1], "-p", "hi", "--temperature", "0.7"]
    code, _, err = run_cli([*args, *extra], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err, err


def test_the_sampling_controls_keep_the_text_invariant(tiny_models, capsys):
    controls = ["--min-p", "0.05", "--presence-penalty", "0.4", "--frequency-penalty", "0.2"]
    controls += ["--no-repeat-ngram-size", "3", "--min-new-tokens", "6"]
    reference, doc = texts(tiny_models, capsys, "--baseline", *controls)
    names = [p["name"] for p in doc["manifest"]["target_policy"]["processors"]]
    assert {"min_p", "presence_frequency_penalty", "no_repeat_ngram", "min_new_tokens"} <= set(names)
    for extra in (["-k", "1"], ["-k", "4"], ["-k", "auto"], ["--batch-size", "1", "-k", "3"]):
        assert texts(tiny_models, capsys, *extra, *controls)[0] == reference, extra
