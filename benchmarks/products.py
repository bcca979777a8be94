"""A linear product's CPU form (specd.models.hf.products), measured side by side in one process.

    python benchmarks/products.py [--threads 1,2] [--repeats 9] [--context 150]
    python benchmarks/products.py --overhead   # the dispatch alone, in microseconds

Per torch thread count, on the embedded target (SmolLM2-135M-Instruct, float32):

1. the target call by row count R (one request, R new tokens at a ``--context``-token
   context, specd's adapter): every linear product plain (F.linear, what Hugging Face runs)
   and in the forms specd chooses (decided first, in 8 untimed calls per R: the steady state of a
   run), interleaved call by call in a rotating order; printed: each
   in ms, T(R) / T(1) for each (what decides K for a free draft), and chosen / plain;
2. decode end to end (96 new tokens, greedy, 3 open prompts): Hugging Face greedy, specd
   target-only with plain products and with the chosen forms, back to back per prompt; every
   output must equal Hugging Face greedy's (counted).

``--overhead`` measures only what the product form adds to a product that is decided: a 64 x 64
linear layer on one row, 20,000 calls through the module (specd's calls, engaged) against as many
of ``F.linear`` on it, one torch thread, thread time, the best of 5 rounds each, interleaved. Run it
from two checkouts to compare them.

Not a test: it measures.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grounded import CATEGORIES, hf_generate  # noqa: E402

from specd.core.model import RowInput  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.models.run.prompts import PromptItem  # noqa: E402

ROWS = (1, 2, 3, 4, 5, 6, 8, 9, 12, 17, 25, 33)


@contextmanager
def plain_products(lm):
    """Every product of ``lm``'s calls plain (F.linear), as before specd chose forms."""
    forms, head = lm.forms, lm.head.forms if lm.head is not None else None
    lm.forms = None
    if lm.head is not None:
        lm.head.forms = None
    try:
        yield
    finally:
        lm.forms = forms
        if lm.head is not None:
            lm.head.forms = head


def call_costs(lm, context: int, repeats: int) -> dict:
    """(form, R) -> median seconds of one target call of R rows at ``context``."""
    cache = lm.new_cache()
    cache.open(0)
    prompt = tuple(range(100, 100 + context))
    lm.step(cache, [RowInput(0, prompt, tuple(range(context)))], logits_for=0)
    cache.commit(0, context)
    for rows in ROWS:  # untimed: each row count's forms are decided (a run's first calls at it)
        for _ in range(8):
            lm.step(cache, [RowInput(0, tuple(range(7, 7 + rows)), tuple(range(context, context + rows)))])
            cache.commit(0, 0)
            cache.tidy()
    times: dict = {}
    for rep in range(repeats):
        for rows in ROWS if rep % 2 == 0 else ROWS[::-1]:
            for form in ("plain", "chosen") if rep % 2 == 0 else ("chosen", "plain"):
                tokens = tuple(range(7, 7 + rows))
                with plain_products(lm) if form == "plain" else nullcontext():
                    started = time.perf_counter()
                    lm.step(cache, [RowInput(0, tokens, tuple(range(context, context + rows)))])
                    times.setdefault((form, rows), []).append(time.perf_counter() - started)
                cache.commit(0, 0)
                cache.tidy()
    return {key: median(values) for key, values in times.items()}


def decode_rates(pipe, max_new: int) -> tuple[dict, dict, int]:
    """System -> median tokens/s over the open prompts, system -> the median of its per-prompt ratios
    to HF greedy, and the outputs that differ from HF greedy's."""
    rates, mismatches = {}, 0
    for i, text in enumerate(CATEGORIES["open_chat"]):
        item = PromptItem(f"open-{i}", text)
        ids = list(pipe.encode(item))
        outs = {}
        for name in ("HF greedy", "specd target-only, plain", "specd target-only, chosen forms"):
            started = time.perf_counter()
            if name == "HF greedy":
                out, _ = hf_generate(pipe.target.model, ids, max_new)
            else:
                with plain_products(pipe.target) if name.endswith("plain") else nullcontext():
                    out = pipe.run([item], baseline=True, record_log=False).results[0].tokens
            rates.setdefault(name, []).append(len(out) / (time.perf_counter() - started))
            outs[name] = tuple(out)
        mismatches += sum(o != outs["HF greedy"] for o in outs.values())
    ratios = {name: median(r / h for r, h in zip(v, rates["HF greedy"])) for name, v in rates.items()}
    return {name: median(v) for name, v in rates.items()}, ratios, mismatches


def dispatch_overhead(calls: int = 20_000, rounds: int = 5) -> tuple[float, float]:
    """(us a product through the module, engaged and decided; us a call of F.linear on the same)."""
    import torch.nn.functional as F

    from specd.models.hf.products import forms_of

    torch.set_num_threads(1)
    layer = torch.nn.Linear(64, 64)
    forms = forms_of(torch.nn.Sequential(layer))
    x = torch.randn(1, 1, 64)
    best = {"module": float("inf"), "F.linear": float("inf")}
    with torch.no_grad(), forms.engaged():
        for _ in range(10):  # the class decided (timed by its own first calls)
            layer(x)
        for _ in range(rounds):
            for name, run in (
                ("module", lambda: layer(x)),
                ("F.linear", lambda: F.linear(x, layer.weight, layer.bias)),
            ):
                started = time.thread_time()
                for _ in range(calls):
                    run()
                best[name] = min(best[name], (time.thread_time() - started) / calls * 1e6)
    return best["module"], best["F.linear"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--context", type=int, default=150)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--overhead", action="store_true", help="only the dispatch's overhead a product")
    args = ap.parse_args()
    if args.overhead:
        module, plain = dispatch_overhead()
        print(f"a decided product: the module {module:.2f} us, F.linear {plain:.2f} us, added {module - plain:.2f}")
        return
    pipe = Pipeline.build(
        GenerateOptions(max_new_tokens=args.max_new_tokens, temperature=0.0, backend="hf"), with_draft=False
    )
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        costs = call_costs(pipe.target, args.context, args.repeats)
        print(f"\n== {threads} torch thread(s): the target call by row count, {args.context}-token context")
        print("| R | plain ms | chosen ms | plain T(R)/T(1) | chosen T(R)/T(1) | chosen / plain |")
        print("|---|---|---|---|---|---|")
        for rows in ROWS:
            p, c = costs[("plain", rows)], costs[("chosen", rows)]
            p1, c1 = costs[("plain", 1)], costs[("chosen", 1)]
            print(f"| {rows} | {p * 1e3:.1f} | {c * 1e3:.1f} | {p / p1:.2f} | {c / c1:.2f} | {c / p:.2f} |")
        rates, ratios, mismatches = decode_rates(pipe, args.max_new_tokens)
        print(f"decode, {args.max_new_tokens} new tokens, tokens/s (median of 3 open prompts): ", end="")
        print(", ".join(f"{name} {rate:.1f}" for name, rate in rates.items()))
        print("  / HF greedy (median of per-prompt ratios): " + ", ".join(f"{n} {r:.2f}" for n, r in ratios.items()))
        print(f"  outputs that differ from HF greedy's: {mismatches}")


if __name__ == "__main__":
    main()
