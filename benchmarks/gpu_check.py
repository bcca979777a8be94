"""The GPU check: what a short GPU slot should learn, cheapest and most important first.

    python benchmarks/gpu_check.py --out-dir DIR [--budget-s 470]      # on a CUDA machine
    python benchmarks/gpu_check.py --out-dir DIR --dry-run             # tiny sizes, on a CPU (the tests run it)

Every step appends one JSON line to DIR/gpu_check.jsonl as soon as it ends (its figures, or its
error, or "skipped: out of time"), so a slot cut off mid-run still returns what it measured. Each
step has its own time limit (SIGALRM) and the whole run a budget. Models are built on the device
from configs, with random weights (nothing is downloaded or copied there): a Llama-3-style ~1B
config (V = 128,256) in bfloat16 (what users run) and in float32, the float32 one drafted by its
own bfloat16 copy. Prompts are token ids: random ids, or for a lookup a passage said twice.

What it measures (issue 59), every speed a ratio of runs side by side in one process:
- ``batch1_bf16``: specd target-only with CUDA graphs and without, against Hugging Face's eager
  greedy; specd's default (suffix lookup, -k auto) on copy prompts against its own target-only and
  Hugging Face's prompt lookup; milliseconds per target step against the weights' memory time
  (bytes / the bandwidth measured here), for every system; host syncs per round;
- ``hf_fastest``: Hugging Face's fastest greedy (its static cache, the forward compiled with
  reduce-overhead) against specd target-only and the default;
- ``batch1_f32``: float32 greedy equal to Hugging Face's; K = 4 with the bf16 copy against specd
  target-only (tokens kept a round) and Hugging Face's assisted generation;
- ``batches``: at batch 8 and 32 the default against target-only, and -k auto with ``--tree auto``
  against the chain;
- ``sampled``: the invariant rule's texts equal target-only sampling's on CUDA;
- before them: the device, the noise and decisions CPU against CUDA, ``pytest -m gpu``, and
  ``specd generate --compare`` as a user runs it on a tiny model folder.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

SIZES = {  # the real configs, and the dry run's stand-ins
    "llama1b": dict(vocab_size=128_256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8),
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


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def bandwidth(device: torch.device) -> float:
    """Bytes a second this device copies (read and write of a 1 GiB buffer, the best of three)."""
    if device.type != "cuda":
        return float("nan")
    src = torch.empty(1 << 28, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(3):
        sync(device)
        t = time.perf_counter()
        dst.copy_(src)
        sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * src.numel() * src.element_size() / best


def prompts(vocab: int, batch: int, length: int, copy: bool, seed: int = 0) -> list[tuple[int, ...]]:
    """Token-id prompts: random ids, or for ``copy`` a passage given twice (what a lookup can draft)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(batch):
        ids = torch.randint(10, vocab, (length // 2 if copy else length,), generator=gen).tolist()
        out.append(tuple(ids + ids if copy else ids))
    return out


def hf_generate(model, batch_prompts, new_tokens: int, **kwargs) -> tuple[list[tuple[int, ...]], float]:
    """Hugging Face greedy (or assisted / prompt lookup / static cache, by kwargs) at batch 1, prompt
    by prompt -> (outputs, seconds)."""
    device = next(model.parameters()).device
    outs, started = [], time.perf_counter()
    for p in batch_prompts:
        ids = torch.tensor([p], device=device)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, **kwargs)  # fmt: skip
        outs.append(tuple(out[0, len(p) :].tolist()))
    sync(device)
    return outs, time.perf_counter() - started


def specd_run(target, sources, batch_prompts, new_tokens: int, k, batch: int, **options) -> dict:
    """specd on token ids (k: an int, "auto", or None for target-only), all prompts ``batch`` at a time
    -> outputs, seconds, target steps, host syncs and reads per round, mean accepted length.
    ``options``: temperature, seed, tree (a --tree spec), rule."""
    from specd.core.engine import EngineConfig, SpeculativeEngine
    from specd.core.host_reads import HostReads
    from specd.core.processors import SamplingPolicy
    from specd.core.round import decode
    from specd.core.sources import SourceSet
    from specd.core.state import Request
    from specd.core.tree_shape import parse_tree
    from specd.policy.autok import auto_k_over
    from specd.policy.costs import OnlineCosts

    policy = SamplingPolicy.build(temperature=options.get("temperature", 0.0))
    tree = options.get("tree")
    auto_tree = tree == "auto"
    config = EngineConfig(
        k=k if isinstance(k, int) else 0,
        record_log=False,
        rule=options.get("rule", "invariant"),
        tree=parse_tree(tree) if tree and not auto_tree else None,
    )
    costs = OnlineCosts()
    graphs = getattr(target, "graphs", None)
    costs.buckets = graphs.buckets if graphs is not None else None
    if k is None:
        engine = SpeculativeEngine.baseline(target, policy, config)
    else:
        proposer = SourceSet(sources)
        budget = 32 if auto_tree else 0
        k_policy = (
            auto_k_over(proposer.sources, 32, batch, costs, greedy=policy.greedy, tree_budget=budget)
            if k == "auto"
            else None
        )
        engine = SpeculativeEngine(target, proposer, policy, config, k_policy=k_policy, observers=(costs.observe,))
    seed = options.get("seed", 0)
    requests = [Request(f"r{i}", p, new_tokens, seed=seed) for i, p in enumerate(batch_prompts)]
    session = engine.start()
    session.submit(requests)
    reads = HostReads()
    syncs = []
    started = time.perf_counter()
    with reads, synchronizing(target.device, syncs):
        result = decode(session, batch_size=batch)
    sync(target.device)
    seconds = time.perf_counter() - started
    rounds = max(result.stats.rounds, 1)
    steps = max(result.stats.target_forwards, 1)
    return {"outputs": [tuple(t) for t in result.new_tokens()], "seconds": seconds, "target_steps": steps,
            "ms_per_target_step": 1000 * seconds / steps * batch / max(len(batch_prompts), 1),
            "reads_per_round": reads.count / rounds, "syncs_per_round": len(syncs) / rounds, "rounds": rounds,
            "mean_accepted_length": result.stats.figures().get("mean_accepted_length"),
            "graph_replays": graphs.replays if graphs is not None else 0}  # fmt: skip


@contextmanager
def synchronizing(device, seen: list):
    """Every operation that waits for the device (torch's sync debug mode) appended to ``seen``."""
    if getattr(device, "type", None) != "cuda":
        yield
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
    seen.extend(str(w.message)[:80] for w in caught if "synchroniz" in str(w.message))


def lm(model, name: str, graphs: str):
    from specd.models.hf.model import HFCausalLM

    return HFCausalLM(model, name, graphs=graphs)


def per_token(seconds: float, count: int, tokens: int) -> float:
    return 1000 * seconds / max(count * tokens, 1)


def step_device(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"device": "cpu (dry run)", "torch": torch.__version__}
    free, total = torch.cuda.mem_get_info(device)
    return {"device": torch.cuda.get_device_name(device), "torch": torch.__version__, "cuda": torch.version.cuda,
            "free_gib": free / 2**30, "total_gib": total / 2**30,
            "copy_bandwidth_gb_s": bandwidth(device) / 1e9}  # fmt: skip


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


def step_batch1_bf16(device: torch.device, size: str, tokens: int) -> dict:
    """Target-only with and without graphs against Hugging Face's eager greedy; the default (suffix
    lookup) on copy prompts against its own target-only and HF prompt lookup; the memory time."""
    from specd.core.suffix import SuffixProposer

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = llama(size, dtype, device)
    vocab = SIZES[size]["vocab_size"]
    rand, copies = prompts(vocab, 2, 64, copy=False), prompts(vocab, 2, 128, copy=True, seed=7)
    graphed, eager = lm(model, size, "auto"), lm(model, size, "off")
    hf_generate(model, rand[:1], 4)  # warm-up: kernels chosen, graphs captured
    specd_run(graphed, [], rand[:1], 4, None, 1)
    specd_run(graphed, [SuffixProposer(vocab)], copies[:1], 8, "auto", 1)
    hf, hf_s = hf_generate(model, rand, tokens)
    with_graphs = specd_run(graphed, [], rand, tokens, None, 1)
    without = specd_run(eager, [], rand, tokens, None, 1)
    hf_copy, hf_copy_s = hf_generate(model, copies, tokens)
    lookup, lookup_s = hf_generate(model, copies, tokens, prompt_lookup_num_tokens=10)
    own_base = specd_run(graphed, [], copies, tokens, None, 1)
    default = specd_run(graphed, [SuffixProposer(vocab)], copies, tokens, "auto", 1)
    memory_ms = 1000 * weight_bytes(model) / bandwidth(device) if device.type == "cuda" else None
    n = len(rand)
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "weights_memory_ms": memory_ms,
        "ms_per_step": {
            "hf_greedy": per_token(hf_s, n, tokens),
            "specd_target_only_graphs": with_graphs["ms_per_target_step"],
            "specd_target_only_eager": without["ms_per_target_step"],
            "specd_default_copy": default["ms_per_target_step"],
            "hf_lookup_copy": per_token(lookup_s, n, tokens),  # a token, not a step: HF counts no steps
        },
        "ratios": {
            "target_only_graphs_vs_hf_eager": hf_s / with_graphs["seconds"],  # issue: >= 2.5
            "target_only_eager_vs_hf_eager": hf_s / without["seconds"],  # >= 1.0
            "default_copy_vs_own_target_only": own_base["seconds"] / default["seconds"],  # >= 1.8 at 4 kept
            "default_copy_vs_hf_greedy": hf_copy_s / default["seconds"],
            "default_copy_vs_hf_lookup": lookup_s / default["seconds"],
        },
        "default_mean_accepted_length": default["mean_accepted_length"],
        "syncs_per_round": {"target_only": with_graphs["syncs_per_round"], "default": default["syncs_per_round"]},
        "reads_per_round": {"target_only": with_graphs["reads_per_round"], "default": default["reads_per_round"]},
        "graph_replays": with_graphs["graph_replays"],
        "equal": {"target_only_graphs_eager": with_graphs["outputs"] == without["outputs"],
                  "target_only_hf": with_graphs["outputs"] == hf,
                  "default_own_target_only": default["outputs"] == own_base["outputs"],
                  "default_hf": default["outputs"] == hf_copy, "hf_lookup_hf": lookup == hf_copy},
    }  # fmt: skip


