import json
import subprocess
import sys

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
