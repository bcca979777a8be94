"""A row-cost file (--row-costs): written, it reads back; a bad one is refused in one line naming it;
the ledger's costs read off it are the curve's."""

import json

import pytest

from specd.errors import InvalidCost, UsageError
from specd.policy.costs import FIXED_ROWS_PRIOR
from specd.policy.row_costs import SCHEMA, RowCosts, read_row_costs, write_row_costs

CURVE = {"1": 40.0, "2": 44.0, "5": 68.0, "9": 94.0}  # milliseconds: any unit, divided by the one-row call


def write(tmp_path, doc, name="costs.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_a_written_curve_reads_back(tmp_path):
    curve = RowCosts(((1, 1.0), (3, 1.4), (17, 2.8)), ((1, 0.3), (4, 0.5)), "a GPU", "median of 9")
    write_row_costs(tmp_path / "c.json", curve)
    assert read_row_costs(tmp_path / "c.json") == curve
    without_draft = RowCosts(((1, 1.0), (2, 1.0)))
    write_row_costs(tmp_path / "d.json", without_draft)
    assert read_row_costs(tmp_path / "d.json") == without_draft


def test_the_curve_is_read_in_one_row_calls_linear_between_its_points_anchored_past_them(tmp_path):
    costs = read_row_costs(write(tmp_path, {"schema": SCHEMA, "target": CURVE})).costs(draft_cost=0.5, state_cost=0.02)
    assert costs.target(1) == 1.0 and costs.target(2) == pytest.approx(1.1)
    assert costs.target(3) == pytest.approx(1.1 + (1.7 - 1.1) / 3)  # a third of the way from 2 to 5
    assert costs.target(17) == pytest.approx(2.35 * (FIXED_ROWS_PRIOR + 17) / (FIXED_ROWS_PRIOR + 9))
    assert costs.verify_time(4, 1, 0) == pytest.approx(1.7) and costs.verify_time(1, 2, 0) == pytest.approx(
        1.1 + 0.6 * 2 / 3
    )
    assert costs.baseline_time(2, 0) == pytest.approx(1.1)
    assert costs.draft_time(3, 1) == pytest.approx(1.5)  # no draft curve: 0.5 x a target call of as many rows
    assert costs.draft_calls((1, 4), 1) == pytest.approx(0.5 + 0.5 * 1.5)
    drafted = read_row_costs(write(tmp_path, {"schema": SCHEMA, "target": CURVE, "draft": {"1": 8.0, "4": 12.0}}))
    assert drafted.costs(0.5).draft_calls((1, 4), 1) == pytest.approx(0.2 + 0.3)  # its own curve wins


@pytest.mark.parametrize(
    "doc, message",
    [
        ("{", "not JSON"),
        ("[1, 2]", "is a JSON object"),
        ({"target": CURVE}, "schema must be"),
        ({"schema": "specd.row-costs/v2", "target": CURVE}, "schema must be"),
        ({"schema": SCHEMA, "target": CURVE, "gpu": 1}, "unknown key 'gpu'"),
        ({"schema": SCHEMA}, "target must be an object"),
        ({"schema": SCHEMA, "target": {}}, "target must be an object"),
        ({"schema": SCHEMA, "target": {"2": 1.0, "4": 1.1}}, "needs the one-row call"),
        ({"schema": SCHEMA, "target": {"1": 1.0, "two": 1.1}}, "row count 'two'"),
        ({"schema": SCHEMA, "target": {"1": 1.0, "0": 1.1}}, "row count '0'"),
        ({"schema": SCHEMA, "target": {"1": 1.0, "01": 1.1}}, "given twice"),
        ({"schema": SCHEMA, "target": {"1": 1.0, "2": -1}}, "at 2 rows must be a finite number above 0"),
        ({"schema": SCHEMA, "target": {"1": 0, "2": 1}}, "at 1 rows must be a finite number above 0"),
        ({"schema": SCHEMA, "target": {"1": 1.0, "2": "fast"}}, "at 2 rows"),
        ({"schema": SCHEMA, "target": {"1": 1.0, "2": True}}, "at 2 rows"),
        ({"schema": SCHEMA, "target": CURVE, "draft": []}, "draft must be an object"),
        ({"schema": SCHEMA, "target": CURVE, "device": 3}, "device must be text"),
        ('{"schema": "specd.row-costs/v1", "target": {"1": 1.0, "2": NaN}}', "finite"),
    ],
)
def test_a_bad_file_is_refused_in_one_line_naming_it(tmp_path, doc, message):
    path = write(tmp_path, doc)
    with pytest.raises(UsageError, match=message) as err:
        read_row_costs(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_missing_file_and_a_folder_are_one_line(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        read_row_costs(tmp_path / "nowhere.json")
    with pytest.raises(UsageError, match="directory"):
        read_row_costs(tmp_path)


def test_negative_costs_for_the_rest_of_a_round_are_refused():
    with pytest.raises(InvalidCost):
        RowCosts(((1, 1.0),)).costs(draft_cost=-0.1)
