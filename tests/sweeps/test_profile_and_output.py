import csv
import json
import os

import pytest

from specd.policy.ledger import CostModel
from specd.policy.profile import constant_profile
from specd.sweeps.ledger import sweep
from specd.sweeps.output import CSV_COLUMNS, row_dict, write_csv
from specd.sweeps.profile import profile_from_trace
from tests.helpers import synthetic_log


def test_profile_estimated_from_a_trace_recovers_reach_conditioned_rates(tmp_path):
    alphas = [0.85, 0.4, 0.7]
    requests, proposals, rounds = synthetic_log(alphas, rounds=20000, seed=3)
    path = tmp_path / "log.jsonl"
    with path.open("w") as fh:
        fh.write(json.dumps({"type": "header", "schema": "specd.trace/v1", "manifest": {}}) + "\n")
        for obj in requests:
            fh.write(json.dumps({"type": "request", **obj}) + "\n")
        for obj in proposals:
            fh.write(json.dumps({"type": "proposal", **obj}) + "\n")
        for obj in rounds:
            fh.write(json.dumps({"type": "round", **obj}) + "\n")
    profile = profile_from_trace(str(path))
    assert profile.alphas == pytest.approx(alphas, abs=0.02)


def test_csv_columns_are_the_documented_schema(tmp_path):
    rows = sweep(constant_profile(0.8), CostModel(), range(1, 4), [1, 2])
    path = tmp_path / "r.csv"
    write_csv(path, [row_dict(r, "analytic") for r in rows])
    with path.open() as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == CSV_COLUMNS
        data = list(reader)
    assert len(data) == 6 and sum(int(r["optimal"]) for r in data) == 2
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "sweep-k.md")).read()
    for col in CSV_COLUMNS:
        assert f"`{col}`" in readme, col


def test_interrupted_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "r.csv"
    path.write_text("old\n")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        write_csv(path, [row_dict(sweep(constant_profile(0.5), CostModel(), [1], [1])[0], "analytic")])
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]
