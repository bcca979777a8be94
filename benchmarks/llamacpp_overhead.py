"""specd's time around llama.cpp's step: specd target-only on llama.cpp against llama.cpp's own plain
decoding of the same file with the same keys (q8_0: the same tokens), interleaved, in one process.

    python benchmarks/llamacpp_overhead.py [--half test] [--kinds K1,K2] [--per-kind 1] [--repeats 3]
                                           [--max-new-tokens 96] [--default]

For each prompt and repeat, back to back in an order that alternates: specd target-only
(``--backend llama.cpp --baseline``) and llama-cpp-python's ``Llama.generate`` (greedy, flash
attention on, q8_0 keys), every ``llama_decode`` of each timed. Printed per system: milliseconds per
generated token in all, in llama_decode, and outside it (specd: filling the batch, copying the
logits, its rounds, rows, rule, staging, commit; llama-cpp-python: the same of its own), medians
over runs; then specd's tokens/s over llama.cpp's (the median of per-run ratios: the figure of issue
49's "target-only at least 0.9x llama.cpp's plain decoding") and how many runs gave the same tokens.
``--default`` adds specd's default (its suffix draft, -k auto) as a third system, timed the same way,
with its tokens/s over specd target-only: where a default round loses to target-only, in llama.cpp's
calls (rejected rows) or outside them (the draft, the rule over more rows).
To compare two versions of the round, run it from each checkout in turn, alternating. Not a test:
it measures.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive  # noqa: E402
from heldout import TARGETS, load_half  # noqa: E402
from llamacpp import llama, plain_tokens  # noqa: E402
from model_time import time_calls  # noqa: E402

import specd.models.llamacpp.lib as llamacpp_lib  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402


def take(spent: list[float]) -> float:
    """The seconds ``time_calls`` has added up since the last take."""
    seconds, spent[0] = spent[0], 0.0
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=("fit", "test"), default="test")
    ap.add_argument("--kinds", default=None, help="only these kinds, comma-separated")
    ap.add_argument("--per-kind", type=positive, default=1)
    ap.add_argument("--repeats", type=positive, default=3)
    ap.add_argument("--max-new-tokens", type=positive, default=96)
    ap.add_argument("--default", action="store_true", help="also time specd's default (suffix draft, -k auto)")
    args = ap.parse_args()
    items = load_half(args.half, args.per_kind, args.kinds)
    options = GenerateOptions(
        target=TARGETS["smollm"], max_new_tokens=args.max_new_tokens, temperature=0.0, backend="llama.cpp"
    )
    pipe = Pipeline.build(options)
    plain = llama(str(pipe.target.file.path), torch.get_num_threads(), k_type="q8_0")
    # llama_decode itself, for both systems: specd calls it through the binding's package, whose
    # name for it llama-cpp-python's own classes do not read (they call its low-level module's)
    in_specd = time_calls(llamacpp_lib.binding(), ("llama_decode",))
    low = sys.modules["llama_cpp.llama_cpp"]
    in_plain = in_specd if low is llamacpp_lib.binding() else time_calls(low, ("llama_decode",))
    systems = ("specd target-only", "llama.cpp plain") + (("specd default",) if args.default else ())
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in systems}
    ratios, default_ratios, same = [], [], 0
    pipe.run(items[:1], baseline=True, record_log=False, max_new_tokens=8)  # warm-up, untimed
    for repeat in range(args.repeats):
        for i, item in enumerate(items):
            ids = list(pipe.encode(item))
            runs = {}
            for name in systems[:: 1 if (repeat + i) % 2 else -1]:
                take(in_specd), take(in_plain)
                t = time.perf_counter()
                if name == "llama.cpp plain":
                    tokens = plain_tokens(plain, ids, args.max_new_tokens, pipe.eos_ids)
                    inside = take(in_plain)
                else:
                    baseline = name == "specd target-only"
                    tokens = list(pipe.run([item], baseline=baseline, record_log=False).results[0].tokens)
                    inside = take(in_specd)
                wall = time.perf_counter() - t
                runs[name] = tokens
                figures[name].append((wall / len(tokens), inside / len(tokens)))
            same += runs["specd target-only"] == runs["llama.cpp plain"]
            ratios.append(figures["llama.cpp plain"][-1][0] / figures["specd target-only"][-1][0])
            if args.default:
                same += runs["specd default"] == runs["specd target-only"]
                default_ratios.append(figures["specd target-only"][-1][0] / figures["specd default"][-1][0])
    print(f"{len(items)} prompts of the {args.half} half x {args.repeats}, {args.max_new_tokens} new tokens")
    print("| system | ms a token | in llama_decode | outside it |")
    print("|---|---|---|---|")
    for name, rows in figures.items():
        total, inside = median(r[0] for r in rows) * 1e3, median(r[1] for r in rows) * 1e3
        outside = median(r[0] - r[1] for r in rows) * 1e3
        print(f"| {name} | {total:.2f} | {inside:.2f} | {outside:.2f} |")
    print(f"specd target-only / llama.cpp plain, tokens/s (median of per-run ratios): {median(ratios):.3f}")
    if args.default:
        print(f"specd default / specd target-only, tokens/s (median of per-run ratios): {median(default_ratios):.3f}")
    print(f"identical tokens: {same}/{len(ratios) * (len(systems) - 1)} pairs with specd target-only's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
