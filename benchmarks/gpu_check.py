"""GPU check for sessions lent a CUDA machine (not run by the test suite).

    python benchmarks/gpu_check.py --out gpu_check.json

Builds a random-weight Llama target of about 1B parameters and a draft made
from it (its first 4 layers: self:layers=4, weights shared), saves both with a
tiny tokenizer, then runs `specd generate --compare` at batch 1 and 8 for
K = 1..8, and a measured `specd sweep-k` at batch 1, 8 and 32. Prints one JSON
document with tokens/s, speedups and predicted vs measured ledger figures.
Random weights make acceptance meaningless for quality but real for cost.
First, the invariant rule's noise on both devices: the same SplitMix64 bits and Gumbel-max
tokens on CPU and CUDA (``noise_parity``), and a sampled run's text equal on both. Then the
shared-body draft (self:vocab=64 of the 300-token vocabulary) on CUDA at K = 2 and 4: greedy
output identical to target-only, and its speedup.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build(folder: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.hf_helpers import tiny_tokenizer

    tok = tiny_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    path = folder / "target-1b"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def specd(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "specd.cli", *args, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": out.stderr.strip()}
    return json.loads(out.stdout)


def noise_parity() -> dict:
    """The invariant rule's noise bits and race winners, CPU against CUDA."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from specd.core.gumbel import race_tokens, request_key, uniforms

    key = request_key(3, "gpu")
    positions = torch.arange(4096)
    cpu = uniforms(key, positions, 1024)
    gpu = uniforms(key, positions.cuda(), 1024).cpu()
    rows = torch.softmax(torch.randn(4096, 1024, generator=torch.Generator().manual_seed(0), dtype=torch.float64), -1)
    keys, at = [key] * 4096, positions.tolist()
    winners_cpu = race_tokens(rows, keys, at)
    winners_gpu = race_tokens(rows.cuda(), keys, at).cpu()
    return {
        "uniform_bits_equal": bool(torch.equal(cpu, gpu)),
        "race_winners_equal": int((winners_cpu == winners_gpu).sum()),
        "races": 4096,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu_check.json")
    args = ap.parse_args()
    report: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "noise_parity": noise_parity()}
    with tempfile.TemporaryDirectory() as tmp:
        target = str(build(Path(tmp)))
        sampled = ["generate", "--target", target, "--draft", "self:layers=4", "-p", "the quick brown fox"]
        sampled += ["--temperature", "0.8", "--seed", "3", "--max-new-tokens", "32", "-k", "4", "--rule", "invariant"]
        texts = {dev: specd(*sampled, "--device", dev).get("results", [{}])[0].get("text") for dev in ("cpu", "cuda")}
        report["invariant_text_cpu_equals_cuda"] = texts["cpu"] is not None and texts["cpu"] == texts["cuda"]
        for k in (2, 4):
            doc = specd(
                "generate", "--target", target, "--draft", "self:vocab=64", "-p", "the quick brown fox",
                "-k", str(k), "--max-new-tokens", "64", "--dtype", "bfloat16", "--device", "cuda", "--compare",
            )  # fmt: skip
            report[f"shared_body_k{k}"] = {
                "speedup": doc.get("speedup"),
                "identical": doc.get("identical_outputs"),
                "error": doc.get("error"),
            }
        prompts = Path(tmp) / "p.jsonl"
        prompts.write_text("".join(json.dumps({"prompt": f"the quick brown fox {i}"}) + "\n" for i in range(8)))
        for batch in (1, 8):
            for k in range(1, 9):
                src = ["-p", "the quick brown fox"] if batch == 1 else ["--prompts-file", str(prompts)]
                doc = specd(
                    "generate",
                    "--target",
                    target,
                    "--draft",
                    "self:layers=4",
                    *src,
                    "-k",
                    str(k),
                    "--max-new-tokens",
                    "64",
                    "--dtype",
                    "bfloat16",
                    "--device",
                    "cuda",
                    "--compare",
                )
                report[f"generate_b{batch}_k{k}"] = {
                    "speedup": doc.get("speedup"),
                    "identical": doc.get("identical_outputs"),
                    "tokens_per_s": {n: s.get("tokens_per_second") for n, s in doc.get("stats", {}).items()},
                    "error": doc.get("error"),
                }
        report["sweep"] = specd(
            "sweep-k",
            "--measure",
            "--target",
            target,
            "--draft",
            "self:layers=4",
            "--k",
            "1..8",
            "--batch",
            "1,8,32",
            "--dtype",
            "bfloat16",
            "--device",
            "cuda",
            "--max-new-tokens",
            "32",
        )
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
