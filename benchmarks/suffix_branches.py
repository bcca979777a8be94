"""Would verifying several suffix continuations in one call pay? A bound from the fit half.

    python benchmarks/suffix_branches.py [--half fit] [--kinds grounded|open|all] [--ks 1,3,8]
                                         [--threads 2] [--max-new-tokens 96]

Issue 36 asks whether a small tree of the suffix automaton's continuations, verified in the
target's one call, would buy what one longer draft cannot where the first continuation fails.
This script answers before anything is built, on the fit half (a tuning decision reads only it):

1. The target's greedy text for every prompt of the half (specd target-only, batches of 8).
2. Per position of that text, the lookup's draft (``SuffixIndex.lookup``, what ``--draft suffix``
   proposes) and every other continuation of the same match: the distinct tokens that followed
   the matched suffix's earlier occurrences, each continued from its latest occurrence. Counted:
   where the first continuation's first token is not the target's, how often another one's is.
3. Greedy decoding replayed at a fixed K without timing noise: one branch (today) against a tree
   of the first continuation and the latest other one (2 branches), or every other one (all),
   branching at the root, each up to K tokens; the round keeps the longest branch the target
   agrees with. Rounds, verification rows, and
   the time in plain target steps, from the target's call timed here at each row count (median
   of ``--repeats`` calls, 2 torch threads by default, interleaved across row counts): a
   prediction from measured costs, not a measured speedup.

A greedy text is the target's alone, so a branch's accepted length is the common prefix of the
branch and the text; the tree's time bound is an upper bound on what a tree could gain, since it
pays no mask, position or commit work beyond its rows. Not a test: it measures.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive, positives  # noqa: E402
from heldout import GROUNDED, OPEN, Systems, load_half  # noqa: E402

from specd.core.model import RowInput  # noqa: E402
from specd.core.suffix import SuffixIndex  # noqa: E402


def alternatives(tokens: list[int], match: int, first: int, k: int) -> list[tuple[int, ...]]:
    """Every continuation (up to k tokens) of the last ``match`` tokens' earlier occurrences whose
    first token is not ``first``: one per distinct next token, from its latest occurrence."""
    n, suffix, latest = len(tokens), tokens[-match:], {}
    for end in range(match - 1, n - 1):
        if tokens[end - match + 1 : end + 1] == suffix and tokens[end + 1] != first:
            latest[tokens[end + 1]] = end
    return [tuple(tokens[end + 1 : end + 1 + k]) for end in sorted(latest.values())]


def agreed(branch: tuple[int, ...], text: list[int], at: int) -> int:
    """How many of ``branch``'s tokens the greedy text continues with from position ``at``."""
    n = 0
    while n < len(branch) and at + n < len(text) and branch[n] == text[at + n]:
        n += 1
    return n


def replay(prompt: list[int], text: list[int], k: int, width: int) -> tuple[int, list[int]]:
    """Greedy decoding of ``text`` at K = k with the suffix lookup -> (rounds, rows of each round's
    verification call); ``width``: branches verified (the draft and, past 1, other continuations
    of the match, the latest first; 0: all of them)."""
    index = SuffixIndex()
    for token in prompt:
        index.extend(token)
    rounds, rows, at = 0, [], 0
    while at < len(text):
        draft, match = index.lookup(k)
        branches = [draft] if draft else []
        if width != 1 and draft:
            others = alternatives(index.tokens, match, draft[0], k)[::-1]
            branches += others if width == 0 else others[: width - 1]
        kept = max((agreed(b, text, at) for b in branches), default=0)
        rows.append(1 + sum(len(b) for b in branches))
        emitted = min(kept + 1, len(text) - at)
        for token in text[at : at + emitted]:
            index.extend(token)
        at += emitted
        rounds += 1
    return rounds, rows


def first_token_counts(prompt: list[int], text: list[int]) -> Counter:
    """Per position of the text: is there a match, does the draft's first token hold, and where it
    does not, does another continuation's (by match length: 1, 2-3, 4 or more)."""
    index, counts = SuffixIndex(), Counter()
    for token in prompt:
        index.extend(token)
    for token in text:
        draft, match = index.lookup(1)
        if not draft:
            counts["no match"] += 1
        else:
            tier = "L=1" if match == 1 else "L=2-3" if match <= 3 else "L>=4"
            if draft[0] == token:
                counts[f"{tier} first holds"] += 1
            else:
                counts[f"{tier} first fails"] += 1
                if any(a[0] == token for a in alternatives(index.tokens, match, draft[0], 1)):
                    counts[f"{tier} another holds"] += 1
        index.extend(token)
    return counts


