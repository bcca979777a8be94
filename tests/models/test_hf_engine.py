"""Real-model plumbing: caches, positions, masks and batching through the HF adapter."""

import pytest
import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.round import decode, speculative_round
from specd.core.state import Request
from specd.models.hf.model import HFCausalLM
from specd.oracles.engine.montecarlo import bernstein_bound, rng_accounting_error
from tests.hf_helpers import committed_kv, exact_joint, noisy_copy, tiny_llama

GREEDY = SamplingPolicy.build(temperature=0)
BATCH = [
    Request("short", (3,), 24, seed=1),
    Request("mid", (5, 6, 7, 8), 24, seed=2),
    Request("long", (9, 10, 11, 12, 13, 14, 15, 16, 17), 18, seed=3),
]


@pytest.fixture(scope="module")
def pair(hf_pair):
    return hf_pair


def spec(pair, k, layout="replay_frontier", target_policy=GREEDY, draft_policy=GREEDY, **kw):
    t, d = pair
    return SpeculativeEngine(t, ModelProposer(d, draft_policy), target_policy, EngineConfig(k=k, layout=layout, **kw))


@pytest.mark.parametrize("layout", ["replay_frontier", "retained_frontier"])
@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_speculation_equals_target_greedy(pair, layout, k, batch):
    requests = BATCH[:batch] if batch > 1 else BATCH[1:2]
    expected = SpeculativeEngine.baseline(pair[0], GREEDY).run(requests).new_tokens()
    result = spec(pair, k, layout).run(requests)
    assert result.new_tokens() == expected
    hist = result.stats.accepted_hist
    assert hist.get(0, 0) > 0 and sum(n for a, n in hist.items() if a > 0) > 0  # rejections and acceptances


def test_each_row_is_what_it_would_be_alone(pair):
    together = spec(pair, 4).run(BATCH).new_tokens()
    assert together == [spec(pair, 4).run([r]).new_tokens()[0] for r in BATCH]
    sampler = SamplingPolicy.build(temperature=1.0)
    together = spec(pair, 3, target_policy=sampler, draft_policy=sampler).run(BATCH).new_tokens()
    alone = [spec(pair, 3, target_policy=sampler, draft_policy=sampler).run([r]).new_tokens()[0] for r in BATCH]
    assert together == alone


def fresh_prefill_kv(model: HFCausalLM, tokens):
    """Per layer (keys, values) of ``tokens`` prefilled by Hugging Face itself, in its own dynamic cache."""
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        model.model.model(input_ids=torch.tensor([tokens]), use_cache=True, **{model._cache_kw: cache})
    return [(layer.keys[0], layer.values[0]) for layer in cache.layers]


@pytest.mark.parametrize("layout", ["replay_frontier", "retained_frontier"])
def test_committed_cache_equals_a_fresh_prefill_after_every_round(pair, layout):
    sampler = SamplingPolicy.build(temperature=1.0)
    engine = spec(pair, 4, layout, target_policy=sampler, draft_policy=SamplingPolicy.build(temperature=0.6))
    session = engine.start(BATCH)
    checked = 0
    while not session.done:
        speculative_round(session)
        for s in session.live():
            got = committed_kv(session.cache, s.slot)
            want = fresh_prefill_kv(pair[0], s.cache_tokens)
            for (gk, gv), (wk, wv) in zip(got, want):
                assert torch.allclose(gk, wk, atol=1e-5) and torch.allclose(gv, wv, atol=1e-5)
            checked += 1
    assert checked > 10


def test_finished_rows_leave_the_batch(pair):
    engine = spec(pair, 3)
    session = engine.start([Request("a", (1, 2), 3), Request("b", (3, 4), 30)])
    while not session.store.get("a").finished:
        speculative_round(session)
    assert session.cache.rows == [None, 1] or session.cache.rows == [1]  # a's row is free, moved down or not
    assert decode(session).states[1].finish_reason == "length"
    assert session.cache.rows == [] and session.cache.store.keys == []  # nothing left holds memory


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["replay_frontier", "retained_frontier"])
def test_sampled_joint_through_the_adapter_matches_the_target(layout):
    """Mixed policies (draft colder than target) through real caches stay exact.

    Bound: per sequence, Bernstein at failure probability 1e-6 with a union bound
    over the V^H cells (see specd.oracles.engine.montecarlo).
    """
    vocab, horizon, n = 8, 3, 4000
    target_model = tiny_llama(vocab, seed=3, hidden=32)
    target = HFCausalLM(target_model, "t8")
    draft = HFCausalLM(noisy_copy(target_model, 0.5, seed=4), "d8")
    target_policy = SamplingPolicy.build(temperature=1.0)
    draft_policy = SamplingPolicy.build(temperature=0.6)
    prompt = (1, 2)
    engine = SpeculativeEngine(
        target, ModelProposer(draft, draft_policy), target_policy, EngineConfig(k=2, layout=layout, record_log=False)
    )
    result = engine.run([Request(f"s{i}", prompt, horizon, seed=11) for i in range(n)])
    assert all(rng_accounting_error(c) is None for c in result.commits)
    assert 0 < result.stats.figures()["draft_acceptance_rate"] < 1
    counts = {}
    for seq in result.new_tokens():
        counts[seq] = counts.get(seq, 0) + 1
    reference = exact_joint(target, prompt, horizon, target_policy)
    assert abs(sum(reference.values()) - 1) < 1e-9
    worst = max(abs(counts.get(seq, 0) / n - p) / bernstein_bound(p, n, vocab**horizon) for seq, p in reference.items())
    assert worst <= 1.0


