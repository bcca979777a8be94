"""The shared-body draft (self:vocab=N) on Gemma 3 270M, side by side in one process.

    python benchmarks/head_spec.py [--max-new-tokens 64] [--threads 1,2] [--passes parts,greedy,sampling]

The embedded Gemma 3 270M (float32, no chat template), prompts of the grounded benchmark's
categories (3 each): open chat, writing, math word problems (where no lookup helps), and
summarization and question answering from a passage. Per prompt every system runs back to
back in a rotating order:

    HF greedy / HF sampling        model.generate (do_sample, temperature 0.7, top-k 50 when sampling)
    specd target-only              specd --baseline
    specd vocab=N auto             --draft self:vocab=N -k auto, N in 8192, 16384, 32768
    specd vocab=16384 K=2 / K=4    a fixed K
    specd default                  the embedded model's default draft (suffix,self:vocab=16384), -k auto

Every greedy output must equal HF greedy's (counted and printed). Printed: the cost of each part
of a round (a body step, the restricted head at each N, the full head over 1..9 rows, a whole
target step), then per category tokens/s (end to end) and the ratios to HF, acceptance (mean
accepted length, counting the correction or bonus token) by N, and the K histogram of specd
default. Not a test: it measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections import defaultdict
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grounded import CATEGORIES as GROUNDED_CATEGORIES  # noqa: E402
from grounded import hf_generate, rotate  # noqa: E402

from specd.core.model import RowInput  # noqa: E402
from specd.core.shared_body import SharedBodyProposer  # noqa: E402
from specd.core.sources import SourceSet  # noqa: E402
from specd.core.suffix import SuffixProposer  # noqa: E402
from specd.models.run.embedded import EMBEDDED  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.models.run.prompts import PromptItem  # noqa: E402
from specd.models.vocab_table import DATA, read_table, tokenizer_digest  # noqa: E402
from specd.policy.costs import OnlineCosts  # noqa: E402

CATEGORIES = {
    "open_chat": GROUNDED_CATEGORIES["open_chat"],
    "writing": [
        "Write a letter to a friend describing your first week in a new city.",
        "Write the opening paragraph of a mystery novel set on a night train.",
        "Write a product description for a handmade wooden chess set.",
    ],
    "math": GROUNDED_CATEGORIES["math"],
    "summarization": GROUNDED_CATEGORIES["summarization"],
    "qa_passage": GROUNDED_CATEGORIES["qa_passage"],
}
OPEN = ("open_chat", "writing", "math")
NS = (8192, 16384, 32768)


class Systems:
    def __init__(self, max_new: int):
        self.base = Pipeline.build(
            GenerateOptions(target="embedded:gemma-3-270m", draft="suffix", max_new_tokens=max_new, temperature=0.0)
        )
        lm, tok = self.base.target, self.base.tokenizer
        self.table = read_table(DATA / EMBEDDED["gemma-3-270m"].vocab_table, tokenizer_digest(tok), len(tok))
        self.model, self.max_new = lm.model, max_new
        self.k_hist = defaultdict(int)
        self.accept = defaultdict(list)

    def sources(self, pipe: Pipeline, n: int, lookup: bool = False) -> SourceSet:
        shared = SharedBodyProposer(pipe.target, self.table.columns(n), pipe.draft_policy, label=f"self:vocab={n}")
        return SourceSet([SuffixProposer(pipe.target.vocab_size), shared] if lookup else [shared])

    def run(self, name: str, item: PromptItem, ids, sample: bool, seed: int):
        if name.startswith("HF"):
            return hf_generate(self.model, ids, self.max_new, sample, seed)
        pipe = self.base
        if sample:
            pipe = pipe.with_options(dataclasses.replace(pipe.options, temperature=0.7, top_k=50, seed=seed))
        t = time.perf_counter()
        if name == "specd target-only":
            run = pipe.run([item], baseline=True, record_log=False)
            return run.results[0].tokens, time.perf_counter() - t
        n = 16384 if "16384" in name or name == "specd default" else int(name.split("=")[1].split()[0])
        k = "auto" if name.endswith("auto") or name == "specd default" else int(name.split("K=")[1])
        proposer = self.sources(pipe, n, lookup=name == "specd default")
        run = dataclasses.replace(pipe, proposer=proposer, costs=OnlineCosts()).run([item], k=k, record_log=False)
        t = time.perf_counter() - t
        self.accept[name].append(run.stats.figures()["mean_accepted_length"])
        if name == "specd default":
            for kk, c in run.stats.k_hist.items():
                self.k_hist[kk] += c
        return run.results[0].tokens, t


def parts(systems: Systems) -> None:
    """The cost of each part of a round, ms (median of 7, after a warm-up)."""
    lm = systems.base.target
    cache = lm.new_cache()
    cache.open(0)
    lm.step(cache, [RowInput(0, tuple(range(100, 160)), tuple(range(60)))], logits_for=0)
    cache.commit(0, 60)

    def timed(fn) -> float:
        fn()
        ts = []
        for _ in range(7):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return 1000 * median(ts)

    def body():
        out = lm.body_step(cache, [RowInput(0, (5,), (60,))], logits_for=1)
        cache.discard(0)
        return out.hidden[0]

    def whole():
        lm.step(cache, [RowInput(0, (5,), (60,))], logits_for=1)
        cache.discard(0)

    hidden = body()
    print(f"  target step, 1 row: {timed(whole):.1f} ms; body step, 1 row: {timed(body):.1f} ms")
    heads = {m: timed(lambda m=m: lm.head_logits(hidden.repeat(m, 1))) for m in range(1, 10)}
    print("  full head over m rows: " + ", ".join(f"{m}: {v:.1f}" for m, v in heads.items()) + " ms")
    for n in NS:
        small = systems.sources(systems.base, n).sources[0].small_head
        print(f"  restricted head, N = {n}: {timed(lambda small=small: small(hidden)):.2f} ms")


def acceptance(systems: Systems, ns=(1024, 4096, 8192, 16384, 32768), k: int = 4) -> None:
    """Acceptance by N at a fixed K over every prompt, greedy and at temperature 0.7 (--rule maximal
    and the default invariant rule): the share of drafts accepted, and the mean accepted length."""
    items = [PromptItem(f"{c}-{i}", text, c) for c, texts in CATEGORIES.items() for i, text in enumerate(texts)]
    for label, changes in (
        ("greedy", {}),
        ("temperature 0.7, invariant", {"temperature": 0.7, "top_k": 50}),
        ("temperature 0.7, maximal", {"temperature": 0.7, "top_k": 50, "rule": "maximal"}),
    ):
        pipe = (
            systems.base.with_options(dataclasses.replace(systems.base.options, **changes)) if changes else systems.base
        )
        cells = []
        for n in ns:
            run = dataclasses.replace(pipe, proposer=systems.sources(pipe, n)).run(items, k=k, record_log=False)
            figures = run.stats.figures()
            rate = figures["accepted_tokens"] / max(figures["proposed_tokens"], 1)
            cells.append(f"N = {n}: {rate:.3f} ({figures['mean_accepted_length']:.2f})")
        print(f"  {label}, K = {k}: share of drafts accepted (mean accepted length): " + ", ".join(cells))


def measure(systems: Systems, names, repeats: int, sample: bool) -> dict:
    items = [PromptItem(f"{c}-{i}", text, c) for c, texts in CATEGORIES.items() for i, text in enumerate(texts)]
    encoded = {it.request_id: list(systems.base.encode(it)) for it in items}
    for name in names:  # warm-up, untimed
        systems.run(name, items[0], encoded[items[0].request_id], sample, 0)
    systems.k_hist.clear()
    systems.accept.clear()
    blocks, mismatches = rotate(systems.run, names, items, encoded, repeats, sample)
    return {"blocks": blocks, "mismatches": mismatches}


def report(result: dict, names, base: str, systems: Systems) -> None:
    head = ["category", *names, "default / HF", "best vocab auto / HF"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    autos = [n for n in names if n.startswith("specd vocab=") and n.endswith("auto")]
    for cat in [*CATEGORIES, "open (chat, writing, math)"]:

        def keep(tag, cat=cat):
            return tag in OPEN if cat.startswith("open (") else tag == cat

        blocks = [b for b in result["blocks"] if keep(b["tag"])]
        rates = {n: median(b["rates"][n] for b in blocks) for n in names}
        ratio = median(b["rates"]["specd default"] / b["rates"][base] for b in blocks)
        best = max(median(b["rates"][a] / b["rates"][base] for b in blocks) for a in autos)
        print("| " + " | ".join([cat, *(f"{rates[n]:.2f}" for n in names), f"{ratio:.2f}", f"{best:.2f}"]) + " |")
    print(
        "mean accepted length (median over prompts): "
        + ", ".join(f"{n}: {median(v):.2f}" for n, v in systems.accept.items())
    )
    print(f"specd default chose K (request-rounds): {dict(sorted(systems.k_hist.items()))}")
    if "mismatches" in result and base == "HF greedy":
        print(f"outputs that differ from HF greedy: {len(result['mismatches'])} {result['mismatches'][:5]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--passes", default="parts,acceptance,greedy,sampling")
    args = ap.parse_args()
    systems = Systems(args.max_new_tokens)
    passes = set(args.passes.split(","))
    vocab = [f"specd vocab={n} auto" for n in NS] + ["specd vocab=16384 K=2", "specd vocab=16384 K=4"]
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        if "parts" in passes:
            print(f"\n== the parts of a round, {threads} torch thread(s)")
            parts(systems)
        if "acceptance" in passes and threads == int(args.threads.split(",")[0]):
            print("\n== acceptance by N (the draft vocabulary), all prompts")
            acceptance(systems)
        if "greedy" in passes:
            names = ["HF greedy", "specd target-only", *vocab, "specd default"]
            print(f"\n== greedy, {threads} torch thread(s), {args.max_new_tokens} new tokens, tokens/s")
            report(measure(systems, names, args.repeats, False), names, "HF greedy", systems)
        if "sampling" in passes:
            names = [
                "HF sampling",
                "specd target-only",
                "specd vocab=16384 auto",
                "specd vocab=8192 auto",
                "specd default",
            ]
            print(f"\n== temperature 0.7, top-k 50, {threads} torch thread(s), tokens/s")
            report(measure(systems, names, args.repeats, True), names, "HF sampling", systems)


if __name__ == "__main__":
    main()
