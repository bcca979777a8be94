"""The rest of a round (the rule, staging, publication, cache commit: a round's time outside its
draft and verification blocks) by how many tokens the round drafted, as -k auto's costs record it.

    python benchmarks/round_rest.py [--half fit] [--temperature 0] [--per-kind 1] [--max-new-tokens 96]

The embedded SmolLM2 on its CPU default backend (llama.cpp) with its default drafts and -k auto,
the first ``--per-kind`` prompts of each kind of the half, each a fresh run with fresh measured
costs (``OnlineCosts``), every published round's ``RoundTiming`` read as the costs read it.
Sampled (``--temperature`` > 0): top-k 50, the default rule. Printed per K (the most any request
drafted in the round; 3 stands for 3 or more): the rounds, and the medians of the rest, the draft
block and the verification block in ms. Not a test: it measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive  # noqa: E402
from heldout import TARGETS, load_half  # noqa: E402

from specd.models.options import GenerateOptions  # noqa: E402
from specd.models.pipeline import Pipeline  # noqa: E402
from specd.policy.costs import OnlineCosts  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=("fit", "test"), default="fit")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--per-kind", type=positive, default=1)
    ap.add_argument("--max-new-tokens", type=positive, default=96)
    args = ap.parse_args()
    sampling = {"temperature": args.temperature, "top_k": 50} if args.temperature > 0 else {"temperature": 0.0}
    pipe = Pipeline.build(GenerateOptions(target=TARGETS["smollm"], max_new_tokens=args.max_new_tokens, **sampling))
    by_k: dict[int, list[tuple[float, float, float]]] = defaultdict(list)

    class Recorded(OnlineCosts):
        def observe(self, t):
            k = max((s.max_k for s in t.sources), default=0)
            by_k[min(k, 3)].append((t.other_seconds, t.draft_seconds, t.verify_seconds))
            super().observe(t)

    items = load_half(args.half, args.per_kind)
    for item in items:
        dataclasses.replace(pipe, costs=Recorded()).run([item], k="auto", record_log=False)
    print(f"{len(items)} prompts of the {args.half} half, T {args.temperature}, backend {pipe.target.backend}")
    print("| K | rounds | rest, ms | draft block, ms | verification, ms |")
    print("|---|---|---|---|---|")
    for k in sorted(by_k):
        rows = by_k[k]
        rest, draft, verify = (statistics.median(r[i] for r in rows) * 1e3 for i in range(3))
        print(f"| {k}{'+' if k == 3 else ''} | {len(rows)} | {rest:.2f} | {draft:.2f} | {verify:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
