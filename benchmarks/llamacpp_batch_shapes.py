"""What a batched call costs on llama.cpp by how its rows fall over the requests' sequences.

    python benchmarks/llamacpp_batch_shapes.py [--model smollm] [--context 200] [--repeats 9] [--threads 2]

specd's llama.cpp context (a K/V stream per request, q8_0 keys: specd.models.llamacpp.lib.Context)
holds 8 sequences of ``--context`` cached tokens; one call then feeds each sequence the number of
rows a SHAPE gives it (in sequence order: 1 = a request at K = 0, K + 1 = one drafting K), every
row asking for logits, and the rows are removed again. The shapes are interleaved within each
repeat (so a change of load falls on all of them); printed per shape: the median in milliseconds
and in one-row calls (a call of one sequence's one row, timed in the same repeats).

What it shows: with a stream per sequence, llama.cpp splits a call into micro-batches that take
consecutive sequences in lockstep, as many rows of each as the fewest any of them has left, and
each micro-batch is its own pass over the weights. So a request drafting K beside requests at K = 0
adds a micro-batch of K rows, and requests drafting different K add one each. Not a test: it
measures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive  # noqa: E402
from llamacpp_invariance import FILES  # noqa: E402

from specd.models.llamacpp.lib import Context, GGUFModel  # noqa: E402
from specd.models.run.embedded import EMBEDDED  # noqa: E402

# name -> rows per sequence, in sequence order (8 sequences unless it says otherwise)
SHAPES = {
    "one sequence, 1 row": [1],
    "one sequence, 4 rows": [4],
    "one sequence, 11 rows": [11],
    "8 x 1": [1] * 8,
    "7 x 1, then 2": [1] * 7 + [2],
    "7 x 1, then 4": [1] * 7 + [4],
    "6 x 1, then 4, 4": [1] * 6 + [4, 4],
    "5 x 1, then 2, 3, 4": [1] * 5 + [2, 3, 4],
    "4 x 1, then 4 x 2": [1] * 4 + [2] * 4,
    "1, 2 alternating": [1, 2] * 4,
    "8 x 2": [2] * 8,
    "8 x 4": [4] * 8,
}
BASE = "one sequence, 1 row"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(FILES), default="smollm")
    ap.add_argument("--context", type=positive, default=200)
    ap.add_argument("--repeats", type=positive, default=9)
    ap.add_argument("--threads", type=positive, default=2)
    args = ap.parse_args()
    model = GGUFModel(EMBEDDED[FILES[args.model]].gguf())
    ctx = Context(model, cells=max(1024, 2 * args.context), streams=8, threads=args.threads)
    rng = np.random.default_rng(0)
    n = args.context
    vocab = model.facts.vocab
    for seq in range(8):
        ctx.decode(rng.integers(10, vocab, n), np.arange(n), [seq] * n, np.arange(n) == n - 1)

    def timed(rows_per_seq: list[int]) -> float:
        tokens, positions, seqs = [], [], []
        for seq, rows in enumerate(rows_per_seq):
            tokens += rng.integers(10, vocab, rows).tolist()
            positions += range(n, n + rows)
            seqs += [seq] * rows
        started = time.perf_counter()
        ctx.decode(tokens, positions, seqs, [True] * len(tokens))
        seconds = time.perf_counter() - started
        for seq in range(len(rows_per_seq)):
            ctx.remove(seq, n)
        return seconds

    for shape in SHAPES.values():  # warm-up, untimed
        timed(shape)
    times: dict[str, list[float]] = {name: [] for name in SHAPES}
    for _ in range(args.repeats):
        for name, shape in SHAPES.items():
            times[name].append(timed(shape))
    base = statistics.median(times[BASE])
    print(f"{model.facts.description}, {args.threads} threads, {n} cached tokens a sequence, median of {args.repeats}")
    print("| rows per sequence | rows | ms | one-row calls |")
    print("|---|---|---|---|")
    for name, shape in SHAPES.items():
        ms = statistics.median(times[name])
        print(f"| {name} | {sum(shape)} | {ms * 1e3:.1f} | {ms / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
