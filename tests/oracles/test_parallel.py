import os
import signal
import sys
import time

import pytest

from specd.oracles.fixture import OracleConfig
from specd.oracles.parallel import DEFAULT_JOBS_CAP, run_parts, usable_cores
from specd.oracles.report import run_oracle
from tests.helpers import interrupted

forks = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parts run on forked processes on Linux")


def _without_time(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "elapsed_s"}


@forks
def test_the_report_on_two_processes_is_the_serial_report():
    cfg = OracleConfig(vocab=2, k=2, samples=200, rule="all", repetition_penalty=1.3)  # every part, every lab
    assert _without_time(run_oracle(cfg, jobs=2)) == _without_time(run_oracle(cfg, jobs=1))


def _pid_and(value):
    return lambda: (os.getpid(), value)


@forks
def test_parts_run_on_other_processes_and_come_back_in_order():
    results = run_parts([_pid_and(i) for i in range(6)], jobs=2)
    assert [value for _, value in results] == list(range(6))
    pids = {pid for pid, _ in results}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2


class Refused(Exception):
    pass


def _raises():
    raise Refused("part 1 says no")


@forks
def test_a_part_that_fails_in_a_worker_fails_here_with_its_own_type():
    with pytest.raises(Refused, match="part 1 says no"):
        run_parts([lambda: 1, _raises, lambda: 3], jobs=2)


def test_one_job_runs_every_part_here_in_order():
    assert run_parts([_pid_and(i) for i in range(3)], jobs=1) == [(os.getpid(), i) for i in range(3)]
    assert usable_cores() >= 1


@forks
def test_a_worker_that_dies_leaves_the_work_to_this_process():
    here = os.getpid()

    def dies_in_a_worker():
        if os.getpid() != here:
            os._exit(3)  # killed, out of memory: no result comes back
        return "done here"

    assert run_parts([lambda: 1, dies_in_a_worker, lambda: 3], jobs=2) == [1, "done here", 3]


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


@forks
@pytest.mark.slow
def test_a_stopped_run_ends_its_workers_with_one_line():
    workers: list[int] = []

    def once_the_workers_run(proc):
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and len(workers) < 2:
            workers[:] = _children(proc.pid)
            time.sleep(0.05)
        time.sleep(0.5)  # at work on their parts

    code, err = interrupted(
        ["verify-oracle", "--samples", "200000", "--jobs", "2", "--json"], once_the_workers_run, signal.SIGTERM
    )
    assert len(workers) == 2
    assert code == 143 and err == "specd: error: terminated (SIGTERM)\n", err
    for pid in workers:  # gone, not left running their queue
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_default_is_the_usable_cores_at_most_the_cap(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert usable_cores() == DEFAULT_JOBS_CAP
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert usable_cores() == 1
    monkeypatch.setattr(sys, "platform", "darwin")  # no fork there: the parts run in this process
    assert usable_cores() == 1


def _alive(pid: int) -> bool:
    """Running (a zombie, dead and waiting to be reaped, is not)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@forks
def test_workers_die_with_a_parent_killed_outright():
    """Issue 50: verify-oracle's parent killed with SIGKILL (no clean-up runs) left its forked workers
    running with no end. Each worker asks for the parent-death signal: none is left after 2 s."""
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, "-m", "specd.cli", "verify-oracle", "--vocab", "4", "--k", "4", "--jobs", "4", "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: list[int] = []
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and len(workers) < 2:
        workers = _children(proc.pid)
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert len(workers) >= 2, "the workers never started"
    time.sleep(2)
    left = [pid for pid in workers if _alive(pid)]
    for pid in left:  # not left behind by a failing test either
        os.kill(pid, signal.SIGKILL)
    assert left == []
