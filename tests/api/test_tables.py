"""``specd.ledger`` and ``specd.sweep``: the tables ``sweep-k`` writes, as DataFrames."""

import pandas as pd
import pytest

import specd
from tests.helpers import run_cli


def test_the_ledger_is_sweep_k_s_csv(tmp_path, capsys):
    code, _, err = run_cli(
        [
            "sweep-k",
            "--alpha",
            "0.7",
            "-k",
            "1..5",
            "--batch",
            "1,8",
            "--draft-cost",
            "0.1",
            "--out",
            str(tmp_path / "a.csv"),
        ],
        capsys,
    )
    assert code == 0, err
    table = specd.ledger(alpha=0.7, k="1..5", batch=[1, 8], draft_cost=0.1)
    assert table.equals(pd.read_csv(tmp_path / "a.csv"))
    assert list(table.columns)[:4] == ["schema_version", "mode", "k", "batch"]
    best = table[(table.policy == "fixed") & (table.optimal == 1)]
    assert len(best) == 2 and set(best.batch) == {1, 8}


def test_a_per_position_profile_sets_how_far_k_goes(tmp_path, capsys):
    table = specd.ledger(alphas=[0.9, 0.8, 0.5], batch="1")
    assert sorted(table[table.policy == "fixed"].k) == [1, 2, 3]
    code, _, _ = run_cli(
        ["sweep-k", "--alphas", "0.9,0.8,0.5", "--batch", "1", "--out", str(tmp_path / "b.csv")], capsys
    )
    assert code == 0 and table.equals(pd.read_csv(tmp_path / "b.csv"))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: specd.ledger(alpha=0.8, alphas=[0.8]), "one of"),
        (lambda: specd.ledger(k="3..1"), "empty range"),
        (lambda: specd.ledger(batch=[0]), "values in 1"),
        (lambda: specd.ledger(draft_price=0.1), "unknown cost field 'draft_price'"),
        (lambda: specd.ledger(draft_cost="cheap"), "not a number"),
        (lambda: specd.ledger(stop_probability=1.0), "stop-probability"),
    ],
)
def test_bad_arguments_raise_one_typed_error(call, message):
    with pytest.raises(specd.SpecdError, match=message):
        call()


def test_the_measured_sweep_on_a_loaded_pair(tiny_models):
    pair = specd.Pair.load(tiny_models[0], tiny_models[1])
    table = specd.sweep(pair, k="1,2", batch="1,2", max_new_tokens=6, repeats=1)
    assert set(table["mode"]) == {"measured"}
    fixed = table[table.policy == "fixed"]
    assert sorted(zip(fixed.k, fixed.batch)) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert (table.measured_speedup > 0).all() and (table.predicted_speedup > 0).all()
    with pytest.raises(specd.UsageError, match="--repeats"):
        specd.sweep(pair, repeats=0)
