"""What a round at K = 0 costs against a plain target step: specd target-only, specd with its
default draft held at K = 0, and specd default (-k auto), side by side on the held-out corpus.

    python benchmarks/k_zero_cost.py [--model smollm|gemma] [--half fit] [--kinds open] [--per-kind 1]
                                     [--repeats 3] [--threads 2] [--max-new-tokens 96]

A round's time splits into the target's model calls (``model_time.time_calls``: its steps, body
steps and head) and everything else (the draft sources' offers and bookkeeping, a model draft's own
calls, processors, the rule, staging, the cache commit, publication). Each prompt runs the three
systems back to back in an order rotated per prompt and repeat, greedy, every output checked
equal to target-only's. Printed:
per system the median over runs of the time outside model calls per round, the model time per
round and the rounds; then each system's total time over target-only's total (a ratio measured in
one process). A draft held at K = 0 should cost what a plain step costs: the same time outside
the model per round, and the same total. Not a test: it measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from arguments import positive  # noqa: E402
from heldout import OPEN, Systems, load_half  # noqa: E402
from model_time import time_calls  # noqa: E402

from specd.policy.costs import OnlineCosts  # noqa: E402

SYSTEMS = ("target-only", "default at K = 0", "default (-k auto)")


def run(systems: Systems, name: str, item):
    pipe = systems.pipe
    if name == "target-only":
        return pipe.run([item], baseline=True, record_log=False)
    fresh = dataclasses.replace(pipe, costs=OnlineCosts())  # as a new command would
    return fresh.run([item], k=0 if name == "default at K = 0" else "auto", record_log=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("smollm", "gemma"), default="smollm")
    ap.add_argument("--half", choices=("fit", "test"), default="fit")
    ap.add_argument("--kinds", default="open", help="'open' or a comma list of kinds")
    ap.add_argument("--per-kind", type=positive, default=1)
    ap.add_argument("--repeats", type=positive, default=3)
    ap.add_argument("--threads", type=positive, default=2)
    ap.add_argument("--max-new-tokens", type=positive, default=96)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    systems = Systems(a.model, a.max_new_tokens)
    items = systems.within_context(load_half(a.half, a.per_kind, ",".join(OPEN) if a.kinds == "open" else a.kinds))
    spent = time_calls(systems.pipe.target)  # the target's calls; a model draft's count outside
    for name in SYSTEMS:  # warm-up, untimed: product forms decided, first calls paid
        run(systems, name, items[0])
    outside, model, rounds, total = ({n: [] for n in SYSTEMS} for _ in range(4))
    differ = 0
    for rep in range(a.repeats):
        for i, item in enumerate(items):
            shift = (i + rep) % len(SYSTEMS)
            tokens = {}
            for name in SYSTEMS[shift:] + SYSTEMS[:shift]:
                spent[0] = 0.0
                t = time.perf_counter()
                result = run(systems, name, item)
                seconds = time.perf_counter() - t
                n = result.stats.rounds
                outside[name].append((seconds - spent[0]) * 1000 / n)
                model[name].append(spent[0] * 1000 / n)
                rounds[name].append(n)
                total[name].append(seconds)
                tokens[name] = result.results[0].tokens
            differ += sum(tokens[name] != tokens["target-only"] for name in SYSTEMS)
    print(
        f"{a.model}, {a.half} half, kinds {a.kinds}, {len(items)} prompts x {a.repeats} repeats, "
        f"{a.threads} threads, {a.max_new_tokens} new tokens, greedy; outputs unlike target-only's: {differ}"
    )
    header = ("system", "outside model, ms/round", "model, ms/round", "rounds", "total / target-only")
    print(f"{header[0]:20s} {header[1]:>24s} {header[2]:>16s} {header[3]:>7s} {header[4]:>20s}")
    base = sum(total["target-only"])
    for name in SYSTEMS:
        print(
            f"{name:20s} {statistics.median(outside[name]):24.2f} {statistics.median(model[name]):16.2f} "
            f"{statistics.median(rounds[name]):7.0f} {base / sum(total[name]):19.3f}x"
        )


if __name__ == "__main__":
    main()
