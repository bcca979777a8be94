"""A sampler run cannot pass by dying (issue 50): the sampler under test runs in a process of its own
(specd.oracles.samplers.sandbox), so one that exits the process, crashes, forks, never returns, prints, or
returns what cannot be read is a failed check naming what it did, exit 1, and exactly one report on
standard output; never an internal error, never exit 0 with an empty report."""

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import specd
from specd.errors import SamplerUnloadable
from specd.oracles.samplers.sandbox import _request_bytes, can_fork
from tests.helpers import run_cli

pytestmark = pytest.mark.skipif(not can_fork(), reason="the sampler's own process is forked on Linux")

HOSTILE = textwrap.dedent(
    """
    import os
    import signal
    import sys
    import time

    import torch

    from specd.oracles.samplers.protocol import rule_sampler

    correct = rule_sampler()


    def exits(*args):
        os._exit(0)


    def crashes(*args):
        os.kill(os.getpid(), signal.SIGKILL)


    def forks(*args):
        if os.fork() == 0:  # the copy returns too, and would print a second report
            time.sleep(0.2)
        return correct(*args)


    def hangs(*args):
        while True:
            time.sleep(1)


    def hangs_without_drafts(p, q, drafts, k_lens, accept_u, terminal_u):
        while drafts.shape[1] == 0:
            time.sleep(1)
        return correct(p, q, drafts, k_lens, accept_u, terminal_u)


    def complex_counts(*args):
        accepted, terminal = correct(*args)
        return torch.as_tensor(accepted).to(torch.complex64), terminal


    def complex_rows(p, q, drafts, k_lens, accept_u, terminal_u):
        accepted, _ = correct(p, q, drafts, k_lens, accept_u, terminal_u)
        return accepted, p[:, 0].to(torch.complex128)


    def meta(*args):
        accepted, terminal = correct(*args)
        return torch.as_tensor(accepted).to("meta"), terminal


    class Hostile:
        def __getattr__(self, name):
            raise RuntimeError(f"no {name} for you")

        def __len__(self):
            raise RuntimeError("no length either")


    def raising_attributes(*args):
        return Hostile()


    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("not even its message")


    def raises_unprintable(*args):
        raise Unprintable()


    def prints_and_forks(*args):
        print("a line of the sampler's own")
        sys.stdout.flush()
        return forks(*args)
    """
)


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    (tmp_path / "hostile_samplers.py").write_text(HOSTILE)
    (tmp_path / "exits_on_import.py").write_text("import os\nos._exit(3)\n")
    monkeypatch.chdir(tmp_path)
    yield "hostile_samplers"
    for name in ("hostile_samplers", "exits_on_import"):
        sys.modules.pop(name, None)


CASES = [
    # (sampler, extra flags, the failed check, its finding, words of its detail)
    ("exits", [], "ordinary_round", "exited", "ended its process (exit status 0) instead of returning"),
    ("crashes", [], "ordinary_round", "crashed", "crashed its process (SIGKILL) instead of returning"),
    ("forks", [], "ordinary_round", "forked", "forked a process"),
    ("hangs", ["--sampler-timeout", "1"], "ordinary_round", "timed_out", "did not return within 1 s"),
    ("hangs_without_drafts", ["--sampler-timeout", "1"], "k_zero_row", "timed_out", "did not return within 1 s"),
    ("complex_counts", [], "ordinary_round", "returned_complex", "accepted counts of dtype torch.complex64"),
    ("complex_rows", [], "ordinary_round", "returned_complex", "a terminal of dtype torch.complex128"),
    ("meta", [], "ordinary_round", "returned_meta_tensor", "accepted counts on the meta device"),
    ("raising_attributes", [], "ordinary_round", "returned_unreadable", "RuntimeError: no accepted for you"),
    ("raises_unprintable", [], "ordinary_round", "raised", "Unprintable: (its message cannot be read)"),
]


