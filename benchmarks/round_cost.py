"""The time a round spends outside model calls (proposal bookkeeping, processors, the rule,
staging), this checkout against another (the commit before, as a git worktree), side by side.

    git worktree add /tmp/specd-before HEAD~1
    python benchmarks/round_cost.py --before /tmp/specd-before

Each measurement runs in a fresh process that imports specd from one checkout: a tiny random
Llama (1 layer, hidden 16) at the given vocabulary and B requests at K (``--ragged``: the first
request at K, the others at 0), drafted by a lookup that always has K tokens to offer (an n-gram
lookup whose copy never runs out: its drafts are point masses, as a copy's are), greedy or
sampled (T = 0.7, the maximal or the invariant rule). It runs a warm-up round, then ROUNDS
rounds, and times the rounds with every model call (target steps, the head) timed apart:
non-model time = round time - model time. The two checkouts alternate, REPEATS times per
setting; the table gives the median per round of each and their ratio (before / now).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from model_time import time_calls

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 6


def child(vocab: int, batch: int, k: int, mode: str, ragged: bool = False) -> dict:
    """One measurement in this process (specd imported from PYTHONPATH's checkout)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from specd.core.engine import EngineConfig, SpeculativeEngine
    from specd.core.processors import SamplingPolicy
    from specd.core.proposer import NgramProposer
    from specd.core.round import speculative_round
    from specd.core.state import Request
    from specd.models.hf.model import HFCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
    )
    target = HFCausalLM(LlamaForCausalLM(config).eval(), "target")
    model_seconds = time_calls(target)

    class EndlessCopy(NgramProposer):
        """A lookup that always has K tokens to propose (a copy that never runs out)."""

        def find(self, seq, k):
            return tuple((seq[-1] + 1 + i) % vocab for i in range(k)), 4

    policy = SamplingPolicy.build(temperature=0.0 if mode == "greedy" else 0.7)
    rule = "invariant" if mode == "invariant" else "maximal"
    engine = SpeculativeEngine(target, EndlessCopy(4, vocab), policy, EngineConfig(k=k, rule=rule))
    budget = (ROUNDS + 2) * (k + 1) + 1  # K never shrinks for want of budget
    ks = [k if b == 0 or not ragged else 0 for b in range(batch)]  # ragged: the first request alone drafts
    requests = [Request(f"r{b}", (5 + b, 6, 7), budget, seed=b, k=ks[b]) for b in range(batch)]
    session = engine.start()
    session.submit(requests)
    session.fill(None)
    with torch.inference_mode():
        speculative_round(session)  # warm-up
        model_seconds[0] = 0.0
        started = time.perf_counter()
        drafted = 0
        for _ in range(ROUNDS):
            drafted += sum(len(c.draft_token_ids) for c in speculative_round(session))
        total = time.perf_counter() - started
    return {
        "round_s": total / ROUNDS,
        "model_s": model_seconds[0] / ROUNDS,
        "other_s": (total - model_seconds[0]) / ROUNDS,
        "drafted_per_round": drafted / ROUNDS,
    }


def measure(checkout: Path, vocab: int, batch: int, k: int, mode: str, threads: int, ragged: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": str(threads)}
    args = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps([vocab, batch, k, mode, ragged])]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=checkout, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'failed'}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another checkout of specd (a git worktree of the commit before)")
    parser.add_argument("--vocab", default="49152,262144")
    parser.add_argument("--batch", default="1,8,32")
    parser.add_argument("--k", default="4,32")
    parser.add_argument("--modes", default="greedy,sampled,invariant")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ragged", action="store_true", help="only the first request drafts K; the rest K = 0")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*json.loads(args.child))))
        return
    checkouts = {"now": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    print(
        f"non-model time per round, median of {args.repeats} (ms); model time beside it; torch threads {args.threads}"
        + ("; only the first request drafts (the rest at K = 0)" if args.ragged else "")
    )
    print("| V | B | K | mode | drafted | now: other | now: model | before: other | before: model | other before/now |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for vocab in map(int, args.vocab.split(",")):
        for batch in map(int, args.batch.split(",")):
            for k in map(int, args.k.split(",")):
                for mode in args.modes.split(","):
                    runs: dict[str, list[dict]] = {name: [] for name in checkouts}
                    for rep in range(args.repeats):  # alternate which checkout goes first
                        order = list(checkouts) if rep % 2 == 0 else list(reversed(checkouts))
                        for name in order:
                            runs[name].append(
                                measure(checkouts[name], vocab, batch, k, mode, args.threads, args.ragged)
                            )
                    med = {
                        name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()
                    }
                    now, before = med["now"], med.get("before")
                    cells = [vocab, batch, k, mode, f"{now['drafted_per_round']:.0f}"]
                    cells += [f"{1e3 * now['other_s']:.1f}", f"{1e3 * now['model_s']:.1f}"]
                    if before:
                        cells += [f"{1e3 * before['other_s']:.1f}", f"{1e3 * before['model_s']:.1f}"]
                        cells += [f"{before['other_s'] / now['other_s']:.2f}"]
                    else:
                        cells += ["-", "-", "-"]
                    print("| " + " | ".join(map(str, cells)) + " |", flush=True)


if __name__ == "__main__":
    main()
