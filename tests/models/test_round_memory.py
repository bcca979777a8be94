"""A round's tensors are sized by the rows that exist: p over the R = sum(k_b + 1) real rows, q over
the rows a draft model drew from, never B x K_max x V. A tiny random Llama with Gemma 3's
vocabulary (V = 262,144), batch 8, sampled at T = 0.7: one request drafts K = 32, seven K = 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

VOCAB = 262_144
BATCH, K = 8, 32


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op returns (elements), while it is active."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def run(k_first: int, rule: str, record: bool = False) -> int:
    """Decode 8 requests (the first at K = k_first, the rest at K = 0) -> the largest
    tensor of the run, in elements (0 unless ``record``)."""
    from specd.core.engine import EngineConfig, SpeculativeEngine
    from specd.core.processors import SamplingPolicy
    from specd.core.proposer import ModelProposer
    from specd.core.state import Request
    from specd.models.hf.model import HFCausalLM
    from tests.hf_helpers import tiny_llama

    target = tiny_llama(VOCAB, seed=0, layers=1, hidden=16)
    draft = HFCausalLM(target, "draft")  # the target as its own draft: every draft is tested
    policy = SamplingPolicy.build(temperature=0.7)
    engine = SpeculativeEngine(
        HFCausalLM(target, "target"), ModelProposer(draft, policy), policy, EngineConfig(k=0, rule=rule)
    )
    # the first request has a budget of K + 1 tokens, so its first round may draft all K (a round keeps one
    # for its terminal); the others end after one token
    requests = [
        Request(f"r{b}", (1 + b, 2, 3), K + 1 if b == 0 else 1, seed=b, k=k_first if b == 0 else 0)
        for b in range(BATCH)
    ]
    mode = LargestTensor()
    if record:
        with mode:
            engine.run(requests)
    else:
        engine.run(requests)
    return mode.largest


@pytest.mark.parametrize("rule", ["maximal", "invariant"])
def test_the_largest_tensor_of_a_round_is_its_real_rows_not_the_padded_batch(rule):
    largest = run(K, rule, record=True)
    real_rows = (K + 1) + (BATCH - 1)  # the drafting request's K + 1 rows and one row for each other
    # O(R x V): the target's rows (the invariant rule's race also lists their (row, token) pairs, 2 R V)
    assert largest <= 2 * real_rows * VOCAB, (largest / VOCAB, real_rows)
    assert largest < BATCH * (K + 1) * VOCAB / 3  # the padded p alone was B x (K + 1) x V (measured: 264 V)


PEAK = """
import json, resource, sys
sys.path.insert(0, {root!r})
from tests.models.test_round_memory import run
run(0, "maximal")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
run({k}, "maximal")
print(json.dumps([before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))
"""


@pytest.mark.slow
def test_drafting_32_tokens_for_one_request_costs_less_than_200_mib_of_peak_memory():
    """Peak resident memory of a fresh process (it only rises): the K = 32 run over the all-K = 0
    run's peak (it was 2,025 MiB with padded rows)."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PEAK.format(root=root, k=K)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = json.loads(done.stdout.strip().splitlines()[-1])  # KiB
    extra_mib = (after - before) / 1024
    assert before > 100 * 1024  # the all-K = 0 run itself held the models and its rows: a real peak
    assert extra_mib < 200, extra_mib
