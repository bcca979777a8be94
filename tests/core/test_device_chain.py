"""A model draft's chain drafted with its tokens on the device (specd.core.device_chain): the same
rounds as a chain read a level at a time, proven exact by enumeration, and taken only where nothing
on the host must look at the drafts before the decision."""

import pytest

from specd.core import device_chain
from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.state import Request
from specd.core.table_model import TableModel
from specd.oracles.engine.exact import speculative_joint
from specd.oracles.record import max_abs_diff
from specd.oracles.reference import target_joint
from specd.oracles.rig import Rig


@pytest.fixture
def calls(monkeypatch):
    """How many batches drafted their chain on the device."""
    seen = []
    real = device_chain.draft_chain
    monkeypatch.setattr(device_chain, "draft_chain", lambda *a, **k: seen.append(1) or real(*a, **k))
    return seen


def stateless_rig(vocab: int, k: int, layout: str = "replay_frontier") -> Rig:
    target, draft = TableModel(vocab, seed=5, name="t"), TableModel(vocab, seed=6, name="d")
    policies = SamplingPolicy.build(temperature=0.9, top_p=0.95), SamplingPolicy.build(temperature=0.6)
    return Rig(target, draft, *policies, k, (0, 1), layout)


@pytest.mark.parametrize("layout", ["replay_frontier", "retained_frontier"])
@pytest.mark.parametrize("vocab,k", [(2, 3), (3, 2)])
def test_the_joint_through_chains_drafted_on_the_device_is_the_targets(calls, layout, vocab, k):
    rig = stateless_rig(vocab, k, layout)
    assert max_abs_diff(target_joint(rig, k + 1), speculative_joint(rig, k + 1, "target")) <= 1e-12
    assert calls  # the enumeration went through the device path


@pytest.mark.parametrize("rule", ["maximal", "invariant", "block"])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_chain_drafted_on_the_device_is_the_chain_read_a_level_at_a_time(hf_pair, monkeypatch, rule, temperature):
    """Tokens, drafts, acceptance and stream counters of every round are the same either way."""
    target, draft = hf_pair
    policy = SamplingPolicy.build(temperature=temperature)
    requests = [Request(f"r{i}", (1, 2, 3 + i), 12, seed=i) for i in range(3)]

    def rounds():
        engine = SpeculativeEngine(target, ModelProposer(draft, policy), policy, EngineConfig(k=3, rule=rule))
        result = engine.run(requests)
        return [(c.request_id, c.draft_token_ids, c.accepted, c.emitted, c.rng_after) for c in result.commits]

    on_device = rounds()
    monkeypatch.setattr(device_chain, "on_device", lambda *a: False)
    assert rounds() == on_device


def test_a_penalty_or_draft_stop_keeps_the_read_per_level(calls, hf_pair):
    """A repetition penalty's state follows the drafts' tokens on the host, and --draft-stop decides
    from the drafted rows whether to go on: both read the drafts a level at a time."""
    target, draft = hf_pair
    penalized = SamplingPolicy.build(temperature=0.8, repetition_penalty=1.2)
    plain = SamplingPolicy.build(temperature=0.8)
    request = [Request("r", (1, 2, 3), 6, seed=1)]
    SpeculativeEngine(target, ModelProposer(draft, plain), penalized, EngineConfig(k=3)).run(request)
    SpeculativeEngine(target, ModelProposer(draft, plain, draft_stop=0.2), plain, EngineConfig(k=3)).run(request)
    assert calls == []
    SpeculativeEngine(target, ModelProposer(draft, plain), plain, EngineConfig(k=3)).run(request)
    assert calls
