"""A row-cost curve: what a call of R rows costs on some machine, from a file (``--row-costs FILE``),
and the ledger's costs read off it (``CurveCosts``).

The file (JSON, schema ``specd.row-costs/v1``)::

    {
      "schema": "specd.row-costs/v1",
      "device": "what it was measured on (free text, optional)",
      "note": "how (free text, optional)",
      "target": {"1": 1.0, "2": 1.1, "3": 1.22, "5": 1.71, "9": 2.34, "17": 2.9},
      "draft": {"1": 0.55, "5": 0.6}
    }

``target``: one target call feeding R rows (one request, a prompt of context already cached) ->
its cost, at least the one-row call ("1") and any other row counts; ``draft``, optional: one draft
call of R rows, in the same unit. Any unit will do (seconds, milliseconds): every value is divided
by the one-row target call, the ledger's unit. Between the row counts given the cost is linear;
past the largest (or below the smallest) it is a call whose fixed part is 16 rows, anchored at the
nearest one given (``specd.policy.costs``' curve, which -k auto reads its measured calls through).
Without ``draft``, a draft call of R rows costs ``draft_cost`` times the target's call of R rows
(a draft model scales like its target).

A user's file: anything else (another schema, an unknown key, a row count that is not a whole
number in 1..MAX_ROWS, a value that is not a finite positive number, no one-row target call) is
refused in one line naming the file. ``write_row_costs`` writes one that reads back.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from specd.errors import InvalidCost, shown
from specd.files import loads_json, read_text, write_text_atomic
from specd.policy.costs import row_curve

SCHEMA = "specd.row-costs/v1"
MAX_ROWS = 65536
KEYS = ("schema", "device", "note", "target", "draft")


@dataclass(frozen=True)
class RowCosts:
    """A machine's calls by row count (``target``, ``draft``: rows -> cost in one-row target calls)."""

    target: tuple[tuple[int, float], ...]
    draft: tuple[tuple[int, float], ...] = ()
    device: str = ""
    note: str = ""

    def costs(self, draft_cost: float = 0.0, state_cost: float = 0.0, queue_cost: float = 0.0) -> CurveCosts:
        """The ledger's cost record on this curve (module docstring: ``draft_cost`` without a draft curve)."""
        return CurveCosts(self, float(draft_cost), float(state_cost), float(queue_cost))

    def as_dict(self) -> dict:
        doc = {"schema": SCHEMA, "device": self.device, "note": self.note, "target": _points(self.target)}
        return doc | ({"draft": _points(self.draft)} if self.draft else {})


class CurveCosts:
    """The ledger's costs (``specd.policy.ledger``: draft_time, draft_calls, verify_time,
    baseline_time, state_cost, queue_cost) read off a RowCosts curve; context is not priced."""

    def __init__(self, curve: RowCosts, draft_cost: float, state_cost: float, queue_cost: float):
        for name, value in (("draft_cost", draft_cost), ("state_cost", state_cost), ("queue_cost", queue_cost)):
            if not math.isfinite(value) or value < 0:
                raise InvalidCost(f"cost {name} = {value} must be a finite, non-negative number")
        self.curve, self.draft_cost, self.state_cost, self.queue_cost = curve, draft_cost, state_cost, queue_cost
        self._target = row_curve(curve.target)
        self._draft = row_curve(curve.draft) if curve.draft else None

    def target(self, rows: int) -> float:
        return self._target(rows)

    def draft(self, rows: int) -> float:
        return self._draft(rows) if self._draft is not None else self.draft_cost * self._target(rows)

    def draft_time(self, k: int, batch: int) -> float:
        return k * self.draft(batch)

    def draft_calls(self, levels, batch: int) -> float:
        return sum(self.draft(rows * batch) for rows in levels)

    def verify_time(self, k: int, batch: int, context: int) -> float:
        return self.target(batch * (k + 1))

    def baseline_time(self, batch: int, context: int) -> float:
        return self.target(batch)

    def describe(self) -> dict:
        return {
            "source": "row-costs",
            "device": self.curve.device,
            "target": _points(self.curve.target),
            "draft": _points(self.curve.draft) if self.curve.draft else f"{self.draft_cost} x target",
            "state_cost": self.state_cost,
            "queue_cost": self.queue_cost,
        }


def _points(points) -> dict[str, float]:
    return {str(rows): value for rows, value in points}


def read_row_costs(path: str | Path, where: str = "--row-costs") -> RowCosts:
    """A row-cost file (module docstring) -> its RowCosts, normalized by the one-row target call."""
    label = f"{where} {path}"
    doc = loads_json(read_text(path, f"{where} file"), label)
    if not isinstance(doc, dict):
        raise InvalidCost(f"{label}: a row-cost file is a JSON object with schema {SCHEMA!r}")
    if doc.get("schema") != SCHEMA:
        raise InvalidCost(f"{label}: schema must be {SCHEMA!r}, got {doc.get('schema')!r}")
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise InvalidCost(f"{label}: unknown key {unknown[0]!r}; the keys are {', '.join(KEYS)}")
    for key in ("device", "note"):
        if not isinstance(doc.get(key, ""), str):
            raise InvalidCost(f"{label}: {key} must be text")
    target = _read_points(doc.get("target"), f"{label}: target")
    unit = dict(target).get(1)
    if unit is None:
        raise InvalidCost(f'{label}: target needs the one-row call ("1"), the ledger\'s unit')
    draft = _read_points(doc["draft"], f"{label}: draft") if "draft" in doc else ()
    return RowCosts(
        tuple((r, v / unit) for r, v in target),
        tuple((r, v / unit) for r, v in draft),
        doc.get("device", ""),
        doc.get("note", ""),
    )


def _read_points(raw, where: str) -> tuple[tuple[int, float], ...]:
    """{"rows": cost, ...} -> ((rows, cost), ...) in row order, each checked."""
    if not isinstance(raw, dict) or not raw:
        raise InvalidCost(f'{where} must be an object of row counts to costs, like {{"1": 1.0, "9": 2.3}}')
    out = []
    for key, value in raw.items():
        # ASCII digits, judged by length before converting: isdigit() takes '²', which int() refuses
        whole = isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= len(str(MAX_ROWS))
        if not (whole and 1 <= int(key) <= MAX_ROWS):
            raise InvalidCost(f"{where}: row count {shown(key)} is not a whole number in 1..{MAX_ROWS}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InvalidCost(f"{where}: the cost at {key} rows must be a finite number above 0, got {value!r}")
        out.append((int(key), float(value)))
    if len({r for r, _ in out}) < len(out):
        raise InvalidCost(f"{where}: a row count is given twice")
    return tuple(sorted(out))


def write_row_costs(path: str | Path, curve: RowCosts) -> None:
    """Write ``curve`` as a row-cost file (atomically); ``read_row_costs`` reads it back."""
    write_text_atomic(path, json.dumps(curve.as_dict(), indent=2) + "\n", "row-cost file")
