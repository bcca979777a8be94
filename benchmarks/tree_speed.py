"""Tokens per second of -k auto choosing shapes (--tree auto) against -k auto over chains, side by side.

    python benchmarks/tree_speed.py [--half test] [--pairs default,weak] [--temperatures 0,0.7]
                                    [--tree-budget 16] [--per-kind N] [--max-new-tokens 64] [--repeats 1]
                                    [--threads 2] [--json FILE]

Issue 47's target: on this machine, -k auto with trees is never slower than -k auto with chains. Each
prompt of the half is decoded by both systems back to back, in an order that alternates per prompt
(and per repeat), each a fresh run with fresh measured costs, as a new command would be; per prompt
the ratio of their tokens per second (end to end, prefill included) is taken, and the table prints
both systems' median tokens/s, the median and the spread of the ratio (trees / chains), and the
share of request-rounds where -k auto drafted a tree (the ledger's choice, counted from the rounds).
Pairs: ``default`` is the embedded SmolLM2 with its default drafts (suffix, self:bf16); ``weak`` the
same target with ``self:layers=26``; ``gemma`` the embedded Gemma 3 with ``self:layers=12`` (its
default self:vocab=N draft drafts chains only, so --tree auto is refused with it). Sampled runs use
the default rule (invariant): both systems emit the same text, so the ratio is the speed alone
(greedy and invariant texts are checked equal, and a difference is printed).

Timing is a fact about the machine and its load: run it on a quiet machine (the ratios of two
systems interleaved prompt by prompt survive some noise; absolute tokens/s do not). Not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive  # noqa: E402
from heldout import TARGETS, load_half, refuse_outputs  # noqa: E402

from specd.files import write_text_atomic  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.policy.costs import OnlineCosts  # noqa: E402

PAIRS = {"default": ("smollm", None), "weak": ("smollm", "self:layers=26"), "gemma": ("gemma", "self:layers=12")}
SYSTEMS = ("chains", "trees")


def pipelines(pair: str, temperature: float, budget: int, max_new: int) -> dict[str, Pipeline]:
    """-k auto over chains and with --tree auto, one loaded model shared (the options differ only in --tree)."""
    model, draft = PAIRS[pair]
    sampling = {"temperature": temperature} | ({"top_k": 50} if temperature else {})
    # hf: trees run there (llama.cpp, the embedded SmolLM2's CPU default, verifies chains only)
    options = GenerateOptions(target=TARGETS[model], draft=draft, max_new_tokens=max_new, backend="hf", **sampling)
    chains = Pipeline.build(options)
    trees = chains.with_options(dataclasses.replace(chains.options, tree="auto", tree_budget=budget))
    return {"chains": chains, "trees": trees}


def decode(pipe: Pipeline, item, seed: int):
    """One fresh -k auto run (new measured costs) -> (tokens, seconds, request-rounds, tree rounds)."""
    fresh = dataclasses.replace(pipe, costs=OnlineCosts())
    if seed:
        fresh = fresh.with_options(dataclasses.replace(fresh.options, seed=seed))
    started = time.perf_counter()
    run = fresh.run([item], k="auto", record_log=True)
    seconds = time.perf_counter() - started
    trees = sum(1 for o in run.result.commits if o.draft_parents is not None)
    return run.results[0].tokens, seconds, run.stats.rounds, trees


def compare(pipes: dict[str, Pipeline], items, repeats: int) -> dict:
    """Both systems on every prompt, the order alternating -> per prompt rates and the texts' agreement."""
    blocks, differ, rounds, trees = [], [], 0, 0
    for rep in range(repeats):
        for i, item in enumerate(items):
            order = SYSTEMS if (i + rep) % 2 == 0 else SYSTEMS[::-1]
            rates, texts = {}, {}
            for name in order:
                tokens, seconds, n, t = decode(pipes[name], item, rep)
                rates[name], texts[name] = len(tokens) / seconds, tokens
                if name == "trees":
                    rounds, trees = rounds + n, trees + t
            blocks.append({"id": item.request_id, "tag": item.tag, "rates": rates})
            if texts["chains"] != texts["trees"]:
                differ.append(item.request_id)
    return {"blocks": blocks, "differ": differ, "tree_share": trees / max(rounds, 1)}


def summary(result: dict) -> dict:
    ratios = sorted(b["rates"]["trees"] / b["rates"]["chains"] for b in result["blocks"])
    return {
        "chains_tokens_per_s": median(b["rates"]["chains"] for b in result["blocks"]),
        "trees_tokens_per_s": median(b["rates"]["trees"] for b in result["blocks"]),
        "ratio_median": median(ratios),
        "ratio_low": ratios[0],
        "ratio_high": ratios[-1],
        "tree_share": result["tree_share"],
        "texts_differ": result["differ"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", default="test", choices=("test", "fit"))
    parser.add_argument("--pairs", default="default,weak")
    parser.add_argument("--temperatures", default="0,0.7")
    parser.add_argument("--tree-budget", type=positive, default=16)
    parser.add_argument("--per-kind", type=positive, default=None)
    parser.add_argument("--max-new-tokens", type=positive, default=64)
    parser.add_argument("--repeats", type=positive, default=1)
    parser.add_argument("--threads", type=positive, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    pairs = [p for p in args.pairs.split(",") if p]
    if any(p not in PAIRS for p in pairs):
        parser.error(f"--pairs: choose from {', '.join(PAIRS)}")
    refuse_outputs("tree_speed.py", {"--json": args.json})
    torch.set_num_threads(args.threads)
    items = load_half(args.half, args.per_kind)
    report = []
    print(
        "| pair | T | chains tokens/s | trees tokens/s | trees / chains (median, range) | tree rounds | texts differ |"
    )
    print("|---|---|---|---|---|---|---|")
    for pair in pairs:
        for temperature in (float(t) for t in args.temperatures.split(",") if t):
            pipes = pipelines(pair, temperature, args.tree_budget, args.max_new_tokens)
            limit = pipes["chains"].context
            mine = [
                it for it in items if limit is None or len(pipes["chains"].encode(it)) + args.max_new_tokens <= limit
            ]
            for name in SYSTEMS:  # warm-up, untimed
                decode(pipes[name], mine[0], 0)
            s = summary(compare(pipes, mine, args.repeats))
            print(
                f"| {pair} | {temperature} | {s['chains_tokens_per_s']:.2f} | {s['trees_tokens_per_s']:.2f} | "
                f"{s['ratio_median']:.3f} ({s['ratio_low']:.2f}-{s['ratio_high']:.2f}) | {s['tree_share']:.1%} | "
                f"{len(s['texts_differ'])} |",
                flush=True,
            )
            report.append({"pair": pair, "temperature": temperature, "prompts": len(mine), **s})
    if args.json:
        write_text_atomic(args.json, json.dumps(report, indent=1) + "\n", "JSON file")


if __name__ == "__main__":
    main()
