"""Seconds spent inside a model's calls, for the benchmarks that split a round's time into the
model's and the rest (round_cost.py, k_zero_cost.py). Imports nothing of specd, so a benchmark
child running another checkout's specd can use it."""

from __future__ import annotations

import time

# A causal LM's calls (specd.core.model): a step, a body step and its head, none calling another.
MODEL_CALLS = ("step", "body_step", "head_logits")


def time_calls(obj, names=MODEL_CALLS) -> list[float]:
    """Wrap each method of ``obj`` named in ``names`` that it has (on the instance: the class and
    other instances are untouched) so that the seconds spent in them add up in the returned
    one-item list; what the calls do and return is unchanged."""
    spent = [0.0]
    for name in names:
        original = getattr(obj, name, None)
        if original is None:
            continue

        def timed(*args, _original=original, **kwargs):
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - started

        setattr(obj, name, timed)
    return spent
