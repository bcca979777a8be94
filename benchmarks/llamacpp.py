"""specd on llama.cpp against llama.cpp's own decoding, and against specd on Hugging Face, in one run.

    python benchmarks/llamacpp.py [--models smollm,gemma] [--per-kind N] [--kinds K1,K2] [--max-new-tokens 96]
                                  [--passes greedy,sampling,batch] [--check-only] [--json FILE]

The held-out test half (``benchmarks/corpus/test.jsonl``, 15 kinds: heldout.GROUNDED, heldout.OPEN),
the embedded SmolLM2 Q4_1 and Gemma 3 270M Q4_K_M files, greedy, 96 new tokens, the embedded
model's chat template, llama.cpp on the cores this process may use (2 here). Systems, each on one
prompt at a time, back to back in an order rotated per prompt:

    llama.cpp plain              llama-cpp-python's Llama.generate, greedy, flash attention on, q8_0
                                 keys: the computation specd's backend runs, so the same tokens
    llama.cpp lookup             the same with LlamaPromptLookupDecoding(num_pred_tokens=10)
    llama.cpp plain f16          llama.cpp plain with its default float16 keys
    specd target-only            --backend llama.cpp --baseline
    specd default                --backend llama.cpp, the embedded model's default draft on it, -k auto
    specd hf target-only         --backend hf --baseline (the file dequantized to float32)
    specd hf default             --backend hf, its default draft, -k auto

The llama.cpp systems load the file with llama.cpp's extra weight layouts off (on this machine
its AMX kernels crash: ggml_backend_amx_mul_mat), as specd does. Printed: tokens/s per kind
(medians, end to end, prefill included), the ratios of the issue's targets with "met" / "NOT met".

Why the targets are read against q8_0 keys: a run's tokens/s includes its prompt's prefill, so two
runs that emit different texts (13 of 15 test prompts part between float16 and q8_0 keys) differ
in length and the ratio measures the texts, not the decoding. With q8_0 keys llama.cpp's plain
decoding emits specd's tokens exactly (the greedy check), so the ratio is the same work timed
twice. Against float16 keys one kernel differs: llama.cpp scores a prompt of 64 or more rows with
its tiled kernel only for float16 keys, so a long prompt's prefill costs it less (451 rows: about
1.5 s against 2.5 s here); its one-row calls cost the same with either. "target-only / plain f16"
is printed beside the targets.

The greedy check, on every prompt measured (``--check-only``: the check alone, no timing): specd's
greedy tokens on llama.cpp (target-only and default) against llama.cpp's plain decoding with q8_0
keys (specd's kernels: they must be identical) and with its default float16 keys; where the latter
part, the position is scored both ways and the report says whether the two kernels order the two
tokens differently (a near-tie: both are the top two under each kernel, in opposite orders), and
which kernel llama.cpp's plain call ran there. "sampling" (temperature 0.7, top-k 50): specd
default vs target-only on llama.cpp, per kind. "batch": batches of 8 prompts, specd default vs
target-only on llama.cpp. Not a test: it measures; absolute figures are this machine's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive  # noqa: E402
from heldout import GROUNDED, OPEN, TARGETS, batches, check, load_half, refuse_outputs  # noqa: E402

from specd.files import write_text_atomic  # noqa: E402
from specd.models.llamacpp.lib import binding  # noqa: E402
from specd.models.run.divergence import Divergence, last_row  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.models.run.prompts import PromptItem  # noqa: E402
from specd.policy.costs import OnlineCosts  # noqa: E402

SYSTEMS = (
    "llama.cpp plain",
    "llama.cpp lookup",
    "llama.cpp plain f16",
    "specd target-only",
    "specd default",
    "specd hf target-only",
    "specd hf default",
)
SAMPLING = {"temperature": 0.7, "top_k": 50}
SPLIT_KV_CELLS = 512  # a one-row call with this many cells in view splits them over threads (ops.cpp)
TILED_ROWS = 64  # a call of this many rows takes the tiled kernel (GGML_FA_TILE_Q)


def llama(path: str, threads: int, k_type: str = "f16", lookup: bool = False):
    """llama-cpp-python's own Llama on ``path``: flash attention on, ``k_type`` keys, extra weight
    layouts off (as specd loads it), and with ``lookup`` its prompt-lookup draft."""
    binding()  # specd's quiet log callback first
    from llama_cpp import Llama, llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    defaults = llama_cpp.llama_model_default_params

    def without_extra_layouts():
        params = defaults()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_model_default_params = without_extra_layouts
    try:
        return Llama(
            path,
            n_ctx=2048,
            # its scores buffer has n_batch rows, which its prompt-lookup path indexes by position: a
            # context past 512 tokens (the default batch) overflowed it (ValueError: could not broadcast)
            n_batch=2048,
            n_threads=threads,
            n_threads_batch=threads,
            flash_attn=True,
            type_k={"f16": 1, "q8_0": 8}[k_type],
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10) if lookup else None,
            verbose=False,
        )
    finally:
        llama_cpp.llama_model_default_params = defaults


def plain_tokens(model, ids: list[int], max_new: int, eos: frozenset[int]) -> list[int]:
    """Greedy decoding by llama-cpp-python's Llama.generate, to ``max_new`` tokens or an end token."""
    model.reset()
    out = []
    for token in model.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        out.append(int(token))
        if token in eos or len(out) >= max_new:
            break
    return out


