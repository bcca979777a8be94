"""How often a round reads from the device: counted by ``HostReads`` on a tiny Hugging Face pair (a
model draft at K = 4, sampled), the same number at batch 1 and 16 (each read waits on CUDA)."""

import pytest
import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.host_reads import HostReads
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.round import speculative_round
from specd.core.state import Request

BOUND = 26  # per round, at every batch size; docs/performance.md says where they are made


def test_the_counter_counts_each_kind_of_read():
    x = torch.tensor([1.0, 2.0])
    with HostReads() as reads:
        x.sum().item(), x.tolist(), x.cpu(), bool(x[0]), int(x[1]), float(x[0]), x.nonzero()
        y = x + 1  # arithmetic reads nothing
    assert reads.count == 7 and y.shape == (2,)


def reads_per_round(hf_pair, batch: int, rule: str) -> tuple[float, HostReads]:
    target, draft = hf_pair
    policy = SamplingPolicy.build(temperature=1.0)
    engine = SpeculativeEngine(target, ModelProposer(draft, policy), policy, EngineConfig(k=4, rule=rule))
    session = engine.start([Request(f"r{i}", (1, 2, 3, 4 + i % 7), 40, seed=i) for i in range(batch)])
    reads, rounds = HostReads(), 0
    while not session.done and rounds < 6:
        with reads:
            speculative_round(session)
        rounds += 1
    return reads.count / rounds, reads


@pytest.mark.parametrize("rule", ["maximal", "invariant", "block"])
def test_a_round_reads_from_the_device_a_bounded_number_of_times_at_any_batch_size(hf_pair, rule):
    one, reads = reads_per_round(hf_pair, 1, rule)
    sixteen, _ = reads_per_round(hf_pair, 16, rule)
    assert one <= BOUND and sixteen <= BOUND, reads.where.most_common(12)
    assert sixteen <= one + 1, "reads must not grow with the batch"
