"""Held-out evaluation: specd's default against Hugging Face on prompts no fitted constant has read.

    python benchmarks/heldout.py [--model smollm|gemma] [--half test|fit|both] [--passes greedy,sampling,batch]
                                 [--threads 2,1] [--max-new-tokens 96] [--per-kind N] [--json FILE]

The corpus is ``benchmarks/corpus/{fit,test}.jsonl``: 120 prompts written for this evaluation,
15 kinds, 4 of each kind in each half, no passage, document, code or data shared between the
halves (tests/test_heldout_corpus.py). The split is fixed: every fitted constant and every tuning
decision may read the fit half (``benchmarks/fit_match_prior.py``, the draft vocabulary's N);
the test half is read only by this report. Ten kinds are grounded (the answer reuses text of the
prompt: ``GROUNDED``), five are open.

Systems, each run on one prompt at a time, back to back in an order rotated per prompt (the
machinery of benchmarks/grounded.py), greedy:

    HF greedy             model.generate, greedy
    HF lookup 3 / 10      model.generate(prompt_lookup_num_tokens=3 / 10)    (SmolLM2 only)
    specd target-only     specd --baseline
    specd default         no --draft (SmolLM2: suffix,self:bf16; Gemma 3: suffix,self:vocab=16384), -k auto

Every greedy output must equal HF greedy's (counted and printed). Printed per kind and half:
tokens/s (end to end, prefill included), the ratios of specd default to HF greedy, to the better
HF lookup and to specd target-only (medians over prompts), then each target of issue 36 with its
figure and "met" or "NOT met". "sampling" runs at temperature 0.7, top-k 50 (HF do_sample vs specd
target-only and default; texts differ, so no token check). "batch" decodes batches of 8 prompts
(mixed kinds, and grounded kinds only) with HF generate, specd target-only and specd default,
in a rotating order (``--batch-ks 2,4,8``: also the suffix lookup alone at those fixed K: would
any K pay at batch 8?). "vocab" (Gemma 3) measures the shared-body draft alone by its draft
vocabulary N at K = 4 (``--ns``): how N is chosen, on the fit half. Not a test: it measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive, positives  # noqa: E402
from grounded import batch_rates, hf_generate, ratios, rotate  # noqa: E402

from specd.core.shared_body import SharedBodyProposer  # noqa: E402
from specd.core.sources import SourceSet  # noqa: E402
from specd.errors import SpecdError  # noqa: E402
from specd.files import check_output, check_paths, loads_json, read_text, write_text_atomic  # noqa: E402
from specd.models.run.embedded import EMBEDDED  # noqa: E402
from specd.models.run.inputs import model_folders  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.models.run.prompts import PromptItem, prompt_items  # noqa: E402
from specd.models.vocab_table import DATA, read_table, tokenizer_digest  # noqa: E402
from specd.policy.costs import OnlineCosts  # noqa: E402

CORPUS = Path(__file__).parent / "corpus"
GROUNDED = (
    "copy_extract",
    "typo_fix",
    "code_edit",
    "passage_qa",
    "summarize",
    "rewrite",
    "long_doc_qa",
    "multi_turn_quote",
    "code_review",
    "format_conversion",
)
OPEN = ("translation", "open_chat", "creative_writing", "math", "code_completion")
TARGETS = {"smollm": "embedded:smollm2-135m", "gemma": "embedded:gemma-3-270m"}


def refuse_outputs(
    script: str, outputs: dict[str, str | None], targets: list[str] | None = None, draft: str | None = None
) -> None:
    """Before any measuring: each output a writable file path (a flag ending in "folder": a folder
    written into), none naming the corpus (``check_paths``: writing it would destroy an input) or
    lying inside a model folder the run reads (``model_folders`` of each of ``targets``, default
    both embedded models, with ``draft``'s models); else the script's one line (exit 1)."""
    try:
        for flag, path in outputs.items():
            if path is not None and not flag.endswith("folder"):
                check_output(path, flag)
        folders: dict[str, str] = {}
        for target in targets if targets is not None else list(TARGETS.values()):
            folders.update(model_folders(target, draft))
        check_paths({f"the corpus's {h} half": CORPUS / f"{h}.jsonl" for h in ("fit", "test")}, outputs, folders)
    except SpecdError as err:
        sys.exit(f"{script}: {err}")


SAMPLING = {"temperature": 0.7, "top_k": 50}


def load_half(half: str, per_kind: int | None = None, kinds: str | None = None) -> list[PromptItem]:
    """The half's prompts in file order (only ``kinds``, comma-separated, and the first ``per_kind``
    of each kind, when given)."""
    wanted = None if kinds is None else set(kinds.split(","))
    unknown = sorted((wanted or set()) - {*GROUNDED, *OPEN})
    if unknown:  # one line, not an empty run
        raise SystemExit(f"unknown kind {', '.join(unknown)}: the kinds are {', '.join((*GROUNDED, *OPEN))}")
    seen: dict[str | None, int] = defaultdict(int)
    kept = []
    for item in prompt_items([], str(CORPUS / f"{half}.jsonl")):
        seen[item.tag] += 1
        if (wanted is None or item.tag in wanted) and (per_kind is None or seen[item.tag] <= per_kind):
            kept.append(item)
    return kept


class Systems:
    """The target's pipelines and HF model; ``run(name, item, ids, sample, seed)`` -> (tokens, seconds)."""

    def __init__(self, model: str, max_new: int):
        self.name = model
        self.pipe = Pipeline.build(
            GenerateOptions(target=TARGETS[model], max_new_tokens=max_new, temperature=0.0, backend="hf")
        )
        self.model, self.max_new = self.pipe.target.model, max_new
        self.k_hist: dict[int, int] = defaultdict(int)
        self.sources: dict[str, int] = defaultdict(int)

    def within_context(self, items: list[PromptItem]) -> list[PromptItem]:
        """The prompts specd can decode to the full budget here; prints the others. (A model with
        sliding-window layers, Gemma 3, keeps a run within its window: ``Pipeline.context``.)"""
        limit = self.pipe.context
        kept = [it for it in items if limit is None or len(self.pipe.encode(it)) + self.max_new <= limit]
        if len(kept) < len(items):
            left = [it.request_id for it in items if it not in kept]
            print(f"left out, prompt + {self.max_new} new tokens beyond specd's {limit} positions: {left}")
        return kept

    def sampled(self, seed: int) -> Pipeline:
        return self.pipe.with_options(dataclasses.replace(self.pipe.options, **SAMPLING, seed=seed))

    def run(self, name: str, item: PromptItem, ids, sample: bool = False, seed: int = 0):
        if name.startswith("HF"):
            extra = {"prompt_lookup_num_tokens": int(name.split()[-1])} if name.startswith("HF lookup") else {}
            return hf_generate(self.model, ids, self.max_new, sample, seed, **extra)
        pipe = self.sampled(seed) if sample else self.pipe
        t = time.perf_counter()
        if name == "specd target-only":
            run = pipe.run([item], baseline=True, record_log=False)
        else:  # fresh costs every run, like a new command
            run = dataclasses.replace(pipe, costs=OnlineCosts()).run([item], k="auto", record_log=False)
            for k, n in run.stats.k_hist.items():
                self.k_hist[k] += n
            for s, n in run.stats.source_hist.items():
                self.sources["model" if s.startswith(("hf:", "self:")) else s] += n
        return run.results[0].tokens, time.perf_counter() - t


