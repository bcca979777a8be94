"""The specd Typer app: commands parse options, call the library and render; every
library error becomes one line on stderr and its exit code, never a traceback.

Exit codes: 0 success; 1 a check failed or the run failed; 2 bad input;
130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP).
"""

from __future__ import annotations

import errno
import importlib
import os
import sys

import typer

from specd import __version__
from specd.cli.interrupt import exit_interrupted
from specd.errors import SpecdError, one_line, shown
from specd.files import write_failure

app = typer.Typer(
    name="specd",
    help="Exact speculative decoding: run it, prove it exact, and decide when it pays.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# name -> (module, attribute): a command's module is imported only when it runs (or for the
# help that lists them all), because each pulls in what it needs (transformers, pandas) and
# those imports take seconds: `verify-oracle` need not pay for `generate`'s.
COMMANDS = {
    "generate": ("specd.cli.generate", "generate"),
    "verify-oracle": ("specd.cli.verify_oracle", "verify_oracle"),
    "sweep-k": ("specd.cli.sweep_k", "sweep_k"),
    "trace": ("specd.cli.trace", "app"),
}


def add_commands(argv: list[str]) -> None:
    """Register the command that ``argv`` names, or every command when it names none (``--help``,
    a misspelt name: the message lists them all)."""
    named = next((arg for arg in argv if not arg.startswith("-")), None)
    for name in [named] if named in COMMANDS else list(COMMANDS):
        if any(info.name == name for info in app.registered_commands + app.registered_groups):
            continue
        module, attribute = COMMANDS[name]
        command = getattr(importlib.import_module(module), attribute)
        if isinstance(command, typer.Typer):
            app.add_typer(command, name=name)
        else:
            app.command(name)(command)


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"specd {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """Exact speculative decoding."""


def fail(message: str, code: int) -> None:
    """One line on stderr (no control characters, not cut mid-sentence) and the exit code."""
    sys.stderr.write(f"specd: error: {one_line(message)}\n")
    sys.exit(code)


def _quiet_stdout() -> None:
    """Standard output cannot take what is still buffered: drop it, so exiting does not try again
    (which would print a second message)."""
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until the process ends
    except OSError:
        pass


def _click_kind(err: BaseException) -> set[str]:
    """Class names in the MRO: typer may vendor click, so match by name, not identity."""
    return {cls.__name__ for cls in type(err).__mro__}


def optional_values(argv: list[str]) -> list[str]:
    """``--ray`` takes an optional address, which Typer cannot declare: a bare ``--ray`` means "local"."""
    out = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg == "--ray" and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            out.append("local")
    return out


def run(argv: list[str] | None = None) -> None:
    argv = optional_values(sys.argv[1:] if argv is None else list(argv))
    try:
        add_commands(argv)
        # Outside standalone mode click returns the code of typer.Exit instead of raising;
        # typer turns Ctrl-C inside a command into the code 130.
        result = app(args=argv, standalone_mode=False)
        sys.stdout.flush()  # here, so a full disk behind stdout is one line, not a message at exit
    except SpecdError as err:
        fail(str(err), err.exit_code)
    except KeyboardInterrupt:
        exit_interrupted()
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(1)
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:  # a path typed too long for any file system: bad input
            fail(f"{shown(str(err.filename))}: the name is too long for a file name or path", 2)
        if err.filename is None:  # writing to standard output failed (a file's error names the file)
            _quiet_stdout()
            fail(f"cannot write to standard output: {write_failure(err)}", 1)
        fail(f"{err.filename}: {write_failure(err)}", 1)
    except Exception as err:
        kinds = _click_kind(err)
        if "NoArgsIsHelpError" in kinds:
            err.ctx and sys.stdout.write(err.ctx.get_help() + "\n")
            sys.exit(0)
        if "UsageError" in kinds or "BadParameter" in kinds:
            ctx = getattr(err, "ctx", None)
            path = ctx.command_path if ctx is not None else "specd"
            fail(f"{err.format_message()} (see '{path} --help')", 2)
        if "Exit" in kinds:
            sys.exit(getattr(err, "exit_code", 0))
        if "Abort" in kinds:
            exit_interrupted()
        if "ClickException" in kinds:
            fail(err.format_message(), getattr(err, "exit_code", 1))
        if os.environ.get("SPECD_DEBUG"):
            raise
        fail(f"internal error: {type(err).__name__}: {err} (set SPECD_DEBUG=1 for the traceback)", 1)
    if result == 130:
        exit_interrupted()
    sys.exit(result if isinstance(result, int) else 0)
