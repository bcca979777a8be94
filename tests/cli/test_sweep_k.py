import csv
import json

import pytest

from specd.sweeps.output import CSV_COLUMNS
from tests.helpers import run_cli


def run(args, capsys):
    return run_cli(args, capsys)


def test_bare_sweep_writes_the_csv(tmp_path, capsys):
    out = tmp_path / "results.csv"
    code, text, _ = run(["sweep-k", "--out", str(out)], capsys)
    assert code == 0 and "best K" in text
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == (8 + 1) * 3 and tuple(rows[0]) == CSV_COLUMNS  # K = 1..8 and the auto row per batch
    auto = [r for r in rows if r["policy"] == "auto"]
    for r in auto:  # auto settles on the best of K = 0 (target-only) and the swept K
        mine = [float(x["predicted_speedup"]) for x in rows if x["batch"] == r["batch"]]
        assert float(r["predicted_speedup"]) == max(mine)


def test_json_plot_and_yaml_config(tmp_path, capsys):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("profile: {alphas: [0.95, 0.9, 0.6, 0.4]}\ncost: {draft_cost: 0.1}\nk: 1..4\nbatch: 1,8\n")
    png = tmp_path / "s.png"
    code, text, _ = run(["sweep-k", "--config", str(cfg), "--plot", str(png), "--json"], capsys)
    doc = json.loads(text)
    assert code == 0 and doc["schema"] == "specd.sweep-k/v1" and len(doc["rows"]) == 10
    assert doc["cost"]["draft_cost"] == 0.1 and set(doc["optima"]) == {"1", "8"}
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--alpha", "1.5"], "outside [0, 1]"),
        (["--alphas", "0.9,0.8", "--rates", "per_proposal"], "reach-conditioned"),
        (["--draft-cost", "-1"], "non-negative"),
        (["--k", "5..1"], "empty range"),
        (["--k", "abc"], "range like"),
        (["--alpha", "0.5", "--alphas", "0.5"], "one of"),
        (["--alphas", "0.9", "--k", "1..3"], "positions 1..1"),
    ],
)
def test_bad_fixtures_exit_2_with_one_line(args, message, capsys):
    code, _, err = run(["sweep-k", *args], capsys)
    assert code == 2 and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "args,message",
    [
        (["--measure", "--alpha", "0.9"], "--alpha: analytic-only"),
        (["--measure", "--draft-cost", "0.1", "--context", "5"], "--draft-cost, --context: analytic-only"),
        (["--target", "some/model"], "--target: only used with --measure"),
        (["--repeats", "3"], "--repeats: only used with --measure"),
    ],
)
def test_flags_of_the_other_mode_are_refused_not_ignored(args, message, capsys):
    code, _, err = run(["sweep-k", *args], capsys)
    assert code == 2 and message in err and err.count("\n") == 1