PROMPT_SET = [
    Request(f"q{i}", tuple((i * 7 + j) % 60 + 1 for j in range(1 + i % 9)), 4 + (i * 5) % 17, seed=i) for i in range(24)
]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_continuous_batching_gives_the_same_tokens_at_every_batch_size(pair, temperature):
    policy = SamplingPolicy.build(temperature=temperature)
    expected = spec(pair, 3, target_policy=policy, draft_policy=policy).run(PROMPT_SET).new_tokens()
    for batch_size in (1, 3, 16):
        got = spec(pair, 3, target_policy=policy, draft_policy=policy).run(PROMPT_SET, batch_size=batch_size)
        assert got.new_tokens() == expected, batch_size


def test_requests_joining_a_running_batch_get_exact_caches(pair):
    """A joining prompt is prefilled in a call of its own rows into a freed row; every committed cache
    equals a fresh prefill of its tokens after every round."""
    policy = SamplingPolicy.build(temperature=1.0)
    engine = spec(pair, 3, target_policy=policy, draft_policy=policy)
    session = engine.start()
    session.submit(PROMPT_SET[:10])
    checked, joined = 0, 0
    while session.pending:
        joined += len(session.fill(4))
        speculative_round(session)
        for s in session.live():
            got = committed_kv(session.cache, s.slot)
            for (gk, gv), (wk, wv) in zip(got, fresh_prefill_kv(pair[0], s.cache_tokens)):
                assert torch.allclose(gk, wk, atol=1e-5) and torch.allclose(gv, wv, atol=1e-5)
            checked += 1
        assert len(session.cache.rows) <= 4  # freed rows are reused, the batch never grows past its size
    assert joined == 10 and checked > 20


def test_a_finished_request_frees_its_row_without_copying_the_cache(pair, monkeypatch):
    from specd.models.hf.slot_cache import SlotStore

    calls = []
    real = SlotStore.move_row
    monkeypatch.setattr(SlotStore, "move_row", lambda *a: calls.append(1) or real(*a))
    engine = spec(pair, 2)
    requests = [Request(f"f{i}", (i + 1, i + 2), 3 if i == 0 else 30, seed=i) for i in range(8)]
    session = engine.start(requests)
    while not session.store.get("f0").finished:
        speculative_round(session)
    assert calls == [] and session.cache.rows.count(None) == 1  # 1 of 8 rows free: no copy
    session.submit([Request("joiner", (5, 6, 7), 5)])
    session.fill(8)
    assert session.cache.rows.count(None) == 0 and len(session.cache.rows) == 8  # the joiner took the free row


def test_rows_move_down_once_a_quarter_are_free_and_tokens_stay(pair):
    """Finished requests leave free rows; once a quarter of the rows are free the highest rows in use
    move down (their K/V with them), and every request's tokens are what they would be alone."""
    requests = [Request(f"m{i}", (i + 1, i + 2, i + 3), 2 if i % 2 == 0 else 24, seed=i) for i in range(8)]
    session = spec(pair, 2).start(requests)
    assert len(session.cache.rows) == 8
    while len(session.live()) > 4:  # the even requests finish (2 tokens): half the rows are free
        speculative_round(session)
    assert len(session.live()) == 4 and session.cache.rows.count(None) == 0 and len(session.cache.rows) == 4
    for s in session.live():
        for (gk, gv), (wk, wv) in zip(committed_kv(session.cache, s.slot), fresh_prefill_kv(pair[0], s.cache_tokens)):
            assert torch.allclose(gk, wk, atol=1e-5) and torch.allclose(gv, wv, atol=1e-5)
    alone = [spec(pair, 2).run([r]).new_tokens()[0] for r in requests]
    assert spec(pair, 2).run(requests).new_tokens() == alone