@pytest.mark.parametrize("name,flags,check,finding,words", CASES, ids=[c[0] for c in CASES])
def test_a_sampler_that_dies_hangs_or_returns_nonsense_is_a_failed_check(
    hostile, capsys, name, flags, check, finding, words
):
    code, out, err = run_cli(["verify-oracle", "--sampler", f"{hostile}:{name}", "--json", *flags], capsys)
    assert code == 1 and "internal error" not in err, err
    doc = json.loads(out)  # one report, and nothing else, on standard output
    assert not doc["passed"] and finding in doc["findings"] and doc["sampler"]["process"] == "its own"
    failed = [c for c in doc["checks"] if c["passed"] is False]
    assert [c["name"] for c in failed] == [check] and words in failed[0]["detail"], failed
    assert all(c["passed"] is not False for c in doc["checks"][:-1])  # the checks before it stand


def test_the_tables_say_the_same_and_the_run_takes_its_time_limit(hostile, capsys):
    t0 = time.perf_counter()
    code, out, err = run_cli(["verify-oracle", "--sampler", f"{hostile}:hangs", "--sampler-timeout", "0.5"], capsys)
    assert code == 1 and "FAILED; found: timed_out" in out and "Traceback" not in out + err
    assert time.perf_counter() - t0 < 30


