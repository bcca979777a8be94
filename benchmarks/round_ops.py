"""Tensor operations per round: every torch function a round calls (a kernel launch each on a GPU,
where a small round's time is mostly their launch cost), counted by ``specd.core.host_reads.TorchCalls``
(the counter ``HostReads`` narrows to the reads from the device).

    python benchmarks/round_ops.py [--batch 1,16] [--k 3]

The oracle's table models (V = 2) with a sampled model draft at K, each rule in turn; ten rounds
(or fewer, when every request has finished) after the first. Printed per rule and batch: the
operations per round, and the five functions that call the most. Not a test: it counts.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive, positives  # noqa: E402

from specd.core.host_reads import TorchCalls  # noqa: E402
from specd.core.round import speculative_round  # noqa: E402
from specd.core.state import Request  # noqa: E402
from specd.oracles.fixture import OracleConfig, build_rig  # noqa: E402

ROUNDS = 10


def count(rule: str, batch: int, k: int) -> tuple[float, list[tuple[str, float]]]:
    rig = build_rig(OracleConfig(vocab=2, k=k)).but(rule=rule)
    session = rig.engine().start([Request(f"r{i}", rig.prompt, 60, seed=i) for i in range(batch)])
    speculative_round(session)  # the first round also fills the caches the others reuse
    calls, rounds = TorchCalls(), 0
    with calls:
        while not session.done and rounds < ROUNDS:
            speculative_round(session)
            rounds += 1
    by_caller: collections.Counter = collections.Counter()
    for (_, file, _, function), n in calls.where.items():
        by_caller[f"{file.rsplit('/', 1)[-1]}:{function}"] += n
    top = [(name, n / rounds) for name, n in by_caller.most_common(5)]
    return calls.count / rounds, top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=positives, default=[1, 16])
    parser.add_argument("--k", type=positive, default=3)
    args = parser.parse_args()
    print("| rule | batch | tensor operations per round | the most from |")
    print("|---|---|---|---|")
    for rule in ("maximal", "invariant", "block"):
        for batch in args.batch:
            per_round, top = count(rule, batch, args.k)
            where = ", ".join(f"{name} {n:.0f}" for name, n in top)
            print(f"| {rule} | {batch} | {per_round:.0f} | {where} |")


if __name__ == "__main__":
    main()
