"""Bad input, hostile files and full disks: one clean line and the documented exit code,
every time, and output files left exactly as they were.

Each class of fault is one table; each case asserts the exit code, one line on stderr
with no traceback, and (for outputs) the state of the file before and after.
"""

import errno
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import interrupted, run_cli

TINY = ["--max-new-tokens", "4", "-p", "hello world"]


def one_line(code, err, expected_code=2):
    assert code == expected_code, err
    assert err.startswith("specd: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "\x1b" not in err


def strict_json(text):
    """Parse --json output, refusing NaN and Infinity."""

    def refuse(constant):
        raise AssertionError(f"--json printed {constant}")

    return json.loads(text, parse_constant=refuse)


def snapshot(path: Path):
    """What a test compares before and after: kind, content and mode (None: absent)."""
    if not os.path.lexists(path):
        return None
    st = os.stat(path)
    content = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
    return stat.S_IFMT(st.st_mode), content, stat.S_IMODE(st.st_mode)


@pytest.fixture
def log(tmp_path, tiny_models, capsys):
    """A real acceptance log of the tiny pair."""
    path = tmp_path / "log.jsonl"
    code, _, err = run_cli(
        ["trace", "run", "--target", tiny_models[0], "--draft", tiny_models[1], *TINY, "--trace", str(path)], capsys
    )
    assert code == 0, err
    return path


# -- input files ------------------------------------------------------------------------------
def make_input(tmp_path, kind):
    path = tmp_path / "input"
    if kind == "missing":
        return path, "not found"
    if kind == "directory":
        path.mkdir()
        return path, "is a directory"
    if kind == "not_utf8":
        path.write_bytes(b"\xff\xfe\x00bad bytes\n")
        return path, "is not UTF-8"
    if kind == "empty":
        path.write_text("\n  \n")
        return path, "is empty"
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["missing", "directory", "not_utf8", "empty"])
@pytest.mark.parametrize("command", ["prompts", "config", "trace_show", "trace_summarize", "sweep_trace"])
def test_input_files_that_cannot_be_read(tmp_path, tiny_models, capsys, kind, command):
    path, message = make_input(tmp_path, kind)
    models = ["--target", tiny_models[0], "--draft", tiny_models[1]]
    args = {
        "prompts": ["generate", *models, "--prompts-file", str(path)],
        "config": ["generate", *models, "-p", "hi", "--config", str(path)],
        "trace_show": ["trace", "show", str(path)],
        "trace_summarize": ["trace", "summarize", str(path)],
        "sweep_trace": ["sweep-k", "--trace-log", str(path)],
    }[command]
    if command == "config" and kind == "empty":
        message = None  # an empty config file is an empty mapping: no options, not an error
    code, out, err = run_cli(args, capsys)
    if message is None:
        assert code == 0, err
        return
    one_line(code, err)
    assert message in err


def test_an_unreadable_file_says_permission_denied(tmp_path, tiny_models, capsys, monkeypatch):
    """Root reads everything, so the permission error is injected where the file is read."""
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "hi"}\n')
    real = open

    def denied(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", denied)
    code, _, err = run_cli(
        ["generate", "--target", tiny_models[0], "--draft", tiny_models[1], "--prompts-file", str(path)], capsys
    )
    one_line(code, err)
    assert "not readable (permission denied)" in err


# -- output paths: refused before any model loads, and left as they were -------------------------
OUTPUTS = {
    # command -> (args before the path, the option taking it, what else the command needs)
    "generate_trace": (["generate", "--target", "{t}", "--draft", "{d}", *TINY], "--trace"),
    "trace_run": (["trace", "run", "--target", "{t}", "--draft", "{d}", *TINY], "--trace"),
    "summary_csv": (["trace", "summarize", "{log}"], "--out"),
    "sweep_csv": (["sweep-k"], "--out"),
    "sweep_plot": (["sweep-k"], "--plot"),
}


def make_output(tmp_path, kind):
    if kind == "directory":
        path = tmp_path / "outdir"
        path.mkdir()
        return path, "is a directory"
    if kind == "device":
        return Path("/dev/null"), "not a regular file"
    if kind == "missing_folder":
        return tmp_path / "no" / "such" / "out.file", "does not exist"
    if kind == "read_only_file":
        path = tmp_path / "kept.out"
        path.write_text("keep me\n")
        path.chmod(0o444)
        return path, "is read-only"
    if kind == "folder_is_a_file":
        (tmp_path / "afile").write_text("x")
        return tmp_path / "afile" / "out.file", "is not a folder"
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["directory", "device", "missing_folder", "read_only_file", "folder_is_a_file"])
@pytest.mark.parametrize("command", list(OUTPUTS))
def test_bad_output_paths_are_refused_up_front_and_left_alone(tmp_path, tiny_models, log, capsys, kind, command):
    path, message = make_output(tmp_path, kind)
    before = snapshot(path)
    head, option = OUTPUTS[command]
    args = [a.format(t=tiny_models[0], d=tiny_models[1], log=log) for a in head] + [option, str(path)]
    if command in ("generate_trace", "trace_run"):  # found before loading: a bad model path is never reached
        args[args.index("--target") + 1] = str(tmp_path / "no-such-model")
    code, _, err = run_cli(args, capsys)
    one_line(code, err)
    assert message in err and "no-such-model" not in err
    assert snapshot(path) == before