def test_a_sampler_that_ends_the_process_on_import_is_one_line_exit_2(hostile, capsys):
    code, out, err = run_cli(["verify-oracle", "--sampler", "exits_on_import:sample"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "cannot load the sampler: sampler exits_on_import:sample ended its process (exit status 3) while" in err


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--sampler", "specd", "--sampler-timeout", "0"], "--sampler-timeout must be a number of seconds > 0"),
        (["--sampler", "specd", "--sampler-timeout", "nan"], "--sampler-timeout must be a number of seconds > 0"),
        (["--sampler-timeout", "5"], "--sampler-timeout limits the calls of a --sampler; there is none"),
    ],
)
def test_a_bad_time_limit_is_one_line_exit_2(capsys, flags, message):
    code, out, err = run_cli(["verify-oracle", *flags], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err


def test_one_report_on_standard_output_whatever_the_sampler_prints_or_forks(hostile):
    """The real file descriptors: what the sampler prints goes to standard error, its fork's copy never
    writes a report, and the exit code is the report's."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.getcwd()])}
    run = subprocess.run(
        [sys.executable, "-m", "specd.cli", "verify-oracle", "--sampler", f"{hostile}:prints_and_forks", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr
    assert json.loads(run.stdout)["findings"] == ["forked"]  # exactly one JSON document
    assert run.stdout.count('"schema"') == 1 and "a line" not in run.stdout
    assert "a line of the sampler's own" in run.stderr


def test_from_python_a_sampler_that_ends_its_process_is_a_report_and_this_process_goes_on():
    report = specd.check_sampler(lambda *args: os._exit(7), vocab=2, k=1)
    assert not report.passed and report.findings == ("exited",)
    assert "exit status 7" in report.failed[0].detail
    from specd.testing import assert_sampler_exact

    with pytest.raises(AssertionError, match="found: timed_out"):
        assert_sampler_exact(lambda *args: time.sleep(60), vocab=2, k=1, timeout=0.5)


def test_a_class_that_ends_the_process_when_built_cannot_be_loaded():
    class Exits:
        def __init__(self):
            os._exit(0)

    with pytest.raises(SamplerUnloadable, match="ended its process .exit status 0. while it was loaded"):
        specd.check_sampler(Exits)


TREE_HOSTILE = textwrap.dedent(
    """
    import os
    import time

    from specd.oracles.samplers.tree_protocol import tree_shipped

    correct = tree_shipped()["specd"][0]()


    def exits(*args):
        os._exit(0)


    def hangs_on_branches(tokens, parents, depths, p, q, drawn, u):
        while len(tokens) > 1:
            time.sleep(1)
        return correct(tokens, parents, depths, p, q, drawn, u)


    def forks(*args):
        if os.fork() == 0:
            time.sleep(0.2)
        return correct(*args)
    """
)


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize(
    "name, flags, finding, words",
    [
        ("exits", [], "exited", "ended its process (exit status 0) instead of returning"),
        ("hangs_on_branches", ["--sampler-timeout", "1"], "timed_out", "did not return within 1 s"),
        ("forks", [], "forked", "forked a process"),
    ],
)
def test_a_tree_sampler_that_dies_or_hangs_is_a_failed_check_and_one_report(
    tmp_path, monkeypatch, capsys, name, flags, finding, words, jobs
):
    (tmp_path / "hostile_trees.py").write_text(TREE_HOSTILE)
    monkeypatch.chdir(tmp_path)
    try:
        args = ["verify-oracle", "--sampler", f"hostile_trees:{name}", "--tree", "2", "--vocab", "2", "--json", *flags]
        args += ["--jobs", jobs]
        code, out, err = run_cli(args, capsys)
    finally:
        sys.modules.pop("hostile_trees", None)
    assert code == 1 and "internal error" not in err, err
    doc = json.loads(out)
    assert not doc["passed"] and finding in doc["findings"] and doc["sampler"]["process"] == "its own"
    assert words in [c for c in doc["checks"] if c["passed"] is False][-1]["detail"]


TREE_PICKY = textwrap.dedent(
    """
    from specd.oracles.samplers.tree_protocol import tree_shipped

    correct = tree_shipped()["specd"][0]()
    llamacpp = tree_shipped()["llamacpp"][0]()


    def refuses_iid(tokens, parents, depths, p, q, drawn, u):
        # refuses some of the rounds, each with its own message: the report names the first, as a serial run's
        if drawn == "iid" and len(tokens) and int(tokens[0]) == 2:
            raise ValueError(f"refused the tree {[int(t) for t in tokens]}")
        return correct(tokens, parents, depths, p, q, drawn, u)
    """
)


@pytest.mark.parametrize("sampler", ["llamacpp", "picky_trees:refuses_iid", "picky_trees:llamacpp"])
def test_a_tree_samplers_report_is_the_same_on_one_process_or_several(tmp_path, monkeypatch, capsys, sampler):
    (tmp_path / "picky_trees.py").write_text(TREE_PICKY)
    monkeypatch.chdir(tmp_path)
    docs = []
    try:
        for jobs in ("1", "2"):
            args = ["verify-oracle", "--sampler", sampler, "--tree", "2,1", "--vocab", "3", "--json", "--jobs", jobs]
            args.append("--exact-size")  # eight tables split over the processes; the covered sizes only repeat that
            code, out, err = run_cli(args, capsys)
            assert code in (0, 1) and not err, err
            docs.append(json.loads(out))
            docs[-1].pop("elapsed_s")
    finally:
        sys.modules.pop("picky_trees", None)
    assert docs[0] == docs[1]
    assert docs[0]["sampler"]["process"] == "its own"
    if sampler.endswith("refuses_iid"):
        assert "refused the tree [2, " in [c for c in docs[0]["checks"] if c["name"] == "exact_joint_iid"][0]["detail"]


def test_jobs_with_a_chain_sampler_is_one_line_exit_2(capsys):
    code, _, err = run_cli(["verify-oracle", "--sampler", "specd", "--jobs", "2"], capsys)
    assert code == 2 and err.startswith("specd: error: --jobs with --sampler shares a tree sampler's rounds")


# -- issue 61: what a sampler starts ends with it, whatever session it made ------------------------------
ESCAPING = textwrap.dedent(
    """
    import os
    import subprocess
    import sys
    import time

    from specd.oracles.samplers.protocol import rule_sampler
    from specd.oracles.samplers.tree_protocol import tree_shipped

    MARK = os.environ["SPECD_TEST_MARK"]  # on each process it starts, to find them by
    tree_correct = tree_shipped()["specd"][0]()
    chain_correct = rule_sampler()


    def sleeper():
        return [sys.executable, "-c", "import time; time.sleep(300)", MARK]


    def new_session(*args):
        subprocess.Popen(sleeper(), start_new_session=True)
        return tree_correct(*args)


    def daemon(*args):
        if os.fork() == 0:  # a daemon's double fork: the grandchild in a session of its own, orphaned
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, sleeper())
            os._exit(0)
        return tree_correct(*args)


    def chain_new_session(*args):
        subprocess.Popen(sleeper(), start_new_session=True)
        return chain_correct(*args)


    def new_session_then_hangs(*args):
        subprocess.Popen(sleeper(), start_new_session=True)
        time.sleep(300)
    """
)


def marked(mark: str) -> list[int]:
    """The live processes whose command line holds ``mark`` (those the escaping samplers started)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mark.encode() in (entry / "cmdline").read_bytes():
                if (entry / "stat").read_bytes().rpartition(b")")[2].split()[0] != b"Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture
