"""End to end, this checkout against another (the commit before, as a git worktree), side by side:
``specd generate`` on a batch of grounded prompts, each run a fresh process importing specd from
one checkout, the two alternating.

    git worktree add /tmp/specd-before HEAD~1
    python benchmarks/commits.py --before /tmp/specd-before [--target embedded:gemma-3-270m]
        [--modes sampled,greedy] [--repeats 4] [--batch 8] [--max-new-tokens 96]

Prompts: the first ``--batch`` grounded prompts of benchmarks/grounded.py (summaries, passage QA,
code edits, copies, rewrites), decoded together. Sampled: temperature 0.7, seed 0; greedy: every
output of the two checkouts must be identical (checked, printed). Reported per mode: tokens per
second of decoding (``generate --json``'s ``tokens_per_second``; load and prefill excluded) and of
the whole run (emitted tokens / wall time), median of the repeats, and the ratio now / before.
Torch threads: ``--threads`` (2). Not a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.grounded import CATEGORIES  # noqa: E402

GROUNDED = ("summarization", "qa_passage", "code_edit", "copy_extract", "rewrite")


def prompts(n: int) -> list[str]:
    """The grounded prompts, round robin over the kinds, the first ``n``."""
    lists = [CATEGORIES[kind] for kind in GROUNDED if kind in CATEGORIES]
    out = [p for i in range(max(map(len, lists))) for ps in lists if i < len(ps) for p in [ps[i]]]
    return out[:n]


def run(checkout: Path, args, mode: str, prompt_file: str) -> dict:
    command = [sys.executable, "-m", "specd.cli", "generate", "--target", args.target, "--prompts-file", prompt_file]
    command += ["--batch-size", str(args.batch), "--max-new-tokens", str(args.max_new_tokens), "--json", "--seed", "0"]
    command += ["--temperature", "0" if mode == "greedy" else "0.7"]
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": str(args.threads)}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=checkout, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    doc = json.loads(done.stdout)
    stats = next(iter(doc["stats"].values()))
    tokens = [r["tokens"] for r in doc["results"]]
    emitted = sum(len(t) for t in tokens)
    return {"decode": stats["tokens_per_second"], "wall": emitted / stats["wall_time_s"], "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="another checkout of specd")
    parser.add_argument("--target", default="embedded:gemma-3-270m")
    parser.add_argument("--modes", default="sampled,greedy")
    parser.add_argument("--repeats", type=int, default=4, help="rounded up to an even count")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    checkouts = {"now": ROOT, "before": args.before.resolve()}
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = str(Path(tmp) / "prompts.jsonl")
        Path(prompt_file).write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts(args.batch)))
        print(f"{args.target}, batch {args.batch}, {args.max_new_tokens} new tokens, {args.threads} torch threads")
        print("| mode | now: decode tok/s | before: decode tok/s | decode now/before | wall now/before | outputs |")
        print("|---|---|---|---|---|---|")
        for mode in args.modes.split(","):
            runs: dict[str, list[dict]] = {name: [] for name in checkouts}
            # each checkout goes first equally often: here the first run of a pair is the slower
            # (measured: 0.92-0.93x with 3 repeats, 1.05-1.07x with 2 and 4, the same two commits)
            for rep in range(args.repeats + args.repeats % 2):
                for name in checkouts if rep % 2 == 0 else reversed(list(checkouts)):
                    runs[name].append(run(checkouts[name], args, mode, prompt_file))
            med = {n: {k: statistics.median(r[k] for r in rs) for k in ("decode", "wall")} for n, rs in runs.items()}
            same = runs["now"][0]["tokens"] == runs["before"][0]["tokens"]
            outputs = ("identical" if same else "DIFFER") if mode == "greedy" else ("identical" if same else "differ")
            cells = [mode, f"{med['now']['decode']:.1f}", f"{med['before']['decode']:.1f}"]
            cells += [f"{med['now']['decode'] / med['before']['decode']:.3f}"]
            cells += [f"{med['now']['wall'] / med['before']['wall']:.3f}", outputs]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
