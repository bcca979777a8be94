"""How specd ends when it is stopped: one line, and 128 + the signal's number as the exit code.

Ctrl-C (SIGINT) exits 130; SIGTERM (``kill``, ``timeout``, systemd, ``docker stop``, batch
schedulers) 143; SIGHUP (the terminal closed) 129. All three stop a run the same way: the
signal becomes a KeyboardInterrupt where the program is, so every ``finally`` runs and the
requests that finished are written before specd exits.
"""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

STOPPING_SIGNALS = {signal.SIGTERM: "terminated (SIGTERM)", signal.SIGHUP: "hung up (SIGHUP)"}
_received: list[int] = []  # the signal that stopped the run, if not Ctrl-C


def _stop(signum, frame) -> None:
    if _received:  # a second signal while the first one's clean-up runs: let that finish
        return
    _received.append(signum)
    raise KeyboardInterrupt


def handle_stop_signals() -> None:
    """SIGTERM and SIGHUP stop specd as Ctrl-C does (only the main thread can install handlers)."""
    for signum in STOPPING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _stop)


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
