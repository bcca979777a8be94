"""``specd.Pair``: models loaded once (from folders or objects in memory, never copied), generate,
stream and compare, and the same answers as ``specd generate`` for the same request."""

import json
from pathlib import Path

import pytest
import torch

import specd
from specd.errors import UsageError
from tests.helpers import run_cli

PROMPTS = ["the quick brown fox", "def add(a, b):"]
TIMING = ("time_s", "tokens_per_second", "time_per_output_token_s", "wall_time_s")  # differ run to run


@pytest.fixture(scope="module")
def objects():
    """A tiny target and draft in memory, and their tokenizer."""
    from tests.hf_helpers import noisy_copy, tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    target = tiny_llama(len(tok), seed=0, eos=tok.eos_token_id)
    return target, noisy_copy(target, 0.15, seed=1), tok


@pytest.fixture(scope="module")
def pair(objects):
    target, draft, tok = objects
    return specd.Pair.load(target, ["suffix", draft], tokenizer=tok)


def test_models_in_memory_are_used_as_they_are_not_copied(objects, pair):
    target, draft, _ = objects
    pipe = pair._pipe
    assert pipe.target.model is target
    model_draft = next(s for s in pipe.proposer.sources if hasattr(s, "model"))
    assert model_draft.model.model is draft
    pointers = {p.data_ptr() for p in target.parameters()}
    assert {p.data_ptr() for p in pipe.target.model.parameters()} == pointers
    assert pair.options.device == "cpu" and pair.options.dtype == "float32"
    assert pair.options.draft == "suffix,memory:draft"
    assert pair.manifest()["target"]["name"].startswith("memory:")


def test_generate_one_prompt_and_many(pair):
    one = pair.generate(PROMPTS[0], max_new_tokens=10, k=3)
    many = pair.generate(PROMPTS, max_new_tokens=10, k=3)
    assert isinstance(one, specd.Generation) and one.mode == "speculative"
    assert len(one.results) == 1 and len(many.results) == 2
    assert many.results[0].tokens == one.results[0].tokens  # batch-mates do not change a request's output
    for r in many.results:
        assert r.finish_reason == "length" and len(r.tokens) == 10 and r.text == pair._pipe.decode(r.tokens)
    assert many.stats["emitted_tokens"] == 20 and many.stats["mean_accepted_length"] >= 1
    assert many.texts == [r.text for r in many.results]


def test_target_only_and_greedy_speculative_agree(pair):
    base = pair.generate(PROMPTS, baseline=True, max_new_tokens=12, temperature=0)
    spec = pair.generate(PROMPTS, max_new_tokens=12, temperature=0, k=4)
    assert base.mode == "target-only" and [r.tokens for r in base.results] == [r.tokens for r in spec.results]


def test_the_seed_decides_the_sampled_text_under_every_rule(pair):
    for rule in ("invariant", "maximal", "block"):
        a = pair.generate(PROMPTS, max_new_tokens=10, temperature=0.9, seed=7, rule=rule, k=2)
        b = pair.generate(PROMPTS, max_new_tokens=10, temperature=0.9, seed=7, rule=rule, k=2)
        assert a.results == b.results


def test_stream_yields_the_text_generate_returns(pair):
    options = dict(max_new_tokens=14, temperature=0.8, seed=3, k=3)
    whole = pair.generate(PROMPTS, **options)
    joined = {}
    for delta in pair.stream(PROMPTS, **options):
        assert isinstance(delta, specd.TextDelta) and delta.text
        joined[delta.request_id] = joined.get(delta.request_id, "") + delta.text
    assert [joined.get(r.request_id, "") for r in whole.results] == whole.texts


def test_stream_honours_stop_strings(pair):
    text = pair.generate(PROMPTS[0], max_new_tokens=14, temperature=0).texts[0]
    stop = text[3:5]
    assert stop and text.find(stop) >= 0
    cut = pair.generate(PROMPTS[0], max_new_tokens=14, temperature=0, stop=[stop])
    streamed = "".join(d.text for d in pair.stream(PROMPTS[0], max_new_tokens=14, temperature=0, stop=[stop]))
    assert streamed == cut.texts[0] == text[: text.find(stop)] and cut.results[0].finish_reason == "stop_string"