def escaping(tmp_path, monkeypatch):
    mark = f"escape-{os.getpid()}-{time.monotonic_ns()}"
    (tmp_path / "escaping.py").write_text(ESCAPING)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECD_TEST_MARK", mark)
    yield mark
    sys.modules.pop("escaping", None)
    for pid in marked(mark):  # a failed test leaves nothing running either
        os.kill(pid, 9)


def settled(mark: str, seconds: float = 2.0) -> list[int]:
    """The marked processes still alive after up to ``seconds`` (a killed process takes a moment to go)."""
    until = time.monotonic() + seconds
    while (left := marked(mark)) and time.monotonic() < until:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize(
    "sampler, tree, jobs",
    [("new_session", "2", "1"), ("new_session", "2", "2"), ("daemon", "2", "2"), ("chain_new_session", None, None)],
)
def test_every_process_a_sampler_starts_ends_with_the_run_whatever_session_it_made(
    escaping, capsys, sampler, tree, jobs
):
    args = ["verify-oracle", "--sampler", f"escaping:{sampler}", "--vocab", "2", "--json"]
    args += ["--tree", tree, "--jobs", jobs] if tree else ["--k", "1"]
    code, out, err = run_cli(args, capsys)
    assert code == 1 and json.loads(out)["findings"] == ["forked"], err  # the verdict: it forked
    assert settled(escaping) == []


