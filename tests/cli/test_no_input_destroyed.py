"""No input destroyed, no finished work lost: outputs that alias inputs, refused runs, standard
output, SIGTERM and SIGHUP, self-written files that must read back, and hostile files that must
be refused in one line. Every case checks the exit code, one ``specd: error:`` line with no
traceback, and that every input (and an existing output) is byte-identical after the run."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_bad_input import one_line, snapshot
from tests.helpers import interrupted, run_cli

HOSTILE = "line\u2028sep\u2029para\x85nel\x1b[31mred\x07 tab\t emoji \U0001f600 \u202eevil"


def tiny(tiny_models, *extra):
    return ["generate", "--target", tiny_models[0], "--draft", tiny_models[1], "--max-new-tokens", "4", *extra]


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A prompts file, a YAML config, an acceptance-log-like JSONL and an old results file, in a
    working folder (so that ./name spellings are real)."""
    monkeypatch.chdir(tmp_path)
    repo = str(Path(__file__).resolve().parents[2])  # a child process started here still imports specd
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hello world"}\n{"prompt": "the cat"}\n')
    (tmp_path / "config.yaml").write_text("max_new_tokens: 4\n")
    (tmp_path / "old.jsonl").write_text('{"type": "header", "schema": "specd.results/v1", "manifest": {}}\n')
    os.symlink(tmp_path / "prompts.jsonl", tmp_path / "link.jsonl")
    return tmp_path


def unchanged(folder: Path):
    return {p.name: snapshot(p) for p in sorted(folder.iterdir())}


# -- 1. an output that names an input, or two outputs on one file ---------------------------------------
ALIASES = [
    # (arguments after the models, words the one line must hold)
    (["--prompts-file", "prompts.jsonl", "--out", "prompts.jsonl"], "--out prompts.jsonl is the same file as"),
    (["--prompts-file", "prompts.jsonl", "--out", "./prompts.jsonl"], "--prompts-file"),
    (["--prompts-file", "prompts.jsonl", "--out", "link.jsonl"], "would destroy that input"),
    (["--prompts-file", "link.jsonl", "--trace", "prompts.jsonl"], "--trace prompts.jsonl is the same file"),
    (["-p", "hi", "--config", "config.yaml", "--out", "config.yaml"], "--config"),
    (["-p", "hi", "--out", "./x.jsonl", "--trace", "x.jsonl"], "--out and --trace both name one file"),
    (["-p", "hi", "--out", "old.jsonl", "--trace", "./sub/../old.jsonl"], "both name one file"),
    (["-p", "hi", "--out", "-", "--json"], "--out and --json both name standard output"),
    (["-p", "hi", "--out", "/dev/stdout", "--trace", "-"], "both name standard output"),
    (["-p", "hi", "--out", "/dev/stderr"], "names an open file descriptor"),
]


@pytest.mark.parametrize("extra,message", ALIASES)
def test_an_output_naming_an_input_is_refused_and_nothing_is_touched(files, tiny_models, capsys, extra, message):
    (files / "sub").mkdir()
    before = unchanged(files)
    code, out, err = run_cli(tiny(tiny_models, *extra), capsys)
    one_line(code, err)
    assert message in err and out == ""
    assert unchanged(files) == before


def test_aliases_in_the_config_and_in_trace_run_are_refused(files, tiny_models, capsys):
    (files / "both.yaml").write_text("out: r.jsonl\ntrace: ./r.jsonl\nmax_new_tokens: 4\n")
    before = unchanged(files)
    code, _, err = run_cli(tiny(tiny_models, "-p", "hi", "--config", "both.yaml"), capsys)
    one_line(code, err)
    code2, _, err2 = run_cli(
        ["trace", "run", *tiny(tiny_models)[1:], "--prompts-file", "link.jsonl", "--trace", "prompts.jsonl"], capsys
    )
    one_line(code2, err2)
    assert "both name one file" in err and "same file as --prompts-file" in err2
    assert unchanged(files) == before


def test_an_output_inside_the_model_folder_is_refused(tmp_path, tiny_models, capsys):
    config = Path(tiny_models[0]) / "config.json"
    before = config.read_bytes()
    code, _, err = run_cli(tiny(tiny_models, "-p", "hi", "--out", str(config)), capsys)
    one_line(code, err)
    assert "model folder's config.json" in err and config.read_bytes() == before


@pytest.fixture
def log(files, tiny_models, capsys):
    code, _, err = run_cli(tiny(tiny_models, "-p", "hi", "--trace", "log.jsonl"), capsys)
    assert code == 0, err
    return files / "log.jsonl"


