"""The verification rules side by side: acceptance, the (1 - TV)/(1 + TV) bound, and speed.

    python benchmarks/rules.py [--pairs smollm,gemma-vocab,gemma-default] [--ks 2,4,8]
                               [--temperatures 0.7,1.0] [--max-new-tokens 48] [--repeats 2] [--threads 2]

Pairs: ``smollm``: the embedded SmolLM2-135M-Instruct (float32) with its bfloat16 copy as the
draft (``self:bf16``), at each fixed K, so the model drafts; ``gemma-vocab``: Gemma 3 270M with its
shared-body draft ``self:vocab=16384``, at each fixed K; ``gemma-default``: Gemma 3 270M with its
default draft (``suffix,self:vocab=16384``, ``-k auto``; the K list does not apply). Six open
prompts, decoded together. For each pair and temperature:

- (``smollm`` only) along the target's own sampled text, per position, the processed rows p and q:
  their total variation TV, the maximal rule's acceptance of one draft, 1 - TV (exact), the
  invariant rule's bound (1 - TV)/(1 + TV), and the invariant rule's acceptance measured directly,
  P(Gumbel-max of p == Gumbel-max of q under shared noise), over 512 noise draws per position;
- the rules through the engine (maximal, invariant, block), interleaved in a rotating order per
  repeat: per-draft acceptance (accepted / proposed), mean accepted length (tokens per round, the
  correction or bonus counted), decode throughput, and block's mean accepted length minus
  maximal's with a 95% confidence interval over the paired (prompt, repeat) runs (both rules read
  the same seed on the same prompt).

Not a test: it measures. Ratios come from runs side by side in one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from statistics import mean, stdev

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specd.core.gumbel import gumbel, race, request_key  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.models.run.prompts import PromptItem  # noqa: E402
from specd.oracles.rig import fold  # noqa: E402

PROMPTS = [
    "What are three good habits for staying healthy?",
    "Write a short story about a robot who learns to paint.",
    "Explain in two sentences why the sky is blue.",
    "Tell a bedtime story about a brave little turtle.",
    "Give me three ideas for a birthday party for a ten-year-old.",
    "Write a short poem about autumn leaves.",
]
SETTINGS = [("T=0.7", 0.7, None), ("T=1.0", 1.0, None), ("T=1.0, top-p 0.9", 1.0, 0.9)]
NOISE_DRAWS = 512


def rows(pipe: Pipeline, model, policy, ids: list[int], prompt_len: int) -> torch.Tensor:
    """The policy's processed rows after each prefix of ``ids`` from the prompt on: float64[T, V]."""
    with torch.no_grad():
        logits = model.model(torch.tensor([ids])).logits[0, prompt_len - 1 : -1].float()
    logits = logits[:, : pipe.target.vocab_size]
    states = [
        fold(policy.initial_state(ids[:prompt_len]), ids[prompt_len : prompt_len + i]) for i in range(len(logits))
    ]
    return policy.probabilities(logits, states, "max_shift", torch.float64)


def position_figures(pipe: Pipeline, texts) -> dict:
    """TV, the two acceptances and the bound per position. The invariant acceptance races the
    tokens that hold p or q mass above 1e-6 (the rest can change a race's winner only with the
    probability of their mass, reported as ``excluded_mass``)."""
    tv_all, invariant_hits, excluded = [], [], []
    draft_model = pipe.proposer.models[0]
    for r, (prompt_ids, new) in enumerate(texts):
        ids = list(prompt_ids) + list(new)
        p = rows(pipe, pipe.target, pipe.target_policy, ids, len(prompt_ids))
        q = rows(pipe, draft_model, pipe.draft_policy, ids, len(prompt_ids))
        tv_all += (0.5 * (p - q).abs().sum(-1)).tolist()
        for t in range(p.shape[0]):
            keep = torch.maximum(p[t], q[t]) > 1e-6
            excluded.append(max(float(p[t][~keep].sum()), float(q[t][~keep].sum())))
            pt, qt = p[t][keep], q[t][keep]
            noise = gumbel(request_key(r, "bench"), torch.arange(NOISE_DRAWS) + 1000 * t, pt.shape[-1])
            same = race(pt.expand(NOISE_DRAWS, -1), noise) == race(qt.expand(NOISE_DRAWS, -1), noise)
            invariant_hits.append(same.double().mean().item())
    return {
        "positions": len(tv_all),
        "mean_tv": mean(tv_all),
        "maximal_acceptance": mean(1 - tv for tv in tv_all),
        "invariant_bound": mean((1 - tv) / (1 + tv) for tv in tv_all),
        "invariant_acceptance": mean(invariant_hits),
        "excluded_mass": max(excluded),
    }