def test_compare_runs_both_modes_side_by_side(pair):
    c = pair.compare(PROMPTS, max_new_tokens=10, temperature=0, k=3)
    assert isinstance(c, specd.Comparison) and c.identical is True and c.speedup > 0
    assert c.target_only.mode == "target-only" and c.speculative.mode == "speculative"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda p: p.generate("x", dtype="bfloat16"), "dtype is fixed when the models load"),
        (lambda p: p.generate("x", tempreature=1.0), "unknown option 'tempreature'"),
        (lambda p: p.generate("x", temperature=-1.0), "temperature"),
        (lambda p: p.generate("x", k=0), "-k"),
        (lambda p: p.generate("x", rule="tree"), "rule"),
        (lambda p: p.generate("x", batch_size=0), "batch_size"),
        (lambda p: p.generate(["x", 3]), "list of strings"),
        (lambda p: p.generate(""), "empty prompt"),
    ],
)
def test_bad_arguments_raise_one_typed_error(pair, call, message):
    with pytest.raises(UsageError, match=message):
        call(pair)


def test_bad_objects_are_refused_by_name(objects):
    target, draft, tok = objects
    with pytest.raises(UsageError, match="needs its tokenizer"):
        specd.Pair.load(target)
    with pytest.raises(UsageError, match="causal LM"):
        specd.Pair.load(torch.nn.Linear(2, 2), tokenizer=tok)
    with pytest.raises(UsageError, match="weights are in cpu"):
        specd.Pair.load(target, tokenizer=tok, device="cuda")
    assert specd.Pair.load(target, "suffix", tokenizer=tok, device="auto", dtype="auto").options.dtype == "float32"
    with pytest.raises(UsageError, match="at most one separate draft model"):
        specd.Pair.load(target, [draft, draft], tokenizer=tok)


def test_a_model_in_training_mode_decodes_in_eval_mode(objects):
    target, _, tok = objects
    target.train()
    try:
        pair = specd.Pair.load(target, "suffix", tokenizer=tok)
        assert not target.training
        a = pair.generate(PROMPTS[0], max_new_tokens=6, temperature=0).results[0].tokens
        assert a == pair.generate(PROMPTS[0], max_new_tokens=6, temperature=0).results[0].tokens
    finally:
        target.eval()


def test_a_model_put_back_in_training_mode_still_decodes_in_eval_mode(objects):
    """Issue 50: ``model.train()`` after ``Pair.load`` (dropout on) made greedy calls decode other text
    with nothing said. Each call runs in eval mode and leaves the model as it found it."""
    from tests.hf_helpers import tiny_llama

    _, _, tok = objects
    target = tiny_llama(len(tok), seed=4, eos=tok.eos_token_id)
    for module in target.modules():
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = 0.5  # dropout that changes the logits in training mode
    pair = specd.Pair.load(target, "suffix,self:layers=1", tokenizer=tok)
    expected = pair.generate(PROMPTS, max_new_tokens=12, temperature=0, k=3).texts
    target.train()
    try:
        for _ in range(2):
            assert pair.generate(PROMPTS, max_new_tokens=12, temperature=0, k=3).texts == expected
            assert target.training and all(m.training for m in target.modules())  # left as the owner set it
    finally:
        target.eval()


