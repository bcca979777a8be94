"""The costs -k auto reads (``specd.policy.autok``): measured as the run goes (``OnlineCosts``),
fixed (``FixedCosts``: the oracle's, the tests', sweep-k's analytic auto row), and a round's costs
when a model's first draft call also reads output its cache lacks (``CatchingUp``).

The measured costs are facts about the machine, shared by every request of a run: a target call
and a draft step as functions of their row counts, from moving medians of the last WINDOW rounds,
and the rest of a round (the rule, staging, publication, cache commit) as a function of the rows it
verified: a round that drafted does more of that work than one that did not (on llama.cpp here, a
greedy round's rest took 0.73 ms at K = 0 and 1.4-1.8 ms at K >= 1; sampled, 1.9 ms and 2.8-5.0 ms,
against a 12 ms step: benchmarks/round_rest.py), and a ledger that charged every K the same rest
would draft where it loses.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

from specd.core.records import MIXED, RoundTiming
from specd.policy.ledger import CostModel, MeasuredCosts

FIXED_ROWS_PRIOR = 16.0  # one timed row count: T(R) taken proportional to (16 + R)
# The rest of a round past the row counts timed is the nearest timed count's (a fixed part of infinitely
# many rows): it grows with the rows only as far as rounds have shown it to.
REST_FIXED_ROWS = math.inf
WINDOW = 48  # recent rounds the costs are read from
ORDINARY_READ = 2  # tokens a draft's first call reads after a round it drafted in (its last draft, the bonus)


@dataclass(frozen=True)
class CatchingUp:
    """A source's ledger costs for a round whose first draft call also reads the output its cache
    lacks: ``extra`` (in target steps) more draft time for any K >= 1, nothing at K = 0."""

    costs: CostModel | MeasuredCosts
    extra: float

    def draft_time(self, k: int, batch: int) -> float:
        return self.costs.draft_time(k, batch) + (self.extra if k > 0 else 0.0)

    def draft_calls(self, levels, batch: int) -> float:
        return self.costs.draft_calls(levels, batch) + (self.extra if levels else 0.0)

    def verify_time(self, k: int, batch: int, context: int) -> float:
        return self.costs.verify_time(k, batch, context)

    def baseline_time(self, batch: int, context: int) -> float:
        return self.costs.baseline_time(batch, context)

    @property
    def state_cost(self) -> float:
        return self.costs.state_cost

    @property
    def queue_cost(self) -> float:
        return self.costs.queue_cost


def row_curve(samples, fixed_rows: float = FIXED_ROWS_PRIOR):
    """Seconds against row count, through the median at each row count seen: piecewise linear
    between them; past the largest (or below the smallest) row count seen, a call whose fixed part
    is ``fixed_rows`` rows (the model's ``fixed_rows_prior``, else FIXED_ROWS_PRIOR), anchored
    there. A call's cost is not a line in its rows on a CPU: a
    line through rows 1 and 2 prices 9 rows at several times what they cost, so a free draft would
    never be allowed the K that pays. -> rows -> seconds, or None."""
    by_rows: dict[int, list[float]] = {}
    for rows, seconds in samples:
        by_rows.setdefault(rows, []).append(seconds)
    if not by_rows:
        return None
    points = sorted((r, statistics.median(v)) for r, v in by_rows.items())

    def anchored(point, rows: int) -> float:
        r0, t0 = point
        return t0 if math.isinf(fixed_rows) else t0 * (fixed_rows + rows) / (fixed_rows + r0)

    def at(rows: int) -> float:
        if rows <= points[0][0]:
            return anchored(points[0], rows)
        if rows >= points[-1][0]:
            return anchored(points[-1], rows)
        hi = next(i for i, (r, _) in enumerate(points) if r >= rows)
        (r0, t0), (r1, t1) = points[hi - 1], points[hi]
        return t0 + (t1 - t0) * (rows - r0) / (r1 - r0)

    return at


class OnlineCosts:
    """The run's measured costs, shared by its requests: seconds of a target call against its row
    count, of one draft step of each source (a lookup: its time per proposed token), and of the rest
    of a round against the rows it verified, from the last WINDOW rounds (and any calls timed
    outside them). The ledger reads the rest of a K = 0 round as its state cost, and what a round
    of more rows adds to it as part of that round's verification."""

    def __init__(self, window: int = WINDOW, fixed_rows: float = FIXED_ROWS_PRIOR):
        self.window = window
        self.fixed_rows = fixed_rows  # the target call's fixed part, in rows, past the row counts timed
        self.target: deque[tuple[int, float]] = deque(maxlen=window)
        self.draft: dict[str, deque[tuple[int, float]]] = {}
        # A shared-body source's verification (a body step and the full head over the staged rows) by
        # its scored rows; until one is timed, a one-row target call per request prices it (the head
        # reads its weight once whatever its rows, and the body feeds one token per request).
        self.shared: dict[str, deque[tuple[int, float]]] = {}
        self.other: deque[tuple[int, float]] = deque(maxlen=window)  # (rows verified, the rest's seconds)
        self.aside = 0.0  # seconds of draft timing done inside the round being timed: not the round's cost
        self.version = 0
        self._read: dict = {}
        # The shapes captured calls are padded to (specd.models.hf.graphs.Buckets: ``priced(batch, rows)``),
        # or None: a call costs its own rows. With them every call is timed and priced as its bucket.
        self.buckets = None

    def priced(self, batch: int, rows: int) -> int:
        """The rows a call over ``batch`` requests and ``rows`` rows in all costs: its bucket's where
        calls are padded to one (each request's rows the most any has: the call's width), else its own."""
        if self.buckets is None or batch <= 0:
            return rows
        return self.buckets.priced(batch, -(-rows // batch))

    @property
    def timed_target(self) -> bool:
        return bool(self.target)

    def timed_draft(self, source: str) -> bool:
        return bool(self.draft.get(source))

    def _steps(self, source: str) -> deque:
        return self.draft.setdefault(source, deque(maxlen=self.window))

    def record_draft_step(self, source: str, rows: int, seconds: float, spent: float = 0.0) -> None:
        """A draft step of ``source`` timed outside a round's own calls (see Proposer.step_seconds);
        ``spent``: the seconds the timing took, inside the round now being timed, which the rest of
        that round must not be charged with (a one-off, not a cost of every round)."""
        self._steps(source).append((self.priced(rows, rows), seconds))
        self.aside += spent
        self.version += 1

    def share_body(self, source: str) -> None:
        """``source`` verifies through the target's head alone (specd.core.shared_body)."""
        self.shared.setdefault(source, deque(maxlen=self.window))

    def observe(self, t: RoundTiming) -> None:
        if t.verify_rows > 0 and t.verify_seconds > 0:
            rows = self.priced(t.batch, t.verify_rows)
            if t.verify_source is None:
                self.target.append((rows, t.verify_seconds))
            elif t.verify_source != MIXED:
                self.shared.setdefault(t.verify_source, deque(maxlen=self.window)).append((rows, t.verify_seconds))
        for source in t.sources:
            step = self._draft_step(source)
            if step is not None:
                self._steps(source.source).append((self.priced(max(source.rows, 1), step[0]), step[1]))
        self.other.append((max(t.verify_rows, t.batch), max(t.other_seconds - self.aside, 0.0)))
        self.aside = 0.0
        self.version += 1

    @staticmethod
    def _draft_step(t) -> tuple[int, float] | None:
        """(rows, seconds) of one ordinary draft step of a source in a round (a SourceTiming), or None.
        A first call that caught the draft up on many tokens (its prompt, or output decoded at K = 0)
        is a one-off, not a step. A tree's later calls feed several rows a request (its levels): they
        are steps of that many rows on average, its first call apart."""
        rows = max(t.rows, 1)
        if t.max_k == 0 or t.seconds <= 0:
            return None
        if t.steps == 0:  # no model (a lookup): its time per proposed token
            return rows, t.seconds / t.max_k
        if t.steps >= 2 and t.fed_rows > rows * (t.steps - 1):  # a tree's levels
            return round(t.fed_rows / (t.steps - 1)), max(t.seconds - t.first_seconds, 0.0) / (t.steps - 1)
        if t.first_tokens <= 2:
            return rows, t.seconds / t.steps
        if t.steps >= 2:
            return rows, max(t.seconds - t.first_seconds, 0.0) / (t.steps - 1)
        return None

    def catch_up(self, source: str, tokens: int) -> float:
        """What a model source's first call of a round costs beyond an ordinary draft step when it
        reads ``tokens`` tokens of output (its cache is that far behind), in units of a one-row target
        call: the draft step scaled as a target call over that many rows (the timed calls' curve),
        less the step itself; 0 for the one or two tokens of an ordinary round, or until both are
        timed."""
        if tokens <= ORDINARY_READ:
            return 0.0
        target, draft = self._curves(source)
        if target is None or draft is None:
            return 0.0
        return draft(1) * (target(tokens) - target(1)) / target(1) ** 2

    def _curves(self, source: str):
        """(the target call's curve, ``source``'s draft step curve), each None until timed; read once
        per version of the costs (every request's plan of a round reads the same)."""
        key = (self.version, "curves", source)
        if key not in self._read:
            self._remember(key, (row_curve(self.target, self.fixed_rows), row_curve(self.draft.get(source, ()))))
        return self._read[key]

    def _remember(self, key, value) -> None:
        if len(self._read) > 64:
            self._read.clear()
        self._read[key] = value

    def ledger_costs(self, batch: int, k_max: int, source: str) -> MeasuredCosts | None:
        """The ledger's cost record of ``source`` at ``batch`` for K = 0..k_max, in units of a one-row
        target call (None until a target call and a step of the source have been timed)."""
        key = (self.version, batch, k_max, source)
        if key in self._read:
            return self._read[key]
        target, draft = self._curves(source)
        costs = None
        if target is not None and draft is not None:
            rows_of = self.priced  # a call's rows as it is timed: its bucket's where calls are padded
            unit = target(rows_of(1, 1))
            head = row_curve(self.shared.get(source, ()), self.fixed_rows)
            shared = source in self.shared
            rest = row_curve(self.other, REST_FIXED_ROWS)
            state = rest(batch) if rest is not None else 0.0  # a K = 0 round's rest: the state cost

            def more_rest(rows: int) -> float:
                """What a round verifying ``rows`` rows adds to a K = 0 round's rest."""
                return max(rest(rows) - state, 0.0) if rest is not None and rows > batch else 0.0

            def verify(k: int) -> float:
                rows = batch * (k + 1)
                if k == 0 or (shared and head is None):
                    return target(rows_of(batch, batch)) + more_rest(rows)
                return (head if shared else target)(rows_of(batch, rows)) + more_rest(rows)

            costs = MeasuredCosts(
                draft_step={batch: draft(rows_of(batch, batch)) / unit},
                verify={(k, batch): verify(k) / unit for k in range(k_max + 1)},
                baseline={batch: target(rows_of(batch, batch)) / unit},
                state_cost=state / unit,
                source="online",
                # a tree's levels: a draft call over that many rows; a tree's verification likewise
                draft_curve=lambda rows: draft(rows_of(batch, rows)) / unit,
                target_curve=None if shared else (lambda rows: (target(rows_of(batch, rows)) + more_rest(rows)) / unit),
            )
        self._remember(key, costs)
        return costs


class FixedCosts:
    """A cost model that does not move (the oracle's, the tests', sweep-k's analytic auto row):
    a ledger CostModel read at any batch, the same for every source (or one per source), and a
    model's catch-up priced at ``catch_up_per_token`` target steps per token it reads beyond an
    ordinary round's (0: free)."""

    def __init__(
        self, model: CostModel, per_source: dict[str, CostModel] | None = None, catch_up_per_token: float = 0.0
    ):
        self.model = model
        self.per_source = per_source or {}
        self.catch_up_per_token = catch_up_per_token

    def ledger_costs(self, batch: int, k_max: int, source: str | None = None) -> CostModel:
        return self.per_source.get(source, self.model) if source is not None else self.model

    timed_target = True

    def timed_draft(self, source: str) -> bool:
        return True

    def catch_up(self, source: str, tokens: int) -> float:
        return self.catch_up_per_token * max(tokens - ORDINARY_READ, 0)
