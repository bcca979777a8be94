"""``specd verify-oracle`` timed, this checkout against another (the commit before, as a git worktree),
side by side: each command a fresh process importing specd from one checkout, the two alternating.

    git worktree add /tmp/specd-before HEAD~1
    flock /tmp/specd-cpu.lock python benchmarks/oracle_time.py --before /tmp/specd-before [--repeats 5]
        [--command "verify-oracle --vocab 2 --k 3"] ...

Default commands: the engine's default run, and the default check of a tree sampler and of a chain
sampler (specd's own rule, llama.cpp's, the correct sampler of docs/oracle.md). Reported per command:
the oracle's work (``elapsed_s`` of ``--json``) and the whole command's wall time, median and range of
the repeats, and the ratio now / before of the medians. Run it under the CPU lock: on a shared machine
the ratio is the figure to read. Not a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arguments import positive  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (
    "verify-oracle --vocab 2 --k 3",
    "verify-oracle --sampler specd --tree 2,2 --vocab 3",
    "verify-oracle --sampler llamacpp --tree 2,2 --vocab 3",
    "verify-oracle --sampler specd",
)


def run(checkout: Path, command: str) -> tuple[float, float]:
    """One fresh process of ``specd COMMAND --json`` importing specd from ``checkout`` -> (oracle work,
    wall time), in seconds."""
    argv = [sys.executable, "-m", "specd.cli", *shlex.split(command), "--json"]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=checkout, timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{checkout}: {command}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    return json.loads(done.stdout)["elapsed_s"], wall


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout (a git worktree)")
    parser.add_argument("--repeats", type=positive, default=5)
    parser.add_argument("--command", action="append", help="a specd command line (repeatable)")
    args = parser.parse_args()
    if not (args.before / "specd").is_dir():
        parser.error(f"--before {args.before}: not a checkout of specd (no specd/ folder in it)")
    for command in args.command or COMMANDS:
        times: dict[str, list[tuple[float, float]]] = {"now": [], "before": []}
        for _ in range(args.repeats):
            for label, checkout in (("now", ROOT), ("before", args.before)):
                times[label].append(run(checkout, command))
        print(f"specd {command}")
        for label, runs in times.items():
            work, wall = [w for w, _ in runs], [w for _, w in runs]
            print(f"  {label:6s} oracle work {spread(work)}, wall {spread(wall)}")
        ratio = statistics.median(w for w, _ in times["now"]) / statistics.median(w for w, _ in times["before"])
        print(f"  now / before (oracle work, medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
