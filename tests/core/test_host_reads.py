"""How often a round reads from the device: counted by ``HostReads`` on a tiny Hugging Face pair (a
model draft at K = 4, sampled), at most BOUND a round under every rule, the same at batch 1 and 16
(each read waits for the device on CUDA)."""

import pytest
import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.host_reads import HostReads
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.round import speculative_round
from specd.core.state import Request

BOUND = 16  # per round, at every batch size; docs/performance.md says where they are made
ROUNDS = 4


def test_the_counter_counts_each_kind_of_read():
    x = torch.tensor([1.0, 2.0])
    with HostReads() as reads:
        x.sum().item(), x.tolist(), x.cpu(), bool(x[0]), int(x[1]), float(x[0]), x.nonzero()
        y = x + 1  # arithmetic reads nothing
    assert reads.count == 7 and y.shape == (2,)


def reads_per_round(hf_pair, batch: int, rule: str, log: bool = False) -> tuple[float, HostReads]:
    """Reads a round makes, on average over its first rounds. On a CPU the invariant rule's race
    counts a row's support to race sparse rows over it alone; on a GPU it races them whole, reading
    nothing, so that CPU-only read is not counted here."""
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
    cpu_only = sum(n for (_, _, _, function), n in reads.where.items() if function == "race_tokens")
    return (reads.count - cpu_only) / rounds, reads


def tidy_reads(reads: HostReads) -> int:
    """The caches' tidy reads: one per cache and round where it has holes to look at, none where its
    ledger knows it has none (more often at batch 1: a round whose drafts were all accepted)."""
    return sum(n for (_, _, _, function), n in reads.where.items() if function == "tidy")


@pytest.mark.parametrize("rule", ["maximal", "invariant", "block"])
def test_a_round_reads_from_the_device_a_bounded_number_of_times_at_any_batch_size(hf_pair, rule):
    one, reads_one = reads_per_round(hf_pair, 1, rule)
    sixteen, reads_sixteen = reads_per_round(hf_pair, 16, rule)
    assert one <= BOUND and sixteen <= BOUND, reads_sixteen.where.most_common(12)
    assert max(tidy_reads(reads_one), tidy_reads(reads_sixteen)) <= 2 * ROUNDS  # two caches
    rest_one = one - tidy_reads(reads_one) / ROUNDS
    rest_sixteen = sixteen - tidy_reads(reads_sixteen) / ROUNDS
    assert rest_sixteen <= rest_one, "reads must not grow with the batch"


def test_the_acceptance_log_costs_one_read_a_round(hf_pair):
    without, _ = reads_per_round(hf_pair, 4, "maximal")
    with_log, _ = reads_per_round(hf_pair, 4, "maximal", log=True)
    assert with_log == without + 1
