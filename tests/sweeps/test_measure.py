"""Measured mode end to end on tiny models (timings are meaningless here; the plumbing is not)."""

import json

import pytest

from specd.cli import main


def test_measured_sweep_reports_predicted_and_measured_side_by_side(tiny_models, tmp_path, capsys):
    models = tiny_models
    out = tmp_path / "m.csv"
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "sweep-k",
                "--measure",
                "--target",
                models[0],
                "--draft",
                models[1],
                "--k",
                "1..3",
                "--batch",
                "1,2",
                "--max-new-tokens",
                "6",
                "--repeats",
                "1",
                "--out",
                str(out),
                "--json",
            ]
        )
    doc = json.loads(capsys.readouterr().out)
    assert exit_.value.code == 0 and doc["mode"] == "measured"
    assert len(doc["rows"]) == 8  # K = 1..3 and -k auto, at each batch size
    auto = [r for r in doc["rows"] if r["policy"] == "auto"]
    assert [r["batch"] for r in auto] == [1, 2] and all(0 <= r["k"] <= 3 for r in auto)
    for row in doc["rows"]:
        assert row["measured_speedup"] != "" and row["measured_speedup"] > 0 and row["predicted_speedup"] > 0
    assert doc["seconds_per_target_step"] > 0
    assert doc["cost"]["source"] == "measured" and doc["profile"]["source"] == "measured"
    assert set(doc["gap"]) == {"mean_predicted_minus_measured", "max_abs_gap", "at"}
    assert out.read_text().count("\n") == 9