@pytest.mark.parametrize("command", ["summary_csv", "sweep_csv", "sweep_plot", "trace_run"])
def test_a_full_disk_keeps_the_previous_file_whole(tmp_path, tiny_models, log, capsys, monkeypatch, command):
    path = tmp_path / ("previous.png" if command == "sweep_plot" else "previous.out")
    path.write_text("the previous result\n")
    path.chmod(0o640)
    before = snapshot(path)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    head, option = OUTPUTS[command]
    args = [a.format(t=tiny_models[0], d=tiny_models[1], log=log) for a in head] + [option, str(path)]
    code, _, err = run_cli(args, capsys)
    one_line(code, err, expected_code=1)
    assert "the disk is full" in err and "previous file is unchanged" in err
    assert snapshot(path) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_a_rewritten_output_keeps_its_mode(tmp_path, log, capsys):
    path = tmp_path / "summary.csv"
    path.write_text("old\n")
    path.chmod(0o640)
    code, _, err = run_cli(["trace", "summarize", str(log), "--out", str(path)], capsys)
    assert code == 0, err
    assert path.read_text().startswith("group,") and stat.S_IMODE(path.stat().st_mode) == 0o640


# -- YAML values are checked like flags ------------------------------------------------------------
@pytest.mark.parametrize(
    "yaml_text,message",
    [
        ("k: two", "k must be auto or an integer, got 'two'"),
        ("k: 2.7", "k must be auto or an integer, got 2.7"),
        ("temperature: [1, 2]", "temperature must be a number"),
        ("top_p: .nan", "top_p must be a finite number"),
        ("prompt: 5\n", "prompt must be a string or a list of strings"),
        ("json: maybe", "json must be true or false"),
        ("no_such_option: 1", "unknown option(s) no_such_option"),
        ("[1, 2]", "must be a mapping"),
        ("k: [", "not valid YAML"),
    ],
)
def test_generate_config_values(tmp_path, tiny_models, capsys, yaml_text, message):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"target: {tiny_models[0]}\ndraft: {tiny_models[1]}\n" + yaml_text + "\n")
    if yaml_text.startswith("["):
        cfg.write_text(yaml_text + "\n")
    prompt = [] if yaml_text.startswith("prompt") else ["-p", "hi"]  # a flag would win over the file
    code, _, err = run_cli(["generate", *prompt, "--config", str(cfg)], capsys)
    one_line(code, err)
    assert message in err and str(cfg) in err


@pytest.mark.parametrize(
    "yaml_text,message",
    [
        ("stop_probability: 1.5", "--stop-probability must be in [0, 1)"),
        ("context: 2.5", "--context must be an integer"),
        ("k: two", "k takes a range like 1..8"),
        ("profile: {alpha: high}", "is not a number"),
        ("profile: {alphas: 0.9}", "alphas must be a list of numbers"),
        ("cost: {draft_cost: cheap}", "is not a number"),
        ("cost: [1]", "cost must be a mapping"),
        ("cost: {draft_cost: .inf}", "finite"),
    ],
)
def test_sweep_config_values(tmp_path, capsys, yaml_text, message):
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml_text + "\n")
    code, _, err = run_cli(["sweep-k", "--config", str(cfg)], capsys)
    one_line(code, err)
    assert message in err


