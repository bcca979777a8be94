"""This machine's call costs by row count, written as a row-cost file (``sweep-k --row-costs FILE``).

    python benchmarks/row_costs.py --out FILE [--target embedded:smollm2-135m] [--draft self:bf16]
                                   [--rows 1,2,3,5,9,17,33] [--draft-rows 1,2,4,8,16] [--context 150]
                                   [--repeats 9] [--threads 1]

Times one call of the target feeding R rows to one request whose prompt of ``--context`` tokens is
cached (``specd.sweeps.measure.scratch_cache``, the call sweep-k times), for each R of ``--rows``,
and one call of the draft (the first model of ``--draft``) for each R of ``--draft-rows``; the row
counts are interleaved within each repeat (so a change of load falls on all of them), after two
warm-up rounds, and the median of ``--repeats`` is written, in milliseconds, as a
``specd.row-costs/v1`` file (``specd.policy.row_costs``), read back before the script ends. A
lookup draft has no calls: the file then has no draft curve. Timing is a fact about the machine and
its load: run it on a quiet machine. Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive, positives  # noqa: E402
from heldout import refuse_outputs  # noqa: E402

from specd.core.model import RowInput, device_sync  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.policy.row_costs import RowCosts, read_row_costs, write_row_costs  # noqa: E402
from specd.sweeps.measure import scratch_cache  # noqa: E402


def timed_calls(lms, row_counts, context: int, repeats: int, device) -> list[dict[int, float]]:
    """Per model of ``lms``, rows -> the median milliseconds of a call feeding that many rows, every
    (model, rows) timed once per repeat in turn."""
    sync = device_sync(device) or (lambda: None)
    caches = [scratch_cache(lm, 1, context) for lm in lms]
    times: list[dict[int, list[float]]] = [{r: [] for r in rows} for rows in row_counts]
    for repeat in range(repeats + 2):
        for i, (lm, cache, rows) in enumerate(zip(lms, caches, row_counts)):
            for r in rows:
                sync()
                started = time.perf_counter()
                lm.step(cache, [RowInput(0, tuple(range(5, 5 + r)), tuple(range(context, context + r)))])
                sync()
                if repeat >= 2:  # two warm-up rounds
                    times[i][r].append((time.perf_counter() - started) * 1000.0)
                cache.discard(0)
    return [{r: statistics.median(v) for r, v in t.items()} for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--target", default="embedded:smollm2-135m")
    parser.add_argument("--draft", default="self:bf16")
    parser.add_argument("--rows", type=positives, default=[1, 2, 3, 5, 9, 17, 33])
    parser.add_argument("--draft-rows", type=positives, default=[1, 2, 4, 8, 16])
    parser.add_argument("--context", type=positive, default=150)
    parser.add_argument("--repeats", type=positive, default=9)
    parser.add_argument("--threads", type=positive, default=1)
    args = parser.parse_args()
    if 1 not in args.rows:
        parser.error("--rows must hold 1: the one-row target call is the file's unit")
    refuse_outputs("row_costs.py", {"--out": args.out}, [args.target], args.draft)
    torch.set_num_threads(args.threads)
    pipe = Pipeline.build(GenerateOptions(target=args.target, draft=args.draft))
    models = pipe.proposer.models
    lms, rows = [pipe.target, *models[:1]], [args.rows, *([args.draft_rows] if models else [])]
    measured = timed_calls(lms, rows, args.context, args.repeats, pipe.device)
    curve = RowCosts(
        tuple(sorted(measured[0].items())),
        tuple(sorted(measured[1].items())) if models else (),
        f"{pipe.target.name} ({pipe.device.type}, {args.threads} torch thread{'s' * (args.threads > 1)}); "
        f"draft {models[0].name if models else 'none'}",
        f"benchmarks/row_costs.py: one request at a {args.context}-token context, milliseconds, "
        f"median of {args.repeats}, row counts interleaved",
    )
    write_row_costs(args.out, curve)
    back = read_row_costs(args.out)
    for name, points in (("target", back.target), ("draft", back.draft)):
        if points:
            print(f"{name}: " + ", ".join(f"{r} rows {v:.2f}" for r, v in points) + " (one-row target calls)")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