class Systems:
    """The model's pipelines on both backends and llama.cpp's own; ``run(name, item, ids)`` ->
    (tokens, seconds)."""

    def __init__(self, model: str, max_new: int, threads: int):
        self.name, self.max_new = model, max_new
        base = GenerateOptions(target=TARGETS[model], max_new_tokens=max_new, temperature=0.0)
        t = time.perf_counter()
        self.pipe = Pipeline.build(dataclasses.replace(base, backend="llama.cpp"))
        self.load = {"specd llama.cpp": time.perf_counter() - t}
        t = time.perf_counter()
        self.hf = Pipeline.build(dataclasses.replace(base, backend="hf"))
        self.load["specd hf"] = time.perf_counter() - t
        path = str(self.pipe.target.file.path)
        t = time.perf_counter()
        self.plain = llama(path, threads, k_type="q8_0")  # specd's keys: its tokens
        self.load["llama.cpp Llama"] = time.perf_counter() - t
        self.lookup = llama(path, threads, k_type="q8_0", lookup=True)
        self.plain_f16 = llama(path, threads)  # llama.cpp's default keys
        self.k_hist: dict[int, int] = {}

    def run(self, name: str, item: PromptItem, ids: list[int], sample: bool = False, seed: int = 0):
        t = time.perf_counter()
        if name.startswith("llama.cpp"):
            model = {"llama.cpp lookup": self.lookup, "llama.cpp plain f16": self.plain_f16}.get(name, self.plain)
            return plain_tokens(model, ids, self.max_new, self.pipe.eos_ids), time.perf_counter() - t
        pipe = self.hf if " hf " in name else self.pipe
        if sample:
            pipe = pipe.with_options(dataclasses.replace(pipe.options, **SAMPLING, seed=seed))
        if name.endswith("target-only"):
            run = pipe.run([item], baseline=True, record_log=False)
        else:  # fresh costs every run, like a new command
            run = dataclasses.replace(pipe, costs=OnlineCosts()).run([item], k="auto", record_log=False)
            for k, n in run.stats.k_hist.items():
                self.k_hist[k] = self.k_hist.get(k, 0) + n
        return list(run.results[0].tokens), time.perf_counter() - t


def kernel_at(prompt: int, position: int) -> str:
    """What differs between llama.cpp's plain decoding (float16 keys) and specd's (q8_0 keys) where they
    parted: the keys' rounding everywhere, and the flash-attention path llama.cpp's own call took."""
    parts = ["float16 keys (specd: q8_0)"]
    if prompt >= TILED_ROWS:
        parts.append(f"the prompt's {prompt} rows in one call: the tiled kernel (calls of >= {TILED_ROWS} rows)")
    if position + 1 > SPLIT_KV_CELLS // 2:
        parts.append("a one-row call over >= 512 cells in view: the split-KV kernel (the cells summed per thread)")
    return "; ".join(parts)


def explain(systems: Systems, item: PromptItem, ids: list[int], ours: list[int], theirs: list[int]) -> dict:
    """Where specd's greedy tokens and llama.cpp's plain ones part: both kernels' margins there."""
    j = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    if j >= min(len(ours), len(theirs)):
        return {"request_id": item.request_id, "index": j, "explained": False, "why": "one run ended there"}
    prefix = tuple(ids) + tuple(ours[:j])
    mine = last_row(systems.pipe.target, prefix)[0]
    model = (
        systems.plain_f16
    )  # its row there as its plain decoding made it: the prompt in one call, then one row a call
    model.reset()
    model.eval(list(ids))
    for token in ours[:j]:
        model.eval([token])
    row = binding().llama_get_logits_ith(model._ctx.ctx, -1)
    plain = torch.from_numpy(np.ctypeslib.as_array(row, shape=(model.n_vocab(),)).copy())
    a, b = ours[j], theirs[j]
    top_mine, top_plain = set(mine.topk(2).indices.tolist()), set(plain.topk(2).indices.tolist())
    margin, other = float(mine[a] - mine[b]), float(plain[a] - plain[b])
    near = Divergence(item.request_id, j, (b, a), tuple(mine.topk(2).indices.tolist()), margin, margin - other, "q8")
    explained = {a, b} == top_mine == top_plain and margin > 0 > other
    return {
        "request_id": item.request_id,
        "index": j,
        "tokens": [a, b],
        "margin_specd": margin,
        "margin_plain": other,
        "explained": explained and near.near_tie,
        "kernel": kernel_at(len(ids), len(ids) + j),
    }


