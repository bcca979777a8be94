"""Measured mode end to end on tiny models (timings are meaningless here; the plumbing is not)."""

import json

import pytest

from specd.cli import main


@pytest.mark.parametrize("draft", ["model", "self:vocab=64"])
def test_measured_sweep_reports_predicted_and_measured_side_by_side(tiny_models, tmp_path, capsys, draft):
    """With a draft model, and with the shared-body draft (its step: a body step and the restricted
    head; its verification: a body step and the full head over K + 1 rows, timed as such)."""
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
                models[1] if draft == "model" else draft,
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


def test_an_interrupted_measured_sweep_keeps_the_cells_measured(tiny_models, tmp_path, capsys, monkeypatch):
    """Ctrl-C (or SIGTERM) in the third cell: the two measured cells are written, then exit 130."""
    import csv

    from specd.sweeps import measure

    real, calls = measure.time_cell, []

    def stopping(*args, **kwargs):
        calls.append(args[1:3])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(measure, "time_cell", stopping)
    out = tmp_path / "m.csv"
    args = ["sweep-k", "--measure", "--target", tiny_models[0], "--draft", tiny_models[1], "--k", "1..3"]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--batch", "1", "--max-new-tokens", "6", "--repeats", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert exit_.value.code == 130 and err.endswith("specd: error: interrupted\n")
    rows = list(csv.DictReader(out.open()))
    assert [(r["k"], r["policy"]) for r in rows][:2] == [("1", "fixed"), ("2", "fixed")]
    assert all(r["measured_speedup"] != "" for r in rows if r["policy"] == "fixed")
    assert "the 2 cells measured are in" in err


def test_a_measured_sweep_times_and_generates_each_tree(tiny_models, capsys):
    """A tree's cell: its verification and level calls timed, generated with the tree, its acceptance by
    depth and rank measured (tokens per round measured beside E[G] predicted)."""
    args = ["sweep-k", "--measure", "--target", tiny_models[0], "--draft", tiny_models[1], "--k", "1,2"]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--batch", "1", "--tree", "2,1", "--max-new-tokens", "6", "--repeats", "1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert exit_.value.code == 0
    tree = [r for r in doc["rows"] if r["shape"]]
    assert [(r["shape"], r["nodes"], r["k"]) for r in tree] == [("2,1", 4, 2)]
    for row in doc["rows"]:
        assert row["measured_speedup"] > 0 and 1 <= row["measured_progress"] <= 3 and row["predicted_speedup"] > 0
