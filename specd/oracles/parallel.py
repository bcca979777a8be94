"""The oracle's independent parts on several processes: the same report, sooner.

Every check and every failure-lab family reads only the fixture it is given, so the parts can
run in any order and anywhere. ``run_parts`` runs them on forked copies of this process (they
inherit the fixture: nothing is pickled but the results) and returns the results in the order
the parts were given, so the report is byte for byte a serial run's (its elapsed time aside).

Forking is used only where it is safe and available: Linux, a process that has not initialized
CUDA, more than one usable core, and more than one part. Each worker runs torch on one thread
(the parts' tensors are a few rows of a tiny vocabulary; one thread per process is also what
keeps a forked process clear of the parent's OpenMP pool). A part that fails in a worker, or a
worker that dies, is run again here, so its error is raised with its own type and traceback, as
a serial run raises it. A stopped run (Ctrl-C, SIGTERM) ends the workers at once, and a parent
killed outright (SIGKILL) takes them with it (specd.oracles.lifeline).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import TypeVar

import torch

from specd.errors import UsageError
from specd.oracles.lifeline import die_with_parent

T = TypeVar("T")
_parts: Sequence[Callable[[], object]] = ()  # a worker's parts, inherited at fork


DEFAULT_JOBS_CAP = 4  # past four, the longest part (the Monte Carlo, or the auto-K proof) bounds a run
# Each process is a fork of specd (a tree sampler's, two: the sampler's and its keeper): a --jobs past any
# machine's cores is refused before the first fork, not met with thousands of them.
MAX_JOBS = 256


def usable_cores() -> int:
    """Processes the oracle uses by default: the cores this process may run on, at most
    DEFAULT_JOBS_CAP (1 where it does not fork: the parts then run in this process)."""
    if not sys.platform.startswith("linux"):
        return 1
    return min(len(os.sched_getaffinity(0)), DEFAULT_JOBS_CAP)


def processes(jobs: int | None) -> int:
    """``--jobs`` as given (1..MAX_JOBS, else UsageError), or ``usable_cores`` when not given."""
    if jobs is None:
        return usable_cores()
    if not 1 <= jobs <= MAX_JOBS:
        raise UsageError(f"--jobs must be in 1..{MAX_JOBS}, got {jobs}")
    return jobs


def run_parts(parts: Sequence[Callable[[], T]], jobs: int) -> list[T]:
    """Each part's result, in the order given, on up to ``jobs`` processes (1: here, in order). Parts
    start in the order given: put the longest first."""
    # CUDA does not survive a fork: a process that initialized it keeps the parts here
    forks = sys.platform.startswith("linux") and not torch.cuda.is_initialized()
    workers = min(jobs, len(parts)) if forks else 1
    if workers <= 1:
        return [part() for part in parts]
    pool = ProcessPoolExecutor(workers, get_context("fork"), initializer=_receive, initargs=(parts, os.getpid()))
    try:
        outcomes = list(pool.map(_run, range(len(parts))))
    except BrokenProcessPool:  # a worker died (killed, out of memory): do the work here
        pool.shutdown()
        return [part() for part in parts]
    except BaseException:  # stopped (Ctrl-C, SIGTERM) or failed: the workers stop now, not after their queue
        _terminate(pool)
        raise
    pool.shutdown()
    return [result if ok else parts[i]() for i, (ok, result) in enumerate(outcomes)]  # type: ignore[misc]


def _terminate(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers at once (SIGTERM; a signal sent to specd alone never reaches them)."""
    processes = getattr(pool, "_processes", None) or {}  # the executor's own table: pid -> process
    for process in list(processes.values()):
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def _receive(parts: Sequence[Callable[[], object]], parent: int) -> None:
    """A worker's start: it dies with its parent (specd.oracles.lifeline: killed with SIGKILL, the
    parent cannot end it), its parts, one torch thread, and the signals' defaults: Ctrl-C reaches
    the whole process group and the parent alone answers it (it ends the workers), SIGTERM just
    ends one."""
    global _parts
    die_with_parent(parent)
    _parts = parts
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _run(i: int) -> tuple[bool, object]:
    """(True, part i's result), or (False, None) when it raised: the parent runs it again to raise.
    An interrupt is not caught: it ends the worker, as it ends the parent."""
    try:
        return True, _parts[i]()
    except Exception:
        return False, None
