"""benchmarks/gpu_check.py runs as written: its CPU dry run (tiny sizes) completes every step, each
line written as the step ends, and a step past its limit is recorded and the run goes on."""

import importlib.util
import json
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dry_run_completes_every_step(gpu_check, tmp_path):
    assert gpu_check.main(["--dry-run", "--out-dir", str(tmp_path)]) == 0
    lines = [json.loads(line) for line in (tmp_path / "gpu_check.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [
        "device",
        "parity",
        "pytest_gpu",
        "cli",
        "llama_f32_self_bf16",
        "bf16_suffix_copy",
        "profile_batch1",
    ]
    parity, cli, llama = lines[1], lines[3], lines[4]
    assert {run["identical_outputs"] for run in cli.values() if isinstance(run, dict)} == {True}
    assert parity["uniform_bits_equal"] and parity["decisions_equal"] and parity["race_winners_equal"] == "512/512"
    assert all(llama["equal_to_hf_greedy"].values()) and llama["batch8"]["equal"]
    assert llama["reads_per_round"]["k4"] <= 16
    assert lines[6]["specd_target_only"]["aten_ops_per_token"] > 0 and "error" not in lines[6]


def test_a_step_past_its_limit_is_a_result_and_the_next_step_runs(gpu_check, tmp_path):
    results = gpu_check.Results(tmp_path)
    with pytest.raises(gpu_check.OutOfTime):
        with gpu_check.time_limit(0.2):
            time.sleep(2)
    results.add({"step": "slow", "error": "OutOfTime"})
    results.add({"step": "next", "ok": True})
    assert [json.loads(x)["step"] for x in (tmp_path / "gpu_check.jsonl").read_text().splitlines()] == ["slow", "next"]


def test_only_runs_the_steps_named_and_refuses_a_name_it_lacks(gpu_check, tmp_path):
    assert gpu_check.main(["--dry-run", "--out-dir", str(tmp_path), "--only", "device,parity"]) == 0
    lines = [json.loads(line) for line in (tmp_path / "gpu_check.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == ["device", "parity"]
    with pytest.raises(SystemExit) as stop:
        gpu_check.main(["--dry-run", "--out-dir", str(tmp_path / "b"), "--only", "clii"])
    assert stop.value.code == 2 and not (tmp_path / "b").exists()
