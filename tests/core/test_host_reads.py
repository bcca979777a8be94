"""How often a round reads from the device: counted by ``HostReads`` on a tiny Hugging Face pair (a
model draft at K = 4, sampled), once a round under every rule, the same at batch 1 and 16 (each read
waits for the device on CUDA): the drafts stay on the device until the decision's read
(specd.core.device_chain), and the caches know their rows without looking."""

import pytest
import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.host_reads import HostReads
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.round import speculative_round
from specd.core.state import Request

BOUND = 1  # per round, at every batch size; docs/performance.md says where it is made
# Reads a CPU run makes that a GPU run does not: numpy's argmax over a view of a row, the invariant
# rule's race counting a row's support to race sparse rows over it alone.
CPU_ONLY = {"race_tokens", "argmax_ids"}
ROUNDS = 4


def test_the_counter_counts_each_kind_of_read():
    x = torch.tensor([1.0, 2.0])
    with HostReads() as reads:
        x.sum().item(), x.tolist(), x.cpu(), bool(x[0]), int(x[1]), float(x[0]), x.nonzero()
        y = x + 1  # arithmetic reads nothing
    assert reads.count == 7 and y.shape == (2,)


def reads_per_round(hf_pair, batch: int, rule: str, log: bool = False) -> tuple[float, HostReads]:
    """Reads a round makes, on average over its first rounds, but for the CPU-only ones (CPU_ONLY)."""
    target, draft = hf_pair
    policy = SamplingPolicy.build(temperature=1.0)
    config = EngineConfig(k=4, rule=rule, record_log=log)
    engine = SpeculativeEngine(target, ModelProposer(draft, policy), policy, config)
    session = engine.start([Request(f"r{i}", (1, 2, 3, 4 + i % 7), 40, seed=i) for i in range(batch)])
    reads, rounds = HostReads(), 0
    while not session.done and rounds < ROUNDS:
        with reads:
            speculative_round(session)
        rounds += 1
    cpu_only = sum(n for (_, _, _, function), n in reads.where.items() if function in CPU_ONLY)
    return (reads.count - cpu_only) / rounds, reads


@pytest.mark.parametrize("rule", ["maximal", "invariant", "block"])
def test_a_round_reads_from_the_device_once_at_any_batch_size(hf_pair, rule):
    one, reads_one = reads_per_round(hf_pair, 1, rule)
    sixteen, reads_sixteen = reads_per_round(hf_pair, 16, rule)
    assert one == BOUND and sixteen == BOUND, (reads_one.where.most_common(6), reads_sixteen.where.most_common(6))


@pytest.mark.parametrize("rule", ["maximal", "invariant"])
def test_the_acceptance_log_is_read_with_the_decision(hf_pair, rule):
    without, _ = reads_per_round(hf_pair, 4, rule)
    with_log, _ = reads_per_round(hf_pair, 4, rule, log=True)
    assert with_log == without


CHECKS = {
    "flagged",
    "exact_less",
    "sample_categorical",
    "acceptance_ratios",
    "refuse_impossible",
    "_check_mass",
    "block_tests",
}


@pytest.mark.parametrize("rule", ["maximal", "invariant", "block"])
def test_the_rules_exactness_checks_are_read_with_the_decision(hf_pair, rule):
    """No check reads on its own in a round where none is set (specd.core.checks): the decision's one
    read carries them all."""
    _, reads = reads_per_round(hf_pair, 4, rule)
    by_function = {}
    for (_, _, _, function), n in reads.where.items():
        by_function[function] = by_function.get(function, 0) + n
    assert not CHECKS & set(by_function), by_function
    assert by_function["_read"] == ROUNDS  # Readback: the one read


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_target_only_decoding_reads_once_a_round(hf_pair, temperature):
    """Without drafts there are no holes to tidy and nothing to draft: the decision's read is all. On a
    CPU a greedy target's argmax is numpy's, over a view of the row (processors.argmax_ids); on a GPU
    it is torch's, reading nothing, so that CPU-only view is not counted here."""
    from specd.core.proposer import NullProposer

    target, _ = hf_pair
    policy = SamplingPolicy.build(temperature=temperature)
    engine = SpeculativeEngine(target, NullProposer(target.vocab_size), policy, EngineConfig(k=0, record_log=True))
    session = engine.start([Request(f"r{i}", (1, 2, 3, 4 + i), 40, seed=i) for i in range(4)])
    with HostReads() as reads:
        for _ in range(ROUNDS):
            speculative_round(session)
    cpu_only = sum(n for (_, _, _, function), n in reads.where.items() if function in CPU_ONLY)
    assert reads.count - cpu_only == ROUNDS, reads.where.most_common(4)
