"""Incremental decoding and stop strings."""

import pytest

from specd.core.stops import IncrementalText, cut_at_stop
from tests.hf_helpers import tiny_tokenizer


@pytest.fixture(scope="module")
def decode():
    tok = tiny_tokenizer()
    calls = []

    def fn(ids):
        calls.append(len(ids))
        return tok.decode(list(ids), skip_special_tokens=True)

    fn.calls = calls
    fn.tok = tok
    return fn


def test_pushed_pieces_add_up_to_the_whole_text_and_each_decode_is_short(decode):
    ids = decode.tok("the quick brown fox jumps over the lazy dog. def add(a, b): return a + b")["input_ids"] * 6
    text = IncrementalText(decode)
    decode.calls.clear()
    pieces = [text.push(ids[i : i + 3]) for i in range(0, len(ids), 3)]
    assert "".join(pieces) == text.text == decode(ids)
    assert max(decode.calls[:-1]) <= 12  # a window of a few tokens, never the whole output


def test_an_incomplete_character_is_held_back_until_it_completes(decode):
    ids = decode.tok("caf\u00e9 \u2603 ok")["input_ids"]
    text = IncrementalText(decode)
    pieces = [text.push([t]) for t in ids]
    assert all("\ufffd" not in p for p in pieces) and "".join(pieces) == decode(ids)


def test_stop_strings_are_found_across_pushes_and_cut(decode):
    ids = decode.tok("hello world, write a haiku about the sea")["input_ids"]
    text = IncrementalText(decode, stops=("haiku",))
    hits = [text.stop_in(text.push([t])) for t in ids]
    assert hits.count(True) >= 1
    first = hits.index(True)
    assert "haiku" in decode(ids[: first + 1]) and "haiku" not in decode(ids[:first])
    kept, tokens = cut_at_stop(ids, decode, ("haiku", "sky"))
    assert kept == "hello world, write a " and tokens == tuple(ids[: first + 1])
    assert cut_at_stop(ids, decode, ("nowhere",)) == (decode(ids), tuple(ids))
