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
    assert [line["step"] for line in lines] == list(gpu_check.STEP_NAMES)
    by = {line["step"]: line for line in lines}
    assert not any("error" in line for line in lines)
    parity = by["parity"]
    assert parity["uniform_bits_equal"] and parity["decisions_equal"] and parity["race_winners_equal"] == "512/512"
    assert {run["identical_outputs"] for run in by["cli"].values() if isinstance(run, dict)} == {True}
    assert all(by["batch1_bf16"]["equal"].values()) and all(by["batch1_f32"]["equal_to_hf_greedy"].values())
    assert set(by["batch1_bf16"]["ratios"]) >= {"target_only_graphs_vs_hf_eager", "default_copy_vs_own_target_only"}
    assert by["hf_fastest"]["equal"] == {"target_only": True, "default": True}
    assert by["batches"]["batch8"]["equal"] and by["sampled"]["invariant_default_equals_target_only"]


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
