"""A forked child's tie to its parent: it dies with it, however the parent ends; and a keeper that
ends everything a child started, whatever session or group it made.

A worker of the oracle (specd.oracles.parallel) or a sampler under test in its own process
(specd.oracles.samplers.sandbox) is forked from specd. Killed with SIGKILL, specd runs no clean-up,
and its children would live on with no one to read their results. On Linux the kernel's
parent-death signal ends them: each asks for SIGKILL when its parent ends, then checks
that the parent is still the one it was forked from (it may have ended between the fork
and the request, and then the request comes too late).

A process group does not hold what a sampler starts: ``subprocess.Popen(..., start_new_session=True)``,
or a daemon's double fork, leaves it and is reparented to init when its parent ends. So the
sampler's process runs under a keeper (``keep``): a process of specd's code only, a child
subreaper (orphans anywhere below it are reparented to it, not to init), which waits for the
sampler's process to end, or for specd to ask (SIGTERM), or for specd to die (its parent-death
signal, SIGTERM), then ends every process below it (``end_descendants``) and exits as the
sampler's process did, so specd reads how it ended from the keeper.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import NoReturn

PR_SET_PDEATHSIG = 1  # prctl(2)
PR_SET_CHILD_SUBREAPER = 36
SWEEPS = 200  # passes over the processes below a keeper, each killing what it finds (a fork bomb races)


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
        except (OSError, AttributeError):  # no C library to ask: the checks around each call still hold
            pass


def die_with_parent(parent: int, signum: int = signal.SIGKILL) -> None:
    """In a process forked from ``parent`` (its pid, read before the fork): ``signum`` when the parent
    ends (Linux); if it already has, end now. Elsewhere nothing is asked, and nothing is forked."""
    _prctl(PR_SET_PDEATHSIG, signum)
    if os.getppid() != parent:
        os._exit(1)


def keep(parent: int, child: Callable[[int], object], release: Callable[[], object] = lambda: None) -> NoReturn:
    """In a process forked from ``parent``: run ``child(keeper_pid)`` in a fork of this one and keep it
    (module docstring); ``release`` closes, after that fork, what only the child should hold. Never
    returns: once the child has ended, or SIGTERM came, every process below this one is ended and this
    one exits as the child did (killed by SIGKILL when it was asked to end first)."""
    try:
        watched = {signal.SIGTERM, signal.SIGCHLD}
        signal.pthread_sigmask(signal.SIG_BLOCK, watched)  # before the fork: no signal is missed
        os.setpgid(0, 0)  # out of specd's group: a Ctrl-C is specd's to handle, then it asks
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        die_with_parent(parent, signal.SIGTERM)
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)
                child(me)
            finally:
                os._exit(0)
        release()
        status = None
        while status is None and signal.sigwaitinfo(watched).si_signo == signal.SIGCHLD:
            status = _reap(pid)
        end_descendants(me)
        _exit_as(status)
    finally:
        os._exit(1)


def _reap(child: int) -> int | None:
    """Reap every ended child of this process: -> ``child``'s wait status once it has ended, else None."""
    status = None
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == child:
            status = code


def _exit_as(status: int | None) -> NoReturn:
    """Exit with ``status`` (a wait status: an exit code, or the signal that ended it; None: SIGKILL)."""
    if status is not None and os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    signum = os.WTERMSIG(status) if status is not None else signal.SIGKILL
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the sampler's crash, not a core of specd's code
    if signum != signal.SIGKILL:  # SIGKILL's action is the default, and cannot be set
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)


def descendants(root: int) -> list[int]:
    """The live processes below ``root`` (children, theirs, ...), read from /proc; zombies are not live."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isascii() or not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rpartition(b")")[2].split()  # after "pid (comm)": state, ppid, ...
        except OSError:  # ended while it was read
            continue
        if len(fields) > 1 and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def end_descendants(root: int) -> None:
    """SIGKILL every process below ``root`` until none lives (at most SWEEPS passes), reaping what is
    ``root``'s (this process's, as a subreaper, every orphan's)."""
    for _ in range(SWEEPS):
        found = descendants(root)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)
        if root == os.getpid():
            _reap(-1)