def test_a_sampler_hanging_in_a_new_session_ends_when_specd_is_killed(escaping):
    """SIGKILL runs no clean-up in specd: the sampler's keeper, told by the kernel, ends what it started."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.getcwd()])}
    args = ["verify-oracle", "--sampler", "escaping:new_session_then_hangs", "--tree", "2", "--vocab", "2"]
    run = subprocess.Popen(
        [sys.executable, "-m", "specd.cli", *args, "--jobs", "2"], env=env, stdout=subprocess.DEVNULL
    )
    try:
        until = time.monotonic() + 60
        while len(marked(escaping)) < 2 and time.monotonic() < until:  # each of the two processes started one
            time.sleep(0.1)
        assert len(marked(escaping)) == 2
    finally:
        run.kill()
        run.wait()
    assert settled(escaping) == []


def test_a_requests_tensors_reach_the_sampler_as_they_were():
    """Sent as numpy arrays where numpy has the dtype (bfloat16: torch's own pickling): each tensor comes
    back with its dtype, shape and values, a view as its own values only, a negated view resolved."""
    p = torch.rand(2, 4, 3, dtype=torch.float64)
    sent = (p[1:, 1:], torch.tensor([[1, -1]]), torch.rand(3, dtype=torch.bfloat16), torch.tensor(0.5), -p[0], p[:0])
    got = pickle.loads(_request_bytes(sent))
    assert len(got) == len(sent)
    for a, b in zip(sent, got):
        assert type(b) is torch.Tensor and b.dtype == a.dtype and b.shape == a.shape and torch.equal(a, b)


def _in_inference_mode(sampler):
    """``sampler``, refusing to run outside torch's inference mode."""

    def checked(*args):
        if not torch.is_inference_mode_enabled():
            raise RuntimeError("called outside inference mode")
        return sampler(*args)

    return checked


def test_a_sampler_runs_in_inference_mode_in_its_process_and_this_one_leaves_it_after():
    """The oracle's run is in inference mode (specd.oracles.report.oracle_running), in the process a
    sampler runs in too: chains and trees."""
    from specd.oracles.samplers.protocol import rule_sampler
    from specd.oracles.samplers.tree_protocol import specd_tree_sampler

    chain = specd.check_sampler(_in_inference_mode(rule_sampler()), vocab=2, k=1, exact_size=True)
    tree = specd.check_sampler(_in_inference_mode(specd_tree_sampler), tree="1", vocab=2, exact_size=True)
    assert chain.passed and tree.passed, (chain.findings, tree.findings)
    assert not torch.is_inference_mode_enabled()


def test_a_rounds_time_limit_runs_from_when_its_process_turns_to_it():
    """The round after the one a process works on waits in its pipe, sent ahead: its time limit starts
    when the process turns to it, not when it was sent. Rounds of 0.6 of the limit each all pass; a
    round past the limit still fails as timed_out."""
    from dataclasses import replace

    from specd.core.tree_shape import parse_tree
    from specd.errors import SamplerAborted
    from specd.oracles.samplers.sandbox import sampler_session
    from specd.oracles.samplers.tree_rounds import draft_trees
    from tests.oracles.slips import exact_floats

    def slow(tokens, parents, depths, p, q, drawn, u):
        time.sleep(0.6 if len(tokens) else 1.5)
        return exact_floats(tokens, parents, depths, p, q, drawn, u)

    rows = lambda _: [0.2, 0.3, 0.5]  # noqa: E731
    rounds = [replace(r, uniforms_at=0.5) for r in draft_trees(parse_tree("2"), "sampled", rows, rows, ())[:3]]
    with sampler_session(slow, timeout=1.0, tree=True) as sampler:
        laws = sampler.round_laws(rounds)
    assert len(laws) == 3 and all(sum(law.values()) == pytest.approx(1.0) for law, *_ in laws)
    empty = replace(rounds[0], tree=type(rounds[0].tree)((), ()))  # no nodes: the slow branch, 1.5 s
    with sampler_session(slow, timeout=1.0, tree=True) as sampler, pytest.raises(SamplerAborted) as err:
        sampler.round_laws([rounds[0], empty])
    assert err.value.finding == "timed_out"


def test_calls_each_alone_are_sent_ahead_answered_in_order_and_a_failure_is_the_first():
    """A chain sampler's calls of one row each (a request decoding alone) go to its process one behind the
    other: the answers come back in the calls' order, each call's time limit runs from when the process
    turns to it (calls of 0.6 of the limit all pass), and where calls raise, the first one's error is raised."""
    from specd.errors import SamplerFailed
    from specd.oracles.samplers.checks import Call, call_tensors
    from specd.oracles.samplers.sandbox import sampler_session
    from tests.oracles.slips import chain_exact

    def slow(p, q, drafts, k_lens, accept_u, terminal_u):
        time.sleep(0.6 if terminal_u[0] < 0.9 else 0)
        if terminal_u[0] >= 0.95:
            raise ValueError(f"at {terminal_u[0].item()}")
        return chain_exact(p, q, drafts, k_lens, accept_u, terminal_u)

    p, q = [[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]], [[0.2, 0.5, 0.3]]
    calls = [call_tensors([Call(p, q, (1,), (0.1,), t, 1.0, 0, 0, [])]) for t in (0.1, 0.3, 0.8)]
    with sampler_session(slow, timeout=1.0) as sampler:
        results = sampler.each(calls)
        assert [(r.accepted, r.terminal) for r in results] == [([1], [0]), ([1], [1]), ([1], [2])]  # the bonus
        late = [call_tensors([Call(p, q, (1,), (0.1,), t, 1.0, 0, 0, [])]) for t in (0.5, 0.96, 0.99)]
        with pytest.raises(SamplerFailed, match="at 0.96"):
            sampler.each(late)
        assert sampler.each(calls[:1])[0].terminal == [0]  # still answering
