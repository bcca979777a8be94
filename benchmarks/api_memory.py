"""Does ``specd.Pair.load`` of a model already in memory copy its weights? Resident memory, measured.

    python benchmarks/api_memory.py [--target embedded:smollm2-135m] [--repeats 2]

Each measurement is a fresh process: it loads the target with transformers (``from_pretrained``
on specd's converted folder of the embedded model), reads every weight and runs one forward (a
memory-mapped file's pages are resident only once read), reads its resident set size (VmRSS), then
builds a pair (drafting from ``suffix``: a lookup, no second model) either from the objects in
memory or by name from the same folder, generates 8 tokens, and reads VmRSS again. Printed: the
growth of each, its median over the repeats, and the model's weight bytes for scale. Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys
sys.path.insert(0, {root!r})
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import specd

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

folder, mode = {folder!r}, {mode!r}
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
tokenizer = AutoTokenizer.from_pretrained(folder)
with torch.no_grad():  # touch every weight: a memory-mapped file's pages count once read
    sum(float(p.double().sum()) for p in model.parameters())
    model(torch.tensor([[1, 2, 3]]))
before = rss_mib()
if mode == "object":
    pair = specd.Pair.load(model, "suffix", tokenizer=tokenizer)
else:
    pair = specd.Pair.load(folder, "suffix")
pair.generate("Write a haiku about the sea", max_new_tokens=8, temperature=0)
weights = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
print(json.dumps({{"growth_mib": rss_mib() - before, "weights_mib": weights}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="embedded:smollm2-135m")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from specd.models.run.embedded import embedded_name, ensure_embedded

    folder = str(ensure_embedded(embedded_name(args.target, None)))
    growth: dict[str, list[float]] = {"object": [], "name": []}
    weights = 0.0
    for _ in range(args.repeats):
        for mode in growth:  # alternating
            code = CHILD.format(root=str(ROOT), folder=folder, mode=mode)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            doc = json.loads(out.stdout.strip().splitlines()[-1])
            growth[mode].append(doc["growth_mib"])
            weights = doc["weights_mib"]
    print(f"{args.target}: weights {weights:.0f} MiB (float32)")
    for mode, values in growth.items():
        how = "from the objects in memory" if mode == "object" else "by name, a second load"
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"  Pair.load {how}: resident memory +{statistics.median(values):.0f} MiB (runs: {runs})")


if __name__ == "__main__":
    main()
