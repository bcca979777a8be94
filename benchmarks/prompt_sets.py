"""Prompt sets at scale, measured side by side in one run (not a test: it measures).

    python benchmarks/prompt_sets.py [--prompts 2000] [--max-new-tokens 8]

A tiny random-weight Llama target (4 layers, hidden 128) and a noisy copy as draft,
K = 4, greedy; short prompts of different lengths (2 to 12 tokens), each decoded to
the token budget (requests finish at different rounds: their acceptance differs).
First the finish cost per request against batch size: the time spent in the
caches' close and compact (what finishing a row costs) divided by the requests
that finished, for one batch of 16, 64, 256, 1024 and all prompts; it must stay
flat. Then throughput: the whole set as one batch, continuous batching with
--batch-size 16 and 64, and Ray with 2 workers (one per core; actor start and
model loading included). Every run's tokens are compared with the one-batch run's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build_models(folder: Path) -> tuple[str, str]:
    import torch

    from tests.hf_helpers import noisy_copy, tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    target = tiny_llama(len(tok), seed=0, layers=4, hidden=128, eos=None)
    paths = []
    for name, model in (("target", target), ("draft", noisy_copy(target, 0.2, seed=1))):
        model.save_pretrained(folder / name)
        tok.save_pretrained(folder / name)
        paths.append(str(folder / name))
    return paths[0], paths[1]


def prompt_items(n: int):
    from specd.models.run.prompts import PromptItem

    words = "the quick brown fox jumps over the lazy dog while a cheap draft proposes".split()
    return [PromptItem(f"q{i}", " ".join(words[(i + j) % len(words)] for j in range(2 + i % 11))) for i in range(n)]


class FinishClock:
    """Time spent in the HF slot caches' close and compact (the cost of requests leaving a batch)."""

    def __init__(self):
        from specd.models.hf.slot_cache import SlotCache

        self.seconds = 0.0
        for name in ("close", "compact"):
            original = getattr(SlotCache, name)

            def timed(cache, *args, _original=original):
                t = time.perf_counter()
                try:
                    return _original(cache, *args)
                finally:
                    self.seconds += time.perf_counter() - t

            setattr(SlotCache, name, timed)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()

    import torch

    from specd.models.run.manifest import run_manifest
    from specd.models.run.options import GenerateOptions
    from specd.models.run.pipeline import Pipeline

    clock = FinishClock()
    with tempfile.TemporaryDirectory() as tmp:
        target, draft = build_models(Path(tmp))
        options = GenerateOptions(target=target, draft=draft, k=4, max_new_tokens=args.max_new_tokens)
        pipe = Pipeline.build(options)
        items = prompt_items(args.prompts)
        print(
            f"{len(items)} prompts, tiny Llama (4 layers, hidden 128), K=4, greedy, "
            f"max-new-tokens {args.max_new_tokens}, torch threads={torch.get_num_threads()}",
            flush=True,
        )
        pipe.run(items[:8], max_new_tokens=4, record_log=False)  # warm-up

        print("finish cost against batch size (one batch each):")
        for size in sorted({16, 64, 256, 1024, len(items)}):
            if size > len(items):
                continue
            clock.seconds = 0.0
            pipe.run(items[:size], record_log=False)
            print(f"  B = {size:5d}   {1e6 * clock.seconds / size:7.1f} us per finished request", flush=True)

        print("throughput:")
        rows, reference = [], None
        for label, batch_size in (("one batch", None), ("--batch-size 16", 16), ("--batch-size 64", 64)):
            clock.seconds = 0.0
            t = time.perf_counter()
            run = pipe.run(items, batch_size=batch_size, record_log=False)
            wall = time.perf_counter() - t
            tokens = [r.tokens for r in run.results]
            reference = reference or tokens
            rows.append((label, len(items) / wall, 1e6 * clock.seconds / len(items), tokens == reference))
            print(
                f"  {label:18s} {rows[-1][1]:8.1f} requests/s   finish cost {rows[-1][2]:7.1f} us/request", flush=True
            )

        if not args.no_ray:
            from specd.models.run.distributed import connect, run_on_ray

            ray = connect("local", num_cpus=2)
            t = time.perf_counter()
            out = run_on_ray(
                ray,
                options,
                items,
                baseline=False,
                k=None,
                max_new_tokens=None,
                record_log=False,
                batch_size=16,
                manifest=run_manifest(pipe),
            )
            wall = time.perf_counter() - t
            same = [r.tokens for r in out.results] == reference
            rows.append(("Ray, 2 workers", len(items) / wall, None, same))
            print(f"  {'Ray, 2 workers':18s} {rows[-1][1]:8.1f} requests/s   (actors start and load in this time)")
            ray.shutdown()

    print()
    print(
        json.dumps(
            {
                label: {"requests_per_s": rps, "finish_us_per_request": f, "same_tokens": same}
                for label, rps, f, same in rows
            },
            indent=2,
        )
    )
    return 0 if all(row[3] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
