"""The GPU check: what a short GPU slot should learn, cheapest and most important first.

    python benchmarks/gpu_check.py --out-dir DIR [--budget-s 420]      # on a CUDA machine
    python benchmarks/gpu_check.py --out-dir DIR --dry-run             # tiny sizes, on a CPU (the tests run it)

Every step appends one JSON line to DIR/gpu_check.jsonl as soon as it ends (its figures, or its
error, or "skipped: out of time"), so a slot cut off mid-run still returns what it measured. Each
step has its own time limit (SIGALRM) and the whole run a budget. Models are built on the device
from configs, with random weights (nothing is downloaded or copied there): a Llama-3-style ~1B
config (V = 128,256) as a float32 target drafted by its own bfloat16 copy (a model mostly agrees
with its bf16 copy, and the copy moves half the bytes), and the SmolLM2-135M config (V = 49,152)
as a bfloat16 target drafting by suffix lookup on copy prompts. The prompts are token ids (no
tokenizer is needed): random ids, the copy prompts a passage said twice.

Steps, in this order: the device; the invariant rule's noise and the sampler's decisions on CPU
and CUDA; ``pytest -m gpu``; ``specd generate --compare`` as a user runs it, on a tiny model folder
(greedy and sampled, chain and tree: on CUDA, the same text as its target-only run); batch 1 on
the 1B target (Hugging Face greedy, HF assisted generation with the same bf16 copy, specd
target-only, specd self:bf16 at K = 4 and -k auto: tokens/s, outputs equal to HF greedy's, peak
memory, reads from the device per round); batch 8 and 32 (specd target-only against the
default); the SmolLM2 config in bf16 (HF greedy, HF prompt lookup, specd suffix); then where batch
1's time goes (``profile_batch1``: HF greedy and specd target-only under torch.profiler, kernels
and host ops per token). Speeds are ratios of runs side by side in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

SIZES = {  # the real configs, and the dry run's stand-ins
    "llama1b": dict(vocab_size=128_256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8),
    "smollm2": dict(vocab_size=49_152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3),
    "dry": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2),
}  # fmt: skip


class OutOfTime(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    """Raise OutOfTime in the step after ``seconds`` (the main thread only; 0: no limit)."""
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def expired(signum, frame):
        raise OutOfTime(f"step ran past its {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Results:
    """Append-only JSONL: one line per step, flushed and synced as it ends."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "gpu_check.jsonl"
        self.lines: list[dict] = []

    def add(self, line: dict) -> None:
        self.lines.append(line)
        with self.path.open("a") as fh:
            fh.write(json.dumps(line, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def llama(size: str, dtype: torch.dtype, device: torch.device, seed: int = 0):
    """A random-weight Llama of the named size, built on ``device`` in ``dtype``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SIZES[size], max_position_embeddings=4096, eos_token_id=None, bos_token_id=None,
                      pad_token_id=None, tie_word_embeddings=False)  # fmt: skip
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    return model.eval()


def prompts(vocab: int, batch: int, length: int, copy: bool, seed: int = 0) -> list[tuple[int, ...]]:
    """Token-id prompts: random ids, or for ``copy`` a passage given twice (what a lookup can draft)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(batch):
        ids = torch.randint(10, vocab, (length // 2 if copy else length,), generator=gen).tolist()
        out.append(tuple(ids + ids if copy else ids))
    return out


def hf_generate(model, batch_prompts, new_tokens: int, **kwargs) -> tuple[list[tuple[int, ...]], float]:
    """Hugging Face greedy (or assisted / prompt lookup, by kwargs) at batch 1, prompt by prompt ->
    (outputs, seconds)."""
    device = next(model.parameters()).device
    outs, started = [], time.perf_counter()
    for p in batch_prompts:
        ids = torch.tensor([p], device=device)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, **kwargs)  # fmt: skip
        outs.append(tuple(out[0, len(p) :].tolist()))
    sync(device)
    return outs, time.perf_counter() - started


def specd_run(target, sources, batch_prompts, new_tokens: int, k, batch: int) -> dict:
    """specd on token ids (k: an int, "auto", or None for target-only), all prompts ``batch`` at a
    time -> outputs, seconds, reads per round, rounds."""
    from specd.core.engine import EngineConfig, SpeculativeEngine
    from specd.core.host_reads import HostReads
    from specd.core.processors import SamplingPolicy
    from specd.core.round import decode
    from specd.core.sources import SourceSet
    from specd.core.state import Request
    from specd.policy.autok import auto_k_over
    from specd.policy.costs import OnlineCosts

    policy = SamplingPolicy.build(temperature=0.0)
    config = EngineConfig(k=k if isinstance(k, int) else 0, record_log=False)
    if k is None:
        engine = SpeculativeEngine.baseline(target, policy, config)
    else:
        costs = OnlineCosts()
        proposer = SourceSet(sources)
        k_policy = auto_k_over(proposer.sources, 32, batch, costs, greedy=True) if k == "auto" else None
        engine = SpeculativeEngine(target, proposer, policy, config, k_policy=k_policy, observers=(costs.observe,))
    requests = [Request(f"r{i}", p, new_tokens) for i, p in enumerate(batch_prompts)]
    session = engine.start()
    session.submit(requests)
    reads = HostReads()
    started = time.perf_counter()
    with reads:
        result = decode(session, batch_size=batch)
    sync(target.device)
    seconds = time.perf_counter() - started
    rounds = max(result.stats.rounds, 1)
    return {"outputs": [tuple(t) for t in result.new_tokens()], "seconds": seconds,
            "reads_per_round": reads.count / rounds, "rounds": rounds,
            "mean_accepted_length": result.stats.figures().get("mean_accepted_length")}  # fmt: skip


def step_device(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"device": "cpu (dry run)", "torch": torch.__version__}
    free, total = torch.cuda.mem_get_info(device)
    return {"device": torch.cuda.get_device_name(device), "torch": torch.__version__, "cuda": torch.version.cuda,
            "free_gib": free / 2**30, "total_gib": total / 2**30}  # fmt: skip


def step_parity(device: torch.device) -> dict:
    """The invariant rule's noise and race winners, and the sampler's decisions, CPU against device."""
    from specd.core.gumbel import race_tokens, request_key, uniforms
    from specd.core.rows import Rows
    from specd.core.sampler import RejectionSampler

    key = request_key(3, "gpu")
    positions = torch.arange(2048)
    bits_equal = torch.equal(uniforms(key, positions, 512), uniforms(key, positions.to(device), 512).cpu())
    gen = torch.Generator().manual_seed(0)
    rows = torch.softmax(torch.randn(512, 2048, generator=gen, dtype=torch.float64), -1)
    keys, at = [key] * 512, list(range(512))
    winners = int((race_tokens(rows, keys, at) == race_tokens(rows.to(device), keys, at).cpu()).sum())
    p = torch.softmax(torch.randn(16, 5, 64, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(16, 4, 64, generator=gen, dtype=torch.float64), -1)
    drafts, k_lens = torch.randint(0, 64, (16, 4), generator=gen), torch.randint(0, 5, (16,), generator=gen)
    u = torch.rand(16, 4, generator=gen, dtype=torch.float64)
    rule = RejectionSampler()
    a = rule.decide(Rows.dense(p, q, drafts, k_lens), u).accepted
    b = rule.decide(Rows.dense(*(t.to(device) for t in (p, q, drafts, k_lens))), u.to(device)).accepted.cpu()
    return {"uniform_bits_equal": bits_equal, "race_winners_equal": f"{winners}/512",
            "decisions_equal": bool(torch.equal(a, b))}  # fmt: skip


def step_llama(device: torch.device, size: str, new_tokens: int, batches: tuple[int, ...]) -> dict:
    """The float32 target drafted by its own bf16 copy: HF greedy, HF assisted, specd at batch 1; then
    specd target-only against the default at larger batches."""
    from specd.core.processors import SamplingPolicy
    from specd.core.proposer import ModelProposer
    from specd.models.hf import HFCausalLM

    model = llama(size, torch.float32, device)
    copy = llama(size, torch.float32, device).to(torch.bfloat16)
    copy.load_state_dict({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
    vocab = SIZES[size]["vocab_size"]
    target, draft = HFCausalLM(model, size), HFCausalLM(copy, f"self:bf16({size})")
    greedy = SamplingPolicy.build(temperature=0.0)
    one = prompts(vocab, 4, 64, copy=False)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    hf, hf_s = hf_generate(model, one, new_tokens)
    assisted, assisted_s = hf_generate(model, one, new_tokens, assistant_model=copy)
    base = specd_run(target, [], one, new_tokens, None, 1)
    k4 = specd_run(target, [ModelProposer(draft, greedy)], one, new_tokens, 4, 1)
    auto = specd_run(target, [ModelProposer(draft, greedy)], one, new_tokens, "auto", 1)
    out = {
        "batch1_tokens_per_s": {
            name: len(one) * new_tokens / s
            for name, s in (
                ("hf_greedy", hf_s),
                ("hf_assisted", assisted_s),
                ("specd_target_only", base["seconds"]),
                ("specd_k4", k4["seconds"]),
                ("specd_auto", auto["seconds"]),
            )
        },  # fmt: skip
        "batch1_ratios": {
            "specd_target_only_vs_hf": hf_s / base["seconds"],
            "specd_auto_vs_hf": hf_s / auto["seconds"],
            "specd_auto_vs_hf_assisted": assisted_s / auto["seconds"],
            "specd_k4_vs_hf": hf_s / k4["seconds"],
        },  # fmt: skip
        "equal_to_hf_greedy": {
            "target_only": base["outputs"] == hf,
            "k4": k4["outputs"] == hf,
            "auto": auto["outputs"] == hf,
            "hf_assisted": assisted == hf,
        },  # fmt: skip
        "reads_per_round": {"target_only": base["reads_per_round"], "k4": k4["reads_per_round"]},
        "mean_accepted_length": {"k4": k4["mean_accepted_length"], "auto": auto["mean_accepted_length"]},
    }
    for b in batches:
        many = prompts(vocab, b, 64, copy=False, seed=b)
        t_only = specd_run(target, [], many, new_tokens, None, b)
        default = specd_run(target, [ModelProposer(draft, greedy)], many, new_tokens, "auto", b)
        out[f"batch{b}"] = {"specd_default_vs_target_only": t_only["seconds"] / default["seconds"],
                            "equal": t_only["outputs"] == default["outputs"]}  # fmt: skip
    if device.type == "cuda":
        out["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out


def step_profile(device: torch.device, size: str, new_tokens: int) -> dict:
    """Where batch 1's time goes: HF greedy against specd target-only on the float32 target, each under
    torch.profiler for ``new_tokens`` tokens -> per token, the kernels launched on the device, the
    host operations run, and the host ops that took the most time (self CPU time)."""
    from torch.profiler import ProfilerActivity, profile

    from specd.models.hf import HFCausalLM

    model = llama(size, torch.float32, device)
    prompt = prompts(SIZES[size]["vocab_size"], 1, 64, copy=False)
    target = HFCausalLM(model, size)
    hf_generate(model, prompt, 4)  # warm: the kernels' first launches are not a step's cost
    specd_run(target, [], prompt, 4, None, 1)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    out = {}
    for name, run in (("hf_greedy", lambda: hf_generate(model, prompt, new_tokens)),
                      ("specd_target_only", lambda: specd_run(target, [], prompt, new_tokens, None, 1))):  # fmt: skip
        with profile(activities=activities) as prof:
            started = time.perf_counter()
            run()
            seconds = time.perf_counter() - started
        events = prof.key_averages()
        kernels = sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
        host_ops = sum(e.count for e in events if e.key.startswith("aten::"))
        top = sorted((e for e in events if e.key.startswith("aten::")), key=lambda e: -e.self_cpu_time_total)[:8]
        out[name] = {
            "ms_per_token": 1000 * seconds / new_tokens,
            "device_kernels_per_token": kernels / new_tokens,
            "aten_ops_per_token": host_ops / new_tokens,
            "top_self_cpu_ms_per_token": {e.key: e.self_cpu_time_total / 1000 / new_tokens for e in top},
        }
    return out


def step_suffix(device: torch.device, size: str, new_tokens: int) -> dict:
    """A bf16 target drafting by suffix lookup on copy prompts: HF greedy, HF prompt lookup, specd."""
    from specd.core.suffix import SuffixProposer
    from specd.models.hf import HFCausalLM

    model = llama(size, torch.bfloat16 if device.type == "cuda" else torch.float32, device, seed=1)
    vocab = SIZES[size]["vocab_size"]
    copy_prompts = prompts(vocab, 4, 128, copy=True, seed=7)
    target = HFCausalLM(model, size)
    hf, hf_s = hf_generate(model, copy_prompts, new_tokens)
    lookup, lookup_s = hf_generate(model, copy_prompts, new_tokens, prompt_lookup_num_tokens=10)
    spec = specd_run(target, [SuffixProposer(target.vocab_size)], copy_prompts, new_tokens, "auto", 1)
    return {
        "specd_suffix_vs_hf": hf_s / spec["seconds"],
        "specd_suffix_vs_hf_lookup": lookup_s / spec["seconds"],
        "equal_to_hf_greedy": spec["outputs"] == hf,
        "hf_lookup_equal": lookup == hf,
        "mean_accepted_length": spec["mean_accepted_length"],
        "reads_per_round": spec["reads_per_round"],
    }


def step_cli(dry_run: bool) -> dict:
    """``specd generate`` as a user runs it, on a tiny model folder written here (the device picked by
    ``--device auto``): greedy and sampled (invariant rule, one seed), chains and trees, each with
    ``--compare``, whose target-only text must be the speculative run's."""
    import tempfile

    from tests.hf_helpers import save_tiny_pair

    runs = {
        "greedy_chain": ["--temperature", "0"],
        "greedy_tree": ["--temperature", "0", "--tree", "2,2,1"],
        "greedy_tree_auto": ["--temperature", "0", "--tree", "auto"],
        "sampled_chain": ["--temperature", "0.8", "--seed", "3"],
        "sampled_tree": ["--temperature", "0.8", "--seed", "3", "--tree", "nodes=8"],
    }
    if dry_run:  # each run is a fresh process (seconds of imports): the dry run checks that one runs
        runs = {"greedy_tree": runs["greedy_tree"]}
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        target, draft = save_tiny_pair(Path(folder))
        for name, extra in runs.items():
            argv = [sys.executable, "-m", "specd.cli", "generate", "--target", str(target), "--draft", str(draft),
                    "--prompt", "the quick brown", "--prompt", "hello world, write", "--max-new-tokens", "24",
                    "--compare", "--json", *extra]  # fmt: skip
            t0 = time.perf_counter()
            run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=90)
            seconds = time.perf_counter() - t0
            if run.returncode != 0:
                out[name] = {
                    "returncode": run.returncode,
                    "seconds": seconds,
                    "stderr": run.stderr.strip().splitlines()[-1:],
                }
                continue
            doc = json.loads(run.stdout)
            out[name] = {"seconds": seconds, "device": doc["manifest"]["device"], "dtype": doc["manifest"]["dtype"],
                         "identical_outputs": doc["identical_outputs"]}  # fmt: skip
    bad = [n for n, r in out.items() if r.get("identical_outputs") is not True
           or (not dry_run and not str(r.get("device", "")).startswith("cuda"))]  # fmt: skip
    if bad:
        raise AssertionError(f"not identical or not on CUDA: {bad}: {out}")
    return out


def step_gpu_tests(timeout: float) -> dict:
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/models/test_cuda.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=timeout)  # fmt: skip
    return {"returncode": run.returncode, "summary": (run.stdout.strip().splitlines() or [""])[-1]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--budget-s", type=float, default=420.0, help="The whole run's time; later steps are skipped.")
    ap.add_argument("--dry-run", action="store_true", help="Tiny sizes on the CPU: checks the script runs.")
    ap.add_argument("--only", help="Run only the steps named (comma-separated), as a rerun of a slot's failed steps.")
    args = ap.parse_args(argv)
    device = torch.device("cpu" if args.dry_run else "cuda")
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device here: use --dry-run", file=sys.stderr)
        return 2
    big, small, tokens = ("dry", "dry", 8) if args.dry_run else ("llama1b", "smollm2", 96)
    steps = [  # (name, limit in seconds, function): cheapest and most important first
        ("device", 30, lambda: step_device(device)),
        ("parity", 60, lambda: step_parity(device)),
        ("pytest_gpu", 150, lambda: step_gpu_tests(140) if not args.dry_run else {"skipped": "dry run"}),
        ("cli", 240, lambda: step_cli(args.dry_run)),
        ("llama_f32_self_bf16", 240, lambda: step_llama(device, big, tokens, (8,) if args.dry_run else (8, 32))),
        ("bf16_suffix_copy", 120, lambda: step_suffix(device, small, tokens)),
        ("profile_batch1", 120, lambda: step_profile(device, big, 32 if not args.dry_run else 4)),
    ]
    if args.only:
        wanted = set(args.only.split(","))
        if unknown := wanted - {name for name, _, _ in steps}:
            ap.error(f"--only: no step {', '.join(sorted(unknown))}; the steps: {', '.join(n for n, _, _ in steps)}")
        steps = [step for step in steps if step[0] in wanted]
    results, started = Results(Path(args.out_dir)), time.perf_counter()
    for name, limit, fn in steps:
        left = args.budget_s - (time.perf_counter() - started)
        if left < 5:
            results.add({"step": name, "skipped": "out of time"})
            continue
        t0 = time.perf_counter()
        try:
            with time_limit(min(limit, left)):
                figures = fn()
            results.add({"step": name, "seconds": time.perf_counter() - t0, **figures})
        except Exception as err:  # noqa: BLE001 - a failed step is a result; the next step still runs
            results.add({"step": name, "seconds": time.perf_counter() - t0, "error": f"{type(err).__name__}: {err}"})
    failed = [line["step"] for line in results.lines if "error" in line]
    print(json.dumps({"jsonl": str(results.path), "steps": len(results.lines), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
