"""SDPA over grouped-query heads without repeating K/V: the attention specd's own SDPA calls run with.

In a model with grouped-query attention (H query heads share H_kv key/value heads, G = H / H_kv of
them each), transformers' SDPA given a mask and several query rows repeats every K/V head G times
first: a copy of the call's whole span of keys and values, in every layer, in every call of more
than one row (a verification call's K + 1). Here a group's G query heads stand side by side in the
query length instead, query float[B, H, n, D] -> float[B, H_kv, G n, D], the mask's rows repeated G
times: the same rows of attention over the same keys and values, so the same sums to float32's
rounding (bit for bit on some CPUs; on others the kernels' blocks of another query length round apart
in the last bits: tests/models/test_grouped_attention.py), without the copy (on this project's CPU, 5 rows over a
1,000-column span: 0.28 ms a layer against 0.86 at 9 heads over 3, 0.77 against 8.9 at 32 over 8,
``benchmarks/grouped_attention.py``). One query row (transformers packs it
the same way itself), one query head per K/V head, or a call with more than a mask (a position
bias, a softcap, dropout, attention weights asked for) runs transformers' own SDPA.

Registered with transformers' attention functions as ``NAME`` at a step's first use (``registered``);
a step sets it for the length of its call only (``specd.models.hf.step_call.attention_as``), so the
model's own calls are untouched.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "specd_grouped_sdpa"
# keyword arguments transformers' SDPA acts on beyond a mask: a call with any of them set runs its SDPA
PAST_A_MASK = ("position_bias", "softcap", "output_attentions", "s_aux", "sinks")


def grouped_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """query float[B, H, n, D], key float[B, H_kv, S, D], value float[B, H_kv, S, D_v], attention_mask
    bool or additive float[B, 1, n, S] -> (float[B, n, H, D_v], None), as transformers' SDPA returns."""
    batch, heads, rows, dim = query.shape
    kv_heads = key.shape[1]
    plain = (
        rows == 1
        or heads == kv_heads
        or heads % kv_heads
        or attention_mask is None
        or attention_mask.dim() != 4
        or attention_mask.shape[1] != 1
        or dropout
        or any(kwargs.get(name) is not None and kwargs.get(name) is not False for name in PAST_A_MASK)
    )
    if plain:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    groups = heads // kv_heads
    out = F.scaled_dot_product_attention(
        query.reshape(batch, kv_heads, groups * rows, dim),
        key,
        value,
        attn_mask=attention_mask.repeat(1, 1, groups, 1),
        scale=scaling,
    )
    return out.reshape(batch, heads, rows, value.shape[-1]).transpose(1, 2).contiguous(), None


@functools.cache
def registered() -> str:
    """``NAME``, registered with transformers' attention functions (once). Imported here, not above:
    transformers' modeling module, where they live, takes 2.3 s to import, which every command that
    runs no Hugging Face model would pay at its start (a model object has it imported already)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, grouped_sdpa)
    return NAME