def call_seconds(lm, context: int, row_counts, repeats: int) -> dict[int, float]:
    """R -> median seconds of one target call of R rows after ``context`` tokens (forms decided first)."""
    cache = lm.new_cache()
    cache.open(0)
    lm.step(cache, [RowInput(0, tuple(range(100, 100 + context)), tuple(range(context)))], logits_for=0)
    cache.commit(0, context)
    times: dict[int, list[float]] = {r: [] for r in row_counts}
    for rep in range(repeats + 3):  # the first 3 untimed: each row count's product forms are decided
        for r in row_counts if rep % 2 else reversed(row_counts):
            started = time.perf_counter()
            lm.step(cache, [RowInput(0, tuple(range(7, 7 + r)), tuple(range(context, context + r)))])
            if rep >= 3:
                times[r].append(time.perf_counter() - started)
            cache.commit(0, 0)
            cache.tidy()
    return {r: median(v) for r, v in times.items()}


def steps(rows: int, cost: dict[int, float]) -> float:
    """A call of ``rows`` rows in plain target steps (linear between the row counts timed)."""
    known = sorted(cost)
    if rows in cost:
        return cost[rows] / cost[1]
    lo = max((r for r in known if r < rows), default=known[0])
    hi = min((r for r in known if r > rows), default=known[-1])
    if hi == lo:
        return cost[hi] * rows / hi / cost[1]
    return (cost[lo] + (cost[hi] - cost[lo]) * (rows - lo) / (hi - lo)) / cost[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--half", choices=("fit", "test"), default="fit")
    ap.add_argument("--kinds", choices=("grounded", "open", "all"), default="all")
    ap.add_argument("--ks", type=positives, default=[1, 3, 8], help="fixed K values, comma-separated")
    ap.add_argument("--threads", type=positive, default=2)
    ap.add_argument("--max-new-tokens", type=positive, default=96)
    ap.add_argument("--repeats", type=positive, default=7)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ks = a.ks
    systems = Systems("smollm", a.max_new_tokens)
    kinds = {"grounded": GROUNDED, "open": OPEN, "all": GROUNDED + OPEN}[a.kinds]
    items = load_half(a.half, None, ",".join(kinds))
    run = systems.pipe.run(items, baseline=True, record_log=False, batch_size=8)
    texts = [(it.tag, list(systems.pipe.encode(it)), list(r.tokens)) for it, r in zip(items, run.results)]
    print(f"SmolLM2, {a.half} half, {a.kinds} kinds: {len(texts)} prompts, {sum(len(t) for *_, t in texts)} tokens")

    for group, members in (("grounded", GROUNDED), ("open", OPEN)):
        counts = sum((first_token_counts(p, t) for tag, p, t in texts if tag in members), Counter())
        if counts:
            print(f"\n{group}: the lookup's first token, per position of the greedy text")
            for tier in ("L=1", "L=2-3", "L>=4"):
                holds, fails = counts[f"{tier} first holds"], counts[f"{tier} first fails"]
                other = counts[f"{tier} another holds"]
                print(f"  match {tier:6s} first holds {holds:5d}, fails {fails:5d}, of which another holds {other:4d}")
            print(f"  no match {counts['no match']}")

    longest = max(len(p) + len(t) for _, p, t in texts)
    widths = (1, 2, 0)  # one branch (today), two, all
    replays = {
        (group, k, width): [replay(p, t, k, width) for tag, p, t in texts if tag in members]
        for group, members in (("grounded", GROUNDED), ("open", OPEN))
        for k in ks
        for width in widths
    }
    needed = sorted({r for runs in replays.values() for _, rows in runs for r in rows} | {1})
    grid = sorted({r for r in needed if r <= 8} | {r for r in (12, 17, 25, 33, 49, 65) if r <= max(needed) * 2} | {1})
    cost = call_seconds(systems.pipe.target, min(longest, 400), grid, a.repeats)
    print(
        f"\nthe target's call, plain steps by rows (median of {a.repeats}, {a.threads} threads): "
        + ", ".join(f"{r}: {cost[r] / cost[1]:.2f}" for r in grid)
    )
    print(
        "\n| kinds | K | branches | rounds | verification rows | predicted speedup over target-only | over one branch |"
    )
    print("|---|---|---|---|---|---|---|")
    for group, members in (("grounded", GROUNDED), ("open", OPEN)):
        tokens = sum(len(t) for tag, _, t in texts if tag in members)
        if not tokens:
            continue
        for k in ks:
            one = None
            for width in widths:
                runs = replays[(group, k, width)]
                rows = [r for _, rr in runs for r in rr]
                spent = sum(steps(r, cost) for r in rows) / tokens
                one = one or spent
                name = {1: "1 (today)", 2: "2", 0: "all"}[width]
                cells = (group, k, name, sum(n for n, _ in runs), sum(rows), f"{1 / spent:.3f}x", f"{one / spent:.3f}x")
                print("| " + " | ".join(map(str, cells)) + " |")


if __name__ == "__main__":
    main()