def step_hf_fastest(device: torch.device, size: str, tokens: int) -> dict:
    """Hugging Face's fastest greedy: its static cache with the forward compiled (reduce-overhead), on
    the bf16 target, against specd target-only (graphs) and the default on copy prompts."""
    from specd.core.suffix import SuffixProposer

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = llama(size, dtype, device)
    vocab = SIZES[size]["vocab_size"]
    rand, copies = prompts(vocab, 2, 64, copy=False), prompts(vocab, 2, 128, copy=True, seed=7)
    graphed = lm(model, size, "auto")
    specd_run(graphed, [], rand[:1], 4, None, 1)
    base = specd_run(graphed, [], rand, tokens, None, 1)
    default = specd_run(graphed, [SuffixProposer(vocab)], copies, tokens, "auto", 1)
    if device.type == "cuda":  # the dry run's CPU would compile for minutes
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    for _ in range(2):  # compiled and captured before timing
        hf_generate(model, rand[:1], tokens, cache_implementation="static")
    fast, fast_s = hf_generate(model, rand, tokens, cache_implementation="static")
    fast_copy, fast_copy_s = hf_generate(model, copies, tokens, cache_implementation="static")
    return {
        "hf_fastest_ms_per_token": per_token(fast_s, len(rand), tokens),
        "ratios": {
            "target_only_graphs_vs_hf_fastest": fast_s / base["seconds"],  # issue: >= 0.9
            "default_copy_vs_hf_fastest": fast_copy_s / default["seconds"],  # >= 1.5
        },
        "equal": {"target_only": base["outputs"] == fast, "default": default["outputs"] == fast_copy},
    }


