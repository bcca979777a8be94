"""SDPA over grouped-query heads without repeating K/V (specd.models.hf.grouped_attention): the same
attention as transformers' SDPA, to float32's rounding, in every call it takes; what it does not take
is transformers' own; and specd's steps, and only they, run with it."""

import subprocess
import sys

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from specd.models.hf.grouped_attention import NAME, grouped_sdpa
from specd.models.hf.step_call import attention_as


class Attention(torch.nn.Module):
    """What transformers' SDPA reads of the attention module: its grouping."""

    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups


def inputs(batch, heads, kv_heads, rows, span, additive, seed=0):
    gen = torch.Generator().manual_seed(seed)
    # queries as a model makes them: [B, n, H, D] transposed, not contiguous
    query = torch.randn(batch, rows, heads, 16, generator=gen).transpose(1, 2)
    key, value = (torch.randn(batch, kv_heads, span, 16, generator=gen) for _ in range(2))
    # each row's rows end at a column of its own (right-padded rows of several requests)
    ends = torch.tensor([span - 1 - 2 * b for b in range(batch)])
    mask = (ends[:, None] - rows + 1 + torch.arange(rows))[:, None, :, None] >= torch.arange(span)
    if additive:
        mask = torch.where(mask, torch.tensor(0.0), torch.tensor(float("-inf")))
    return query, key, value, mask


@pytest.mark.parametrize("additive", [False, True])
@pytest.mark.parametrize(
    "batch,heads,kv_heads,rows,span", [(1, 4, 2, 5, 40), (2, 9, 3, 3, 150), (1, 8, 1, 17, 300), (3, 6, 2, 2, 64)]
)
def test_the_same_attention_as_transformers_sdpa_to_float32_rounding(batch, heads, kv_heads, rows, span, additive):
    """Bit for bit on some CPUs, not on all: the kernels' sums over a query block of another length may
    round apart in the last bits (an AMD EPYC, at batch 2 and 3: by up to 3.3e-7). So:
    within float32's rounding of the exact (float64) attention, the bound transformers' SDPA meets too;
    a head, group or mask row out of place misses it by orders of magnitude."""
    query, key, value, mask = inputs(batch, heads, kv_heads, rows, span, additive)
    module = Attention(heads // kv_heads)
    want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    got, weights = grouped_sdpa(module, query, key, value, mask, scaling=0.25)
    assert weights is None and got.shape == want.shape == (batch, rows, heads, 16) and got.is_contiguous()
    exact_mask = mask if mask.dtype == torch.bool else mask.double()
    exact, _ = sdpa_attention_forward(module, query.double(), key.double(), value.double(), exact_mask, scaling=0.25)
    rounding = 8 * torch.finfo(torch.float32).eps * exact.abs().max()
    assert (want.double() - exact).abs().max() <= rounding
    assert (got.double() - exact).abs().max() <= rounding


@pytest.mark.parametrize(
    "case", ["one query row", "one head a group", "no mask", "a position bias", "attention weights asked for"]
)
def test_what_it_does_not_take_is_transformers_own(case, monkeypatch):
    heads, kv_heads, rows = {"one query row": (4, 2, 1), "one head a group": (4, 4, 3)}.get(case, (4, 2, 3))
    query, key, value, mask = inputs(1, heads, kv_heads, rows, 32, additive=True)
    kwargs = {}
    if case == "no mask":
        mask = None
    elif case == "a position bias":
        kwargs["position_bias"] = torch.zeros(1, heads, rows, 32)
    elif case == "attention weights asked for":
        kwargs["output_attentions"] = True
    seen = []
    from specd.models.hf import grouped_attention

    def own(*args, **kw):
        seen.append(case)
        return sdpa_attention_forward(*args, **kw)

    monkeypatch.setattr(grouped_attention, "sdpa_attention_forward", own)
    module = Attention(heads // kv_heads)
    got, _ = grouped_sdpa(module, query, key, value, mask, scaling=0.25, **kwargs)
    assert seen == [case]
    assert torch.equal(got, sdpa_attention_forward(module, query, key, value, mask, scaling=0.25, **kwargs)[0])


def test_a_step_runs_with_it_and_leaves_the_models_own_setting_as_it_was():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from tests.hf_helpers import tiny_llama

    model = tiny_llama(64, layers=1)
    model.config._attn_implementation = "sdpa"
    with attention_as(model.config, "sdpa"):
        assert model.config._attn_implementation == NAME
        assert ALL_ATTENTION_FUNCTIONS[NAME] is grouped_sdpa  # registered by the step's first use
    assert model.config._attn_implementation == "sdpa"
    with attention_as(model.config, "eager"):
        assert model.config._attn_implementation == "eager"
    assert model.config._attn_implementation == "sdpa"


def test_a_models_calls_write_the_field_as_it_lies_and_leave_the_owners_setting():
    """A model's calls set its config's field directly where nothing is passed on (no sub-configs):
    inside a call the config reads specd's attention, after it whatever the owner set last, even a
    setting changed between two calls. A config with sub-configs goes through transformers' setter."""
    from transformers import Gemma3Config

    from specd.models.hf.model import HFCausalLM
    from specd.models.hf.step_call import plain_fields
    from tests.hf_helpers import tiny_llama

    model = tiny_llama(64, layers=1)
    lm = HFCausalLM(model, "t")
    for owners in ("sdpa", "eager", "sdpa"):
        model.config._attn_implementation = owners
        with lm.attending():
            assert model.config._attn_implementation == NAME
        assert model.config._attn_implementation == owners
    assert lm._config_fields[1] is vars(model.config)
    assert plain_fields(Gemma3Config()) is None  # its text and vision configs are set too, by the setter

    def keep(self, value):  # the field written, and the value read from another
        vars(self).update({"_attn_implementation_internal": value, "elsewhere": value})

    class Elsewhere(type(model.config)):  # a config whose attention is read from another field
        _attn_implementation = property(lambda self: vars(self)["elsewhere"], keep)

    assert plain_fields(Elsewhere(**model.config.to_dict())) is None
    composite = Gemma3Config()
    with attention_as(composite, "eager", plain_fields(composite)):
        assert composite.text_config._attn_implementation == "eager"


def test_commands_that_run_no_model_do_not_import_transformers_modeling_module():
    """Registering the function imports transformers' modeling module (2.3 s): a step's first use does it,
    not an import of specd's Hugging Face backend, which every command's start pays."""
    code = (
        "import sys, specd.models.hf.step_call, specd.cli.generate, specd.cli.trace, specd.cli.sweep_k;"
        "print('transformers.modeling_utils' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
