"""``specd generate`` and ``specd trace`` end to end on tiny models saved by the tests' helper."""

import json

import pytest

from tests.helpers import run_cli


@pytest.fixture(scope="module")
def models(tiny_models):
    return tiny_models


def run(args, capsys):
    return run_cli(args, capsys)


def test_generate_streams_text_and_prints_the_summary(models, capsys):
    code, out, err = run(
        ["generate", "--target", models[0], "--draft", models[1], "-p", "the quick brown", "--max-new-tokens", "12"],
        capsys,
    )
    assert code == 0
    assert "mean accepted length" in out and "draft / verify / state" in out and "K/V rows" in out


def test_generate_json_compare_is_exact_for_greedy(models, capsys):
    code, out, _ = run(
        [
            "generate",
            "--target",
            models[0],
            "--draft",
            models[1],
            "-p",
            "hello world",
            "-p",
            "def add(a, b):",
            "--max-new-tokens",
            "16",
            "-k",
            "3",
            "--compare",
            "--json",
        ],
        capsys,
    )
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "specd.generate/v1" and doc["mode"] == "compare"
    assert doc["identical_outputs"] is True and doc["speedup"] > 0
    spec = doc["stats"]["speculative"]
    assert spec["emitted_tokens"] == 32 and spec["mean_accepted_length"] >= 1
    assert len(doc["manifest"]["target"]["weights_sha256"]) == 64
    assert [r["finish_reason"] for r in doc["results"]] == ["length", "length"]


