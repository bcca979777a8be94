"""The pipeline is immutable after build: per-run values are arguments of run."""

import dataclasses

import pytest

from specd.models.options import GenerateOptions
from specd.models.pipeline import Pipeline
from specd.models.prompts import PromptItem


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
