"""specd.files: the one JSONL writer and reader, bounded parsing, and the path rule."""

import json
import os

import pytest

from specd.errors import OutputPathError, UsageError
from specd.files import (
    MAX_JSON_DEPTH,
    check_paths,
    identity,
    image_format,
    is_stdout,
    json_line,
    jsonl_records,
    loads_json,
    read_text,
)

HOSTILE = [
    "plain",
    "line\u2028separator\u2029paragraph\x85next-line",
    "control \x00\x01\x1b[31m\x7f and tab\t and newline\n",
    "lone \ud800 high and \udfff low surrogates",
    "emoji \U0001f600 and \u202e bidi",
    "",
]


def test_every_line_written_reads_back_whatever_the_text():
    text = "".join(json_line({"text": t, "id": t}) for t in HOSTILE)
    assert text.count("\n") == len(HOSTILE)  # one physical line per record
    assert len(text.splitlines()) == len(HOSTILE)  # even a reader that splits on U+2028 and U+0085
    text.encode("utf-8")  # every lone surrogate is an escape: the text is valid UTF-8
    got = [obj for _, obj in jsonl_records(text, "t")]
    assert got == [{"text": t, "id": t} for t in HOSTILE]


def test_the_reader_splits_on_newline_only():
    raw = '{"a": "x\u2028y"}\n\n{"a": "\x85"}\n'  # raw separators inside strings, as other tools write them
    assert [obj for _, obj in jsonl_records(raw, "t")] == [{"a": "x\u2028y"}, {"a": "\x85"}]


@pytest.mark.parametrize(
    "text,message",
    [
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "nested deeper than"),
        ("1" * 5000, "too many digits"),
        ("{bad", "not JSON"),
    ],
)
def test_bounded_json(text, message):
    with pytest.raises(UsageError, match=message):
        loads_json(text, "where")
    assert loads_json('["[[[[", {"a": "{{{{"}]', "w") == ["[[[[", {"a": "{{{{"}]  # brackets in strings are text


def test_a_device_and_an_oversized_file_are_refused_without_reading(tmp_path):
    with pytest.raises(UsageError, match="is a device"):
        read_text("/dev/zero", "file")
    big = tmp_path / "big.txt"
    big.write_text("x" * 2000)
    with pytest.raises(UsageError, match="larger than"):
        read_text(big, "file", limit=1000)


def test_identity_sees_through_spellings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("a")
    os.symlink(tmp_path / "a.txt", tmp_path / "link")
    assert identity("a.txt") == identity("./a.txt") == identity(str(tmp_path / "link"))
    assert identity("new.txt") == identity("./sub/../new.txt") != identity("other.txt")
    assert is_stdout("-") and is_stdout("/dev/stdout") and is_stdout("/proc/self/fd/1") and not is_stdout("a.txt")
    with pytest.raises(OutputPathError, match="--out link is the same file as --in a.txt"):
        check_paths({"--in": "a.txt"}, {"--out": "link"})
    with pytest.raises(OutputPathError, match="--x and --y both name one file"):
        check_paths({}, {"--x": "new.txt", "--y": "./new.txt"})
    check_paths({"--in": "a.txt"}, {"--x": "new.txt", "--y": "other.txt"})  # distinct: fine


@pytest.mark.parametrize("name,fmt", [("p.png", "png"), ("p.PDF", "pdf"), ("p.svg", "svg"), ("plot", "png")])
def test_image_format_follows_the_suffix(name, fmt):
    assert image_format(name) == fmt
    with pytest.raises(OutputPathError, match="specd draws"):
        image_format("p.jpg")
    json.dumps(fmt)
