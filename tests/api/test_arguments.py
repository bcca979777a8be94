"""The Python API's bad arguments (issue 50): each refused by name as one ``specd.UsageError`` of one
line, before any work, and no message ever carries a huge value (``specd.errors.shown``)."""

import math
import os

import pytest

import specd
from specd.errors import MAX_MESSAGE, shown


@pytest.fixture(scope="module")
def pair():
    from tests.hf_helpers import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    return specd.Pair.load(tiny_llama(len(tok), seed=0, eos=tok.eos_token_id), "suffix", tokenizer=tok)


BAD = [
    # (call, words the message holds)
    (lambda p: p.generate(5), "prompts must be a string or a list of strings, got 5 (int)"),
    (lambda p: p.generate(None), "prompts must be a string or a list of strings, got None"),
    (lambda p: p.generate(b"bytes"), "got b'bytes' (bytes)"),
    (lambda p: p.generate([]), "prompts is empty"),
    (lambda p: p.generate(iter([])), "prompts is empty"),
    (lambda p: p.generate(["a", 3]), "item 1 is 3 (int)"),
    (lambda p: p.stream(5), "prompts must be a string or a list of strings"),
    (lambda p: p.compare(None), "prompts must be a string or a list of strings"),
    (lambda p: p.generate("a", out=3), "out must be a path (a str or os.PathLike), got 3 (int)"),
    (lambda p: p.generate("a", temperature=[0.5] * 100000), "[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, ...] (100000 items)"),
    (lambda p: specd.prove(vocab="2"), "vocab must be an integer, got '2' (str)"),
    (lambda p: specd.prove(vocab=2.5), "vocab must be an integer, got 2.5 (float)"),
    (lambda p: specd.prove(k=True), "k must be an integer, got True (bool)"),
    (lambda p: specd.prove(jobs=2.5), "jobs must be an integer or None, got 2.5 (float)"),
    (lambda p: specd.prove(target_bias=[1, 2]), "target_bias must be a mapping of token ids to numbers"),
    (lambda p: specd.prove(draft_bias={"0": 1.0}), "draft_bias: a token id must be an integer, got '0'"),
    (lambda p: specd.prove(samples=None), "samples must be an integer, got None"),
    (lambda p: specd.prove(lab="yes"), "lab must be True or False"),
    (lambda p: specd.prove(min_p="0.1"), "min_p must be a number, got '0.1' (str)"),
    (lambda p: specd.prove(top_k=3), "unknown option 'top_k'; the target's controls are min_p"),
    (lambda p: specd.check_sampler("specd", input_rounding=math.inf), "input_rounding must be a finite number"),
    (lambda p: specd.check_sampler("specd", input_rounding=math.nan), "input_rounding must be a finite number"),
    (lambda p: specd.check_sampler("specd", input_rounding=-1), "input_rounding is a relative change in [0, 1)"),
    (lambda p: specd.check_sampler("specd", input_rounding="x"), "input_rounding must be a number, got 'x' (str)"),
    (lambda p: specd.check_sampler("specd", timeout=0), "timeout must be a number of seconds > 0"),
    (lambda p: specd.check_sampler("specd", timeout=math.inf), "timeout must be a finite number"),
    (lambda p: specd.read_log(0), "read_log(path) must be a path (a str or os.PathLike), got 0 (int)"),
    (lambda p: specd.read_log(None), "read_log(path) must be a path"),
    (lambda p: specd.summarize_log(1), "summarize_log(path) must be a path"),
    (lambda p: specd.ledger(trace_log=0), "trace_log must be a path"),
    (lambda p: specd.sweep("not a pair"), "sweep takes a specd.Pair (from specd.Pair.load), got 'not a pair'"),
    (lambda p: specd.sweep(p, prompts=5), "prompts must be a string or a list of strings"),
    (lambda p: specd.sweep(p, repeats=1.5), "repeats must be an integer"),
    (lambda p: specd.Pair.load("x" * 10000), "(10000 characters) is too long for a file name or path"),
    (lambda p: p.generate("a", out="d/" + "x" * 300), "results file 'd/xxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx'"),
]


@pytest.mark.parametrize("call,message", BAD)
def test_bad_arguments_are_one_usage_error_naming_them(pair, call, message):
    with pytest.raises(specd.UsageError) as refused:
        call(pair)
    text = str(refused.value)
    assert message in text and "\n" not in text and len(text) < 300, text


def test_a_generator_of_prompts_is_read_once_and_used(pair):
    listed = pair.generate(["the cat", "a dog"], max_new_tokens=3, temperature=0).texts
    assert pair.generate((p for p in ["the cat", "a dog"]), max_new_tokens=3, temperature=0).texts == listed


def test_an_int_is_never_read_as_a_file_descriptor(tmp_path):
    """read_log(0) read standard input (it blocked); summarize_log(fd) read the caller's descriptor and
    closed it. An int is refused before anything is opened: the descriptor stays open and unread."""
    path = tmp_path / "log.jsonl"
    path.write_text('{"type": "header", "schema": "specd.trace/v1", "manifest": {}}\n')
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(specd.UsageError):
            specd.summarize_log(fd)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # open (lseek would raise on a closed one) and unread
    finally:
        os.close(fd)


def test_a_string_of_prompts_to_sweep_is_one_prompt(pair, monkeypatch):
    """sweep(prompts="w1 w2") measured each character as a prompt; a string is one prompt."""
    from specd.api import tables

    seen = {}

    def measure(pipe, ks, batches, prompts, **kw):
        seen["prompts"] = prompts
        raise specd.UsageError("stop here")

    monkeypatch.setattr(tables, "measure", measure)
    with pytest.raises(specd.UsageError, match="stop here"):
        specd.sweep(pair, prompts="w1 w2")
    assert seen["prompts"] == ["w1 w2"]


@pytest.mark.parametrize(
    "value,expected",
    [
        pytest.param([0.5] * 100000, "[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, ...] (100000 items)", id="long-list"),
        pytest.param("x" * 10000, "(10000 characters)", id="long-string"),
        pytest.param(10**5000, "an integer of about 5000 digits", id="huge-int"),
        ("short", "'short'"),
        (2.5, "2.5"),
    ],
)
def test_shown_abbreviates_any_value(value, expected):
    text = shown(value)
    assert expected in text and len(text) < 100


def test_no_message_is_huge():
    assert len(str(specd.UsageError("x" * 10**6))) <= MAX_MESSAGE + 10
