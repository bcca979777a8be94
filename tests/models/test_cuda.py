"""The CUDA path, on a GPU (``-m gpu``; skipped cleanly without CUDA, run by ``make test`` where one
is present): the same exactness the CPU tests prove, the same noise and decisions on both devices,
the reads a round makes, and the peak memory of a round at a real vocabulary."""

import pytest
import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.gumbel import race_tokens
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.round import speculative_round
from specd.core.rows import Rows
from specd.core.sampler import RejectionSampler
from specd.core.state import Request
from specd.models.hf.model import HFCausalLM
from specd.oracles.engine.montecarlo import bernstein_bound, rng_accounting_error
from tests.hf_helpers import noisy_copy, tiny_llama

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
CUDA = torch.device("cuda")


def on_cuda(model):
    return model.to(CUDA).eval()


def test_greedy_is_hugging_faces_on_cuda_in_float32():
    model = tiny_llama(256, seed=0)
    draft = HFCausalLM(on_cuda(noisy_copy(model, 0.2, seed=1)), "d")
    model = on_cuda(model)
    target = HFCausalLM(model, "t")
    policy = SamplingPolicy.build(temperature=0.0)
    engine = SpeculativeEngine(target, ModelProposer(draft, policy), policy, EngineConfig(k=3, record_log=False))
    prompts = [(1, 2, 3), (4, 5, 6, 7, 8), (9,)]
    result = engine.run([Request(f"g{i}", p, 24) for i, p in enumerate(prompts)])
    for p, got in zip(prompts, result.new_tokens()):
        ids = torch.tensor([p], device=CUDA)
        want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False)
        assert tuple(got) == tuple(want[0, len(p) :].tolist())


def exact_joint(model, prompt, horizon, policy):
    joint = {(): 1.0}
    for _ in range(horizon):
        prefixes = list(joint)
        ids = torch.tensor([prompt + p for p in prefixes], device=CUDA)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[:, -1].float()
        probs = policy.probabilities(logits, [policy.initial_state(prompt + p) for p in prefixes], dtype=torch.float64)
        joint = {p + (x,): joint[p] * probs[i, x].item() for i, p in enumerate(prefixes) for x in range(probs.shape[1])}
    return joint


def test_the_sampled_joint_is_the_targets_on_cuda():
    vocab, horizon, n = 8, 3, 4000
    model = tiny_llama(vocab, seed=3, hidden=32)
    draft = on_cuda(noisy_copy(model, 0.5, seed=4))
    model = on_cuda(model)
    target_policy, draft_policy = SamplingPolicy.build(temperature=1.0), SamplingPolicy.build(temperature=0.6)
    engine = SpeculativeEngine(
        HFCausalLM(model, "t8"),
        ModelProposer(HFCausalLM(draft, "d8"), draft_policy),
        target_policy,
        EngineConfig(k=2, record_log=False),
    )
    result = engine.run([Request(f"s{i}", (1, 2), horizon, seed=11) for i in range(n)])
    assert all(rng_accounting_error(c) is None for c in result.commits)
    counts: dict = {}
    for seq in result.new_tokens():
        counts[seq] = counts.get(seq, 0) + 1
    reference = exact_joint(model, (1, 2), horizon, target_policy)
    worst = max(abs(counts.get(s, 0) / n - p) / bernstein_bound(p, n, vocab**horizon) for s, p in reference.items())
    assert worst <= 1.0


def test_the_invariant_rules_race_has_the_same_winners_on_both_devices():
    gen = torch.Generator().manual_seed(0)
    rows = torch.rand(64, 4096, generator=gen, dtype=torch.float64)
    rows[::3, 100:] = 0.0  # sparse rows too
    keys, positions = [7 * i + 1 for i in range(64)], [i % 13 for i in range(64)]
    assert torch.equal(race_tokens(rows, keys, positions), race_tokens(rows.to(CUDA), keys, positions).cpu())


