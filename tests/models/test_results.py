"""Results files and acceptance logs written request by request, in input order, resumable."""

import errno
import io
import json

import pytest

from specd.errors import ResumeMismatch, UsageError
from specd.models.run.results import RESULTS_SCHEMA, RequestLines, manifest_difference

MANIFEST = {
    "target": {"identity": "t"},
    "seed": 0,
    "k": 4,
    "target_policy": {"greedy": True},
    "backend": "hf",
    "tree": {"spec": "2,1", "drawn": None, "choices": [[0], [1], [0, 0], [1, 0]]},
}
ORDER = ["a", "b", "c", "d"]


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def result(rid):
    return [{"type": "result", "id": rid, "prompt": rid.upper()}]


def test_requests_are_written_in_input_order_as_the_prefix_finishes(tmp_path):
    path = tmp_path / "r.jsonl"
    f = RequestLines(str(path), "results file", RESULTS_SCHEMA, "result", MANIFEST, ORDER, resume=False)
    f.add("b", result("b"))
    assert not path.exists()  # b waits for a; nothing is written (or replaced) before a first request is
    f.add("a", result("a"))
    assert [x.get("id") for x in lines(path)] == [None, "a", "b"]  # written and flushed at once
    f.add("d", result("d"))
    f.add("c", result("c"))
    f.close()
    assert [x.get("id") for x in lines(path)] == [None, "a", "b", "c", "d"]
    assert lines(path)[0] == {"type": "header", "schema": RESULTS_SCHEMA, "manifest": MANIFEST}


def test_a_stopped_run_writes_what_finished_and_a_resumed_one_ends_in_input_order(tmp_path):
    path = tmp_path / "r.jsonl"
    f = RequestLines(str(path), "results file", RESULTS_SCHEMA, "result", MANIFEST, ORDER, resume=False)
    f.add("c", result("c"))  # finished, but a and b are not: it waits
    f.close()  # the run stops (Ctrl-C): c must not be lost
    assert [x.get("id") for x in lines(path)] == [None, "c"]
    with path.open("a") as fh:
        fh.write('{"type": "result", "id": "a", "pro')  # a torn line from a write cut off
    g = RequestLines(str(path), "results file", RESULTS_SCHEMA, "result", MANIFEST, ORDER, resume=True)
    assert g.done == {"c"} and "torn last line" in g.notes[0]
    for rid in ("b", "a", "c", "d"):  # c again: already in the file, not written twice
        g.add(rid, result(rid))
    g.close()
    expected = tmp_path / "e.jsonl"
    h = RequestLines(str(expected), "results file", RESULTS_SCHEMA, "result", MANIFEST, ORDER, resume=False)
    for rid in ORDER:
        h.add(rid, result(rid))
    h.close()
    assert path.read_bytes() == expected.read_bytes()


def test_a_group_cut_off_before_its_last_line_is_dropped(tmp_path):
    path = tmp_path / "t.jsonl"
    header = {"type": "header", "schema": "specd.trace/v1", "manifest": MANIFEST}
    body = [{"type": "round", "request_id": "a"}, {"type": "request", "request_id": "a", "prompt": "A"}]
    body += [{"type": "round", "request_id": "b"}]  # b's request line never came
    path.write_text("".join(json.dumps(x) + "\n" for x in [header, *body]))
    before = path.read_bytes()
    f = RequestLines(str(path), "acceptance log", "specd.trace/v1", "request", MANIFEST, ORDER, resume=True)
    assert f.done == {"a"} and "cut off" in f.notes[0]
    assert path.read_bytes() == before  # rewritten only once a request is written
    f.add("c", [{"type": "request", "request_id": "c", "prompt": "C"}])  # waits for b
    f.add("b", [{"type": "round", "request_id": "b"}, {"type": "request", "request_id": "b", "prompt": "B"}])
    f.close()
    assert [x.get("request_id") for x in lines(path)] == [None, "a", "a", "b", "b", "c"]


