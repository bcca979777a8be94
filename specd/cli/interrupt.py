"""How specd ends when it is stopped: one line, and 128 + the signal's number as the exit code.

Ctrl-C (SIGINT) exits 130; SIGTERM (``kill``, ``timeout``, systemd, ``docker stop``, batch
schedulers) 143; SIGHUP (the terminal closed) 129. All three stop a run the same way: the
signal becomes a KeyboardInterrupt where the program is (never inside a finalizer, which would
drop it), so every ``finally`` runs and the requests that finished are written before specd exits.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

STOPPING_SIGNALS = {signal.SIGTERM: "terminated (SIGTERM)", signal.SIGHUP: "hung up (SIGHUP)"}
_received: list[int] = []  # the signal that stopped the run, if not Ctrl-C


RETRY_S = 0.005  # how soon a stop that landed in a finalizer is raised again


def _stop(signum, frame) -> None:
    if _received:  # a second signal while the first one's clean-up runs: let that finish
        return
    _received.append(signum)
    _raise_where_it_counts(frame)


def _raise_where_it_counts(frame) -> None:
    """Raise the stop as a KeyboardInterrupt where the program is, unless it is inside a finalizer
    (a ``__del__`` the garbage collector runs, or weakref's machinery): CPython prints an exception
    raised there, drops it, and the run would go on to its end. There the stop is raised again a few
    milliseconds later (SIGALRM), once the finalizer has returned."""
    if _in_finalizer(frame):
        signal.signal(signal.SIGALRM, lambda _signum, later: _raise_where_it_counts(later))
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    raise KeyboardInterrupt


def _in_finalizer(frame) -> bool:
    """Whether ``frame`` runs inside a finalizer, where a raised exception is printed and dropped."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code.co_filename.endswith(f"{os.sep}weakref.py"):
            return True
        frame = frame.f_back
    return False


def _interrupt(signum, frame) -> None:
    """Ctrl-C: Python's own handler (every press raises), but never lost in a finalizer."""
    _raise_where_it_counts(frame)


def handle_stop_signals() -> None:
    """SIGTERM and SIGHUP stop specd as Ctrl-C does, and none of the three is lost in a finalizer
    (only the main thread can install handlers)."""
    for signum in STOPPING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _stop)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)


def exit_interrupted() -> NoReturn:
    """Ctrl-C (or SIGTERM, SIGHUP): one line on stderr and 128 + the signal, wherever it landed.

    CPython remembers a KeyboardInterrupt that escaped code run by ``exec`` of a
    string, even when a caller catches it, and under ``python -m`` it then ends the
    process by SIGINT instead of the exit code (a shell sees 130 either way; a CI
    script or ``subprocess`` sees -2). Dataclasses define their methods that way, so
    Ctrl-C while torch or specd is importing lands there often. Each ``exec`` of a
    string clears that memory first, so one empty ``exec`` after the catch does.
    """
    signum = _received[0] if _received else signal.SIGINT
    sys.stderr.write(f"specd: error: {STOPPING_SIGNALS.get(signum, 'interrupted')}\n")
    exec("")
    sys.exit(128 + signum)
