"""A model with sliding-window layers (a tiny Gemma 3: local layers and a global one) runs within
its window: full cache layers that rows can be dropped from, a context of the window minus the
widest round, and a guard that refuses a step past the window. Within it, every layer sees every
position, so specd's tokens are Hugging Face greedy's."""

import pytest

from specd.core.model import RowInput
from specd.errors import CacheIdentityError
from specd.models.hf import cache_compat
from specd.models.hf.model import HFCausalLM
from specd.policy.kpolicy import MAX_K
from tests.helpers import run_cli
from tests.hf_helpers import tiny_gemma3, tiny_tokenizer

WINDOW = MAX_K + 1 + 48  # 48 positions usable by a run


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    tok = tiny_tokenizer(eos=False)
    model = tiny_gemma3(len(tok), WINDOW, tok.pad_token_id)
    folder = tmp_path_factory.mktemp("gemma") / "model"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model, tok


def test_the_window_is_read_and_the_cache_has_full_layers(gemma):
    _, model, _ = gemma
    assert cache_compat.sliding_window(model.config) == WINDOW
    lm = HFCausalLM(model, "gemma")
    cache = lm.new_cache()
    cache.open(0)
    lm.step(cache, [RowInput(0, (1, 2, 3), (0, 1, 2))], logits_for=0)
    assert len(cache.store.keys) == 3  # every layer, the sliding ones too, holds full K/V rows


@pytest.mark.parametrize("k", ["2", "auto"])
def test_greedy_within_the_window_is_hugging_faces(gemma, capsys, k):
    folder, model, tok = gemma
    prompts = ["the quick brown fox", "hello world, write a haiku"]
    args = ["generate", "--target", str(folder), "--draft", "self:layers=1", "--max-new-tokens", "24", "-k", k]
    for p in prompts:
        args += ["-p", p]
    code, out, err = run_cli([*args, "--json", "--temperature", "0", "--batch-size", "2"], capsys)
    assert code == 0, err
    import json

    results = json.loads(out)["results"]
    for p, r in zip(prompts, results):
        ids = tok(p, return_tensors="pt").input_ids
        want = model.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=tok.pad_token_id)
        assert r["tokens"] == want[0, ids.shape[1] :].tolist()


def test_a_run_that_would_leave_the_window_is_cut_or_refused(gemma, capsys):
    folder, _, _ = gemma
    base = ["generate", "--target", str(folder), "--draft", "ngram:2", "--json"]
    code, out, err = run_cli([*base, "-p", "the quick brown fox", "--max-new-tokens", "200"], capsys)
    assert code == 0, err
    import json

    doc = json.loads(out)
    assert any("positions" in n for n in doc["notes"])  # the budget was cut to what fits
    long_prompt = " ".join(["fox"] * 200)
    code, _, err = run_cli([*base, "-p", long_prompt], capsys)
    assert code == 2 and err.count("\n") == 1 and "reads at most 48 positions" in err


def test_a_step_past_the_window_is_refused_not_computed(gemma):
    _, model, _ = gemma
    from specd.core.model import RowInput

    lm = HFCausalLM(model, "gemma")
    cache = lm.new_cache()
    cache.open(0)
    with pytest.raises(CacheIdentityError, match="attention window"):
        lm.step(cache, [RowInput(0, tuple(range(3, 3 + WINDOW + 1)), tuple(range(WINDOW + 1)))], logits_for=1)