def greedy_check(systems: Systems, items: list[PromptItem], outputs: dict) -> dict:
    """specd's llama.cpp outputs against llama.cpp's plain decoding with q8_0 keys (identical) and
    with float16 keys (each parting explained or not)."""
    same_q8, parted = [], []
    for item in items:
        ids = list(systems.pipe.encode(item))
        done = outputs[item.request_id]
        q8 = done.get("llama.cpp plain") or plain_tokens(systems.plain, ids, systems.max_new, systems.pipe.eos_ids)
        plain = done.get("llama.cpp plain f16") or plain_tokens(
            systems.plain_f16, ids, systems.max_new, systems.pipe.eos_ids
        )
        for name in ("specd target-only", "specd default"):
            ours = outputs[item.request_id][name]
            same_q8.append(ours == q8)
            if ours != plain and name == "specd target-only":
                parted.append(explain(systems, item, ids, ours, plain))
        if outputs[item.request_id]["specd target-only"] != outputs[item.request_id]["specd default"]:
            print(f"  {item.request_id}: specd target-only and default differ: a bug", flush=True)
    print(f"  specd = llama.cpp plain with q8_0 keys: {sum(same_q8)}/{len(same_q8)} outputs identical")
    print(f"  specd = llama.cpp plain with float16 keys: {len(items) - len(parted)}/{len(items)} prompts identical")
    for p in parted:
        state = "explained: a near-tie the two kernels order apart" if p["explained"] else "NOT explained"
        figures = f"margins {p.get('margin_specd', 0):.3g} (specd) vs {p.get('margin_plain', 0):.3g} (plain)"
        print(f"    {p['request_id']} token {p['index']}: {figures}; {state}; llama.cpp ran {p.get('kernel')}")
    return {"identical_q8": sum(same_q8), "compared_q8": len(same_q8), "parted_f16": parted}


def measure(systems: Systems, items: list[PromptItem], sample: bool, names=SYSTEMS) -> tuple[list, dict]:
    encoded = {it.request_id: list(systems.pipe.encode(it)) for it in items}
    for name in names:  # warm-up, untimed
        systems.run(name, items[0], encoded[items[0].request_id][:32], sample)
    systems.k_hist.clear()
    blocks, outputs, order = [], {}, list(names)
    for item in items:
        order = order[1:] + order[:1]
        outputs[item.request_id] = {}
        rates = {}
        for name in order:
            tokens, wall = systems.run(name, item, encoded[item.request_id], sample)
            outputs[item.request_id][name], rates[name] = tokens, len(tokens) / wall
        blocks.append({"tag": item.tag, "rates": rates})
        print(f"  {item.request_id}: " + ", ".join(f"{n} {r:.1f}" for n, r in rates.items()), flush=True)
    return blocks, outputs


def ratio(blocks, keep, num: str, den: str) -> float:
    values = [b["rates"][num] / b["rates"][den] for b in blocks if keep(b["tag"])]
    return median(values) if values else float("nan")


RATIOS = {  # label -> (numerator, denominator)
    "target-only / plain": ("specd target-only", "llama.cpp plain"),
    "target-only / plain f16": ("specd target-only", "llama.cpp plain f16"),
    "default / plain": ("specd default", "llama.cpp plain"),
    "default / lookup": ("specd default", "llama.cpp lookup"),
    "default / target-only": ("specd default", "specd target-only"),
    "default / hf default": ("specd default", "specd hf default"),
}


