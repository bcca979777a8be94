"""The command-line interface. ``main`` is the console script's entry point.

This module imports nothing heavy: importing torch and transformers takes
seconds, and Ctrl-C during them must still end with one line and exit code 130.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    try:
        from specd.cli.app import run
    except KeyboardInterrupt:
        sys.stderr.write("specd: error: interrupted\n")
        sys.exit(130)
    run(argv)
