"""-k auto against fixed K, target-only and Hugging Face, side by side in one process.

    python benchmarks/auto_k.py [--max-new-tokens 64] [--repeats 2] [--ways quiet,contention,useless]

The embedded pair (SmolLM2-135M-Instruct float32 target), greedy, one prompt per
category (chat, story, code, rewrite). Per repeat and prompt, interleaved in a
rotating order: specd target-only, specd fixed K = 2, 4, 8, specd -k auto (with
fresh cost estimates every run, as a new `specd generate` would start), Hugging
Face greedy `generate`, Hugging Face assisted generation with its default schedule
(heuristic K, assistant confidence threshold 0.4) and with the constant schedule at
K = 4. Every system must emit Hugging Face greedy's tokens. Throughput is end to end
(prefill included) tokens per second per category; ratios of those are printed.

Three ways: "quiet"; "contention" (the script starts a process that keeps one core
busy, and stops it after); "useless" (draft self:layers=1, whose drafts are almost
never accepted). Then the ledger's ceiling from the measured costs: the best speedup
any K could give with every draft accepted, and the draft cost that would reach 1.5x.
Not a test: it measures.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import multiprocessing
import sys
import time
from collections import defaultdict
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.models.run.prompts import PromptItem  # noqa: E402
from specd.policy.costs import OnlineCosts  # noqa: E402
from specd.policy.ledger import CostModel, progress_rate  # noqa: E402
from specd.policy.profile import AcceptanceProfile  # noqa: E402

PROMPTS = [
    ("chat", "What are three good habits for staying healthy?"),
    ("story", "Write a short story about a robot who learns to paint."),
    ("code", "Write a Python function that checks whether a string is a palindrome."),
    ("rewrite", "Rewrite this text in a formal tone: hey guys, the meeting got moved to friday, dont be late ok"),
]
FIXED_KS = (2, 4, 8)
SYSTEMS = ("target-only", *(f"K={k}" for k in FIXED_KS), "auto", "HF greedy", "HF assisted default", "HF assisted K=4")


def burn() -> None:
    while True:
        pass


def hf_generate(model, ids, max_new, assistant=None, schedule=None):
    kwargs = dict(max_new_tokens=max_new, do_sample=False, pad_token_id=model.generation_config.eos_token_id)
    if assistant is not None:
        kwargs["assistant_model"] = assistant
        if schedule == "constant":
            kwargs.update(num_assistant_tokens=4, num_assistant_tokens_schedule="constant")
            kwargs["assistant_confidence_threshold"] = 0.0
    x = torch.tensor([ids])
    t = time.perf_counter()
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), **kwargs)
    return tuple(out[0, len(ids) :].tolist()), time.perf_counter() - t


def run_system(name, pipe, assistant, item, ids, max_new):
    if name.startswith("HF"):
        if name == "HF greedy":
            return hf_generate(pipe.target.model, ids, max_new)
        # A fresh copy of the assistant's config each call: HF's heuristic schedule mutates it.
        assistant.generation_config = copy.deepcopy(pipe.target.model.generation_config)
        schedule = "constant" if name.endswith("K=4") else None
        return hf_generate(pipe.target.model, ids, max_new, assistant, schedule)
    t = time.perf_counter()
    if name == "target-only":
        run = pipe.run([item], baseline=True, record_log=False)
    elif name == "auto":
        run = dataclasses.replace(pipe, costs=OnlineCosts()).run([item], k="auto", record_log=False)
        for k, n in run.stats.k_hist.items():
            run_system.k_hist[k] += n
    else:
        run = pipe.run([item], k=int(name[2:]), record_log=False)
    return run.results[0].tokens, time.perf_counter() - t


run_system.k_hist = defaultdict(int)


def one_way(way: str, args) -> dict:
    draft = "self:layers=1" if way == "useless" else "self:bf16"
    pipe = Pipeline.build(GenerateOptions(max_new_tokens=args.max_new_tokens, draft=draft, backend="hf"))
    assistant = pipe.proposer.models[0].model
    items = [PromptItem(f"{tag}", text, tag) for tag, text in PROMPTS]
    encoded = {it.request_id: list(pipe.encode(it)) for it in items}
    for name in SYSTEMS:  # warm-up: one-time allocations and lazy initialization, untimed
        run_system(name, pipe, assistant, items[0], encoded["chat"], 4)
    run_system.k_hist.clear()
    burner = None
    if way == "contention":
        burner = multiprocessing.Process(target=burn, daemon=True)
        burner.start()
        time.sleep(1.0)
    tokens, seconds, wrong = defaultdict(int), defaultdict(float), []
    block_rates = []  # per (prompt, repeat): every system's tokens/s, measured back to back
    try:
        order = list(SYSTEMS)
        for rep in range(args.repeats):
            for item in items:
                ids = encoded[item.request_id]
                reference = None
                order = order[1:] + order[:1]  # rotate: no system always runs first or after another
                outs, rates = {}, {}
                for name in order:
                    out, wall = run_system(name, pipe, assistant, item, ids, args.max_new_tokens)
                    outs[name] = out
                    rates[name] = len(out) / wall
                    tokens[(name, item.tag)] += len(out)
                    seconds[(name, item.tag)] += wall
                block_rates.append({"tag": item.tag, "repeat": rep, "tokens_per_s": rates})
                reference = outs["HF greedy"]
                wrong += [(name, item.tag, rep) for name, out in outs.items() if out != reference]
                print(f"  [{way}] repeat {rep + 1}, {item.tag} done", flush=True)
    finally:
        if burner is not None:
            burner.terminate()
    rate = {key: tokens[key] / seconds[key] for key in tokens}
    return {
        "way": way,
        "draft": ",".join(pipe.proposer.identities),
        "tokens_per_s": {f"{n}|{tag}": r for (n, tag), r in rate.items()},
        "blocks": block_rates,
        "mismatches": wrong,
        "auto_k_histogram": dict(sorted(run_system.k_hist.items())),
        "ceiling": ceiling(pipe),
    }


def ceiling(pipe: Pipeline) -> dict:
    """From costs measured here (a fixed-K run feeds OnlineCosts): the best speedup over target-only any
    K <= 8 could reach with every draft accepted, and the draft step (in target steps) giving 1.5x there."""
    costs = OnlineCosts()
    timed = dataclasses.replace(pipe, costs=costs)  # a fixed-K run reports its rounds' timings here
    timed.run([PromptItem("c", PROMPTS[1][1])], k=4, record_log=False)
    measured = costs.ledger_costs(1, 8, pipe.proposer.identities[0])
    perfect = AcceptanceProfile((1.0,), True, "perfect")
    off = progress_rate(perfect, measured, 0)
    best = max(range(1, 9), key=lambda k: progress_rate(perfect, measured, k))
    speed = progress_rate(perfect, measured, best) / off
    d = measured.draft_step[1]

    def at(draft_cost: float) -> float:
        cm = CostModel(draft_cost=draft_cost, row_cost=measured.verify[(1, 1)] - 1, draft_row_cost=0.0)
        cm = dataclasses.replace(cm, state_cost=measured.state_cost)
        return max(progress_rate(perfect, cm, k) for k in range(1, 9)) / progress_rate(perfect, cm, 0)

    lo, hi = 0.0, 2.0  # at() falls as the draft step grows; a draft step of 2 target steps never pays
    for _ in range(40):  # the largest draft step cost at which the perfect-acceptance ceiling is 1.5x
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at(mid) >= 1.5 else (lo, mid)
    return {
        "draft_step_in_target_steps": d,
        "verify_9_rows_in_target_steps": measured.verify[(8, 1)],
        "state_cost": measured.state_cost,
        "best_k_at_perfect_acceptance": best,
        "ceiling_speedup": speed,
        "draft_step_for_1.5x": lo if at(lo) >= 1.5 else None,
    }


def report(results: list[dict], as_json: bool) -> None:
    print()
    for res in results:
        r = res["tokens_per_s"]
        print(f"way: {res['way']} (draft {res['draft']}); auto chose K: {res['auto_k_histogram']}")
        print("  tokens/s, end to end, pooled over repeats")
        head = f"  {'category':9s}" + "".join(f"{s:>21s}" for s in SYSTEMS)
        print(head)
        for tag, _ in PROMPTS:
            print(f"  {tag:9s}" + "".join(f"{r[f'{s}|{tag}']:21.2f}" for s in SYSTEMS))
        print(
            f"  {'ratios':9s} auto/max(target-only, best K)  auto/target-only  auto/HF assisted  auto/HF greedy"
            "   (median over repeats of ratios measured back to back)"
        )
        for tag in [t for t, _ in PROMPTS] + ["all"]:
            blocks = [b["tokens_per_s"] for b in res["blocks"] if tag in ("all", b["tag"])]
            cells = [
                median(b["auto"] / max(b["target-only"], *(b[f"K={k}"] for k in FIXED_KS)) for b in blocks),
                median(b["auto"] / b["target-only"] for b in blocks),
                median(b["auto"] / b["HF assisted default"] for b in blocks),
                median(b["auto"] / b["HF greedy"] for b in blocks),
            ]
            print(f"  {tag:9s} {cells[0]:29.3f} {cells[1]:17.3f} {cells[2]:17.3f} {cells[3]:15.3f}")
        c = res["ceiling"]
        print(
            f"  ceiling from measured costs: draft step {c['draft_step_in_target_steps']:.3f} target steps, "
            f"9-row verification {c['verify_9_rows_in_target_steps']:.3f}; with every draft accepted the best K "
            f"({c['best_k_at_perfect_acceptance']}) gives {c['ceiling_speedup']:.3f}x over target-only; 1.5x needs "
            + (
                f"a draft step of at most {c['draft_step_for_1.5x']:.3f} target steps"
                if c["draft_step_for_1.5x"] is not None
                else "more than even a free draft step gives"
            )
        )
        print(f"  token mismatches against HF greedy: {len(res['mismatches'])}")
    if as_json:
        print(json.dumps(results, indent=1, default=str))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--ways", default="quiet,contention,useless")
    ap.add_argument("--json", action="store_true", help="also print every measured figure as JSON")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    print(f"torch threads={torch.get_num_threads()}, {len(PROMPTS)} prompts, {args.max_new_tokens} tokens", flush=True)
    results = [one_way(way, args) for way in args.ways.split(",")]
    report(results, args.json)
    return 0 if all(not r["mismatches"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
