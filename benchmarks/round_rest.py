"""The rest of a round (the rule, staging, publication, cache commit: a round's time outside its
draft and verification blocks) by how many tokens the round drafted, as -k auto's costs record it.

    python benchmarks/round_rest.py [--half fit] [--temperature 0] [--per-kind 1] [--max-new-tokens 96]
                                    [--kinds K1,K2] [--by-match]

The embedded SmolLM2 on its CPU default backend (llama.cpp) with its default drafts and -k auto,
the first ``--per-kind`` prompts of each kind of the half, each a fresh run with fresh measured
costs (``OnlineCosts``), every published round's ``RoundTiming`` read as the costs read it.
Sampled (``--temperature`` > 0): top-k 50, the default rule. Printed per K (the most any request
drafted in the round; 3 stands for 3 or more): the rounds, and the medians of the rest, the draft
block and the verification block in ms. ``--by-match``: also the drafted rounds by the match length
their lookup continued, in -k auto's tiers (``match_tier``: 1, 2-3, 4-7, ...), with how often the
first draft was kept and the mean accepted; the runs then record their acceptance logs, which the
rest includes. Not a test: it measures.
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

from specd.core.state import MATCH_TIERS, match_tier  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.policy.costs import OnlineCosts  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=("fit", "test"), default="fit")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--per-kind", type=positive, default=1)
    ap.add_argument("--max-new-tokens", type=positive, default=96)
    ap.add_argument("--kinds", default=None, help="only these kinds, comma-separated")
    ap.add_argument("--by-match", action="store_true", help="also the drafted rounds by match length")
    args = ap.parse_args()
    sampling = {"temperature": args.temperature, "top_k": 50} if args.temperature > 0 else {"temperature": 0.0}
    pipe = Pipeline.build(GenerateOptions(target=TARGETS["smollm"], max_new_tokens=args.max_new_tokens, **sampling))
    by_k: dict[int, list[tuple[float, float, float]]] = defaultdict(list)

    class Recorded(OnlineCosts):
        def observe(self, t):
            k = max((s.max_k for s in t.sources), default=0)
            by_k[min(k, 3)].append((t.other_seconds, t.draft_seconds, t.verify_seconds))
            super().observe(t)

    items = load_half(args.half, args.per_kind, args.kinds)
    by_match: dict[int, list[tuple[bool, int]]] = defaultdict(list)
    for item in items:
        run = dataclasses.replace(pipe, costs=Recorded()).run([item], k="auto", record_log=args.by_match)
        for outcome in run.result.commits:
            if outcome.draft_token_ids and outcome.match is not None:
                by_match[match_tier(outcome.match)].append((outcome.accepted > 0, outcome.accepted))
    print(f"{len(items)} prompts of the {args.half} half, T {args.temperature}, backend {pipe.target.backend}")
    print("| K | rounds | rest, ms | draft block, ms | verification, ms |")
    print("|---|---|---|---|---|")
    for k in sorted(by_k):
        rows = by_k[k]
        rest, draft, verify = (statistics.median(r[i] for r in rows) * 1e3 for i in range(3))
        print(f"| {k}{'+' if k == 3 else ''} | {len(rows)} | {rest:.2f} | {draft:.2f} | {verify:.2f} |")
    if args.by_match:
        print("| match length | drafted rounds | first draft kept | mean accepted |")
        print("|---|---|---|---|")
        for tier in sorted(by_match):
            rows = by_match[tier]
            kept, accepted = (statistics.mean(r[i] for r in rows) for i in range(2))
            lo, hi = 2**tier, 2 ** (tier + 1) - 1
            lengths = f"{lo}+" if tier == MATCH_TIERS - 1 else str(lo) if lo == hi else f"{lo}-{hi}"
            print(f"| {lengths} | {len(rows)} | {kept:.2f} | {accepted:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