# -- draft source lists: refused naming the element, before any model loads ------------------------
@pytest.mark.parametrize(
    "draft,message",
    [
        ("suffix,,ngram:3", "an empty element"),
        ("suffix,", "an empty element"),
        ("ngram:3,suffix,ngram:3", "'ngram:3' is named twice"),
        ("ngram:0", "ngram:N needs N >= 1"),
        ("suffix,self:int4", "unknown draft source 'self:int4'"),
        ("suffix:all", "unknown draft source 'suffix:all'"),
        ("./one-model,./another-model", "at most one separate draft model"),
    ],
)
def test_bad_draft_lists(capsys, draft, message, monkeypatch):
    loaded = []
    monkeypatch.setattr("specd.models.run.backends.load", lambda *a, **k: loaded.append(a) or 1 / 0)
    code, _, err = run_cli(["generate", "--target", "./some-target", "--draft", draft, *TINY], capsys)
    one_line(code, err)
    assert message in err and not loaded


# -- numbers: non-finite, out of range, huge -------------------------------------------------------
@pytest.mark.parametrize(
    "args,message",
    [
        (["generate", "--temperature", "inf"], "--temperature must be a finite number"),
        (["generate", "--temperature", "nan"], "--temperature must be a finite number"),
        (["generate", "--top-p", "nan"], "--top-p must be a finite number"),
        (["generate", "--top-p", "1.5"], "--top-p must be in (0, 1]"),
        (["generate", "--repetition-penalty", "inf"], "--repetition-penalty must be a finite number"),
        (["generate", "--repetition-penalty", "-1"], "--repetition-penalty must be a finite number > 0"),
        (["generate", "--draft-temperature", "-inf"], "--draft-temperature must be a finite number"),
        (["generate", "-k", "1000000000"], "-k must be auto or in 1..64"),
        (["generate", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["verify-oracle", "--target-bias", "0=nan"], "finite number"),
        (["verify-oracle", "--repetition-penalty", "nan"], "--repetition-penalty must be a finite number"),
        (["verify-oracle", "--k", "1000000000"], "too large to enumerate"),
        (["verify-oracle", "--horizon", "1000000000"], "too large to enumerate"),
        (["verify-oracle", "--samples", "1000000000"], "--samples must be in 0..200000"),
        (["verify-oracle", "--jobs", "0"], "--jobs must be in 1..256"),
        (["verify-oracle", "--sampler", "llamacpp", "--tree", "2", "--jobs", "0"], "--jobs must be in 1..256"),
        # issue 61: thousands of forks of specd, each with a sampler loaded, are refused before the first
        (["verify-oracle", "--sampler", "llamacpp", "--tree", "2", "--jobs", "100000"], "--jobs must be in 1..256"),
        (["verify-oracle", "--jobs", "257"], "--jobs must be in 1..256"),
        (["verify-oracle", "--sampler", "specd", "--jobs", "2"], "a chain sampler is checked in one"),
        (["verify-oracle", "--tree", "3,0"], "every depth needs at least one child"),
        (["verify-oracle", "--tree", "nodes=8"], "static trees"),
        (["sweep-k", "--k", "1..1000000000"], "--k takes values in 1..256"),
        (["sweep-k", "--batch", "0"], "--batch takes values in 1..65536"),
        (["sweep-k", "--draft-cost", "inf"], "finite, non-negative"),
        (["sweep-k", "--alpha", "nan"], "outside [0, 1]"),
        (["sweep-k", "--kv-shape", "30,-3,64"], "--kv-shape values must be >= 1"),
        (["sweep-k", "--measure", "--repeats", "0"], "--repeats must be in 1..100"),
        (["trace", "show", "{log}", "--max-rounds", "-2"], "--max-rounds must be >= 1"),
    ],
)
def test_numbers(tiny_models, log, capsys, args, message):
    if args[0] == "generate":
        args = [*args[:1], "--target", tiny_models[0], "--draft", tiny_models[1], "-p", "hi", *args[1:]]
    args = [a.format(log=log) for a in args]
    t0 = time.perf_counter()
    code, _, err = run_cli(args, capsys)
    one_line(code, err)
    assert message in err
    assert time.perf_counter() - t0 < 10  # refused up front, never a long run


# -- conflicting options ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,message",
    [
        (["generate", "--draft", "ngram:2", "--draft-gguf", "x.gguf", "-p", "hi"], "not both"),
        (["generate", "--target", "a", "--target-gguf", "b.gguf", "-p", "hi"], "not both"),
        (["generate", "--baseline", "--compare", "-p", "hi"], "exclusive"),
        (["generate", "--baseline", "--trace", "t.jsonl", "-p", "hi"], "needs speculative decoding"),
        (["sweep-k", "--measure", "--alpha", "0.9"], "analytic-only"),
        (["sweep-k", "--target", "x"], "only used with --measure"),
    ],
)
def test_conflicts(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(args, capsys)
    one_line(code, err)
    assert message in err


# -- the model's context ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    """A tiny Llama that reads only 24 positions."""
    from tests.hf_helpers import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), seed=0, eos=None)
    model.config.max_position_embeddings = 24
    folder = tmp_path_factory.mktemp("short") / "model"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def test_a_prompt_longer_than_the_context_is_refused(short_model, capsys):
    prompt = "the quick brown fox jumps over the lazy dog " * 4
    code, _, err = run_cli(["generate", "--target", short_model, "--draft", "self:layers=1", "-p", prompt], capsys)
    one_line(code, err)
    assert "reads at most 24 positions" in err


