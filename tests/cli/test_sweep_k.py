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


def test_tree_rows_read_back_as_the_trees_they_price(tmp_path, capsys):
    """A tree's row: its shape and nodes as --tree reads them, its E[A] the profile's by depth and rank,
    and the -k auto row choosing a tree where rows and drafts are cheap."""
    from specd.core.tree_shape import parse_tree
    from specd.policy.trees import TreeProfile, expected_accepted

    out = tmp_path / "trees.csv"
    choices = "[[0],[1],[0,0],[0,0,0]]"
    args = ["--k", "1..3", "--batch", "1,4", "--alphas", "0.6,0.5,0.4", "--tree", "2,1", "--tree", choices]
    args += ["--sibling-alphas", "0.3,0.1", "--tree-budget", "6", "--row-cost", "0", "--draft-cost", "0.01"]
    code, _, err = run(["sweep-k", *args, "--out", str(out)], capsys)
    assert code == 0, err
    rows = list(csv.DictReader(out.open()))
    profile = TreeProfile(((0.6, 0.3, 0.1), (0.5, 0.3, 0.1), (0.4, 0.3, 0.1)))
    trees = [r for r in rows if r["shape"] and r["policy"] == "fixed"]
    assert [r["shape"] for r in trees] == ["2,1", choices] * 2
    for r in trees:
        shape = parse_tree(r["shape"])
        assert int(r["nodes"]) == shape.size and int(r["k"]) == shape.depth
        assert float(r["expected_accepted"]) == pytest.approx(expected_accepted(shape, profile))
        assert float(r["discarded_kv_rows"]) == pytest.approx(shape.size - float(r["expected_accepted"]))
    auto = [r for r in rows if r["policy"] == "auto"]
    assert all(r["shape"] and 2 < int(r["nodes"]) <= 6 for r in auto)  # a tree, read back as --tree reads one
    for r in auto:
        assert expected_accepted(parse_tree(r["shape"]), profile) == pytest.approx(float(r["expected_accepted"]))
    code, text, _ = run(["sweep-k", *args, "--json"], capsys)
    doc = json.loads(text)
    assert doc["optima"]["1"]["auto_shape"] == auto[0]["shape"]


def test_a_row_cost_curve_prices_the_calls(tmp_path, capsys):
    """Extra rows free on the curve: the auto row takes a tree; this CPU's curve: a chain."""
    free, cpu = tmp_path / "free.json", tmp_path / "cpu.json"
    free.write_text(json.dumps({"schema": "specd.row-costs/v1", "target": {"1": 1.0, "64": 1.0}}))
    points = {"1": 1.0, "2": 1.10, "3": 1.49, "5": 1.96, "9": 2.37, "17": 2.77, "33": 3.76}
    cpu.write_text(json.dumps({"schema": "specd.row-costs/v1", "device": "2-core CPU", "target": points}))
    shapes = {}
    for name, path in (("free", free), ("cpu", cpu)):
        args = ["--k", "1..8", "--batch", "1", "--alpha", "0.6", "--tree-budget", "8", "--draft-cost", "0.05"]
        code, text, err = run(["sweep-k", *args, "--sibling-alphas", "0.3", "--row-costs", str(path), "--json"], capsys)
        assert code == 0, err
        doc = json.loads(text)
        assert doc["cost"]["source"] == "row-costs"
        shapes[name] = doc["optima"]["1"]["auto_shape"]
    assert shapes["free"] and shapes["cpu"] == ""


@pytest.mark.parametrize(
    "args,message",
    [
        (["--tree", "nodes=6"], "prices static shapes"),
        (["--tree", "0,1"], "at least one child"),
        (["--tree-budget", "1"], "--tree-budget must be in 2..256"),
        (["--sibling-alphas", "0.3"], "give --tree SPEC or --tree-budget N"),
        (["--tree", "2", "--sibling-alphas", "0.3,x"], "numbers like"),
        (["--tree", "2", "--sibling-alphas", "1.3"], "outside [0, 1]"),
        (["--tree", "2", "--stop-probability", "0.1"], "prices chains only"),
        (["--tree", "2,2,2", "--alphas", "0.5,0.5"], "positions 1..2"),
        (["--measure", "--tree-budget", "4"], "--tree-budget: analytic-only"),
        (["--row-costs", "ROW", "--row-cost", "0.1"], "--row-cost: --row-costs gives"),
        (["--row-costs", "ROW", "--context", "100"], "does not price the context"),
        (["--row-costs", "missing.json"], "not found"),
        (["--row-costs", "BAD"], "schema must be"),
        (["--measure", "--row-costs", "ROW"], "--row-costs: analytic-only"),
        # issue 61: every size a user can type is checked before the work it asks for
        (["--k", "1..256", "--batch", "1..65536"], "256 K values at 65536 batch sizes make 16777216 rows"),
        (["--batch", "1..65536"], "at most 10000"),
        (["--k", "1..100", "--batch", "1..100", "--tree", "2"], "100 K values and trees at 100 batch sizes"),
    ],
)
def test_bad_trees_and_row_costs_exit_2_with_one_line(args, message, capsys, tmp_path):
    row, bad = tmp_path / "row.json", tmp_path / "bad.json"
    row.write_text(json.dumps({"schema": "specd.row-costs/v1", "target": {"1": 1.0}}))
    bad.write_text(json.dumps({"schema": "specd.rowcosts", "target": {"1": 1.0}}))
    args = [str(row) if a == "ROW" else str(bad) if a == "BAD" else a for a in args]
    code, _, err = run(["sweep-k", *args], capsys)
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_the_largest_tree_budget_at_every_depth_is_priced_in_seconds(tmp_path, capsys):
    """--tree-budget 256 with --k 1..64 (both documented ranges) searched every tree of up to 256 nodes and
    64 levels by a dynamic program of 10^10 cells (hours, 2 GB); the best-first search finds the same best
    trees (tests/policy/test_trees.py) in a fraction of a second. Where a call's rows are free, -k auto
    takes a tree of the profile's, and the row reads back as --tree reads one."""
    free = tmp_path / "free.json"
    free.write_text(json.dumps({"schema": "specd.row-costs/v1", "target": {"1": 1.0, "256": 1.0}}))
    args = ["--k", "1..64", "--batch", "1", "--alpha", "0.5", "--tree-budget", "256", "--json"]
    for extra in ([], ["--row-costs", str(free), "--draft-cost", "0.01"]):
        code, text, err = run(["sweep-k", *args, *extra], capsys)
        assert code == 0, err
    auto = [r for r in json.loads(text)["rows"] if r["policy"] == "auto"]
    from specd.core.tree_shape import parse_tree

    shape = parse_tree(auto[0]["shape"])
    assert 2 < shape.size <= 256 and int(auto[0]["nodes"]) == shape.size and not shape.is_chain