@pytest.mark.parametrize("call", ["generate", "stream"])
def test_two_threads_on_one_pair_get_what_each_would_get_alone(objects, call):
    """Issue 50: two threads on one Pair raced in the product forms' timing (a KeyError). Calls take
    turns round by round; each thread's results are those of a serial run (fresh models: their
    product forms are still being timed)."""
    import threading

    from tests.hf_helpers import noisy_copy, tiny_llama

    _, _, tok = objects
    target = tiny_llama(len(tok), seed=5, eos=tok.eos_token_id)
    pair = specd.Pair.load(target, ["suffix", noisy_copy(target, 0.15, seed=2)], tokenizer=tok)
    jobs = [dict(prompts=PROMPTS * 2, k=2, temperature=0), dict(prompts=PROMPTS[::-1], k=3, temperature=0.8, seed=3)]

    def run(job):
        if call == "stream":
            parts: dict = {}
            for delta in pair.stream(**job, max_new_tokens=12, batch_size=1):
                parts[delta.request_id] = parts.get(delta.request_id, "") + delta.text
            return parts
        return pair.generate(**job, max_new_tokens=12, batch_size=1).texts

    got, errors = {}, []

    def thread(i):
        try:
            got[i] = run(jobs[i])
        except Exception as err:  # noqa: BLE001 - any failure in a thread is the test's
            errors.append(err)

    threads = [threading.Thread(target=thread, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [got[0], got[1]] == [run(jobs[0]), run(jobs[1])]


def test_the_same_request_from_python_and_from_the_command_line_agrees(tiny_models, capsys):
    """Every field of every result and every statistic but the timings, sampled, two prompts."""
    target, draft = tiny_models
    options = dict(max_new_tokens=12, k=3, temperature=0.8, top_p=0.95, seed=5, rule="maximal")
    flags = ["--max-new-tokens", "12", "-k", "3", "--temperature", "0.8", "--top-p", "0.95", "--seed", "5"]
    flags += ["--rule", "maximal"]
    code, out, err = run_cli(
        ["generate", "--target", target, "--draft", draft, *sum((["-p", p] for p in PROMPTS), []), *flags, "--json"],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    pair = specd.Pair.load(target, draft)
    api = pair.generate(PROMPTS, **options)
    assert [r.as_dict() for r in api.results] == doc["results"]
    cli_stats = {k: v for k, v in doc["stats"]["speculative"].items() if k not in TIMING}
    api_stats = json.loads(json.dumps(api.stats))  # JSON writes integer keys as strings
    assert {k: v for k, v in api_stats.items() if k not in TIMING} == cli_stats
    assert set(api.stats) == set(doc["stats"]["speculative"])
    assert pair.manifest(**options) == doc["manifest"]


def test_results_and_acceptance_log_are_written_as_the_command_writes_them(tiny_models, tmp_path, capsys):
    target, draft = tiny_models
    pair = specd.Pair.load(target, draft)
    log, results = tmp_path / "log.jsonl", tmp_path / "results.jsonl"
    run = pair.generate(PROMPTS, max_new_tokens=10, k=3, trace=str(log), out=str(results))
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert [line["text"] for line in lines if line.get("type") == "result"] == run.texts
    code, _, err = run_cli(
        [
            "trace",
            "run",
            "--target",
            target,
            "--draft",
            draft,
            *sum((["-p", p] for p in PROMPTS), []),
            "--max-new-tokens",
            "10",
            "-k",
            "3",
            "--trace",
            str(tmp_path / "cli.jsonl"),
        ],
        capsys,
    )
    assert code == 0, err
    rounds, cli_rounds = specd.read_log(str(log)), specd.read_log(str(tmp_path / "cli.jsonl"))
    assert len(rounds) == run.stats["rounds"] and rounds.drop(columns="round_id").equals(
        cli_rounds.drop(columns="round_id")
    )
    code, _, err = run_cli(["trace", "summarize", str(log), "--out", str(tmp_path / "summary.csv")], capsys)
    assert code == 0, err
    import pandas as pd

    summary = specd.summarize_log(str(log))
    assert summary.round(12).equals(pd.read_csv(tmp_path / "summary.csv").round(12))
    assert summary.iloc[0]["mean_accepted_length"] == run.stats["mean_accepted_length"]


def test_an_output_is_never_written_into_a_model_folder_or_over_an_input(tiny_models, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target, draft = tiny_models
    model, tok = AutoModelForCausalLM.from_pretrained(target), AutoTokenizer.from_pretrained(target)
    pair = specd.Pair.load(model, "suffix", tokenizer=tok)
    before = sorted(p.name for p in Path(target).iterdir())
    with pytest.raises(specd.SpecdError, match="model folder"):
        pair.generate("x", trace=str(Path(target) / "log.jsonl"), max_new_tokens=4)
    with pytest.raises(specd.SpecdError):
        pair.generate("x", out=str(Path(target) / "config.json"), max_new_tokens=4)
    assert sorted(p.name for p in Path(target).iterdir()) == before
    with pytest.raises(UsageError, match="needs speculative decoding"):
        pair.generate("x", baseline=True, trace=str(tmp_path / "log.jsonl"))