@pytest.mark.parametrize("draft", ["self:layers=1", "ngram:2"])
def test_a_budget_past_the_context_is_clamped_and_said(short_model, capsys, draft):
    args = ["generate", "--target", short_model, "--draft", draft, "-p", "hello world", "--max-new-tokens", "1000"]
    code, out, err = run_cli([*args, "--json"], capsys)
    doc = strict_json(out)
    result = doc["results"][0]
    assert code == 0 and result["finish_reason"] == "length"
    prompt_tokens = 24 - len(result["tokens"])
    assert prompt_tokens > 0 and "generating at most" in doc["notes"][0] and "24 positions" in doc["notes"][0]
    code, _, err = run_cli(args, capsys)
    assert code == 0 and "note:" in err and "24 positions" in err


# -- trace logs ---------------------------------------------------------------------------------------
HEADER = '{"type": "header", "schema": "specd.trace/v1", "manifest": {}}\n'


@pytest.mark.parametrize(
    "body,message",
    [
        (HEADER + '{"type": "proposal", "request_id": "a", "round_id": "a/0", "draft_index": 1}\n', "'reached'"),
        (HEADER + '{"type": "round", "request_id": "a", "round_id": "a/0", "k": "2"}\n', "'k'"),
        (
            HEADER + '{"type": "round", "request_id": "a", "round_id": "a/0", "k": 2, "accepted": 5, '
            '"emitted": [1], "terminal_kind": "bonus"}\n',
            "accepted 5 of k 2",
        ),
        (HEADER + '{"type": "round", "request_id": "a", "round_id": "a/0", "k": 2, "acc', "truncated or not JSON"),
        (HEADER + '{"type": "surprise"}\n', "unknown line type 'surprise'"),
        ('{"type": "header", "schema": "specd.trace/v9", "manifest": {}}\n', "schema 'specd.trace/v9'"),
        ('{"hello": "world"}\n', "not a specd trace"),
    ],
)
@pytest.mark.parametrize("command", [["trace", "show"], ["trace", "summarize"], ["sweep-k", "--trace-log"]])
def test_malformed_trace_logs(tmp_path, capsys, body, message, command):
    path = tmp_path / "bad.jsonl"
    path.write_text(body)
    code, _, err = run_cli([*command, str(path)], capsys)
    one_line(code, err)
    assert message in err


# -- terminal safety ----------------------------------------------------------------------------------
def test_control_characters_from_a_log_are_shown_escaped(log, capsys):
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    for line in lines:
        if line["type"] == "request":
            line["prompt"] = "\x1b[2J\x1b[31mred prompt\x07"
            line["tag"] = "\x1b[5mblink"
        if line["type"] == "proposal":
            line["draft_text"] = "\x1b]0;title\x07"
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    for args in (["trace", "show", str(log)], ["trace", "summarize", str(log), "--by", "tag"]):
        code, out, err = run_cli(args, capsys)
        assert code == 0, err
        assert "\x1b" not in out and "\x07" not in out  # captured output: rich adds no styling codes of its own
        assert "\\x1b" in out  # the log's escapes are shown, visibly


def test_json_outputs_are_strict(log, capsys):
    for args in (
        ["trace", "summarize", str(log), "--json"],
        ["sweep-k", "--json", "--alpha", "1.0", "--draft-cost", "0"],
        ["verify-oracle", "--vocab", "2", "--k", "1", "--samples", "50", "--no-lab", "--json"],
    ):
        code, out, err = run_cli(args, capsys)
        assert code == 0, err
        strict_json(out)


