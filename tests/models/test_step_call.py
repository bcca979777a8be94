"""What one Hugging Face model call is fed (specd.models.hf.step_call): its attention mask, additive in
the model's dtype, is 0 exactly where the rule lets a query attend and -inf (eager: the dtype's lowest)
elsewhere, and SDPA over it computes what SDPA over the boolean rule computes, bit for bit."""

import pytest
import torch
import torch.nn.functional as F

from specd.core.kv import KVRows
from specd.models.hf.slot_cache import SlotCache
from specd.models.hf.step_call import plan_call


def two_slots() -> SlotCache:
    """Slot 0 with 5 committed rows, slot 1 with 2: a call over both is right-padded."""
    cache = SlotCache(torch.device("cpu"))
    for slot, n in ((0, 5), (1, 2)):
        cache.open(slot)
        cache.stage(KVRows(slot, tuple(range(10, 10 + n)), tuple(range(n))))
        cache.commit(slot, n)
    return cache


def chain_rule(call) -> torch.Tensor:
    """bool[B, 1, n, span]: a chain's query sees every column up to the one it writes."""
    return call.write[:, None, :, None] >= torch.arange(call.span)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_mask_is_additive_in_the_models_dtype_and_zero_exactly_where_a_query_attends(dtype):
    cache = two_slots()
    rows = [KVRows(0, (1, 2, 3), (5, 6, 7)), KVRows(1, (4,), (2,))]
    call = plan_call(cache, rows, pad_id=0, attention="sdpa", dtype=dtype)
    assert call.mask.dtype == dtype and call.mask.shape == (2, 1, 3, call.span) == (2, 1, 3, 8)
    attends = chain_rule(call)
    assert torch.equal(call.mask == 0, attends)
    assert torch.isneginf(call.mask[~attends]).all()
    eager = plan_call(two_slots(), rows, pad_id=0, attention="eager", dtype=dtype)
    assert torch.equal(eager.mask == 0, attends) and (eager.mask[~attends] == torch.finfo(dtype).min).all()


@pytest.mark.parametrize("heads,kv_heads,n", [(4, 4, 1), (4, 4, 3), (6, 2, 1), (6, 2, 3)])
def test_sdpa_over_the_additive_mask_is_sdpa_over_the_boolean_rule_bit_for_bit(heads, kv_heads, n):
    """SDPA turns a boolean mask into 0 / -inf itself, in every layer: given that form once a call it
    computes the same sums (grouped-query heads repeated, as transformers feeds them for several queries)."""
    cache = two_slots()
    rows = [KVRows(0, tuple(range(1, n + 1)), tuple(range(5, 5 + n))), KVRows(1, (4,), (2,))]
    call = plan_call(cache, rows, pad_id=0, attention="sdpa", dtype=torch.float32)
    gen = torch.Generator().manual_seed(n)
    q = torch.randn(2, heads, n, 16, generator=gen)
    k, v = (torch.randn(2, kv_heads, call.span, 16, generator=gen) for _ in range(2))
    k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=chain_rule(call))
    assert torch.equal(F.scaled_dot_product_attention(q, k, v, attn_mask=call.mask), want)


def test_a_model_of_several_floating_dtypes_gets_sdpas_mask_boolean():
    """Its queries' dtype is not known before the call (a module kept in float32, say), and SDPA takes a
    float mask only in the queries' dtype: the boolean mask is right whatever they are."""
    from specd.models.hf.step_call import mask_dtype

    uniform = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 4)).to(torch.bfloat16)
    assert mask_dtype(uniform, "sdpa") == torch.bfloat16
    mixed = torch.nn.Sequential(torch.nn.Embedding(8, 4).to(torch.bfloat16), torch.nn.Linear(4, 4))
    assert mask_dtype(mixed, "sdpa") is None and mask_dtype(mixed, "eager") == torch.bfloat16
    call = plan_call(two_slots(), [KVRows(0, (1, 2), (5, 6))], pad_id=0, attention="sdpa", dtype=None)
    assert call.mask.dtype == torch.bool and torch.equal(call.mask, chain_rule(call))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, None])
def test_one_query_a_row_at_the_spans_end_gets_the_rules_mask(dtype):
    """Every row's one query at the span's last column (target-only decoding's calls) sees every column:
    the mask is filled with one value, the rule's exactly; a shorter row beside them still gets the rule."""
    even = SlotCache(torch.device("cpu"))
    for slot in (0, 1):
        even.open(slot)
        even.stage(KVRows(slot, (10, 11, 12), (0, 1, 2)))
        even.commit(slot, 3)
    rows = [KVRows(0, (1,), (3,)), KVRows(1, (2,), (3,))]
    call = plan_call(even, rows, pad_id=0, attention="sdpa", dtype=dtype)
    assert call.mask.shape == (2, 1, 1, 4) and call.mask.dtype == (dtype or torch.bool)
    assert chain_rule(call).all() and torch.equal(call.mask == (True if dtype is None else 0), chain_rule(call))
    uneven = plan_call(
        two_slots(), [KVRows(0, (1,), (5,)), KVRows(1, (4,), (2,))], pad_id=0, attention="sdpa", dtype=dtype
    )
    attends = chain_rule(uneven)
    assert not attends.all() and torch.equal(uneven.mask == (True if dtype is None else 0), attends)
