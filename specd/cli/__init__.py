"""The command-line interface. ``main`` is the console script's entry point.

This module imports nothing heavy: importing torch and transformers takes
seconds, and Ctrl-C during them must still end with one line and exit code 130,
so the app is imported inside ``main``, under the handler (SIGTERM and SIGHUP are
handled the same way, see ``interrupt``) (the one import in a
function in the package that is not of an optional library).
"""

from __future__ import annotations

from specd.cli.interrupt import exit_interrupted, handle_stop_signals


def main(argv: list[str] | None = None) -> None:
    handle_stop_signals()
    try:
        from specd.cli.app import run
    except KeyboardInterrupt:
        exit_interrupted()
    run(argv)