# -- the oracle never passes on a joint without mass --------------------------------------------------
def test_an_exact_check_fails_on_zero_mass():
    from specd.oracles.record import exact_check

    reference = {(0,): 0.5, (1,): 0.5}
    assert exact_check("x", reference, dict(reference), "").passed
    assert not exact_check("x", {}, {}, "").passed
    assert not exact_check("x", {(0,): 0.0, (1,): 0.0}, {(0,): 0.0, (1,): 0.0}, "").passed
    nan = float("nan")
    assert not exact_check("x", {(0,): nan}, {(0,): nan}, "").passed


# -- security: model folders -------------------------------------------------------------------------
@pytest.fixture
def hostile_folder(tmp_path):
    """A model folder whose config names its own Python module, which writes a marker when imported."""
    folder = tmp_path / "hostile"
    folder.mkdir()
    marker = tmp_path / "MARKER"
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "hostilemodel",
                "architectures": ["HostileModel"],
                "auto_map": {"AutoConfig": "hostile.HostileConfig", "AutoModelForCausalLM": "hostile.HostileModel"},
            }
        )
    )
    (folder / "hostile.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    return folder, marker


def specd_process(args, stdin="", timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "specd.cli", *args], input=stdin, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_custom_code_is_refused_without_the_flag_even_when_stdin_says_yes(hostile_folder):
    folder, marker = hostile_folder
    proc = specd_process(["generate", "--target", str(folder), "--draft", "ngram:2", "-p", "hi"], stdin="y\n" * 50)
    one_line(proc.returncode, proc.stderr)
    assert "--trust-remote-code" in proc.stderr and proc.stderr.rstrip().endswith("trust")
    assert proc.stdout == "" and not marker.exists()


def test_the_flag_is_what_lets_custom_code_run(hostile_folder, capsys):
    folder, marker = hostile_folder
    code, _, err = run_cli(
        ["generate", "--target", str(folder), "--draft", "ngram:2", "-p", "hi", "--trust-remote-code"], capsys
    )
    assert marker.exists()  # the user asked for it; the folder's (broken) code then fails in one line
    one_line(code, err)


def test_a_pickle_with_a_payload_is_refused(tmp_path, capsys):
    import torch

    from tests.hf_helpers import tiny_llama, tiny_tokenizer

    marker = tmp_path / "MARKER"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    folder = tmp_path / "pickled"
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), seed=0)
    model.config.save_pretrained(folder)
    tok.save_pretrained(folder)
    torch.save({**model.state_dict(), "extra": Payload()}, folder / "pytorch_model.bin")
    code, _, err = run_cli(["generate", "--target", str(folder), "--draft", "ngram:2", "-p", "hi"], capsys)
    one_line(code, err)
    assert "weights-only loader" in err and not marker.exists()


# -- interrupts -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def endless_model(tmp_path_factory):
    """A tiny model and tokenizer with no end-of-sequence token: a run goes on to its budget."""
    from tests.hf_helpers import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer(eos=False)
    folder = tmp_path_factory.mktemp("endless") / "model"
    tiny_llama(len(tok), seed=0, eos=None).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["importing", "generating"])
def test_ctrl_c_prints_one_line_and_exits_130(endless_model, moment):
    """While torch is being imported, and in the middle of a run (once text has streamed)."""
    args = ["generate", "--target", endless_model, "--draft", "self:layers=1", "-p", "the quick brown fox"]
    args += ["--max-new-tokens", "1000"]
    # 1 s: past Python's own start-up even on a loaded machine, well inside importing torch (seconds)
    wait = (lambda proc: time.sleep(1.0)) if moment == "importing" else (lambda proc: proc.stdout.read(1))
    code, err = interrupted(args, wait)
    assert code == 130 and err == "specd: error: interrupted\n", err


# -- --help shows the limits ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command,limits",
    [
        (["generate"], ["1..64", "(0, 1]", "finite", "--trust-remote-code", "with your permissions"]),
        (["trace", "run"], ["1..64", "--trust-remote-code"]),
        (["trace", "show"], [">= 1"]),
        (["verify-oracle"], ["20000", "100000", "200000"]),
        (["sweep-k"], ["256", "65536", "1..100"]),
    ],
)
def test_help_shows_the_limits(capsys, command, limits):
    code, out, _ = run_cli([*command, "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0 and all(limit in text for limit in limits), [x for x in limits if x not in text]
