"""Token trees on Hugging Face models: a tree step's rows are each node's own branch's (SDPA, eager,
and a sliding-window Gemma 3 within its window), the cache keeps the accepted path and continues from
it, attention that takes no tree mask is refused, and ``specd generate --tree`` decodes greedy text
identical to target-only decoding."""

import json

import pytest
import torch

from specd.core.model import RowInput
from specd.models.hf.model import HFCausalLM
from tests.helpers import run_cli
from tests.hf_helpers import tiny_gemma3, tiny_llama

PROMPTS = {0: (1, 2, 3, 4, 5), 1: (7, 8, 9)}
# the frontier F, then nodes (parents as rows of this input: -1 the committed rows, 0 is F)
TOKENS = {0: (5, 11, 12, 13, 14, 15), 1: (9, 20, 21)}
PARENTS = {0: (-1, 0, 0, 1, 1, 2), 1: (-1, 0, 1)}


def branch(slot: int, row: int) -> list[int]:
    out = []
    while row >= 0:
        out.append(TOKENS[slot][row])
        row = PARENTS[slot][row]
    return list(PROMPTS[slot][:-1]) + out[::-1]


@pytest.mark.parametrize("family", ["sdpa", "eager", "gemma3"])
def test_a_tree_steps_rows_are_each_nodes_own_branchs(family):
    model = tiny_gemma3(50, window=64) if family == "gemma3" else tiny_llama(50, seed=0)
    if family == "eager":
        model.config._attn_implementation = "eager"
    lm = HFCausalLM(model, family)
    cache = lm.new_cache()
    for slot in PROMPTS:
        cache.open(slot)
    lm.step(cache, [RowInput(s, p[:-1], tuple(range(len(p) - 1))) for s, p in PROMPTS.items()], logits_for=0)
    for slot, prompt in PROMPTS.items():
        cache.commit(slot, len(prompt) - 1)
    rows = []
    for slot in PROMPTS:
        depth = [len(branch(slot, r)) - len(PROMPTS[slot]) for r in range(len(TOKENS[slot]))]
        positions = tuple(len(PROMPTS[slot]) - 1 + d for d in depth)
        rows.append(RowInput(slot, TOKENS[slot], positions, PARENTS[slot]))
    out = lm.step(cache, rows)
    with torch.no_grad():
        for slot in PROMPTS:
            for r in range(len(TOKENS[slot])):
                ref = model(torch.tensor([branch(slot, r)])).logits[0, -1].float()
                assert torch.allclose(out.logits[slot][r], ref, atol=1e-4), (slot, r)
    # keep slot 0's branch F -> 11 -> 13 and nothing of slot 1's tree past F; then a chain step continues it
    cache.commit(0, [0, 1, 3])
    cache.commit(1, [0])
    assert cache.committed(0) == (1, 2, 3, 4, 5, 11, 13) and cache.committed(1) == (7, 8, 9)
    nxt = lm.step(cache, [RowInput(s, (40,), (len(cache.committed(s)),)) for s in PROMPTS])
    with torch.no_grad():
        for slot in PROMPTS:
            ref = model(torch.tensor([[*cache.committed(slot)[:-1], cache.committed(slot)[-1], 40]])).logits[0, -1]
            assert torch.allclose(nxt.logits[slot][0], ref.float(), atol=1e-4)


def test_a_model_set_to_attention_that_takes_no_4d_mask_runs_its_steps_with_sdpa():
    """Flash attention takes 2D masks only; a model configured for it runs specd's steps (which pass a
    4D mask: a tree's, a slot cache's) with SDPA, the same function, and its config is left as it was."""
    model = tiny_llama(50, seed=0)
    expected = HFCausalLM(model, "t")
    cache = expected.new_cache()
    cache.open(0)
    want = expected.step(cache, [RowInput(0, (1, 2, 3), (0, 1, 2))]).logits[0]
    model.config._attn_implementation = "flash_attention_2"
    lm = HFCausalLM(model, "t")
    assert lm.tree_refusal is None and lm.attention == "sdpa"
    cache = lm.new_cache()
    cache.open(0)
    got = lm.step(cache, [RowInput(0, (1, 2, 3), (0, 1, 2))]).logits[0]
    assert torch.allclose(got, want, atol=1e-6)
    assert model.config._attn_implementation == "flash_attention_2"


@pytest.mark.parametrize("tree", ["2,2", "rank:3,1", "nodes=6", "[[0],[1],[0,0],[1,0],[1,0,0]]", "auto"])
def test_generate_with_a_tree_is_target_only_greedy(tiny_models, capsys, tree):
    args = [
        "generate",
        "--target",
        tiny_models[0],
        "--draft",
        tiny_models[1],
        "-p",
        "hello world",
        "-p",
        "def add(a, b):",
    ]
    code, out, err = run_cli([*args, "--max-new-tokens", "14", "--tree", tree, "--compare", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0, err
    assert doc["identical_outputs"] is True
    assert doc["stats"]["speculative"]["emitted_tokens"] == 28


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tree", "0,2"], "--tree '0,2': every depth needs at least one child per node"),
        (["--tree", "2,2", "--rule", "block", "--temperature", "0.7"], "block verification"),
        (["--tree", "2,2", "-k", "3"], "sets each round's depth"),
        (["--tree", "2", "--draft", "self:vocab=64"], "drafts chains only"),
        (["--tree", "auto", "-k", "3"], "lets -k auto choose each round's shape"),
        (["--tree", "auto", "--rule", "block", "--temperature", "0.7"], "block verification"),
        (["--tree", "auto", "--draft", "self:vocab=64"], "drafts chains only"),
        (["--tree", "auto", "--k-schedule", "x.jsonl"], "replays K, not shapes"),
        (["--tree-budget", "8"], "give --tree auto with it"),
        (["--tree", "2,2", "--tree-budget", "8"], "give --tree auto with it"),
        (["--tree", "auto", "--tree-budget", "1"], "--tree-budget must be in 2..256"),
        (["--tree", "auto", "--tree-budget", "300"], "--tree-budget must be in 2..256"),
        (["--tree", "[[0],[2]]"], "lacks its parent or an earlier sibling"),
        (["--tree", "[[0],"], "cannot read a JSON choices list"),
        (["--baseline", "--tree", "auto", "--tree-budget", "4"], "needs a draft"),
    ],
)
def test_a_tree_that_cannot_run_is_one_line(tiny_models, capsys, extra, message):
    code, out, err = run_cli(["generate", "--target", tiny_models[0], "-p", "hello", *extra], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