def test_config_file_and_flag_override(models, tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"target: {models[0]}\ndraft: {models[1]}\nmax_new_tokens: 5\nk: 2\nprompt: hello world\n")
    code, out, _ = run(["generate", "--config", str(cfg), "--max-new-tokens", "7", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and len(doc["results"][0]["tokens"]) == 7 and doc["manifest"]["k"] == 2


def test_prompts_file_with_tags_trace_show_and_summarize(models, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "the quick brown", "tag": "story"}\n{"prompt": "def add(a, b):", "tag": "code"}\n')
    log = tmp_path / "log.jsonl"
    code, _, _ = run(
        [
            "trace",
            "run",
            "--target",
            models[0],
            "--draft",
            models[1],
            "--prompts-file",
            str(prompts),
            "--max-new-tokens",
            "10",
            "--temperature",
            "0.8",
            "--seed",
            "3",
            "-k",
            "3",  # a fixed K: under -k auto a draft as big as the target may rightly never draft
            "--trace",
            str(log),
        ],
        capsys,
    )
    assert code == 0
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    header = lines[0]
    assert header["schema"] == "specd.trace/v1"
    for key in (
        "target",
        "draft",
        "dtype",
        "device",
        "torch",
        "transformers",
        "target_policy",
        "draft_policy",
        "layout",
        "k",
        "seed",
    ):
        assert key in header["manifest"]
    kinds = {line["type"] for line in lines}
    assert kinds == {"header", "request", "proposal", "round"}
    rounds = [line for line in lines if line["type"] == "round"]
    assert sum(len(r["emitted"]) for r in rounds) == 20
    code, out, _ = run(["trace", "show", str(log)], capsys)
    assert code == 0 and "legend" in out and "story" in out
    csv = tmp_path / "s.csv"
    code, out, _ = run(["trace", "summarize", str(log), "--by", "tag", "--out", str(csv), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and set(doc["groups"]) == {"story", "code"} and csv.read_text().startswith("group,")


def test_stop_string_truncates_text(models, capsys):
    code, out, _ = run(
        [
            "generate",
            "--target",
            models[0],
            "--draft",
            models[1],
            "-p",
            "hello world",
            "--max-new-tokens",
            "30",
            "--json",
        ],
        capsys,
    )
    text = json.loads(out)["results"][0]["text"]
    assert len(text) > 3
    stop = text[2:4]
    code, out, _ = run(
        [
            "generate",
            "--target",
            models[0],
            "--draft",
            models[1],
            "-p",
            "hello world",
            "--max-new-tokens",
            "30",
            "--stop",
            stop,
            "--json",
        ],
        capsys,
    )
    result = json.loads(out)["results"][0]
    assert stop not in result["text"] and text.startswith(result["text"]) and result["finish_reason"] == "stop_string"


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--target", "/no/such/folder"], "model folder not found"),
        (["--target-gguf", "/no/such.gguf"], "GGUF file not found"),
        (["-k", "0"], "-k must be auto or in 1..64"),
        (["--temperature", "-0.5"], "--temperature must be a finite number >= 0"),
        (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
        (["--top-p", "0"], "--top-p must be in (0, 1]"),
        (["--device", "cuda"], "CUDA"),
        (["--dtype", "int3"], "unknown dtype"),
        (["--layout", "diagonal"], "unknown layout"),
        (["--prompts-file", "NOTJSONL"], "not JSONL"),
        (["--config", "MISSING.yaml"], "config file not found"),
    ],
)
def test_bad_input_is_one_line(models, tmp_path, capsys, extra, message):
    if "NOTJSONL" in extra:
        bad = tmp_path / "bad.jsonl"
        bad.write_text("this is not json\n")
        extra = ["--prompts-file", str(bad)]
    if extra[:2] == ["--device", "cuda"]:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    args = ["generate", "--target", models[0], "--draft", models[1], "-p", "hi", *extra]
    if "--target" in extra[:1] or "--target-gguf" in extra[:1]:
        args = ["generate", "--draft", models[1], "-p", "hi", *extra]
    code, out, err = run(args, capsys)
    assert code == 2, err
    assert err.startswith("specd: error: ") and err.strip().count("\n") == 0 and message in err


def test_empty_prompt_and_tokenizer_mismatch(models, tmp_path, capsys):
    code, _, err = run(["generate", "--target", models[0], "--draft", models[1], "-p", "  "], capsys)
    assert code == 2 and "empty prompt" in err
    from tests.hf_helpers import tiny_llama

    other = tmp_path / "other"
    model = tiny_llama(500, seed=5)
    model.save_pretrained(other)
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tkm
    from transformers import PreTrainedTokenizerFast

    wl = Tokenizer(tkm.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    wl.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=wl, unk_token="[UNK]").save_pretrained(other)
    code, _, err = run(["generate", "--target", models[0], "--draft", str(other), "-p", "hello"], capsys)
    assert code == 2 and "tokenizers differ" in err


def test_json_tokens_are_cut_where_the_text_is_cut(models, capsys):
    """--json: the tokens end with the one that completed the stop string; the text stops before it."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(models[0])
    decode = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731
    base = ["generate", "--target", models[0], "--draft", models[1], "-p", "hello world", "-k", "6"]
    _, out, _ = run([*base, "--max-new-tokens", "30", "--json"], capsys)
    full = json.loads(out)["results"][0]
    text = decode(full["tokens"])
    stop = next(text[i : i + 3] for i in range(4, len(text) - 3) if text[i : i + 3].strip() and text[i] != " ")
    code, out, _ = run([*base, "--max-new-tokens", "30", "--stop", stop, "--json"], capsys)
    cut = json.loads(out)["results"][0]
    tokens = cut["tokens"]
    assert code == 0 and cut["finish_reason"] == "stop_string"
    assert tokens == full["tokens"][: len(tokens)] and len(tokens) < len(full["tokens"])
    assert stop in decode(tokens) and stop not in decode(tokens[:-1])  # nothing generated past the stop
    assert cut["text"] == decode(tokens)[: decode(tokens).index(stop)]
    assert cut["text"] == text[: text.index(stop)]


def test_a_config_value_of_the_wrong_type_is_one_line_naming_the_file(models, tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"target: {models[0]}\ndraft: {models[1]}\nk: two\nprompt: hi\n")
    code, _, err = run(["generate", "--config", str(cfg)], capsys)
    assert code == 2 and err.count("\n") == 1 and f"{cfg}: k must be auto or an integer, got 'two'" in err


# The figures a run reports in `generate --json` and that `trace summarize --json` recomputes from the
# run's acceptance log: one definition (specd.core.stats.acceptance_figures), so equal field by field.
SHARED = (
    "rounds",
    "rounds_k0",
    "proposed_tokens",
    "accepted_tokens",
    "emitted_tokens",
    "mean_accepted_length",
    "acceptance_by_position",
    "reached_per_position",
    "accepted_per_position",
    "accepted_histogram",
    "k_histogram",
    "share_k0",
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "num_accepted_tokens_per_pos",
    "mean_acceptance_length",
    "draft_acceptance_rate",
)


@pytest.mark.parametrize("k", ["auto", "3"])
def test_generate_json_and_trace_summarize_json_agree_on_every_shared_figure(models, tmp_path, capsys, k):
    log = tmp_path / "log.jsonl"
    prompts = ["-p", "the quick brown", "-p", "def add(a, b):", "-p", "hello"]
    args = ["generate", "--target", models[0], "--draft", models[1], *prompts, "--max-new-tokens", "24", "-k", k]
    code, out, _ = run([*args, "--trace", str(log), "--temperature", "0.8", "--json"], capsys)
    assert code == 0
    generated = json.loads(out)["stats"]["speculative"]
    code, out, _ = run(["trace", "summarize", str(log), "--json"], capsys)
    assert code == 0
    summarized = json.loads(out)["overall"]
    for name in SHARED:
        assert summarized[name] == generated[name], name
    assert generated["rounds"] == sum(generated["k_histogram"].values()) > 0
    if k == "auto":  # the first round of a -k auto run is a plain target step: K = 0 rounds are counted
        assert generated["rounds_k0"] > 0 and generated["rounds"] > generated["num_drafts"]
