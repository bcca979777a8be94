"""Shared helpers: table-model engines and oracle rigs, synthetic acceptance logs, the CLI in-process."""

from __future__ import annotations

import functools
import importlib.util
import random
import signal
import subprocess
import sys
from pathlib import Path

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.table_model import TableModel
from specd.oracles.rig import Rig


def table_engine(
    vocab=4, k=3, layout="replay_frontier", target_temperature=1.0, draft_temperature=0.8, seed=1, **kw
) -> SpeculativeEngine:
    target = TableModel(vocab, seed=seed, name="target")
    draft = TableModel(vocab, seed=seed + 100, name="draft")
    config = EngineConfig(k=k, layout=layout, **kw)
    return SpeculativeEngine(
        target,
        ModelProposer(draft, SamplingPolicy.build(temperature=draft_temperature)),
        SamplingPolicy.build(temperature=target_temperature),
        config,
    )


def run_cli(args, capsys):
    """Run the console entry point in-process -> (exit code, stdout, stderr)."""
    import pytest

    from specd.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(args)
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err


def rig(vocab, k, layout="replay_frontier", target_temperature=0.9, draft_temperature=0.6, **kw) -> Rig:
    """An oracle rig whose policies exercise every processor kind."""
    return Rig(
        TableModel(vocab, seed=11, name="t"),
        TableModel(vocab, seed=12, name="d"),
        SamplingPolicy.build(temperature=target_temperature, logit_bias={0: 0.3}, repetition_penalty=1.3),
        SamplingPolicy.build(temperature=draft_temperature, top_k=max(1, vocab - 1)),
        k,
        (0,),
        layout_name=layout,
        **kw,
    )


def synthetic_log(alphas, rounds=20000, seed=0):
    """Rounds whose draft j is accepted with probability alphas[j-1] given it was reached."""
    rng = random.Random(seed)
    k = len(alphas)
    proposals, rnds = [], []
    for r in range(rounds):
        a = 0
        while a < k and rng.random() < alphas[a]:
            a += 1
        rid = f"req{r % 3}"
        for j in range(1, k + 1):
            proposals.append(
                {
                    "request_id": rid,
                    "round_id": f"{rid}/{r}",
                    "draft_index": j,
                    "reached": j <= a + 1,
                    "accepted": j <= a,
                }
            )
        rnds.append(
            {
                "request_id": rid,
                "round_id": f"{rid}/{r}",
                "k": k,
                "accepted": a,
                "emitted": [0] * (a + 1),
                "terminal_kind": "bonus" if a == k else "correction",
            }
        )
    requests = [{"request_id": f"req{i}", "prompt": f"p{i}", "tag": "even" if i % 2 == 0 else "odd"} for i in range(3)]
    return requests, proposals, rnds


def _default_signals() -> None:
    """The child's stop signals at their defaults, whatever this process inherited: under ``nohup``
    SIGHUP arrives ignored, and specd rightly leaves an ignored signal ignored."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def interrupted(args, when, signum=signal.SIGINT) -> tuple[int, str]:
    """Start ``specd ARGS`` in a child process, wait with ``when(proc)``, send ``signum`` (Ctrl-C's
    SIGINT unless told) -> (exit code, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specd.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,
    )
    when(proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@functools.cache
def benchmark(name: str):
    """The script benchmarks/NAME.py as a module (it may import the scripts beside it)."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module