@pytest.mark.parametrize(
    "args,message",
    [
        (["trace", "summarize", "log.jsonl", "--out", "log.jsonl"], "--out log.jsonl is the same file as LOG"),
        (["trace", "summarize", "log.jsonl", "--plot", "./log.jsonl"], "same file as LOG"),
        (["trace", "summarize", "log.jsonl", "--out", "s.png", "--plot", "s.png"], "both name one file"),
        (["sweep-k", "--trace-log", "log.jsonl", "--out", "log.jsonl"], "same file as --trace-log"),
        (["sweep-k", "--config", "config.yaml", "--plot", "config.yaml"], "same file as --config"),
        (["sweep-k", "--out", "-", "--json"], "both name standard output"),
        (["sweep-k", "--plot", "speedup.jpg"], "specd draws png, pdf, svg"),
    ],
)
def test_trace_and_sweep_outputs_never_name_their_inputs(files, log, capsys, args, message):
    before = unchanged(files)
    code, _, err = run_cli(args, capsys)
    one_line(code, err)
    assert message in err and unchanged(files) == before


def test_a_sweep_configs_trace_log_is_an_input_too(files, log, capsys):
    """A sweep config's ``profile: {trace: FILE}`` names a log sweep-k reads: its CSV must not replace it."""
    (files / "sweep.yaml").write_text("profile:\n  trace: ./log.jsonl\n")
    before = unchanged(files)
    for args in (["--out", "log.jsonl"], ["--plot", "log.jsonl"]):
        code, _, err = run_cli(["sweep-k", "--config", "sweep.yaml", *args], capsys)
        one_line(code, err)
        assert "is the same file as sweep.yaml: profile: trace ./log.jsonl" in err, err
    assert unchanged(files) == before


# -- 2. a refused run leaves an existing results file as it was -----------------------------------------
def test_a_refused_run_does_not_replace_the_old_results_file(files, tiny_models, capsys):
    old = files / "results.jsonl"
    code, _, err = run_cli(tiny(tiny_models, "-p", "hello world", "--out", str(old)), capsys)
    assert code == 0, err
    before = unchanged(files)
    too_long = " ".join(["word"] * 5000)
    code, _, err = run_cli(tiny(tiny_models, "-p", too_long, "--out", str(old)), capsys)
    one_line(code, err)
    assert "tokens, but the model reads at most" in err
    code, _, err = run_cli(
        tiny(tiny_models, "-p", "another prompt", "--k-schedule", str(old), "--out", str(old)), capsys
    )
    one_line(code, err)
    assert unchanged(files) == before


# -- 3. standard output is a stream, never a rename -------------------------------------------------------
def test_out_dash_streams_results_to_stdout_and_tables_to_stderr(files, tiny_models, capsys):
    code, out, err = run_cli(tiny(tiny_models, "-p", "hello world", "-p", "the cat", "--out", "-"), capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in out.split("\n") if line]
    assert [r["type"] for r in rows] == ["header", "result", "result"]
    assert "written to standard output" in err and "acceptance" in err.lower()


@pytest.mark.slow
def test_out_dev_stdout_into_a_redirect_and_a_pipe(files, tiny_models):
    args = [sys.executable, "-m", "specd.cli", *tiny(tiny_models, "-p", "hello world", "--out", "/dev/stdout")]
    with open(files / "res.jsonl", "w") as fh:
        proc = subprocess.run(args, stdout=fh, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (files / "res.jsonl").read_text().split("\n") if line]
    assert [r["type"] for r in rows] == ["header", "result"]
    piped = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr
    assert [json.loads(line)["type"] for line in piped.stdout.split("\n") if line] == ["header", "result"]


# -- 4. SIGTERM and SIGHUP stop a run as Ctrl-C does -----------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "signum,code,line", [(signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGHUP, 129, "hung up (SIGHUP)")]
)
def test_sigterm_and_sighup_keep_every_finished_request(files, tiny_models, signum, code, line):
    prompts = files / "many.jsonl"
    # many more prompts than the signal needs: a fast run must still be decoding when it arrives
    prompts.write_text("".join(json.dumps({"prompt": f"prompt number {i}"}) + "\n" for i in range(400)))
    out = files / "r.jsonl"
    args = [*tiny(tiny_models, "--prompts-file", str(prompts), "--out", str(out), "--batch-size", "2")]
    args[args.index("4")] = "24"

    def some_written(proc):
        deadline = time.monotonic() + 120
        while (
            proc.poll() is None
            and time.monotonic() < deadline
            and (not out.exists() or len(out.read_text().split("\n")) < 4)
        ):
            time.sleep(0.05)

    got, err = interrupted(args, some_written, signum)
    assert got == code and err.endswith(f"specd: error: {line}\n"), err
    rows = [json.loads(x) for x in out.read_text().split("\n") if x]
    assert rows[0]["type"] == "header" and 3 <= len(rows) < 401  # stopped before the end, every line whole
    assert len({r["id"] for r in rows[1:]}) == len(rows) - 1


