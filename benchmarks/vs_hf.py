"""specd vs Hugging Face generate on the embedded default model, side by side in one process.

    python benchmarks/vs_hf.py [--max-new-tokens 64] [--repeats 3] [--ks 2,4,6,8]

Per prompt and repeat, interleaved: (a) HF greedy generate, (c) specd --baseline,
then for each K: (b) HF assisted generation with the same bf16 draft and the same
K (constant schedule, no confidence cut-off), (d) specd speculative. (b), (c), (d)
must emit exactly the tokens of (a). Throughput is end-to-end (prefill included)
tokens/s summed over the prompt set; ratios are medians over repeats. A sampling
run (temperature 0.8) reports speed ratios only. Not a test: it measures.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections import defaultdict

import torch

from specd.models.run.options import GenerateOptions
from specd.models.run.pipeline import Pipeline
from specd.models.run.prompts import PromptItem

PROMPTS = [
    ("chat", "What are three good habits for staying healthy?"),
    ("chat", "Explain in two sentences why the sky is blue."),
    ("story", "Write a short story about a robot who learns to paint."),
    ("story", "Tell a bedtime story about a brave little turtle."),
    ("code", "Write a Python function that checks whether a string is a palindrome."),
    ("code", "Write a Python function that returns the n-th Fibonacci number."),
    ("rewrite", "Rewrite this text in a formal tone: hey guys, the meeting got moved to friday, dont be late ok"),
    (
        "rewrite",
        "Rewrite this text more concisely: In the event that it happens to rain tomorrow, we will "
        "most likely have to make the decision to postpone the picnic to another day.",
    ),
]


def hf_generate(model, ids, max_new, assistant=None, k=None, sample=False, seed=0):
    kwargs = dict(max_new_tokens=max_new, do_sample=sample, pad_token_id=model.generation_config.eos_token_id)
    if sample:
        kwargs.update(temperature=0.8, top_k=0, top_p=1.0)
        torch.manual_seed(seed)
    if assistant is not None:
        kwargs.update(
            assistant_model=assistant,
            num_assistant_tokens=k,
            num_assistant_tokens_schedule="constant",
            assistant_confidence_threshold=0.0,
        )
    x = torch.tensor([ids], device=model.device)  # built where the model is: no copy inside the timing
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)
    t = time.perf_counter()
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), **kwargs)
    return tuple(out[0, len(ids) :].tolist()), time.perf_counter() - t  # tolist waits for the device


def specd_generate(pipe: Pipeline, item: PromptItem, baseline: bool, k: int):
    t = time.perf_counter()
    run = pipe.run([item], baseline=baseline, k=k, record_log=False)
    wall = time.perf_counter() - t
    return run.results[0].tokens, wall, run.stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ks", default="2,4,6,8")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    torch.set_grad_enabled(False)

    pipe = Pipeline.build(
        GenerateOptions(max_new_tokens=args.max_new_tokens, temperature=0.0, k=ks[0], draft="self:bf16", backend="hf")
    )
    target = pipe.target.model
    draft = pipe.proposer.models[0].model  # the same bf16 copy for both systems
    assistant = draft
    assistant.generation_config = copy.deepcopy(target.generation_config)
    items = [PromptItem(f"{tag}{i}", text, tag) for i, (tag, text) in enumerate(PROMPTS[: args.prompts])]
    encoded = {it.request_id: list(pipe.encode(it)) for it in items}
    print(
        f"target {pipe.target.name} float32, draft {','.join(pipe.proposer.identities)}, {len(items)} prompts, "
        f"max_new_tokens={args.max_new_tokens}, repeats={args.repeats}, torch threads={torch.get_num_threads()}",
        flush=True,
    )

    # warm-up (one-time allocations, lazy init), untimed
    hf_generate(target, encoded[items[0].request_id], 4)
    hf_generate(target, encoded[items[0].request_id], 4, assistant, ks[0])
    specd_generate(pipe, items[0], True, ks[0])
    specd_generate(pipe, items[0], False, ks[0])

    tokens = defaultdict(int)  # (system, k, repeat) -> tokens
    seconds = defaultdict(float)
    accepted_len = defaultdict(list)
    share = defaultdict(list)
    mismatches = []
    for rep in range(args.repeats):
        for it in items:
            ids = encoded[it.request_id]
            ref, ta = hf_generate(target, ids, args.max_new_tokens)
            tokens[("a", 0, rep)] += len(ref)
            seconds[("a", 0, rep)] += ta
            out, tc, _ = specd_generate(pipe, it, True, ks[0])
            tokens[("c", 0, rep)] += len(out)
            seconds[("c", 0, rep)] += tc
            if out != ref:
                mismatches.append(("c", it.request_id, rep))
            for k in ks:
                out_b, tb = hf_generate(target, ids, args.max_new_tokens, assistant, k)
                tokens[("b", k, rep)] += len(out_b)
                seconds[("b", k, rep)] += tb
                if out_b != ref:
                    mismatches.append((f"b(K={k})", it.request_id, rep))
                out_d, td, st = specd_generate(pipe, it, False, k)
                tokens[("d", k, rep)] += len(out_d)
                seconds[("d", k, rep)] += td
                accepted_len[k].append(st.figures()["mean_accepted_length"])
                share[k].append(st.state_time / st.decode_time if st.decode_time else 0.0)
                if out_d != ref:
                    mismatches.append((f"d(K={k})", it.request_id, rep))
        print(f"repeat {rep + 1}/{args.repeats} done", flush=True)

    def tps(system, k, rep):
        return tokens[(system, k, rep)] / seconds[(system, k, rep)]

    reps = range(args.repeats)
    med = statistics.median
    a = med(tps("a", 0, r) for r in reps)
    c = med(tps("c", 0, r) for r in reps)
    c_over_a = med(tps("c", 0, r) / tps("a", 0, r) for r in reps)
    print()
    print("greedy, end-to-end tokens/s (median over repeats), ratios are medians of per-repeat ratios")
    print(f"(a) HF generate            {a:7.2f} tok/s")
    print(f"(c) specd --baseline       {c:7.2f} tok/s    c/a = {c_over_a:.3f}")
    print()
    print(
        f"{'K':>3} {'(b) HF assisted':>16} {'(d) specd':>10} {'mean acc len':>13} {'d/a':>6} {'d/b':>6} "
        f"{'state/round':>12}"
    )
    best = None
    for k in ks:
        b = med(tps("b", k, r) for r in reps)
        d = med(tps("d", k, r) for r in reps)
        d_a = med(tps("d", k, r) / tps("a", 0, r) for r in reps)
        d_b = med(tps("d", k, r) / tps("b", k, r) for r in reps)
        print(
            f"{k:>3} {b:16.2f} {d:10.2f} {statistics.mean(accepted_len[k]):13.2f} {d_a:6.3f} {d_b:6.3f} "
            f"{100 * statistics.mean(share[k]):11.1f}%"
        )
        if best is None or d_a > best[1]:
            best = (k, d_a)
    print(f"\nbest K = {best[0]} (d/a = {best[1]:.3f})")
    print(f"token identity: {'all (b), (c), (d) runs equal (a)' if not mismatches else mismatches}")

    # sampling: speed ratios only (different RNGs, so no token identity)
    k = best[0]
    import dataclasses

    sampled = pipe.with_options(dataclasses.replace(pipe.options, temperature=0.8))
    ratios_da, ratios_ca = [], []
    for rep in range(args.repeats):
        ta = tc = td = 0.0
        na = nc = nd = 0
        for it in items:
            out, t = hf_generate(target, encoded[it.request_id], args.max_new_tokens, sample=True, seed=rep)
            na, ta = na + len(out), ta + t
            out, t, _ = specd_generate(sampled, it, True, k)
            nc, tc = nc + len(out), tc + t
            out, t, _ = specd_generate(sampled, it, False, k)
            nd, td = nd + len(out), td + t
        ratios_da.append((nd / td) / (na / ta))
        ratios_ca.append((nc / tc) / (na / ta))
    print(f"\nsampling T=0.8, K={k}: d/a = {med(ratios_da):.3f}, c/a = {med(ratios_ca):.3f} (medians over repeats)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
