"""Fit -k auto's lookup constants (specd.policy.autok: match_prior, COPY_MEMORY) on the held-out corpus's fit half.

    python benchmarks/fit_match_prior.py [--half fit] [--sampled] [--k 32] [--copy MEMORY,CEILING]
                                         [--max-new-tokens 96] [--threads 2]

The embedded SmolLM2 target (on its default backend), greedy, ``--draft suffix -k K`` (a fixed K,
32 by default, so that every match is drafted from, whatever its length, and a copy is followed as
deep as -k auto may draft it: under ``-k auto`` the prior itself would choose which matches and
positions are observed). Every round that drafted records the length L of the match its drafts continued
and whether the first draft was accepted. The prior's form is L^a / (L^a + c); (a, c) are fit by
maximum likelihood on a grid. Along a greedy copy, the draft at position j >= 2 (reached after
j - 1 accepted) is kept with (m c' + u (j - 1)) / (c' + j - 1), m = match_prior(L) (``match_profile``):
it rises from m toward u; the pseudo-count c' (COPY_MEMORY) and the ceiling u (COPY_CEILING) are fit
the same way, jointly. Printed: the observed first-draft
acceptance by match length, the fitted constants, and the mean log-likelihood per draft of the
fitted and of the shipped constants.

``--half test`` evaluates the shipped constants on the test half without fitting (the held-out
check the report reads); fitting reads only the fit half. ``--copy MEMORY,CEILING``: also the
log-likelihood along a copy of those constants (say, the ones shipped before a refit), on either half.

``--sampled`` asks whether a sampled target needs a prior of its own: the same rounds at temperature
0.7, top-k 50 (the default rule, seed 0), the first drafts' acceptance by match length, the shipped
(greedy-fit) prior's log-likelihood on them and, on the fit half, that of constants fit to them.
Nothing is fit along a copy (a sampled draft is kept alike at every position).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import copy_pair, positive  # noqa: E402
from heldout import TARGETS, load_half  # noqa: E402

from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.policy.autok import COPY_CEILING, COPY_MEMORY, MATCH_PRIOR_ODDS, MATCH_PRIOR_POWER  # noqa: E402

TIERS = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 8), (9, 16), (17, 10**9))


SAMPLING = {"temperature": 0.7, "top_k": 50, "seed": 0}


def drafted_rounds(half: str, max_new: int, k: int, sampled: bool = False) -> list[tuple[int, int, int]]:
    """(match length, drafts, accepted) for every round that drafted from the suffix lookup."""
    sampling = SAMPLING if sampled else {"temperature": 0.0}
    options = GenerateOptions(target=TARGETS["smollm"], draft="suffix", max_new_tokens=max_new, **sampling)
    pipe = Pipeline.build(options)
    rounds: list[tuple[int, int, int]] = []

    def collect(result, log) -> None:
        for rec in log.rounds:
            row = rec.round_row()
            if row["k"] >= 1 and row["match"]:
                rounds.append((row["match"], row["k"], row["accepted"]))

    pipe.run(load_half(half), k=k, on_finish=collect)
    return rounds


def copy_log_likelihood(rounds, memory: float, ceiling: float, power: float, odds: float) -> float:
    """Mean log-likelihood per draft at positions j >= 2 under match_profile's rising rate."""
    total, n = 0.0, 0
    for match, k, accepted in rounds:
        m = match**power / (match**power + odds)
        for j in range(2, min(accepted + 1, k) + 1):  # drafts reached after the first was kept
            p = (m * memory + ceiling * (j - 1)) / (memory + j - 1)
            total += math.log(p if j <= accepted else 1.0 - p)
            n += 1
    return total / max(n, 1)


def log_likelihood(outcomes, power: float, odds: float) -> float:
    """Mean log-likelihood per draft of acceptance L^power / (L^power + odds)."""
    total = 0.0
    for match, accepted in outcomes:
        p = match**power / (match**power + odds)
        total += math.log(p if accepted else 1.0 - p)
    return total / len(outcomes)


def fit(outcomes) -> tuple[float, float]:
    grid = [(a / 20, c / 20) for a in range(10, 81) for c in range(10, 201)]  # a in 0.5..4, c in 0.5..10
    return max(grid, key=lambda ac: log_likelihood(outcomes, *ac))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--half", choices=("fit", "test"), default="fit")
    ap.add_argument("--k", type=positive, default=32, help="the fixed K of the rounds observed")
    ap.add_argument("--copy", type=copy_pair, default=None, help="MEMORY,CEILING: evaluate these along a copy too")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sampled", action="store_true", help="temperature 0.7, top-k 50: does it need its own prior?")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rounds = drafted_rounds(args.half, args.max_new_tokens, args.k, args.sampled)
    outcomes = [(match, accepted >= 1) for match, _, accepted in rounds]
    by_tier: dict[tuple[int, int], list[bool]] = defaultdict(list)
    for match, accepted in outcomes:
        by_tier[next(t for t in TIERS if t[0] <= match <= t[1])].append(accepted)
    print(f"{args.half} half{', sampled' if args.sampled else ''}: {len(outcomes)} first drafts")
    for lo, hi in TIERS:
        seen = by_tier.get((lo, hi), [])
        if seen:
            label = f"{lo}" if lo == hi else f"{lo}-{hi}" if hi < 10**9 else f">={lo}"
            print(f"  match {label}: {sum(seen) / len(seen):.2f} accepted of {len(seen)}")
    shipped = log_likelihood(outcomes, MATCH_PRIOR_POWER, MATCH_PRIOR_ODDS)
    print(f"shipped (a, c) = ({MATCH_PRIOR_POWER}, {MATCH_PRIOR_ODDS}): log-likelihood per draft {shipped:.4f}")
    if args.half == "fit":
        a, c = fit(outcomes)
        print(f"fitted  (a, c) = ({a}, {c}): log-likelihood per draft {log_likelihood(outcomes, a, c):.4f}")
    else:
        a, c = MATCH_PRIOR_POWER, MATCH_PRIOR_ODDS
    if args.sampled:
        return
    shipped = copy_log_likelihood(rounds, COPY_MEMORY, COPY_CEILING, a, c)
    print(
        f"along a copy: shipped COPY_MEMORY, COPY_CEILING = {COPY_MEMORY}, {COPY_CEILING}: "
        f"log-likelihood per draft {shipped:.4f}"
    )
    if args.half == "fit":
        grid = [(m / 4, u / 1000) for m in range(1, 161) for u in range(900, 1001, 2)]
        memory, ceiling = max(grid, key=lambda mu: copy_log_likelihood(rounds, *mu, a, c))
        fitted = copy_log_likelihood(rounds, memory, ceiling, a, c)
        print(
            f"along a copy: fitted  COPY_MEMORY, COPY_CEILING = {memory}, {ceiling}: "
            f"log-likelihood per draft {fitted:.4f}"
        )
    if args.copy:
        memory, ceiling = args.copy
        other = copy_log_likelihood(rounds, memory, ceiling, a, c)
        print(f"along a copy: --copy {memory}, {ceiling}: log-likelihood per draft {other:.4f}")


if __name__ == "__main__":
    main()
