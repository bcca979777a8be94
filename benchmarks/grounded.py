"""Free drafts on grounded prompts: specd's default against Hugging Face, side by side in one process.

    python benchmarks/grounded.py [--max-new-tokens 96] [--repeats 1] [--threads 1,2] [--passes greedy,sampling,batch]

The embedded target (SmolLM2-135M-Instruct, float32, its chat template), greedy, prompts in the
style of Spec-Bench, 3 per category: summarization, question answering from a passage, code
editing, copying/extraction, rewriting with small changes (the grounded five), open chat and math
word problems. Per prompt and repeat every system runs back to back in a rotating order:

    HF greedy            model.generate, greedy
    HF lookup 3 / 10     model.generate(prompt_lookup_num_tokens=3 / 10)
    HF assisted bf16     assisted generation with the target's bfloat16 copy (default schedule)
    specd target-only    specd --baseline
    specd default        no --draft: suffix,self:bf16, -k auto (fresh costs every run, like a new command)
    specd suffix         --draft suffix, -k auto
    specd ngram:3        --draft ngram:3, -k auto

Every greedy output must equal HF greedy's (counted and printed). Printed per category: tokens/s
(end to end, prefill included) and the ratios to HF greedy and to the better of HF's two lookups,
medians over back-to-back blocks, and the K and source histograms of specd default. The pass
"sampling" runs at temperature 0.7 (HF do_sample, top-k 50, vs specd target-only and default, same
prompts; texts differ, so no token check); "batch" decodes eight open prompts together (specd
default and target-only at batch 8 against HF generate of the batch, 4 rotating repeats; the ratio
is the median of the repeats' ratios). Not a test: it measures.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specd.errors import SpecdError  # noqa: E402
from specd.files import check_output, check_paths, loads_json, read_text, write_text_atomic  # noqa: E402
from specd.models.run.inputs import model_folders  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.models.run.prompts import PromptItem  # noqa: E402
from specd.policy.costs import OnlineCosts  # noqa: E402

PASSAGE = (
    "The old lighthouse stood at the edge of the cliff, its white paint peeling in long strips. Every night "
    "for a hundred years its lamp had turned, sweeping the dark water so that ships could find the harbour. "
    "The keeper climbed the spiral stairs at dusk, wound the clockwork, trimmed the wick and watched the beam "
    "go out across the waves. In 1962 the lamp was replaced by an electric light and the keeper moved to the village."
)
REPORT = (
    "Quarterly report: revenue rose 12 percent to 4.2 million dollars, driven by the new subscription plan. "
    "Costs grew 5 percent, mostly from hiring two engineers. The support team answered 3,100 tickets, and "
    "customer satisfaction reached 91 percent. Next quarter the company plans to open an office in Lisbon."
)
CODE = (
    "def total_price(items, tax_rate):\n    total = 0\n    for item in items:\n        total += item.price * "
    "item.quantity\n    total = total * (1 + tax_rate)\n    return round(total, 2)\n"
)
CATEGORIES = {
    "summarization": [
        f"Summarize this passage in two sentences: {PASSAGE}",
        f"Summarize the key figures of this report: {REPORT}",
        f"Give a one-paragraph summary of this text, keeping its details: {PASSAGE}",
    ],
    "qa_passage": [
        f"{PASSAGE}\n\nQuestion: What did the keeper do at dusk? Answer using the passage's words.",
        f"{REPORT}\n\nQuestion: What drove the revenue growth, and what are next quarter's plans?",
        f"{PASSAGE}\n\nQuestion: What happened in 1962? Quote the passage.",
    ],
    "code_edit": [
        f"Rename the variable total to subtotal in this function and show the whole function:\n{CODE}",
        f"Add a docstring to this function and show the whole function:\n{CODE}",
        f"Change the loop in this function to use sum() and show the whole function:\n{CODE}",
    ],
    "copy_extract": [
        f"Repeat this passage exactly, word for word: {PASSAGE}",
        f"Copy every sentence of this report that contains a number: {REPORT}",
        f"Extract the sentences about the keeper from this passage, unchanged: {PASSAGE}",
    ],
    "rewrite": [
        f"Fix the typos and repeat the text: {PASSAGE.replace('the', 'teh', 3).replace('night', 'nihgt')}",
        f"Rewrite this report, replacing 'company' with 'firm' and changing nothing else: {REPORT}",
        f"Repeat this passage in the present tense: {PASSAGE}",
    ],
    "open_chat": [
        "What are three good habits for staying healthy?",
        "Write a short story about a robot who learns to paint.",
        "Explain why the sky is blue to a ten-year-old.",
    ],
    "math": [
        "A shop sells pens at 3 dollars each. Ana buys 7 pens and pays with a 50 dollar note. How much change?",
        "A train travels 180 km in 2 hours, then 120 km in 1.5 hours. What is its average speed?",
        "If 5 workers build a wall in 12 days, how long do 8 workers take at the same rate?",
    ],
}
GROUNDED = ("summarization", "qa_passage", "code_edit", "copy_extract", "rewrite")
HF_SYSTEMS = ("HF greedy", "HF lookup 3", "HF lookup 10", "HF assisted bf16")
SPECD_SYSTEMS = {"specd target-only": None, "specd default": "suffix,self:bf16", "specd suffix": "suffix"}
SPECD_SYSTEMS["specd ngram:3"] = "ngram:3"


def hf_generate(model, ids, max_new, sample=False, seed=0, **extra):
    kwargs = dict(max_new_tokens=max_new, do_sample=sample, pad_token_id=model.generation_config.eos_token_id)
    if sample:
        kwargs.update(temperature=0.7, top_k=50)
        torch.manual_seed(seed)  # the benchmark's own process, not the library
    x = torch.tensor([ids])
    t = time.perf_counter()
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), **kwargs, **extra)
    return tuple(out[0, len(ids) :].tolist()), time.perf_counter() - t


class Systems:
    """Every system of the benchmark, each run on one prompt at a time."""

    def __init__(self, max_new: int):
        base = Pipeline.build(GenerateOptions(max_new_tokens=max_new, temperature=0.0, backend="hf"))
        self.pipes = {name: base for name in ("specd target-only", "specd default")}
        for name, draft in SPECD_SYSTEMS.items():
            if draft not in (None, "suffix,self:bf16"):
                self.pipes[name] = Pipeline.build(
                    GenerateOptions(max_new_tokens=max_new, temperature=0.0, draft=draft, backend="hf")
                )
        self.model = base.target.model
        self.assistant = copy.deepcopy(self.model).to(torch.bfloat16)
        self.max_new = max_new
        self.k_hist, self.source_hist = defaultdict(int), defaultdict(int)

    def run(self, name: str, item: PromptItem, ids: list[int], sample: bool = False, seed: int = 0):
        if name.startswith("HF"):
            extra = {}
            if name.startswith("HF lookup"):
                extra["prompt_lookup_num_tokens"] = int(name.split()[-1])
            elif name == "HF assisted bf16":
                self.assistant.generation_config = copy.deepcopy(self.model.generation_config)
                extra["assistant_model"] = self.assistant
            return hf_generate(self.model, ids, self.max_new, sample, seed, **extra)
        pipe = self.pipes[name]
        if sample:
            pipe = pipe.with_options(dataclasses.replace(pipe.options, temperature=0.7, seed=seed))
        t = time.perf_counter()
        if name == "specd target-only":
            run = pipe.run([item], baseline=True, record_log=False)
        else:
            run = dataclasses.replace(pipe, costs=OnlineCosts()).run([item], k="auto", record_log=False)
            if name == "specd default":
                for k, n in run.stats.k_hist.items():
                    self.k_hist[k] += n
                for s, n in run.stats.source_hist.items():
                    self.source_hist["model" if s.startswith("hf:") else s] += n
        return run.results[0].tokens, time.perf_counter() - t


def rotate(run, names, items, encoded, repeats: int, sample: bool) -> tuple[list, list]:
    """Every system on every prompt, back to back in an order rotated per prompt ->
    (blocks: per prompt its tag and each system's tokens/s, greedy outputs that differ from HF greedy's)."""
    blocks, mismatches, order = [], [], list(names)
    for rep in range(repeats):
        for item in items:
            order = order[1:] + order[:1]
            outs, rates = {}, {}
            for name in order:
                out, wall = run(name, item, encoded[item.request_id], sample, rep)
                outs[name], rates[name] = out, len(out) / wall
            blocks.append({"tag": item.tag, "rates": rates})
            if not sample:
                mismatches += [(n, item.request_id) for n, o in outs.items() if o != outs["HF greedy"]]
        print(f"  repeat {rep + 1} done", flush=True)
    return blocks, mismatches


def measure(systems: Systems, names, repeats: int, sample: bool = False) -> dict:
    items = [PromptItem(f"{cat}-{i}", text, cat) for cat, texts in CATEGORIES.items() for i, text in enumerate(texts)]
    pipe = systems.pipes["specd target-only"]
    encoded = {it.request_id: list(pipe.encode(it)) for it in items}
    for name in names:  # warm-up, untimed
        systems.run(name, items[0], encoded[items[0].request_id][:64], sample)
    systems.k_hist.clear()
    systems.source_hist.clear()
    blocks, mismatches = rotate(systems.run, names, items, encoded, repeats, sample)
    result = {"blocks": blocks, "k": dict(systems.k_hist), "sources": dict(systems.source_hist)}
    return result if sample else {**result, "mismatches": mismatches}  # sampled texts are not compared


def ratios(blocks, tag_filter, num: str, den) -> float:
    values = []
    for b in blocks:
        if tag_filter(b["tag"]):
            d = max(b["rates"][x] for x in den) if isinstance(den, tuple) else b["rates"][den]
            values.append(b["rates"][num] / d)
    return median(values) if values else float("nan")


def print_table(result: dict, names, base: str, lookups) -> None:
    cats = list(CATEGORIES)
    head = ["category", *names, f"default / {base}", "default / best HF lookup", "default / target-only"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for cat in [*cats, "grounded", "open+math"]:

        def keep(tag, cat=cat):
            return (
                tag in GROUNDED
                if cat == "grounded"
                else tag in ("open_chat", "math")
                if cat == "open+math"
                else tag == cat
            )

        rates = {n: median(b["rates"][n] for b in result["blocks"] if keep(b["tag"])) for n in names}
        cells = [f"{rates[n]:.1f}" for n in names] if cat in cats else [""] * len(names)
        line = [cat, *cells]
        line.append(f"{ratios(result['blocks'], keep, 'specd default', base):.2f}")
        line.append(f"{ratios(result['blocks'], keep, 'specd default', lookups):.2f}" if lookups else "-")
        line.append(f"{ratios(result['blocks'], keep, 'specd default', 'specd target-only'):.2f}")
        print("| " + " | ".join(line) + " |")
    print(f"specd default chose K (request-rounds): {dict(sorted(result['k'].items()))}")
    print(f"specd default drafted from (request-rounds): {result['sources']}")
    if "mismatches" in result:
        print(f"outputs that differ from HF greedy: {len(result['mismatches'])} {result['mismatches'][:5]}")


def batch_rates(model, pipe: Pipeline, items, max_new: int, order, k_hist: dict | None = None) -> dict[str, float]:
    """One batch of ``items`` through each system of ``order`` ("HF generate batch 8": the HF model's
    generate over the left-padded batch; "specd target-only"; "specd default": -k auto, fresh costs;
    "specd suffix K=N": the suffix lookup alone at a fixed K = N), greedy -> tokens/s each.
    ``k_hist``: where given, specd default's request-rounds by K are added to it."""
    tok = pipe.tokenizer
    encoded = [list(pipe.encode(it)) for it in items]
    width = max(len(e) for e in encoded)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded])
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
    rates = {}
    for name in order:
        t = time.perf_counter()
        if name.startswith("HF"):
            with torch.no_grad():
                out = model.generate(
                    ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False, pad_token_id=pad
                )
            rates[name] = out[:, width:].numel() / (time.perf_counter() - t)
            continue
        baseline = name == "specd target-only"
        if name.startswith("specd suffix K="):
            runner = pipe.with_options(dataclasses.replace(pipe.options, draft="suffix"))
            run = runner.run(items, k=int(name.removeprefix("specd suffix K=")), record_log=False)
        else:
            runner = pipe if baseline else dataclasses.replace(pipe, costs=OnlineCosts())
            run = runner.run(items, baseline=baseline, k=None if baseline else "auto", record_log=False)
            if not baseline and k_hist is not None:
                for k, n in run.stats.k_hist.items():
                    k_hist[k] = k_hist.get(k, 0) + n
        rates[name] = sum(len(r.tokens) for r in run.results) / (time.perf_counter() - t)
    return rates


