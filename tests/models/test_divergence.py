"""--compare explains a divergence: where greedy target-only and speculative texts part, and whether
the target's rounding of a near-tie explains it (on a model whose tie is constructed) or not (a bug,
exit 1)."""

import json
from types import SimpleNamespace

import pytest
import torch

from specd.errors import OutputsDiffer
from specd.models.run.divergence import divergences, refuse_bugs
from specd.models.run.options import GenerateOptions
from specd.models.run.pipeline import Pipeline
from specd.models.run.prompts import PromptItem
from tests.helpers import run_cli


def runs(request_id, a, b):
    return SimpleNamespace(results=[SimpleNamespace(request_id=request_id, tokens=a)]), SimpleNamespace(
        results=[SimpleNamespace(request_id=request_id, tokens=b)]
    )


@pytest.fixture(scope="module")
def tied(tiny_models):
    """A pipeline whose target's head gives token ``twin`` the same row as the token greedy emits
    first (``first``): at that position the two are tied, exactly."""
    pipe = Pipeline.build(GenerateOptions(target=tiny_models[0], draft="suffix", temperature=0.0))
    item = PromptItem("p", "the quick brown fox")
    first = pipe.run([item], baseline=True, max_new_tokens=1).results[0].tokens[0]
    twin = (first + 7) % pipe.target.vocab_size
    with torch.no_grad():
        pipe.target.model.lm_head.weight[twin] = pipe.target.model.lm_head.weight[first]
    return pipe, item, first, twin


def test_a_part_at_an_exact_tie_is_a_numerical_near_tie(tied):
    pipe, item, first, twin = tied
    (found,) = divergences(pipe, [item], *runs("p", (min(first, twin), 5), (max(first, twin), 5)))
    assert found.index == 0 and set(found.top2) == {first, twin} and found.margin == 0.0 and found.near_tie
    assert "numerical near-tie at token 0: margin 0 in float32" in found.describe()
    refuse_bugs([found])  # nothing to refuse


def test_a_part_that_rounding_does_not_explain_is_a_bug(tied):
    pipe, item, first, twin = tied
    other = next(t for t in range(pipe.target.vocab_size) if t not in (first, twin))
    (found,) = divergences(pipe, [item], *runs("p", (first, 1, 2), (other, 1, 2)))
    assert found.index == 0 and not found.near_tie
    with pytest.raises(OutputsDiffer, match="not a rounding near-tie: a bug"):
        refuse_bugs([found])
    assert divergences(pipe, [item], *runs("p", (3, 4), (3, 4))) == []  # equal texts: nothing to explain


def test_compare_prints_the_document_then_exits_1_on_a_bug(tiny_models, capsys, monkeypatch):
    from specd.models.run import divergence

    bug = divergence.Divergence("p", 3, (5, 9), (5, 6), 2.5, 1e-6, "float32")
    monkeypatch.setattr("specd.cli.generate.divergences", lambda *args: [bug])
    args = ["generate", "--target", tiny_models[0], "--draft", "suffix", "-p", "hello", "--max-new-tokens", "6"]
    code, out, err = run_cli([*args, "--temperature", "0", "--compare", "--json"], capsys)
    assert code == 1 and json.loads(out)["divergences"][0]["near_tie"] is False
    assert err.strip().endswith("the target's margin there is 2.5 in float32, not a rounding near-tie: a bug")
    assert err.strip().count("\n") == 0
