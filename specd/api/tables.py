"""The ledger, the measured sweep and acceptance logs as pandas DataFrames: the tables ``sweep-k``
and ``trace summarize`` write, from the same functions, for a notebook."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pandas as pd

from specd.api import arguments as args
from specd.api.pair import Pair
from specd.errors import UsageError, shown
from specd.policy.kpolicy import MAX_K
from specd.sweeps.analytic import (
    MAX_SWEEP_BATCH,
    MAX_SWEEP_K,
    analytic,
    choose_profile,
    cost_model,
    parse_ints,
)
from specd.sweeps.analytic import kv_shape as parse_kv_shape
from specd.sweeps.measure import MAX_MEASURED_BATCH, measure
from specd.sweeps.output import csv_text, ledger_records
from specd.traces.log import read_trace
from specd.traces.summary import frames, summarize, to_table


def ledger(
    k: str | Sequence[int] | None = None,
    batch: str | Sequence[int] = "1,4,16",
    *,
    alpha: float | None = None,
    alphas: Sequence[float] | None = None,
    trace_log: str | None = None,
    context: int = 0,
    stop_probability: float = 0.0,
    kv_shape: str | None = None,
    **costs: float,
) -> pd.DataFrame:
    """The speedup ledger (``sweep-k`` without ``--measure``): one row per (K, batch) and the row
    -k auto settles on per batch, in the columns of sweep-k's CSV. ``k``: "1..8", "1,2,4" or a
    list (None: 1..8, or as far as ``alphas`` go); the profile: a constant ``alpha``, per-position
    ``alphas``, or an acceptance log's (default alpha 0.8); ``costs``: the cost model's fields by
    name (draft_cost, row_cost, draft_row_cost, state_cost, queue_cost, context_cost)."""
    ks = parse_ints("1..8" if k is None else k, "k", MAX_SWEEP_K)
    batches = parse_ints(batch, "batch", MAX_SWEEP_BATCH)
    trace_log = args.path(trace_log, "trace_log", optional=True)
    profile = choose_profile(alpha, list(alphas) if alphas is not None else None, trace_log=trace_log)
    rows = analytic(
        profile, cost_model(costs), ks, batches, context, stop_probability, parse_kv_shape(kv_shape), k is not None
    )
    return _frame(ledger_records(rows, "analytic", {}))


def sweep(
    pair: Pair,
    k: str | Sequence[int] = "1..4",
    batch: str | Sequence[int] = "1",
    *,
    max_new_tokens: int = 32,
    repeats: int = 5,
    prompts: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The measured sweep (``sweep-k --measure``) on a loaded pair: its acceptance profile from a
    run at the largest K, its target and draft calls timed, and every (K, batch) generated; the
    ledger's predicted speedup beside the measured one (``measured_speedup``)."""
    if not isinstance(pair, Pair):
        raise UsageError(f"sweep takes a specd.Pair (from specd.Pair.load), got {shown(pair)} ({type(pair).__name__})")
    ks = parse_ints(k, "k", MAX_K)
    batches = parse_ints(batch, "batch", MAX_MEASURED_BATCH)
    texts = None if prompts is None else args.prompts(prompts)  # a string is one prompt
    args.whole(max_new_tokens, "max_new_tokens", 1)
    args.whole(repeats, "repeats")
    with pair._pipe.exclusive():  # it times the models' calls: another thread's would be in its figures
        result = measure(pair._pipe, ks, batches, texts, max_new_tokens=max_new_tokens, repeats=repeats)
    return _frame(ledger_records(result.rows, "measured", result.measured, result.progress))


def read_log(path: str) -> pd.DataFrame:
    """An acceptance log's rounds, one row each (request_id, round, k, accepted, emitted, source, ...),
    with each request's prompt and tag beside them."""
    _, requests, _, rounds = read_trace(args.path(path, "read_log(path)"))
    return frames(requests, rounds)


def summarize_log(path: str, by: str | None = None) -> pd.DataFrame:
    """An acceptance log's summary (``trace summarize``): one row for the whole log ("overall") and one
    per group of ``by`` (request_id by default; prompt, tag): rounds, mean accepted length,
    Pr(A = a), survival, reach-conditioned alpha_j, vLLM's counters."""
    _, requests, _, rounds = read_trace(args.path(path, "summarize_log(path)"))
    return to_table(summarize(requests, rounds, args.text(by, "by", optional=True)))


def _frame(records: list[dict]) -> pd.DataFrame:
    """The records as the CSV sweep-k writes, read back by pandas: the same table, the same types."""
    return pd.read_csv(io.StringIO(csv_text(records)))