# -- 5. every file specd writes reads back, whatever the text -------------------------------------------
def test_hostile_text_round_trips_through_results_logs_schedules_and_resume(files, tiny_models, capsys):
    prompts = files / "hostile.jsonl"
    prompts.write_text(
        json.dumps({"prompt": HOSTILE, "id": "h\u2028id"}, ensure_ascii=False) + "\n" + '{"prompt": "plain"}\n'
    )
    sampled = tiny(tiny_models, "--prompts-file", str(prompts), "--temperature", "0.9", "--seed", "3")
    code, _, err = run_cli([*sampled, "--out", "r.jsonl", "--trace", "t.jsonl"], capsys)
    assert code == 0, err
    raw = (files / "r.jsonl").read_bytes()
    assert "\u2028".encode() not in raw and "\x85".encode() not in raw
    results = [json.loads(x) for x in raw.decode().split("\n") if x]
    assert results[1]["prompt"] == HOSTILE and results[1]["id"] == "h\u2028id"
    code, out, err = run_cli(["trace", "summarize", "t.jsonl", "--json"], capsys)
    assert code == 0, err
    code, out, err = run_cli([*sampled, "--k-schedule", "r.jsonl", "--json"], capsys)
    assert code == 0, err
    assert [r["tokens"] for r in json.loads(out)["results"]] == [r["tokens"] for r in results[1:]]
    code, out, err = run_cli([*sampled, "--out", "r.jsonl", "--resume", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["already_complete"] == 2


# -- 7. hostile or broken files are refused in one line (exit 2), never an internal error ---------------
RESUME_FILES = {
    "binary": b"\xff\xfe\x00\x01garbage\n",
    "array": b"[1, 2, 3]\n",
    "manifest not an object": b'{"type": "header", "schema": "specd.results/v1", "manifest": 7}\n',
    "a bare number line": b'{"type": "header", "schema": "specd.results/v1", "manifest": {}}\n42\n',
    "deeply nested": b"[" * 100000 + b"\n",
}


@pytest.mark.parametrize("kind", list(RESUME_FILES))
def test_a_broken_resume_file_is_one_line(files, tiny_models, capsys, kind):
    path = files / "r.jsonl"
    path.write_bytes(RESUME_FILES[kind])
    before = unchanged(files)
    code, _, err = run_cli(tiny(tiny_models, "-p", "hi", "--out", str(path), "--resume"), capsys)
    one_line(code, err)
    assert "internal error" not in err and unchanged(files) == before


@pytest.mark.parametrize(
    "document,message",
    [
        ('{"results": 5}', "its results must be a list"),
        ('{"results": null}', "its results must be a list"),
        ("[" * 5000 + "]" * 5000, "nested deeper than"),
        ('{"results": [' + "1" * 5000 + "]}", "too many digits"),
    ],
)
def test_a_broken_k_schedule_is_one_line(files, tiny_models, capsys, document, message):
    (files / "s.json").write_text(document)
    code, _, err = run_cli(tiny(tiny_models, "-p", "hi", "--k-schedule", "s.json"), capsys)
    one_line(code, err)
    assert message in err


@pytest.fixture
def model_copy(tmp_path, tiny_models):
    folder = tmp_path / "model"
    folder.mkdir()
    for item in Path(tiny_models[0]).iterdir():
        if item.is_file() and item.name != "generation_config.json":
            os.symlink(item, folder / item.name)
    return folder


@pytest.mark.parametrize(
    "content,message",
    [
        ('{"temperature": ' + "1" * 5000 + "}", "too many digits"),
        ("[" * 100000, "nested deeper than"),
        ("/dev/zero", "is a device, not a file"),
    ],
)
def test_a_hostile_generation_config_is_one_line(model_copy, tiny_models, capsys, content, message):
    target = model_copy / "generation_config.json"
    if content.startswith("/dev/"):
        os.symlink(content, target)
    else:
        target.write_text(content)
    code, _, err = run_cli(["generate", "--target", str(model_copy), "--draft", "ngram:2", "-p", "hi"], capsys)
    one_line(code, err)
    assert message in err


@pytest.mark.parametrize(
    "yaml_text,message",
    [
        ('a: &a ["x", "x"]\nb: &b [*a, *a]\nstop: [*b, *b]\n', "anchors and aliases"),
        ("seed: " + "7" * 5000 + "\n", "too many digits"),
        ("seed: 5\nseed: 6\n", "the key 'seed' is given twice"),
        ("seed: 18446744073709551616\n", "out of range"),
    ],
)
def test_hostile_yaml_is_one_line(files, tiny_models, capsys, yaml_text, message):
    (files / "c.yaml").write_text(yaml_text)
    code, _, err = run_cli(tiny(tiny_models, "-p", "hi", "--config", "c.yaml"), capsys)
    one_line(code, err)
    assert message in err


@pytest.mark.parametrize(
    "line", ['{"prompt": "a \\ud800 b"}', '{"prompt": "ok", "id": "x\\udfff"}', '"bare \\ud83d string"']
)
def test_a_lone_surrogate_in_a_prompt_is_one_line(files, tiny_models, capsys, line):
    (files / "p.jsonl").write_text(line + "\n")
    code, _, err = run_cli(tiny(tiny_models, "--prompts-file", "p.jsonl"), capsys)
    one_line(code, err)
    assert "lone surrogate" in err


@pytest.mark.slow
def test_stdout_on_a_full_device_is_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "specd.cli", "sweep-k", "--json"],
        stdout=open("/dev/full", "w"),  # noqa: SIM115
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    one_line(proc.returncode, proc.stderr, expected_code=1)
    assert "cannot write to standard output: the disk is full" in proc.stderr


def test_a_disk_that_fills_mid_run_says_so_and_keeps_what_was_written(files, tiny_models, capsys, monkeypatch):
    from specd.models.run.results import RequestLines

    class Filling:
        """The results file, on a disk that is full after its first request."""

        def __init__(self, fh):
            self.fh, self.writes = fh, 0

        def write(self, text):
            self.writes += 1
            if self.writes == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.fh.write(text)

        def __getattr__(self, name):
            return getattr(self.fh, name)

    real_open = RequestLines._open
    monkeypatch.setattr(RequestLines, "_open", lambda self: Filling(real_open(self)))
    code, _, err = run_cli(tiny(tiny_models, "--prompts-file", "prompts.jsonl", "--out", "r.jsonl"), capsys)
    one_line(code, err, expected_code=1)
    assert "the disk is full" in err and "1 request(s) written before are kept" in err and "--resume" in err
    rows = [json.loads(x) for x in (files / "r.jsonl").read_text().split("\n") if x]
    assert [r["type"] for r in rows] == ["header", "result"]


# -- 8. the smaller items --------------------------------------------------------------------------------
def test_resume_drops_duplicated_lines_and_says_so(files, tiny_models, capsys):
    args = tiny(tiny_models, "--prompts-file", "prompts.jsonl", "--out", "r.jsonl")
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    clean = (files / "r.jsonl").read_bytes()
    lines = clean.split(b"\n")
    (files / "r.jsonl").write_bytes(clean + lines[1] + b"\n" + lines[2] + b"\n")
    code, _, err = run_cli([*args, "--resume"], capsys)
    assert code == 0, err
    assert "dropped 2 duplicate line(s)" in err
    assert (files / "r.jsonl").read_bytes() == clean


def test_k_max_with_a_k_schedule_is_refused(files, tiny_models, capsys):
    code, _, err = run_cli(tiny(tiny_models, "-p", "hi", "--out", "r.jsonl"), capsys)
    assert code == 0, err
    code, _, err = run_cli(tiny(tiny_models, "-p", "hi", "--k-schedule", "r.jsonl", "--k-max", "2"), capsys)
    one_line(code, err)
    assert "--k-max" in err and "--k-schedule" in err


@pytest.mark.parametrize("suffix,magic", [("pdf", b"%PDF"), ("svg", b"<?xml"), ("png", b"\x89PNG")])
def test_a_plot_is_written_in_the_format_its_suffix_names(files, log, capsys, suffix, magic):
    code, _, err = run_cli(["trace", "summarize", "log.jsonl", "--plot", f"a.{suffix}"], capsys)
    assert code == 0, err
    assert (files / f"a.{suffix}").read_bytes().startswith(magic)


def test_resume_accepts_another_spelling_of_the_same_target(files, tiny_models, capsys):
    args = ["generate", "--draft", tiny_models[1], "--max-new-tokens", "4", "--prompts-file", "prompts.jsonl"]
    code, _, err = run_cli([*args, "--target", tiny_models[0], "--out", "r.jsonl"], capsys)
    assert code == 0, err
    before = (files / "r.jsonl").read_bytes()
    folder = Path(tiny_models[0])
    respelled = f"{folder.parent}/./{folder.name}/"
    code, out, err = run_cli([*args, "--target", respelled, "--out", "r.jsonl", "--resume", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["already_complete"] == 2 and (files / "r.jsonl").read_bytes() == before