def test_the_samplers_decisions_are_the_same_on_both_devices():
    gen = torch.Generator().manual_seed(1)
    b, k, v = 16, 4, 50
    p = torch.rand(b, k + 1, v, generator=gen, dtype=torch.float64)
    q = torch.rand(b, k, v, generator=gen, dtype=torch.float64)
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    drafts = torch.randint(0, v, (b, k), generator=gen)
    k_lens = torch.randint(0, k + 1, (b,), generator=gen)
    u = torch.rand(b, k, generator=gen, dtype=torch.float64)
    rule = RejectionSampler()
    cpu = rule.decide(Rows.dense(p, q, drafts, k_lens), u)
    gpu = rule.decide(Rows.dense(p.to(CUDA), q.to(CUDA), drafts.to(CUDA), k_lens.to(CUDA)), u.to(CUDA))
    assert torch.equal(cpu.accepted, gpu.accepted.cpu()) and torch.equal(cpu.is_bonus, gpu.is_bonus.cpu())
    assert torch.equal(cpu.terminal_rows, gpu.terminal_rows.cpu())


def test_a_round_reads_from_the_device_within_the_bound_on_cuda():
    from tests.core.test_host_reads import BOUND, reads_per_round

    model = tiny_llama(64, seed=0)
    pair = HFCausalLM(on_cuda(noisy_copy(model, 0.25, seed=1)), "draft")
    pair = (HFCausalLM(on_cuda(model), "target"), pair)
    for rule in ("maximal", "invariant", "block"):
        for batch in (1, 16):
            per_round, reads = reads_per_round(pair, batch, rule)
            assert per_round <= BOUND, (rule, batch, reads.where.most_common(10))


def test_a_rounds_peak_memory_at_a_real_vocabulary_is_a_few_row_sets():
    """V = 128,256, batch 32, K = 4, sampled: the round's peak over what the models and caches hold
    stays within a few [R, V] float32 row sets (R = 32 x 5 rows), not [B, K, V] per source."""
    vocab, batch, k = 128_256, 32, 4
    model = tiny_llama(vocab, seed=0, hidden=64)
    draft = on_cuda(noisy_copy(model, 0.2, seed=1))
    model = on_cuda(model)
    policy = SamplingPolicy.build(temperature=0.7)
    engine = SpeculativeEngine(
        HFCausalLM(model, "t"),
        ModelProposer(HFCausalLM(draft, "d"), policy),
        policy,
        EngineConfig(k=k, record_log=False),
    )
    session = engine.start([Request(f"m{i}", (1, 2, 3 + i), 16, seed=i) for i in range(batch)])
    speculative_round(session)  # the first round allocates the scratch buffers
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    speculative_round(session)
    torch.cuda.synchronize()
    row_set = batch * (k + 1) * vocab * 4
    assert torch.cuda.max_memory_allocated() - base <= 12 * row_set


def test_launching_a_round_never_waits_for_the_device():
    """``launch`` enqueues a round (its draft steps, verification and decision) without one operation
    that waits for the device (torch's sync debug mode raises on any): a model draft's chain at K = 4
    and target-only decoding, greedy and sampled, with graphs; the round's one wait is ``settle``'s."""
    from specd.core.round import launch, settle

    model = tiny_llama(256, seed=0)
    draft = HFCausalLM(on_cuda(noisy_copy(model, 0.2, seed=1)), "d", graphs="on")
    target = HFCausalLM(on_cuda(model), "t", graphs="on")
    for temperature, proposer, k in ((0.0, None, 0), (0.8, "draft", 4), (0.0, "draft", 4)):
        policy = SamplingPolicy.build(temperature=temperature)
        source = ModelProposer(draft, policy) if proposer else None
        config = EngineConfig(k=k, rule="invariant", record_log=False)
        session = SpeculativeEngine(target, source, policy, config).start(
            [Request(f"s{i}", (1, 2, 3 + i), 24, seed=i) for i in range(3)]
        )
        settle(session, launch(session))  # the first round captures the buckets' graphs
        for _ in range(3):
            torch.cuda.set_sync_debug_mode("error")
            try:
                launched = launch(session)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            settle(session, launched)


def test_running_ahead_on_cuda_gives_the_synchronous_tokens():
    model = on_cuda(tiny_llama(256, seed=0))
    policy = SamplingPolicy.build(temperature=0.8)
    requests = [Request(f"a{i}", (1, 2, 3 + i), 20, seed=i) for i in range(5)]
    runs = []
    for ahead in (False, True):
        engine = SpeculativeEngine(HFCausalLM(model, "t", graphs="on"), None, policy, EngineConfig(k=0, ahead=ahead))
        runs.append(engine.run(requests, batch_size=3).new_tokens())
    assert runs[0] == runs[1]
