"""The self:vocab=N draft vocabulary: a frequency table built from the model's own generations,
written and read back, refused in one line when it is missing, cut short, for another
tokenizer or holds bad ids, all before any weights load; and, end to end, greedy text equal to
target-only text."""

import json

import pytest
import torch

from specd.errors import UsageError
from specd.models.vocab_table import (
    FORMAT,
    MAX_RANKED,
    PROMPTS,
    VocabTable,
    build_table,
    expected_counts,
    rank,
    read_table,
    tokenizer_digest,
    write_table,
)
from tests.helpers import run_cli
from tests.hf_helpers import tiny_llama, tiny_tokenizer


@pytest.fixture(scope="module")
def tiny():
    tok = tiny_tokenizer()
    return tiny_llama(len(tok), seed=0, eos=tok.eos_token_id), tok


def test_rank_orders_by_expected_count_ties_by_id_and_keeps_at_most_v_minus_one():
    counts = torch.tensor([0.5, 2.0, 0.5, 3.0, 0.0], dtype=torch.float64)
    assert rank(counts, 5) == (3, 1, 0, 2)  # 0 and 2 tie: id order; N < V always
    assert rank(counts, 5, keep=2) == (3, 1)


def test_the_counts_are_the_models_own_softmax_mass(tiny):
    model, tok = tiny
    counts = expected_counts(model, tok, PROMPTS[:2], new_tokens=4)
    positions = sum(len(tok(p)["input_ids"]) for p in PROMPTS[:2]) + 2 * 4  # every row sums to 1
    assert counts.sum().item() == pytest.approx(positions, rel=1e-9)
    assert (counts >= 0).all()


def test_a_built_table_writes_and_reads_back(tiny, tmp_path):
    model, tok = tiny
    table = build_table(model, tok, len(tok), "tiny", new_tokens=4)
    assert len(table.ranked) == min(MAX_RANKED, len(tok) - 1) and len(set(table.ranked)) == len(table.ranked)
    assert table.provenance["prompts"] == len(PROMPTS) and table.provenance["new_tokens_per_prompt"] == 4
    path = tmp_path / "t.json"
    write_table(table, path)
    back = read_table(path, tokenizer_digest(tok), len(tok))
    assert back.ranked == table.ranked and back.columns(10) == table.ranked[:10]
    with pytest.raises(UsageError, match="fewer than N"):
        back.columns(len(tok))


def table_text(tok, **changes) -> str:
    doc = json.loads(VocabTable((3, 1, 2), tokenizer_digest(tok), len(tok), {}).to_json())
    doc.update(changes)
    return json.dumps(doc)


@pytest.mark.parametrize(
    "text,message",
    [
        (None, "no such file|not found|cannot read"),
        ("cut", "cut short or not JSON"),
        ("other-tokenizer", "another tokenizer"),
        ("out-of-range", "outside the vocabulary"),
        ("twice", "ranked twice"),
        ("count", "cut short or not integers"),
        ("format", FORMAT),
    ],
)
def test_bad_tables_are_one_line(tiny, tmp_path, text, message):
    _, tok = tiny
    path = tmp_path / "t.json"
    body = {
        "cut": table_text(tok)[:40],
        "other-tokenizer": table_text(tok, tokenizer="0" * 64),
        "out-of-range": table_text(tok, ranked=[1, 2, len(tok)]),
        "twice": table_text(tok, ranked=[1, 2, 1]),
        "count": table_text(tok, count=7),
        "format": table_text(tok, format="something/v0"),
    }.get(text)
    if body is not None:
        path.write_text(body)
    with pytest.raises(UsageError, match=message) as err:
        read_table(path, tokenizer_digest(tok), len(tok))
    assert "\n" not in str(err.value)


def never_load(*args, **kwargs):
    raise AssertionError("weights were loaded before the bad input was refused")


@pytest.mark.parametrize(
    "draft,extra,message",
    [
        ("self:vocab=1", [], "N >= 2"),
        ("self:vocab=300", [], r"\[2, 300\)"),
        ("self:vocab=16", ["--layout", "retained_frontier"], "replay_frontier"),
        ("self:vocab=16", ["--draft-vocab", "MISSING"], "draft vocabulary table"),
        ("self:vocab=16", ["--draft-vocab", "OTHER"], "another tokenizer"),
        ("self:vocab=16", ["--draft-vocab", "CUT"], "cut short"),
        ("suffix", ["--draft-vocab", "OTHER"], "self:vocab=N"),
    ],
)
def test_bad_self_vocab_input_is_one_line_before_any_weights_load(
    tiny_models, tmp_path, capsys, monkeypatch, draft, extra, message
):
    target, _ = tiny_models
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps({"format": FORMAT, "tokenizer": "0" * 64, "vocab_size": 300, "count": 1, "ranked": [1]})
    )
    cut = tmp_path / "cut.json"
    cut.write_text(other.read_text()[:30])
    names = {"MISSING": str(tmp_path / "missing.json"), "OTHER": str(other), "CUT": str(cut)}
    extra = [names.get(a, a) for a in extra]
    monkeypatch.setattr("specd.models.run.backends.load", never_load)
    code, out, err = run_cli(["generate", "--target", target, "--draft", draft, "-p", "hi", *extra], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("specd: error:"), err
    assert __import__("re").search(message, err), err


@pytest.mark.parametrize("k", ["3", "auto"])
@pytest.mark.parametrize("draft", ["self:vocab=64", "suffix,self:vocab=128"])
def test_greedy_text_with_self_vocab_is_target_only_text(tiny_models, capsys, draft, k):
    target, _ = tiny_models
    args = ["generate", "--target", target, "--max-new-tokens", "24", "--json"]
    prompts = ["-p", "the quick brown fox", "-p", "hello world, write a haiku about the sea", "-p", "def add(a, b):"]
    code, out, err = run_cli([*args, *prompts, "--draft", draft, "-k", k, "--compare"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["identical_outputs"] is True
    sources = doc["stats"]["speculative"]["source_histogram"]
    assert any(name.startswith("hf:self:vocab=") for name in sources) or k == "auto", sources


def test_the_table_corpus_shares_no_phrase_with_any_benchmark_prompt():
    """The shipped tables are built from PROMPTS, which share no word 5-gram with any benchmark
    prompt (the held-out corpus and every string of benchmarks/*.py), so no benchmark measures a
    table on the text it was built from."""
    import ast
    import re
    from pathlib import Path

    def grams(text):
        words = re.findall(r"[a-z0-9']+", text.lower())
        return {tuple(words[i : i + 5]) for i in range(len(words) - 4)}

    benchmarks = Path(__file__).resolve().parents[2] / "benchmarks"
    texts = [json.loads(line)["prompt"] for f in benchmarks.glob("corpus/*.jsonl") for line in f.open()]
    for script in benchmarks.glob("*.py"):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 20:
                texts.append(node.value)
    assert len(texts) > 200
    seen = set().union(*(grams(t) for t in texts))
    assert len(PROMPTS) >= 40
    for prompt in PROMPTS:
        assert not grams(prompt) & seen, prompt