@pytest.mark.parametrize(
    "change,field",
    [
        ({"seed": 1}, "seed"),
        ({"k": 8}, "k"),
        ({"target": {"identity": "other"}}, "target"),
        ({"target_policy": {"greedy": False}}, "target_policy"),
        # issue 61: every option that decides the output, the tree and its construction among them
        ({"tree": {"spec": "3", "drawn": None, "choices": [[0], [1], [2]]}}, "tree"),
        ({"tree": {"spec": "rank:2,1", "drawn": "rank", "choices": [[0], [1], [0, 0], [1, 0]]}}, "tree"),
        ({"tree": {"spec": "auto", "auto": True}, "tree_budget": 16}, "tree"),
        ({"backend": "llama.cpp"}, "backend"),
    ],
)
def test_resuming_another_runs_file_is_refused_naming_the_field(tmp_path, change, field):
    path = tmp_path / "r.jsonl"
    first = RequestLines(str(path), "results file", RESULTS_SCHEMA, "result", MANIFEST, ORDER, resume=False)
    first.add("a", result("a"))
    first.close()
    with pytest.raises(ResumeMismatch, match=f"its {field} is"):
        RequestLines(str(path), "results file", RESULTS_SCHEMA, "result", {**MANIFEST, **change}, ORDER, resume=True)
    assert manifest_difference(MANIFEST, {**MANIFEST, "layout": "retained_frontier"}) is None  # not an output field
    same_tree = {**MANIFEST["tree"], "spec": "choices.json"}  # another spelling of the same shape
    assert manifest_difference(MANIFEST, {**MANIFEST, "tree": same_tree}) is None


@pytest.mark.parametrize(
    "text,error,message",
    [
        ('{"type": "header", "schema": "specd.results/v1", "manifest": {}}\nnot json\n{}\n', UsageError, "corrupt"),
        ('{"type": "header", "schema": "something/v9"}\n', ResumeMismatch, "is not a specd.results/v1 file"),
        ("", ResumeMismatch, "is not a specd.results/v1 file"),
    ],
)
def test_a_corrupt_file_is_one_line(tmp_path, text, error, message):
    path = tmp_path / "r.jsonl"
    path.write_text(text)
    with pytest.raises(error, match=message):
        RequestLines(str(path), "results file", RESULTS_SCHEMA, "result", MANIFEST, ORDER, resume=True)


def test_requests_not_in_the_prompt_set_are_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    f = RequestLines(str(path), "results file", RESULTS_SCHEMA, "result", MANIFEST, ["z"], resume=False)
    f.add("z", result("z"))
    f.close()
    with pytest.raises(ResumeMismatch, match="not in this prompt set"):
        RequestLines(str(path), "results file", RESULTS_SCHEMA, "result", MANIFEST, ORDER, resume=True)


class SmallDisk(io.FileIO):
    """A file on a disk with ``room`` bytes left: a write past it fails as a full disk's does
    (ENOSPC), leaving what did not fit in the buffer above, to fail again when it is closed."""

    room = 0

    def write(self, data) -> int:
        if self.tell() + len(data) > SmallDisk.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


@pytest.fixture
def full_disk(monkeypatch, tmp_path):
    """Results files opened for appending land on a small disk: the header and a request or two fit."""
    from specd.models.run import results

    def small_open(path, mode="r", encoding=None):
        assert mode == "a", mode
        raw = SmallDisk(path, "a")
        SmallDisk.room = raw.tell() + 900
        return io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding)

    monkeypatch.setattr(results, "open", small_open, raising=False)
    return tmp_path / "results.jsonl"


def test_a_full_disk_is_write_failed_naming_the_results_file_from_python_and_the_command_line(
    full_disk, tiny_models, capsys
):
    """Issue 50: a full disk under --out raised a raw OSError from RequestLines.close (Python), and the
    command said "cannot write to standard output" while stdout had room. Both name the results file,
    keep the requests written before (complete lines, resumable), and exit 1 (WriteFailed)."""
    import specd
    from specd.errors import WriteFailed
    from tests.cli.test_bad_input import one_line
    from tests.helpers import run_cli

    prompts = [f"prompt number {i} " + "word " * 20 for i in range(12)]
    pair = specd.Pair.load(tiny_models[0], "suffix")
    with pytest.raises(WriteFailed) as failed:
        pair.generate(prompts, max_new_tokens=4, out=str(full_disk), batch_size=1)
    assert str(full_disk) in str(failed.value) and "the disk is full" in str(failed.value)
    kept = [json.loads(x) for x in full_disk.read_text().split("\n")[:-1]]  # a torn last line aside
    assert kept[0]["type"] == "header" and 1 <= len(kept) - 1 < len(prompts)
    assert f"the {len(kept) - 1} request(s) written before are kept" in str(failed.value)

    full_disk.unlink()
    (full_disk.parent / "p.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    args = ["--target", tiny_models[0], "--draft", "suffix", "--max-new-tokens", "4", "--batch-size", "1"]
    code, out, err = run_cli(
        ["generate", *args, "--prompts-file", str(full_disk.parent / "p.jsonl"), "--out", str(full_disk)], capsys
    )
    one_line(code, err, expected_code=1)
    assert f"cannot write the results file {full_disk}: the disk is full" in err and "standard output" not in err
    assert json.loads(full_disk.read_text().split("\n")[0])["type"] == "header"
