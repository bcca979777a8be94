"""How fast any draft could make greedy decoding on llama.cpp, per held-out prompt: the ceiling
under issue 49's targets, from this machine's own costs.

    python benchmarks/llamacpp_bound.py [--model smollm] [--half test] [--per-kind N] [--kinds K1,K2]
                                        [--max-new-tokens 96] [--rows 1,2,3,4,5,6,8,9,12,17,33]
                                        [--k-max 32] [--copy MEMORY,CEILING] [--repeats 5] [--json FILE]

Per prompt of the test half (``benchmarks/corpus/test.jsonl``; ``--half fit``: the fit half), on the
embedded model's GGUF file, 2 threads (torch's setting, as benchmarks/llamacpp.py):

1. llama.cpp's plain greedy decoding (llama-cpp-python's ``Llama.generate``, q8_0 keys: specd's
   tokens, benchmarks/llamacpp.py), timed end to end (P + D) and its prefill alone (P: the prompt
   in one call), twice each, alternated; medians. D is the decode phase, T its tokens.
2. The cost c(n) of a call scoring n rows of one request at this prompt's context (prompt + T / 2
   cells), through specd's llama.cpp backend (benchmarks/row_costs.py's ``timed_calls``), in units
   of a one-row call; between measured row counts, linear.
3. Two ceilings on the decode phase's speedup, each counting the T tokens of the same text:
   - **perfect draft**: every call's n rows become n tokens (n - 1 drafts, all kept, drafted for
     free, and the bonus): at best max_n n / c(n). No draft of any kind does better at these costs.
   - **best lookup**: specd's suffix lookup (``specd.core.suffix.SuffixIndex``, the only draft the
     embedded SmolLM2 file has on this backend) proposes its continuation at every position of
     this text; a round drafting K of it keeps the proposal's longest prefix that the text
     continues, plus one token, and costs c(K + 1). The fewest call units over the text, K chosen
     per round with hindsight (a dynamic program over positions, K = 0..n_max - 1): no -k policy
     over this lookup does better, at zero cost for the lookup itself.
   Beside them, what specd's own policy makes of the same lookup: **-k auto** (``AutoK``, greedy,
   K up to ``--k-max``) replayed round by round over the text at this curve, its history kept as
   the engine keeps it (the rounds' K per prompt are in ``--json``). Its gap to the best lookup is
   the policy's (it cannot see which proposals are right); its gap to specd's measured default
   (benchmarks/llamacpp.py) is specd's time outside llama.cpp's calls.
   ``--copy MEMORY,CEILING`` replays -k auto a second time with those copy constants in place of
   specd.policy.autok's (say, the ones before a refit) and prints the two side by side.
   Each figure, end to end against llama.cpp plain: (P + D) / (P + D / s), where s is the
   decode speedup in call units: the prefill is the same call in both, and D is plain's own decode
   time, so specd's round overhead is counted as llama-cpp-python's (in specd's favour).

Printed per kind, and the medians over the grounded and the open kinds: plain tokens/s, the
prefill's share P / (P + D), the ceilings and -k auto on the decode phase and end to end, and the
targets the ceilings bound (issue 49: default >= 1.5x plain on grounded kinds (median), >= 1.0x on
every open kind). Not a test: it measures; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import copy_pair, positive, positives  # noqa: E402
from heldout import GROUNDED, OPEN, TARGETS, load_half, refuse_outputs  # noqa: E402
from llamacpp import llama, plain_tokens  # noqa: E402
from row_costs import timed_calls  # noqa: E402
from tree_rounds import Replayed  # noqa: E402

import specd.policy.autok as autok  # noqa: E402
from specd.core.sources import Offer  # noqa: E402
from specd.core.state import MATCH_TIERS, match_tier  # noqa: E402
from specd.core.suffix import SuffixIndex  # noqa: E402
from specd.files import write_text_atomic  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.policy.autok import AutoK  # noqa: E402
from specd.policy.costs import FixedCosts, row_curve  # noqa: E402
from specd.policy.kpolicy import DEFAULT_K_MAX  # noqa: E402
from specd.policy.row_costs import RowCosts  # noqa: E402

SOURCE = "suffix"


def curve(points: dict[int, float], n_max: int) -> list[float]:
    """c(n) for n = 0..n_max in one-row units (c(0) unused), linear between measured row counts (the
    ledger's own curve, ``specd.policy.costs.row_curve``)."""
    at = row_curve(points.items())
    return [0.0] + [at(n) / points[1] for n in range(1, n_max + 1)]


def perfect_speedup(cost: list[float]) -> float:
    """max_n n / c(n): every row of every call a kept token."""
    return max(n / cost[n] for n in range(1, len(cost)))


def lookup_speedup(prompt: list[int], text: list[int], cost: list[float]) -> float:
    """T / the fewest call units in which rounds drafting from the suffix lookup emit ``text``."""
    index = SuffixIndex()
    for token in prompt:
        index.extend(token)
    k_max = len(cost) - 2
    kept = []  # per position t: how many of the proposal's tokens the text continues (up to k_max)
    for t, token in enumerate(text):
        proposal, _ = index.lookup(k_max)
        a = 0
        while a < len(proposal) and t + a < len(text) and proposal[a] == text[t + a]:
            a += 1
        kept.append((a, len(proposal)))
        index.extend(token)
    n = len(text)
    best = [0.0] * (n + 1)  # best[t]: the fewest call units from position t to the text's end
    for t in range(n - 1, -1, -1):
        a, offered = kept[t]
        best[t] = min(cost[k + 1] + best[min(n, t + min(a, k) + 1)] for k in range(0, min(offered, k_max) + 1))
    return n / best[0]


def policy_speedup(
    prompt: list[int], text: list[int], points: dict[int, float], k_max: int, max_new: int
) -> tuple[float, dict]:
    """T / the call units -k auto spends emitting ``text`` with the suffix lookup (specd's default on
    this backend), its real policy (``AutoK``, greedy) replayed round by round at this prompt's curve
    (``CurveCosts``: a call of n rows costs c(n), the lookup nothing), its history kept as the engine
    keeps it, ``max_new`` its token budget -> (speedup, K -> rounds)."""
    costs = FixedCosts(RowCosts(tuple(sorted((n, v / points[1]) for n, v in points.items()))).costs())
    policy = AutoK(k_max, 1, costs, greedy=True, lookup_first=True)
    index = SuffixIndex()
    for token in prompt:
        index.extend(token)
    state, units, ks = Replayed(max_new), 0.0, {}  # tree_rounds' replayed request: history, budget, at
    while (at := state.at) < len(text):
        proposal, match = index.lookup(min(k_max, state.draft_budget))
        plan = policy.plan(state, [Offer(0, SOURCE, match=match)] if proposal else [])
        k = min(plan.k, len(proposal))
        kept = 0
        while kept < k and at + kept < len(text) and proposal[kept] == text[at + kept]:
            kept += 1
        state.history = state.history.after(k, kept, SOURCE, match) if k else state.history.after(0, 0)
        emitted = text[at : at + kept + 1]
        for token in emitted:
            index.extend(token)
        units += costs.model.target(k + 1)
        ks[k] = ks.get(k, 0) + 1
        state.at += len(emitted)
    return len(text) / units, ks


def tier_speedups(texts, cost: list[list[float]], k_max: int, max_new: int) -> tuple[list[float], dict[int, int]]:
    """Per text (prompt, text), T / the call units of rounds whose K is a fixed function of the
    lookup's match tier (``match_tier``: 1, 2-3, 4-7, 8-15, 16+ tokens; K = 0 without a match),
    the map chosen with hindsight over all ``texts`` at once (coordinate ascent on the summed
    tokens per unit, from K = 0 everywhere, until no tier's K moves; K capped by the ``max_new``
    budget as the engine caps it): about the most a rule reading only the match length could make of
    this lookup here, in the same units -> (speedups, tier -> K). ``cost[i]``: text i's c(n)."""

    def units(k_of: dict[int, int], i: int) -> float:
        prompt, text = texts[i]
        index = SuffixIndex()
        for token in prompt:
            index.extend(token)
        at, total = 0, 0.0
        while at < len(text):
            proposal, match = index.lookup(k_max)
            k = min(k_of[match_tier(match)] if proposal else 0, len(proposal), max(0, max_new - at - 1))
            kept = 0
            while kept < k and at + kept < len(text) and proposal[kept] == text[at + kept]:
                kept += 1
            for token in text[at : at + kept + 1]:
                index.extend(token)
            total += cost[i][k + 1]
            at += kept + 1
        return total

    def score(k_of):
        return sum(len(texts[i][1]) / units(k_of, i) for i in range(len(texts)))

    k_of = {tier: 0 for tier in range(MATCH_TIERS)}
    best, moved = score(k_of), True
    while moved:
        moved = False
        for tier in k_of:
            for k in range(k_max + 1):
                trial = k_of | {tier: k}
                value = score(trial)
                if value > best + 1e-12:
                    best, k_of, moved = value, trial, True
    return [len(texts[i][1]) / units(k_of, i) for i in range(len(texts))], k_of


@contextlib.contextmanager
def copy_constants(memory: float, ceiling: float):
    """-k auto's copy constants (specd.policy.autok.COPY_MEMORY, COPY_CEILING) set to others for a
    replay: a comparison with the rule as it was, in one run."""
    kept = autok.COPY_MEMORY, autok.COPY_CEILING
    autok.COPY_MEMORY, autok.COPY_CEILING = memory, ceiling
    try:
        yield
    finally:
        autok.COPY_MEMORY, autok.COPY_CEILING = kept


def timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm", choices=sorted(TARGETS))
    ap.add_argument("--half", default="test", choices=("fit", "test"))
    ap.add_argument("--per-kind", type=positive, default=None, help="the first N prompts of each kind")
    ap.add_argument("--kinds", default=None, help="only these kinds, comma-separated")
    ap.add_argument("--max-new-tokens", type=positive, default=96)
    ap.add_argument("--rows", type=positives, default=[1, 2, 3, 4, 5, 6, 8, 9, 12, 17, 33])
    ap.add_argument("--k-max", type=positive, default=DEFAULT_K_MAX, help="-k auto's largest K (specd's default)")
    ap.add_argument(
        "--copy",
        type=copy_pair,
        default=None,
        help="MEMORY,CEILING: also replay -k auto with these copy constants",
    )
    ap.add_argument("--repeats", type=positive, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if 1 not in args.rows or 2 not in args.rows:
        ap.error("--rows must hold 1 and 2")
    if max(args.rows) < args.k_max + 1:  # every plan, hindsight's included, is priced on measured calls
        ap.error(f"--rows must reach --k-max + 1 = {args.k_max + 1}, the call of a round that drafts K = --k-max")
    other = args.copy
    refuse_outputs("llamacpp_bound.py", {"--json": args.json})
    items = load_half(args.half, args.per_kind, args.kinds)
    threads = torch.get_num_threads()
    pipe = Pipeline.build(
        GenerateOptions(target=TARGETS[args.model], max_new_tokens=args.max_new_tokens, backend="llama.cpp")
    )
    plain = llama(str(pipe.target.file.path), threads, k_type="q8_0")
    n_max = max(args.rows)
    print(f"## {args.model} on llama.cpp: {len(items)} prompts, {threads} threads", flush=True)
    plain_tokens(plain, list(pipe.encode(items[0]))[:32], 8, pipe.eos_ids)  # warm-up, untimed
    rows, texts, costs = [], [], []
    for item in items:
        ids = list(pipe.encode(item))
        whole, prefill = [], []
        for _ in range(2):
            plain.reset()
            prefill.append(timed(plain.eval, ids))
            started = time.perf_counter()
            tokens = plain_tokens(plain, ids, args.max_new_tokens, pipe.eos_ids)
            whole.append(time.perf_counter() - started)
        p, total = statistics.median(prefill), statistics.median(whole)
        context = len(ids) + len(tokens) // 2
        measured = timed_calls([pipe.target], [args.rows], context, args.repeats, pipe.device)[0]
        cost = curve(measured, n_max)
        s_perfect, s_lookup = perfect_speedup(cost), lookup_speedup(ids, tokens, cost)
        s_auto, ks = policy_speedup(ids, tokens, measured, args.k_max, args.max_new_tokens)
        if other is not None:
            with copy_constants(*other):
                s_other, _ = policy_speedup(ids, tokens, measured, args.k_max, args.max_new_tokens)
        d = total - p
        row = {
            "request_id": item.request_id,
            "kind": item.tag,
            "prompt_tokens": len(ids),
            "new_tokens": len(tokens),
            "plain_tokens_per_s": len(tokens) / total,
            "prefill_share": p / total,
            "row_costs": {n: cost[n] for n in args.rows},
            "perfect_decode": s_perfect,
            "lookup_decode": s_lookup,
            "perfect_end_to_end": total / (p + d / s_perfect),
            "lookup_end_to_end": total / (p + d / s_lookup),
            "auto_decode": s_auto,
            "auto_end_to_end": total / (p + d / s_auto),
            "auto_k_rounds": ks,
            "tokens": tokens,
            "seconds": {"prefill": p, "end_to_end": total},
        }
        if other is not None:
            row["auto_with_copy_decode"] = s_other
        rows.append(row)
        texts.append((ids, tokens))
        costs.append(cost)
        print(
            f"  {item.request_id}: {len(ids)} prompt tokens, {len(tokens)} new, "
            f"plain {row['plain_tokens_per_s']:.1f}/s, prefill {row['prefill_share']:.2f}, "
            f"c(2) {cost[2]:.2f}, c(9) {cost[9]:.2f}; ceilings: perfect {row['perfect_end_to_end']:.2f}x, "
            f"lookup {row['lookup_end_to_end']:.2f}x, -k auto {row['auto_end_to_end']:.2f}x "
            f"(decode {s_perfect:.2f}x, {s_lookup:.2f}x, {s_auto:.2f}x)",
            flush=True,
        )
    by_tier, k_of = tier_speedups(texts, costs, args.k_max, args.max_new_tokens)
    print(f"best K per match tier over these prompts (tiers 1, 2-3, 4-7, 8-15, 16+): {list(k_of.values())}")
    for row, s_tier in zip(rows, by_tier):
        p, total = row["seconds"]["prefill"], row["seconds"]["end_to_end"]
        row["tier_decode"], row["tier_end_to_end"] = s_tier, total / (p + (total - p) / s_tier)
    groups = {kind: (kind,) for kind in (*GROUNDED, *OPEN)} | {"grounded": GROUNDED, "open": OPEN}
    fields = ("plain_tokens_per_s", "prefill_share")
    whos = ("perfect", "lookup", "tier", "auto")
    fields += tuple(f"{who}_{where}" for where in ("decode", "end_to_end") for who in whos)
    print(
        "\n| kind | prompts | llama.cpp plain tokens/s | prefill share | decode: perfect draft | best lookup | "
        "best K by tier | -k auto | end to end: perfect draft | best lookup | best K by tier | -k auto |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for group, kinds in groups.items():
        mine = [r for r in rows if r["kind"] in kinds]
        if not mine:
            continue
        summary[group] = {f: statistics.median(r[f] for r in mine) for f in fields} | {"prompts": len(mine)}
        s = summary[group]
        print(
            f"| {group} | {len(mine)} | {s['plain_tokens_per_s']:.1f} | {s['prefill_share']:.2f} | "
            + " | ".join(f"{s[f]:.2f}x" for f in fields[2:])
            + " |"
        )
    if other is not None:
        mine = [r["auto_with_copy_decode"] for r in rows]
        change = [r["auto_decode"] / r["auto_with_copy_decode"] for r in rows]
        grounded = [r for r in rows if r["kind"] in GROUNDED]
        print(
            f"-k auto, decode, shipped copy constants ({autok.COPY_MEMORY}, {autok.COPY_CEILING}) against --copy "
            f"{other[0]}, {other[1]}: grounded median {summary['grounded']['auto_decode']:.3f}x against "
            f"{statistics.median(r['auto_with_copy_decode'] for r in grounded):.3f}x; mean of all "
            f"{statistics.mean(r['auto_decode'] for r in rows):.3f}x against {statistics.mean(mine):.3f}x; "
            f"per prompt {min(change):.2f}-{max(change):.2f} of it (median {statistics.median(change):.3f})"
        )
    if "grounded" in summary:
        for name in ("perfect_end_to_end", "lookup_end_to_end"):
            v = summary["grounded"][name]
            verdict = "within reach" if v >= 1.5 else "OUT OF REACH"
            print(f"grounded median, {name}: {v:.2f}x against the 1.5x target: {verdict}")
    for kind in (k for k in OPEN if k in summary):
        v = summary[kind]["lookup_end_to_end"]
        print(f"{kind}: best lookup {v:.2f}x against 1.0x: {'within reach' if v >= 1.0 else 'OUT OF REACH'}")
    if args.json:
        doc = {"prompts": rows, "summary": summary, "k_by_tier": list(k_of.values())}
        write_text_atomic(args.json, json.dumps(doc, indent=1) + "\n", "--json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
