"""A forked child's tie to its parent: it dies with it, however the parent ends.

A worker of the oracle (specd.oracles.parallel) or a sampler under test in its own process
(specd.oracles.sandbox) is forked from specd. Killed with SIGKILL, specd runs no clean-up,
and its children would live on with no one to read their results. On Linux the kernel's
parent-death signal ends them: each asks for SIGKILL when its parent ends, then checks
that the parent is still the one it was forked from (it may have ended between the fork
and the request, and then the request comes too late).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_parent(parent: int) -> None:
    """In a process forked from ``parent`` (its pid, read before the fork): SIGKILL when the parent
    ends (Linux); if it already has, end now. Elsewhere nothing is asked, and nothing is forked."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no C library to ask: the check below still holds
            pass
    if os.getppid() != parent:
        os._exit(1)