RULES = ("maximal", "invariant", "block")


def engine_figures(pipe: Pipeline, items, k, repeats: int) -> dict:
    """Each rule through the engine, ``repeats`` times in a rotating order: totals, and per (prompt,
    repeat) the request's mean accepted length (tokens per round)."""
    out = {
        rule: {"accepted": 0, "proposed": 0, "rounds": 0, "emitted": 0, "time": 0.0, "per_request": []}
        for rule in RULES
    }
    for rep in range(repeats):
        order = RULES[rep % len(RULES) :] + RULES[: rep % len(RULES)]
        for rule in order:
            rounds: dict[str, list[int]] = {}

            def count(state, emitted, rounds=rounds):
                rounds.setdefault(state.request_id, []).append(len(emitted))

            opts = dataclasses.replace(pipe.options, rule=rule)
            run = pipe.with_options(opts).run(items, k=k, record_log=False, on_publish=count)
            s = run.stats
            o = out[rule]
            o["accepted"] += s.accepted
            o["proposed"] += s.proposed
            o["rounds"] += s.rounds
            o["emitted"] += s.emitted
            o["time"] += s.decode_time
            o["per_request"] += [sum(rounds[it.request_id]) / len(rounds[it.request_id]) for it in items]
    for rule in RULES:
        o = out[rule]
        o["draft_acceptance"] = o["accepted"] / max(o["proposed"], 1)
        o["mean_accepted_length"] = o["emitted"] / o["rounds"]
        o["tokens_per_s"] = o["emitted"] / o["time"]
    diffs = [b - m for b, m in zip(out["block"]["per_request"], out["maximal"]["per_request"])]
    half = 1.96 * stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    out["block_minus_maximal"] = (mean(diffs), half)
    return out


PAIRS = {
    "smollm": ("embedded:smollm2-135m", "self:bf16", True),
    "gemma-vocab": ("embedded:gemma-3-270m", "self:vocab=16384", True),
    "gemma-default": ("embedded:gemma-3-270m", None, False),  # its default draft and -k auto
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="smollm,gemma-vocab,gemma-default")
    parser.add_argument("--ks", default="2,4,8")
    parser.add_argument("--temperatures", default="0.7,1.0")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    items = [PromptItem(f"p{i}", text) for i, text in enumerate(PROMPTS)]
    print("| pair | T | K | rule | draft acceptance | mean accepted length | tokens/s | speed / maximal |")
    print("|---|---|---|---|---|---|---|---|")
    notes = []
    for pair in args.pairs.split(","):
        target, draft, fixed_k = PAIRS[pair]
        for temperature in map(float, args.temperatures.split(",")):
            extra = {"draft": draft} if draft else {}
            options = GenerateOptions(
                target=target, max_new_tokens=args.max_new_tokens, temperature=temperature, seed=1, **extra
            )
            pipe = Pipeline.build(options)
            if pair == "smollm":
                base = pipe.run(items, baseline=True, record_log=False)
                texts = [(pipe.encode(it), r.tokens) for it, r in zip(items, base.results)]
                pos = position_figures(pipe, texts)
                notes.append(
                    f"{pair} T={temperature}: {pos['positions']} positions, mean TV {pos['mean_tv']:.3f}; one draft "
                    f"accepted: maximal 1 - TV = {pos['maximal_acceptance']:.3f}, invariant measured "
                    f"{pos['invariant_acceptance']:.3f} (bound {pos['invariant_bound']:.3f})"
                )
            for k in map(int, args.ks.split(",")) if fixed_k else ["auto"]:
                eng = engine_figures(pipe, items, k, args.repeats)
                for rule in RULES:
                    o = eng[rule]
                    speed = o["tokens_per_s"] / eng["maximal"]["tokens_per_s"]
                    print(
                        f"| {pair} | {temperature} | {k} | {rule} | {o['draft_acceptance']:.3f} | "
                        f"{o['mean_accepted_length']:.3f} | {o['tokens_per_s']:.1f} | {speed:.3f} |",
                        flush=True,
                    )
                diff, half = eng["block_minus_maximal"]
                notes.append(
                    f"{pair} T={temperature} K={k}: block - maximal mean accepted length {diff:+.3f} +- {half:.3f}"
                )
    print()
    for line in notes:
        print(line)


if __name__ == "__main__":
    main()
