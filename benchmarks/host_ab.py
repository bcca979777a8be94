"""One change to the round's host code against its code before, side by side in one process.

    python benchmarks/host_ab.py CHANGE [--system "specd target-only"] [--layers 4] [--batch 1]
                                        [--pairs 20] [--json OUT]

``host_cost.py``'s tiny Llama and its clock (model calls timed by forward hooks, one torch thread,
the thread's CPU time, each figure a 128-token run minus a 64-token run). Runs of the code as it is
and as it was alternate, the order flipping each pair; printed: each side's median host time a round,
and the ratio now / before of each pair's two runs (made back to back): its median and quartiles,
and in how many pairs the code as it is was faster. The code before is the module read from git at
the change's parent commit and put in place of the one reference that change made (two versions of
specd cannot be imported side by side otherwise), so only the changes listed here can be measured
this way:

    mask      954ed10: a one-query-a-row call's mask filled with one value (specd.models.hf.step_call)
    modules   6c4bf1e: each call's eval check reads the modules' flags from their dicts (hf.modes)

(A third, 3553f25, a round's launch and settling out of grad mode, measured 1.002x at K = 4 over 20
pairs, ``results/host_ab-2026-12-06-no_grad.json``, was reverted, and its case with it.)

Two versions of a whole round differ by more than this machine's noise only in a long A/B like
this one: host_cost.py's own ratios, run from two checkouts in turn, move by 10-20% between runs.
Not a test: it measures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import host_cost  # noqa: E402
from arguments import positive  # noqa: E402
from heldout import refuse_outputs  # noqa: E402

from specd.files import write_text_atomic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHANGES = {  # name -> (commit, the module file it changed, that module's name)
    "mask": ("954ed10", "specd/models/hf/step_call.py", "specd.models.hf.step_call"),
    "modules": ("6c4bf1e", "specd/models/hf/modes.py", "specd.models.hf.modes"),
}


def module_before(change: str):
    """The changed module as it was at the change's parent commit, imported under a name of its own."""
    commit, path, name = CHANGES[change]
    text = subprocess.run(["git", "show", f"{commit}^:{path}"], cwd=ROOT, capture_output=True, text=True, check=True)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(text.stdout)
    spec = importlib.util.spec_from_file_location(f"{name}_before", fh.name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def switch(change: str, systems, before) -> dict:
    """-> {"before": put the code before in place, "now": the code as it is}."""
    if change == "mask":
        import specd.models.hf.model as model

        now = model.plan_call
        return {
            "before": lambda: setattr(model, "plan_call", before.plan_call),
            "now": lambda: setattr(model, "plan_call", now),
        }
    if change == "modules":
        from specd.models.hf.model import HFCausalLM

        # the pipeline's causal LMs (its target's and its draft's), which every run's options keep
        adapters = [lm for lm in systems.pair._pipe.lms if isinstance(lm, HFCausalLM)]
        if not adapters:
            raise SystemExit("host_ab.py: the pair runs no Hugging Face model: nothing to measure")
        taken = {id(a): a.modules for a in adapters}

        def put(old: bool) -> None:
            for a in adapters:
                a.modules = tuple(taken[id(a)]) if old else taken[id(a)]

        return {"before": lambda: put(True), "now": lambda: put(False)}
    raise ValueError(change)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("change", choices=sorted(CHANGES))
    ap.add_argument("--system", default="specd target-only", choices=["specd target-only", "specd k=4"])
    ap.add_argument("--layers", type=positive, default=4)
    ap.add_argument("--batch", type=positive, default=1)
    ap.add_argument("--pairs", type=positive, default=20)
    ap.add_argument("--json", default=None, help="also write the figures here as JSON")
    a = ap.parse_args()
    refuse_outputs("host_ab.py", {"--json": a.json}, [])
    torch.set_num_threads(1)
    args = argparse.Namespace(vocab=512, layers=a.layers, hidden=64, threads=1, batch=a.batch)
    systems = host_cost.Systems(args)
    sides = switch(a.change, systems, module_before(a.change) if a.change != "modules" else None)

    def host_per_round(side: str) -> float:
        sides[side]()
        short, long = systems.run(a.system, 64), systems.run(a.system, 128)
        return (long[0] - short[0]) / (long[2] - short[2])

    for side in sides:  # warm-up
        host_per_round(side)
    times: dict[str, list[float]] = {"before": [], "now": []}
    for pair in range(a.pairs):
        for side in ("before", "now") if pair % 2 == 0 else ("now", "before"):
            times[side].append(host_per_round(side))
    sides["now"]()
    before, now = (statistics.median(times[s]) * 1e6 for s in ("before", "now"))
    # each pair's two runs were made back to back: their ratio cancels what the machine did meanwhile
    ratios = sorted(n / b for n, b in zip(times["now"], times["before"]))
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    faster = sum(r < 1 for r in ratios)
    print(f"{a.change} ({CHANGES[a.change][0]}), {a.system}, {a.layers} layers, batch {a.batch}, {a.pairs} pairs:")
    print(f"host us a round (medians): before {before:.1f}, now {now:.1f}")
    print(
        f"now / before, per pair: median {statistics.median(ratios):.3f}, quartiles {quartiles[0]:.3f}-"
        f"{quartiles[2]:.3f}; now faster in {faster} of {len(ratios)} pairs"
    )
    if a.json:
        doc = {"change": a.change, "commit": CHANGES[a.change][0], "system": a.system, "layers": a.layers}
        doc |= {"batch": a.batch, "pairs": a.pairs, "host_s": times, "pair_ratios": ratios}
        write_text_atomic(a.json, json.dumps(doc, indent=1) + "\n", "JSON file")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
