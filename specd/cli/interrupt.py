"""How specd ends on Ctrl-C: one line and exit code 130, wherever the interrupt landed."""

from __future__ import annotations

import sys
from typing import NoReturn


def exit_interrupted() -> NoReturn:
    """Ctrl-C: one line on stderr and exit code 130, wherever the interrupt landed.

    CPython remembers a KeyboardInterrupt that escaped code run by ``exec`` of a
    string, even when a caller catches it, and under ``python -m`` it then ends the
    process by SIGINT instead of the exit code (a shell sees 130 either way; a CI
    script or ``subprocess`` sees -2). Dataclasses define their methods that way, so
    Ctrl-C while torch or specd is importing lands there often. Each ``exec`` of a
    string clears that memory first, so one empty ``exec`` after the catch does.
    """
    sys.stderr.write("specd: error: interrupted\n")
    exec("")
    sys.exit(130)
