"""The two verification rules side by side: acceptance, the (1 - TV)/(1 + TV) bound, and speed.

    python benchmarks/rules.py [--max-new-tokens 48] [--k 4] [--repeats 2] [--threads 1]

The embedded pair (SmolLM2-135M-Instruct float32 target, its bfloat16 copy as the draft),
six open prompts, at temperature 0.7, 1.0, and 1.0 with top-p 0.9. For each setting:

- along the target's own sampled text, per position, the processed rows p (target) and q
  (draft): their total variation TV, the maximal rule's acceptance of one draft, 1 - TV
  (exact), the invariant rule's bound (1 - TV)/(1 + TV), and the invariant rule's acceptance
  measured directly, P(Gumbel-max of p == Gumbel-max of q under shared noise), over 512 noise
  draws per position;
- both rules through the engine at fixed K, interleaved (maximal, invariant, then the other
  order): per-draft acceptance (accepted / proposed), mean accepted length, and the ratio of
  decode throughput invariant / maximal.

Not a test: it measures. Ratios come from runs side by side in one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from statistics import mean

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specd.core.gumbel import gumbel, race, request_key  # noqa: E402
from specd.models.options import GenerateOptions  # noqa: E402
from specd.models.pipeline import Pipeline  # noqa: E402
from specd.models.prompts import PromptItem  # noqa: E402
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


def engine_figures(pipe: Pipeline, items, k: int, repeats: int) -> dict:
    out = {
        rule: {"accepted": 0, "proposed": 0, "rounds": 0, "emitted": 0, "time": 0.0}
        for rule in ("maximal", "invariant")
    }
    for rep in range(repeats):
        order = ("maximal", "invariant") if rep % 2 == 0 else ("invariant", "maximal")
        for rule in order:
            run = pipe.with_options(dataclasses.replace(pipe.options, rule=rule)).run(items, k=k, record_log=False)
            s = run.stats
            o = out[rule]
            o["accepted"] += s.accepted
            o["proposed"] += s.proposed
            o["rounds"] += s.rounds
            o["emitted"] += s.emitted
            o["time"] += s.decode_time
    for o in out.values():
        o["draft_acceptance"] = o["accepted"] / o["proposed"]
        o["mean_accepted_length"] = o["emitted"] / o["rounds"]
        o["tokens_per_s"] = o["emitted"] / o["time"]
    out["speed_invariant_over_maximal"] = out["invariant"]["tokens_per_s"] / out["maximal"]["tokens_per_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    items = [PromptItem(f"p{i}", text) for i, text in enumerate(PROMPTS)]
    for name, temperature, top_p in SETTINGS:
        options = GenerateOptions(
            max_new_tokens=args.max_new_tokens, temperature=temperature, top_p=top_p, draft="self:bf16", seed=1
        )
        t0 = time.perf_counter()
        pipe = Pipeline.build(options)
        base = pipe.run(items, baseline=True, record_log=False)
        texts = [(pipe.encode(it), r.tokens) for it, r in zip(items, base.results)]
        pos = position_figures(pipe, texts)
        eng = engine_figures(pipe, items, args.k, args.repeats)
        print(f"\n== {name} (K = {args.k}, {pos['positions']} positions, {time.perf_counter() - t0:.0f} s)")
        print(
            f"  per position: mean TV {pos['mean_tv']:.3f}; one draft accepted: maximal 1 - TV = "
            f"{pos['maximal_acceptance']:.3f}, invariant measured {pos['invariant_acceptance']:.3f} "
            f"(bound (1 - TV)/(1 + TV) = {pos['invariant_bound']:.3f}; raced tokens miss at most "
            f"{pos['excluded_mass']:.1e} of the mass)"
        )
        for rule in ("maximal", "invariant"):
            o = eng[rule]
            print(
                f"  engine {rule:9s}: draft acceptance {o['draft_acceptance']:.3f}, mean accepted length "
                f"{o['mean_accepted_length']:.2f}, {o['emitted']} tokens"
            )
        print(f"  decode throughput invariant / maximal: {eng['speed_invariant_over_maximal']:.3f}")


if __name__ == "__main__":
    main()