def table(blocks, names) -> dict:
    """Per kind and group: tokens/s medians and the ratios side by side -> the group figures."""
    groups = {kind: (lambda tag, kind=kind: tag == kind) for kind in (*GROUNDED, *OPEN)}
    groups |= {"grounded": lambda tag: tag in GROUNDED, "open": lambda tag: tag in OPEN}
    print(
        "| kind | " + " | ".join(names) + " | " + " | ".join(r for r in RATIOS if set(RATIOS[r]) <= set(names)) + " |"
    )
    print("|---|" + "---|" * (len(names) + sum(set(v) <= set(names) for v in RATIOS.values())))
    out = {}
    for group, keep in groups.items():
        mine = [b for b in blocks if keep(b["tag"])]
        if not mine:
            continue
        figures = {label: ratio(mine, keep, *pair) for label, pair in RATIOS.items() if set(pair) <= set(names)}
        out[group] = figures
        rates = [f"{median(b['rates'][n] for b in mine):.1f}" for n in names]
        print(f"| {group} | " + " | ".join(rates + [f"{v:.2f}" for v in figures.values()]) + " |")
    return out


def batch_pass(systems: Systems, items: list[PromptItem], max_batches: int) -> list[float]:
    """Batches of 8 mixed prompts: specd default / target-only on llama.cpp, per batch."""
    out = []
    for i, batch in enumerate(batches(items, False)[:max_batches]):
        rates = {}
        for baseline in (True, False) if i % 2 == 0 else (False, True):
            t = time.perf_counter()
            run = systems.pipe.run(batch, baseline=baseline, k="auto", batch_size=8, record_log=False)
            rates[baseline] = sum(len(r.tokens) for r in run.results) / (time.perf_counter() - t)
        out.append(rates[False] / rates[True])
        print(f"  batch {i}: default / target-only {out[-1]:.2f}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm,gemma")
    ap.add_argument("--per-kind", type=positive, default=None, help="the first N prompts of each kind")
    ap.add_argument("--kinds", default=None, help="only these kinds, comma-separated")
    ap.add_argument("--max-new-tokens", type=positive, default=96)
    ap.add_argument("--passes", default="greedy,sampling,batch")
    ap.add_argument("--batches", type=positive, default=2)
    ap.add_argument("--check-only", action="store_true", help="the greedy check alone, no timing")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    refuse_outputs("llamacpp.py", {"--json": args.json})
    items = load_half("test", args.per_kind, args.kinds)
    threads, report = torch.get_num_threads(), {}  # specd's llama.cpp threads: torch's setting
    for model in args.models.split(","):
        if model not in TARGETS:
            raise SystemExit(f"unknown model {model!r}: choose from {', '.join(TARGETS)}")
        systems = Systems(model, args.max_new_tokens, threads)
        print(f"## {model}: {len(items)} prompts, {threads} threads; load s: {systems.load}", flush=True)
        figures: dict = {"load_s": systems.load}
        if args.check_only:
            names = ("llama.cpp plain", "specd target-only", "specd default")
            outputs = {it.request_id: {} for it in items}
            for it in items:
                ids = list(systems.pipe.encode(it))
                for name in names:
                    outputs[it.request_id][name] = systems.run(name, it, ids)[0]
            figures["greedy_check"] = greedy_check(systems, items, outputs)
        if "greedy" in args.passes and not args.check_only:
            blocks, outputs = measure(systems, items, sample=False)
            figures["greedy"] = table(blocks, SYSTEMS)
            print(f"specd default chose K (request-rounds): {dict(sorted(systems.k_hist.items()))}")
            figures["greedy_check"] = greedy_check(systems, items, outputs)
            g = figures["greedy"]
            if "grounded" in g:
                check("grounded: default / llama.cpp plain", g["grounded"]["default / plain"], 1.5)
                check("grounded: default / llama.cpp lookup", g["grounded"]["default / lookup"], 1.3)
            for kind in (k for k in OPEN if k in g):
                check(f"{kind}: default / llama.cpp plain", g[kind]["default / plain"], 1.0)
            for group in (k for k in ("grounded", "open") if k in g):
                check(f"{group}: target-only / llama.cpp plain", g[group]["target-only / plain"], 0.9)
        if "sampling" in args.passes and not args.check_only:
            names = ("specd target-only", "specd default")
            blocks, _ = measure(systems, items, sample=True, names=names)
            figures["sampling"] = table(blocks, names)
            for kind in (*GROUNDED, *OPEN):
                if kind in figures["sampling"]:
                    check(
                        f"sampled {kind}: default / target-only",
                        figures["sampling"][kind]["default / target-only"],
                        1.0,
                    )
        if "batch" in args.passes and not args.check_only:
            figures["batch"] = batch_pass(systems, items, args.batches)
            check("batch 8: default / target-only (median)", median(figures["batch"] or [float("nan")]), 1.0)
        report[model] = figures
    if args.json:
        write_text_atomic(args.json, json.dumps(report, indent=1, default=str) + "\n", "--json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
