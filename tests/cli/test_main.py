import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_cli


def run(args, capsys):
    return run_cli(args, capsys)


def test_help_lists_the_four_commands(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    for name in ("generate", "verify-oracle", "sweep-k", "trace"):
        assert name in out


@pytest.mark.parametrize(
    "args",
    [
        ["verify-oracle", "--vocab", "1"],
        ["verify-oracle", "--k", "0"],
        ["verify-oracle", "--vocab", "12", "--k", "9"],
        ["verify-oracle", "--layout", "sideways"],
        ["verify-oracle", "--backend", "gpu"],
        ["verify-oracle", "--target-temperature", "-1"],
        ["verify-oracle", "--vocab", "two"],
        ["verify-oracle", "--target-bias", "nonsense"],
        ["no-such-command"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, capsys):
    code, out, err = run(args, capsys)
    assert code == 2
    assert err.startswith("specd: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_verify_oracle_json_is_one_stable_document(capsys):
    code, out, _ = run(["verify-oracle", "--vocab", "2", "--k", "2", "--samples", "300", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["passed"] is True
    assert list(doc) == ["schema", "passed", "config", "checks", "failure_lab", "sequences", "elapsed_s"]
    assert len(doc["sequences"]) == 8


def test_verify_oracle_renders_tables(capsys):
    code, out, _ = run(["verify-oracle", "--samples", "200"], capsys)
    assert code == 0
    assert "exact_joint" in out and "failure_lab" in out and "PASSED" in out


@pytest.mark.slow
def test_console_script_exit_codes_from_a_real_process():
    proc = subprocess.run(
        [sys.executable, "-m", "specd.cli", "verify-oracle", "--vocab", "1"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stderr.strip() == "specd: error: --vocab must be >= 2, got 1"


# A Ctrl-C that lands inside code run by exec() of a string (dataclasses make their methods
# that way, so importing torch or specd is full of them) once made `python -m specd.cli`
# die by SIGINT (-2) after printing its line: CPython remembered the caught interrupt.
IMPORTING = """
import sys
class InterruptImport:
    def find_spec(self, name, path, target=None):
        if name == "{module}":
            exec("raise KeyboardInterrupt")
sys.meta_path.insert(0, InterruptImport())
"""
INTERRUPT_INSIDE_EXEC = {
    "importing the app": IMPORTING.format(module="specd.cli.app"),
    "importing the command": IMPORTING.format(module="specd.cli.verify_oracle"),
    "running": """
import specd.cli.verify_oracle
def interrupt():
    exec("raise KeyboardInterrupt")
specd.cli.verify_oracle.verify_oracle = interrupt
""",
}


@pytest.mark.parametrize("moment", list(INTERRUPT_INSIDE_EXEC))
def test_ctrl_c_inside_exec_still_exits_130_under_python_m(tmp_path, moment):
    source = INTERRUPT_INSIDE_EXEC[moment] + "from specd.cli import main\nmain(['verify-oracle'])\n"
    (tmp_path / "interrupted_entry.py").write_text(source)
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), repo])}
    proc = subprocess.run(
        [sys.executable, "-m", "interrupted_entry"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert (proc.returncode, proc.stderr) == (130, "specd: error: interrupted\n")


def test_a_command_imports_only_what_it_needs_and_help_lists_every_command(capsys):
    probe = (
        "import sys\nfrom specd.cli.app import add_commands, app\nadd_commands(['verify-oracle', '--vocab', '2'])\n"
        "print(sorted(c.name for c in app.registered_commands), 'pandas' in sys.modules,"
        " 'transformers' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.stdout.split() == ["['verify-oracle']", "False", "False"], proc.stderr
    # in this process: whatever commands earlier tests registered, help and a typo name them all
    from specd.cli.app import COMMANDS

    code, listed, _ = run_cli(["--help"], capsys)
    assert code == 0 and all(f"  {name} " in listed for name in COMMANDS)
    code, _, err = run_cli(["genrate"], capsys)
    assert code == 2 and "Did you mean 'generate'?" in err and err.count("\n") == 1