def step_batch1_f32(device: torch.device, size: str, tokens: int) -> dict:
    """The float32 target drafted by its bf16 copy: greedy equal to Hugging Face's; K = 4 and -k auto
    against target-only and HF assisted generation; --tree auto against the chain."""
    from specd.core.processors import SamplingPolicy
    from specd.core.proposer import ModelProposer

    model = llama(size, torch.float32, device)
    copy = llama(size, torch.float32, device).to(torch.bfloat16)
    copy.load_state_dict({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
    target, draft = lm(model, size, "auto"), lm(copy, f"self:bf16({size})", "auto")
    greedy = SamplingPolicy.build(temperature=0.0)
    rand = prompts(SIZES[size]["vocab_size"], 2, 64, copy=False)
    hf_generate(model, rand[:1], 4)
    specd_run(target, [ModelProposer(draft, greedy)], rand[:1], 8, 4, 1)
    hf, hf_s = hf_generate(model, rand, tokens)
    assisted, assisted_s = hf_generate(model, rand, tokens, assistant_model=copy)
    base = specd_run(target, [], rand, tokens, None, 1)
    k4 = specd_run(target, [ModelProposer(draft, greedy)], rand, tokens, 4, 1)
    chain = specd_run(target, [ModelProposer(draft, greedy)], rand, tokens, "auto", 1)
    tree = specd_run(target, [ModelProposer(draft, greedy)], rand, tokens, "auto", 1, tree="auto")
    return {
        "ratios": {
            "target_only_vs_hf": hf_s / base["seconds"],
            "k4_vs_own_target_only": base["seconds"] / k4["seconds"],  # issue: >= 1.8 where 4 are kept
            "k4_vs_hf_assisted": assisted_s / k4["seconds"],
            "tree_auto_vs_chain_auto": chain["seconds"] / tree["seconds"],  # >= 1.1 where rows are cheap
        },
        "k4_mean_accepted_length": k4["mean_accepted_length"],
        "ms_per_step": {"hf_greedy": per_token(hf_s, len(rand), tokens), "target_only": base["ms_per_target_step"],
                        "k4": k4["ms_per_target_step"]},
        "syncs_per_round": {"k4": k4["syncs_per_round"], "target_only": base["syncs_per_round"]},
        "reads_per_round": {"k4": k4["reads_per_round"], "target_only": base["reads_per_round"]},
        "equal_to_hf_greedy": {"target_only": base["outputs"] == hf, "k4": k4["outputs"] == hf,
                               "chain_auto": chain["outputs"] == hf, "tree_auto": tree["outputs"] == hf,
                               "hf_assisted": assisted == hf},
    }  # fmt: skip


def step_batches(device: torch.device, size: str, tokens: int, batches: tuple[int, ...]) -> dict:
    """At larger batches the default (suffix lookup, -k auto) against target-only: never below it."""
    from specd.core.suffix import SuffixProposer

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = llama(size, dtype, device)
    vocab = SIZES[size]["vocab_size"]
    target = lm(model, size, "auto")
    out = {}
    for b in batches:
        many = prompts(vocab, b, 64, copy=False, seed=b)
        specd_run(target, [], many, 4, None, b)  # the batch's buckets captured
        base = specd_run(target, [], many, tokens, None, b)
        default = specd_run(target, [SuffixProposer(vocab)], many, tokens, "auto", b)
        out[f"batch{b}"] = {"default_vs_target_only": base["seconds"] / default["seconds"],
                            "equal": base["outputs"] == default["outputs"],
                            "target_only_ms_per_step": base["ms_per_target_step"]}  # fmt: skip
    return out


def step_sampled(device: torch.device, size: str, tokens: int) -> dict:
    """On CUDA the invariant rule's texts are target-only sampling's (same seed): the default and K = 4."""
    from specd.core.suffix import SuffixProposer

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = llama(size, dtype, device, seed=2)
    vocab = SIZES[size]["vocab_size"]
    copies = prompts(vocab, 2, 96, copy=True, seed=11)
    target = lm(model, size, "auto")
    sampled = dict(temperature=0.8, seed=3, rule="invariant")
    base = specd_run(target, [], copies, tokens, None, 1, **sampled)
    default = specd_run(target, [SuffixProposer(vocab)], copies, tokens, "auto", 1, **sampled)
    return {"invariant_default_equals_target_only": default["outputs"] == base["outputs"],
            "mean_accepted_length": default["mean_accepted_length"]}  # fmt: skip


def step_cli(dry_run: bool) -> dict:
    """``specd generate --compare`` as a user runs it, on a tiny model folder written here (the device
    picked by ``--device auto``): greedy and sampled, chain and tree, whose target-only text must be
    the speculative run's."""
    import tempfile

    from tests.hf_helpers import save_tiny_pair

    runs = {
        "greedy_chain": ["--temperature", "0"],
        "greedy_tree": ["--temperature", "0", "--tree", "2,2,1"],
        "sampled_chain": ["--temperature", "0.8", "--seed", "3"],
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
            if run.returncode != 0:
                out[name] = {"returncode": run.returncode, "stderr": run.stderr.strip().splitlines()[-1:]}
                continue
            doc = json.loads(run.stdout)
            out[name] = {"seconds": time.perf_counter() - t0, "device": doc["manifest"]["device"],
                         "identical_outputs": doc["identical_outputs"], "notes": doc.get("notes")}  # fmt: skip
    bad = [n for n, r in out.items() if r.get("identical_outputs") is not True
           or (not dry_run and not str(r.get("device", "")).startswith("cuda"))]  # fmt: skip
    if bad:
        raise AssertionError(f"not identical or not on CUDA: {bad}: {out}")
    return out


def step_gpu_tests(timeout: float) -> dict:
    files = ["tests/models/test_cuda.py", "tests/models/test_graphs.py", "tests/core/test_ahead.py"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-m", "gpu", *files],
                         cwd=ROOT, capture_output=True, text=True, timeout=timeout)  # fmt: skip
    return {"returncode": run.returncode, "summary": (run.stdout.strip().splitlines() or [""])[-1]}


STEP_NAMES = ("device", "parity", "pytest_gpu", "batch1_bf16", "hf_fastest", "batch1_f32", "batches", "sampled", "cli")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--budget-s", type=float, default=470.0, help="The whole run's time; later steps are skipped.")
    ap.add_argument("--dry-run", action="store_true", help="Tiny sizes on the CPU: checks the script runs.")
    ap.add_argument("--only", help="Run only the steps named (comma-separated), as a rerun of a slot's failed steps.")
    args = ap.parse_args(argv)
    device = torch.device("cpu" if args.dry_run else "cuda")
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device here: use --dry-run", file=sys.stderr)
        return 2
    size, tokens = ("dry", 8) if args.dry_run else ("llama1b", 96)
    steps = [  # (name, limit in seconds, function): cheapest and most important first
        ("device", 20, lambda: step_device(device)),
        ("parity", 30, lambda: step_parity(device)),
        ("pytest_gpu", 90, lambda: step_gpu_tests(85) if not args.dry_run else {"skipped": "dry run"}),
        ("batch1_bf16", 90, lambda: step_batch1_bf16(device, size, tokens)),
        ("hf_fastest", 120, lambda: step_hf_fastest(device, size, tokens)),
        ("batch1_f32", 90, lambda: step_batch1_f32(device, size, tokens)),
        ("batches", 70, lambda: step_batches(device, size, tokens // 2, (8,) if args.dry_run else (8, 32))),
        ("sampled", 40, lambda: step_sampled(device, size, tokens)),
        ("cli", 60, lambda: step_cli(args.dry_run)),
    ]
    if args.only:
        wanted = set(args.only.split(","))
        if unknown := wanted - set(STEP_NAMES):
            ap.error(f"--only: no step {', '.join(sorted(unknown))}; the steps: {', '.join(STEP_NAMES)}")
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
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
    failed = [line["step"] for line in results.lines if "error" in line]
    print(json.dumps({"jsonl": str(results.path), "steps": len(results.lines), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
