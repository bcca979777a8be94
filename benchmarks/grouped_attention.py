"""One layer's attention over grouped-query heads: specd's grouped SDPA (specd.models.hf.grouped_attention)
against transformers' SDPA (which repeats each K/V head for a call of several query rows), side by side.

    python benchmarks/grouped_attention.py [--repeats 200] [--threads 1]

For each shape (batch, query heads, K/V heads, query rows, span), a right-padded chain's additive
mask, both functions alternately, the best of 3 rounds of ``--repeats`` calls each, in ms a call;
and the largest difference of their outputs (0 where equal bit for bit, as on some CPUs; up to about
3e-7 on others, within float32's rounding). Not a test: it measures.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive  # noqa: E402
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402

from specd.models.hf.grouped_attention import grouped_sdpa  # noqa: E402

SHAPES = ((1, 9, 3, 5, 150), (1, 9, 3, 5, 1000), (1, 9, 3, 17, 2000), (1, 32, 8, 5, 1000), (4, 32, 8, 5, 1000))


class Attention(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups


def best_ms(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - started) / repeats * 1e3)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=positive, default=200)
    ap.add_argument("--threads", type=positive, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(0)
    print("| batch | heads / K/V heads | rows | span | transformers ms | grouped ms | ratio | max difference |")
    print("|---|---|---|---|---|---|---|---|")
    for batch, heads, kv_heads, rows, span in SHAPES:
        query = torch.randn(batch, rows, heads, 64, generator=gen).transpose(1, 2)
        key, value = (torch.randn(batch, kv_heads, span, 64, generator=gen) for _ in range(2))
        ends = torch.tensor([span - 1 - b for b in range(batch)])
        attends = (ends[:, None] - rows + 1 + torch.arange(rows))[:, None, :, None] >= torch.arange(span)
        mask = torch.where(attends, torch.tensor(0.0), torch.tensor(float("-inf")))
        args = (Attention(heads // kv_heads), query, key, value, mask)
        theirs = functools.partial(sdpa_attention_forward, *args, scaling=0.125)
        ours = functools.partial(grouped_sdpa, *args, scaling=0.125)
        difference = (theirs()[0] - ours()[0]).abs().max().item()
        t_theirs, t_ours = best_ms(theirs, a.repeats), best_ms(ours, a.repeats)
        print(
            f"| {batch} | {heads} / {kv_heads} | {rows} | {span} | {t_theirs:.3f} | {t_ours:.3f} | "
            f"{t_theirs / t_ours:.1f}x | {difference:.1e} |"
        )


if __name__ == "__main__":
    main()