def measure(systems: Systems, names, items, repeats: int, sample: bool) -> dict:
    encoded = {it.request_id: list(systems.pipe.encode(it)) for it in items}
    for name in names:  # warm-up, untimed
        systems.run(name, items[0], encoded[items[0].request_id][:64], sample)
    systems.k_hist.clear()
    systems.sources.clear()
    blocks, mismatches = rotate(systems.run, names, items, encoded, repeats, sample)
    return {"blocks": blocks, "mismatches": mismatches, "k": dict(systems.k_hist), "sources": dict(systems.sources)}


def table(result: dict, names, base: str) -> dict:
    """Print the per-kind table; return the summary figures the targets read."""
    lookups = tuple(n for n in names if n.startswith("HF lookup"))
    head = ["kind", *names, f"default / {base}", "default / best HF lookup", "default / target-only"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    groups = {kind: (lambda tag, kind=kind: tag == kind) for kind in (*GROUNDED, *OPEN)}
    groups["grounded"] = lambda tag: tag in GROUNDED
    groups["open"] = lambda tag: tag in OPEN
    summary = {}
    for group, keep in groups.items():
        blocks = [b for b in result["blocks"] if keep(b["tag"])]
        if not blocks:
            continue
        rates = [f"{median(b['rates'][n] for b in blocks):.1f}" for n in names]
        figures = {
            "vs_base": ratios(blocks, keep, "specd default", base),
            "vs_lookup": ratios(blocks, keep, "specd default", lookups) if lookups else float("nan"),
            "vs_target_only": ratios(blocks, keep, "specd default", "specd target-only"),
        }
        summary[group] = figures
        cells = [f"{v:.2f}" if v == v else "-" for v in figures.values()]
        label = f"**{group}**" if group in ("grounded", "open") else group
        print("| " + " | ".join([label, *rates, *cells]) + " |")
    print(f"specd default chose K (request-rounds): {dict(sorted(result['k'].items()))}")
    print(f"specd default drafted from (request-rounds): {result['sources']}")
    if base == "HF greedy":
        print(f"outputs that differ from HF greedy: {len(result['mismatches'])} {result['mismatches'][:5]}")
    return summary


def check(label: str, value: float, target: float) -> str:
    line = f"  {label}: {value:.3f} (target >= {target}) {'met' if value >= target else 'NOT met'}"
    print(line)
    return line


def vocab_acceptance(systems: Systems, items: list[PromptItem], ns, k: int = 4) -> dict:
    """The shared-body draft alone (self:vocab=N) at a fixed K over the half, by N, greedy and at
    temperature 0.7 (the default invariant rule): the share of drafts accepted and the mean
    accepted length (counting the correction or bonus token)."""
    tok = systems.pipe.tokenizer
    model = EMBEDDED[TARGETS[systems.name].split(":", 1)[1]]
    table = read_table(DATA / model.vocab_table, tokenizer_digest(tok), len(tok))
    out = {}
    for label, pipe in (("greedy", systems.pipe), ("temperature 0.7", systems.sampled(0))):
        cells = {}
        for n in ns:
            shared = SharedBodyProposer(pipe.target, table.columns(n), pipe.draft_policy, label=f"self:vocab={n}")
            run = dataclasses.replace(pipe, proposer=SourceSet([shared])).run(items, k=k, record_log=False)
            figures = run.stats.figures()
            cells[n] = (
                figures["accepted_tokens"] / max(figures["proposed_tokens"], 1),
                figures["mean_accepted_length"],
            )
        print(f"  {label}, K = {k}: " + ", ".join(f"N = {n}: {a:.3f} ({m:.2f})" for n, (a, m) in cells.items()))
        out[label] = cells
    return out


def batches(items: list[PromptItem], grounded_only: bool, size: int = 8) -> list[list[PromptItem]]:
    """Batches of ``size`` prompts, kinds interleaved so that a batch mixes them."""
    kept = [it for it in items if it.tag in GROUNDED or not grounded_only]
    by_kind: dict[str | None, list[PromptItem]] = defaultdict(list)
    for it in kept:
        by_kind[it.tag].append(it)
    order = [
        group[i] for i in range(max(len(g) for g in by_kind.values())) for group in by_kind.values() if i < len(group)
    ]
    return [order[i : i + size] for i in range(0, len(order) - size + 1, size)]


def batch_check(systems: Systems, items: list[PromptItem], max_batches: int, fixed_ks=()) -> dict:
    """Batches of 8, mixed kinds and grounded kinds only: each system once per batch, the order
    rotated per batch; per batch the ratios of specd default to target-only and to HF. ``fixed_ks``:
    also the suffix lookup alone at each of these fixed K (would any K pay at batch 8?)."""
    names = ["HF generate batch 8", "specd target-only", "specd default", *(f"specd suffix K={k}" for k in fixed_ks)]
    out = {}
    for label, grounded_only in (("mixed", False), ("grounded", True)):
        rows, k_hist = [], {}
        for i, batch in enumerate(batches(items, grounded_only)[:max_batches]):
            order = names[i % len(names) :] + names[: i % len(names)]
            rows.append(batch_rates(systems.model, systems.pipe, batch, systems.max_new, order, k_hist))
        out[label] = {
            "tokens_per_s": {n: median(r[n] for r in rows) for n in names},
            "default_vs_target_only": [r["specd default"] / r["specd target-only"] for r in rows],
            "default_vs_hf": [r["specd default"] / r["HF generate batch 8"] for r in rows],
            "default_k_hist": dict(sorted(k_hist.items())),
        }
        d = out[label]
        print(
            f"  {label}: {len(rows)} batches, tokens/s medians "
            + ", ".join(f"{n} {v:.1f}" for n, v in d["tokens_per_s"].items())
            + f"; default / target-only per batch {[round(x, 2) for x in d['default_vs_target_only']]}"
            + f"; default / HF per batch {[round(x, 2) for x in d['default_vs_hf']]}"
        )
        print(f"    specd default's request-rounds by K: {d['default_k_hist']}")
        for name in names[3:]:
            d[name + " vs target-only"] = [r[name] / r["specd target-only"] for r in rows]
            print(f"    {name} / target-only per batch {[round(x, 2) for x in d[name + ' vs target-only']]}")
    return out


def targets(model: str, figures: dict) -> list[str]:
    """Issue 36's targets on the test half, each with its figure."""
    lines = []
    greedy, sampling, batch = figures.get("greedy"), figures.get("sampling"), figures.get("batch")
    if model == "smollm" and greedy and "grounded" in greedy:
        lines.append(check("grounded median / HF greedy", greedy["grounded"]["vs_base"], 2.0))
        lines.append(check("grounded median / better HF lookup", greedy["grounded"]["vs_lookup"], 1.2))
    for kind in OPEN if model == "smollm" and greedy else ():
        if kind in greedy:
            lines.append(check(f"{kind} / HF greedy", greedy[kind]["vs_base"], 1.0))
            lines.append(check(f"{kind} / specd target-only", greedy[kind]["vs_target_only"], 1.0))
    if model == "gemma" and greedy and "open" in greedy:
        lines.append(check("open kinds median / HF greedy", greedy["open"]["vs_base"], 1.5))
    if model == "gemma" and sampling:
        lines.append(check("sampled, all kinds median / HF sampling", sampling["all"]["vs_base"], 1.3))
    if batch:
        lines.append(
            check("batch 8 mixed, worst batch / target-only", min(batch["mixed"]["default_vs_target_only"]), 1.0)
        )
        lines.append(check("batch 8 grounded, median / HF batch 8", median(batch["grounded"]["default_vs_hf"]), 1.3))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(TARGETS), default="smollm")
    ap.add_argument("--half", choices=("test", "fit", "both"), default="test")
    ap.add_argument("--passes", default="greedy,sampling,batch", help="any of greedy, sampling, batch, vocab")
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--max-new-tokens", type=positive, default=96)
    ap.add_argument("--repeats", type=positive, default=1)
    ap.add_argument("--per-kind", type=positive, help="only the first N prompts of each kind (a quicker, rougher run)")
    ap.add_argument("--kinds", help="only these kinds, comma-separated")
    ap.add_argument("--batches", type=positive, default=5, help="batches of 8 per group in the batch pass")
    ap.add_argument(
        "--batch-ks", type=positives, default=[], help="the batch pass also runs the suffix lookup at these fixed K"
    )
    ap.add_argument("--ns", default="4096,8192,16384,32768", help="draft vocabularies of the vocab pass (gemma)")
    ap.add_argument("--json", help="also write every measurement to this file")
    args = ap.parse_args()
    refuse_outputs("heldout.py", {"--json": args.json}, [TARGETS[args.model]])
    systems = Systems(args.model, args.max_new_tokens)
    lookups = ["HF lookup 3", "HF lookup 10"] if args.model == "smollm" else []
    passes = set(args.passes.split(","))
    everything: dict = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for half in ("fit", "test") if args.half == "both" else (args.half,):
            items = systems.within_context(load_half(half, args.per_kind, args.kinds))
            figures: dict = {}
            where = f"{args.model}, {half} half ({len(items)} prompts), {threads} torch thread(s)"
            if "greedy" in passes:
                names = ["HF greedy", *lookups, "specd target-only", "specd default"]
                print(f"\n== greedy, {where}, {args.max_new_tokens} new tokens, tokens/s", flush=True)
                result = measure(systems, names, items, args.repeats, sample=False)
                figures["greedy"] = table(result, names, "HF greedy")
                everything[f"greedy/{half}/{threads}"] = result
            if "sampling" in passes:
                names = ["HF sampling", "specd target-only", "specd default"]
                print(f"\n== temperature 0.7, top-k 50, {where}, tokens/s", flush=True)
                result = measure(systems, names, items, args.repeats, sample=True)
                summary = table(result, names, "HF sampling")
                summary["all"] = {"vs_base": ratios(result["blocks"], lambda tag: True, "specd default", "HF sampling")}
                print(f"all kinds: specd default / HF sampling {summary['all']['vs_base']:.2f}")
                figures["sampling"] = summary
                everything[f"sampling/{half}/{threads}"] = result
            if "vocab" in passes:
                print(f"\n== acceptance of self:vocab=N alone by N, {where}", flush=True)
                figures["vocab"] = vocab_acceptance(systems, items, [int(n) for n in args.ns.split(",")])
                everything[f"vocab/{half}/{threads}"] = figures["vocab"]
            if "batch" in passes:
                print(f"\n== batches of 8, {where}, greedy", flush=True)
                figures["batch"] = batch_check(systems, items, args.batches, args.batch_ks)
                everything[f"batch/{half}/{threads}"] = figures["batch"]
            print(f"\n== issue 36's targets, {where}" + ("" if half == "test" else " (fit half: not the report)"))
            everything[f"targets/{half}/{threads}"] = targets(args.model, figures)
    if args.json:
        write_text_atomic(args.json, json.dumps(everything, indent=1, default=str), "--json")
        loads_json(read_text(args.json, "--json"), args.json)  # it reads back


if __name__ == "__main__":
    main()
