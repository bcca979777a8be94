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


def test_a_traces_tree_rounds_give_the_acceptance_by_depth_and_rank(tmp_path):
    """Rounds of the tree "2,1" whose first child is kept 60% of the time and the second 25% of the times
    the first is refused: read back as beta by depth and rank; a malformed tree is refused in one line."""
    import random

    from specd.errors import InvalidFixture
    from specd.sweeps.profile import tree_profile_from_trace

    rng, rows = random.Random(5), []
    parents = [-1, -1, 0, 1]  # "2,1": two root children, one child each
    for r in range(6000):
        if rng.random() < 0.6:
            first, kept = 0, True
        else:
            first, kept = 1, rng.random() < 0.25
        if not kept:
            path, accepted = [], 0
        else:
            path, accepted = ([first, 2 + first], 2) if rng.random() < 0.5 else ([first], 1)
        row = {"request_id": "r", "round_id": f"r/{r}", "k": 4, "accepted": accepted, "emitted": [0] * (accepted + 1)}
        rows.append({**row, "terminal_kind": "correction", "parents": parents, "path": path})
    path = tmp_path / "tree.jsonl"
    lines = [{"type": "header", "schema": "specd.trace/v1", "manifest": {}}, *({"type": "round", **r} for r in rows)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    profile = tree_profile_from_trace(str(path), 2, 2)
    assert profile.betas[0] == pytest.approx((0.6, 0.25), abs=0.03)
    assert profile.betas[1][0] == pytest.approx(0.5, abs=0.03)
    bad = tmp_path / "bad.jsonl"
    broken = {**lines[1], "accepted": 1, "path": [3]}  # node 3 is no child of the root
    bad.write_text(json.dumps(lines[0]) + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(InvalidFixture, match="does not walk"):
        tree_profile_from_trace(str(bad), 2, 2)
