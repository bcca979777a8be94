"""The pipeline is immutable after build: per-run values are arguments of run."""

import dataclasses

import pytest

from specd.models.run.options import GenerateOptions
from specd.models.run.pipeline import Pipeline
from specd.models.run.prompts import PromptItem


@pytest.fixture(scope="module")
def pipe(tiny_models):
    return Pipeline.build(GenerateOptions(target=tiny_models[0], draft=tiny_models[1], k=4, max_new_tokens=12))


def test_run_arguments_do_not_touch_the_pipeline(pipe):
    before = (pipe.options, pipe.target_policy, pipe.draft_policy, pipe.proposer)
    items = [PromptItem("a", "hello world")]
    short = pipe.run(items, k=2, max_new_tokens=3)
    full = pipe.run(items)
    assert (pipe.options, pipe.target_policy, pipe.draft_policy, pipe.proposer) == before
    assert len(short.results[0].tokens) == 3 and max(r.k for r in short.result.rounds) <= 2
    assert len(full.results[0].tokens) == 12 and max(r.k for r in full.result.rounds) == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        pipe.options = None


def test_other_sampling_options_give_a_new_pipeline_sharing_the_models(pipe):
    sampled = pipe.with_options(dataclasses.replace(pipe.options, temperature=0.8, top_k=20))
    assert sampled.target is pipe.target and sampled.proposer.sources[0].model is pipe.proposer.sources[0].model
    assert pipe.target_policy.greedy and not sampled.target_policy.greedy
    assert [p["name"] for p in sampled.target_policy.describe()["processors"]] == ["temperature", "top_k"]


def test_the_cuda_batch_default_is_what_half_the_free_memory_holds(tiny_models):
    from specd.models.run.options import BATCH_SIZE_CPU, BATCH_SIZE_CUDA_MAX, GenerateOptions, batch_for_memory
    from specd.models.run.pipeline import Pipeline

    assert batch_for_memory(100 << 30, 1 << 30) == 50  # 100 GiB free, 1 GiB a request
    assert batch_for_memory(1 << 20, 1 << 30) == 1 and batch_for_memory(1 << 50, 1) == BATCH_SIZE_CUDA_MAX
    pipe = Pipeline.build(GenerateOptions(target=tiny_models[0], draft="suffix", max_new_tokens=64))
    assert pipe.default_batch_size == BATCH_SIZE_CPU  # a CPU: fixed
    cfg = pipe.target.model.config  # 2 layers, 2 K/V heads of 16, float32; K max 32; V from the tokenizer
    kv = 2 * 2 * 2 * (cfg.hidden_size // cfg.num_attention_heads) * 4 * min(pipe.context, 1024 + 64)
    assert pipe.request_bytes() == kv + 3 * 33 * pipe.target.vocab_size * 4