def batch_check(systems: Systems, repeats: int = 4) -> dict:
    """Eight open prompts decoded together: specd default and target-only vs HF generate of the batch,
    ``repeats`` times in a rotating order; tokens/s medians, and default / target-only per repeat
    (the ratio printed is their median)."""
    texts = CATEGORIES["open_chat"] + CATEGORIES["math"] + ["Name three rivers in Europe.", "What is a prime number?"]
    items = [PromptItem(f"b{i}", t) for i, t in enumerate(texts)]
    rates = defaultdict(list)
    order = ["HF generate batch 8", "specd target-only", "specd default"]
    for _ in range(repeats):
        order = order[1:] + order[:1]
        for name, rate in batch_rates(
            systems.model, systems.pipes["specd default"], items, systems.max_new, order
        ).items():
            rates[name].append(rate)
    pairs = [d / b for d, b in zip(rates["specd default"], rates["specd target-only"])]
    return {**{name: median(v) for name, v in rates.items()}, "default / target-only, per repeat": pairs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--passes", default="greedy,sampling,batch", help="any of greedy, sampling, batch")
    ap.add_argument("--json", help="also write every measurement to this file")
    args = ap.parse_args()
    if args.json:  # checked before the run: never written into a model the run reads
        try:
            check_output(args.json, "--json")
            check_paths({}, {"--json": args.json}, model_folders(None, None))
        except SpecdError as err:
            sys.exit(f"grounded.py: {err}")
    systems = Systems(args.max_new_tokens)
    names = [*HF_SYSTEMS, *SPECD_SYSTEMS]
    everything = {}
    passes = set(args.passes.split(","))
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        if "greedy" in passes:
            print(f"\n== greedy, {threads} torch thread(s), {args.max_new_tokens} new tokens, {args.repeats} repeat(s)")
            result = measure(systems, names, args.repeats)
            print_table(result, names, "HF greedy", ("HF lookup 3", "HF lookup 10"))
            everything[f"greedy/{threads}"] = result
        if "sampling" in passes:
            print(f"\n== temperature 0.7 (HF do_sample, top-k 50), {threads} torch thread(s)")
            sample_names = ["HF sampling", "specd target-only", "specd default"]
            result = measure(systems, sample_names, args.repeats, sample=True)
            print_table(result, sample_names, "HF sampling", None)
            everything[f"sampling/{threads}"] = result
        if "batch" in passes:
            batch = batch_check(systems)
            pairs = batch.pop("default / target-only, per repeat")
            print(f"\n== batch of 8 open prompts, {threads} torch thread(s), tokens/s (medians): {batch}")
            print(f"   specd default / target-only {median(pairs):.2f} (median of {[round(r, 3) for r in pairs]})")
            batch["default / target-only, per repeat"] = pairs
            everything[f"batch/{threads}"] = batch
    if args.json:
        write_text_atomic(args.json, json.dumps(everything, indent=1, default=str), "--json")
        loads_json(read_text(args.json, "--json"), args.json)  # it reads back


if __name__ == "__main__":
    main()
