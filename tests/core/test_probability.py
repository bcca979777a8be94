import pytest
import torch

from specd.core.probability import argmax_ids, softmax, softmax_max_shift, softmax_online
from specd.errors import EmptyDistribution, UnknownBackend


@pytest.mark.parametrize("vocab,block", [(2, 1), (7, 3), (100, 16), (1000, 1024)])
def test_online_merge_equals_max_shift(vocab, block):
    gen = torch.Generator().manual_seed(vocab)
    x = torch.randn(5, vocab, generator=gen, dtype=torch.float64) * 8
    x[0, : vocab // 2] = float("-inf")  # a masked prefix, possibly a whole block
    a = softmax_max_shift(x, torch.float64)
    b = softmax_online(x, torch.float64, block=block)
    assert (a - b).abs().max().item() <= 1e-12
    assert torch.allclose(a.sum(-1), torch.ones(5, dtype=torch.float64))
    assert (a[0, : vocab // 2] == 0).all() and (b[0, : vocab // 2] == 0).all()


def test_all_masked_row_is_an_error_not_nan():
    x = torch.full((1, 4), float("-inf"))
    with pytest.raises(EmptyDistribution):
        softmax(x, "max_shift")
    with pytest.raises(EmptyDistribution):
        softmax(x, "online")


def test_unknown_backend():
    with pytest.raises(UnknownBackend):
        softmax(torch.zeros(1, 2), "fancy")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_argmax_ids_is_torchs_argmax_ties_nans_and_views_included(dtype):
    """numpy computes it on the CPU for float32/64; the ids are torch.argmax's on every row: the lowest
    index on ties, the first NaN, all -inf, a strided view."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (64, 300), generator=g).to(dtype)  # many ties
    x[3, 7] = x[3, 100] = float("nan")
    x[5] = float("-inf")
    x[6, 299] = float("inf")
    for rows in (x, x[:, :250], x[::3], x.T.contiguous().T):
        got = argmax_ids(rows)
        assert got.dtype == torch.int64 and torch.equal(got, rows.argmax(dim=-1))
    assert torch.equal(argmax_ids(x[0]), x[0].argmax(dim=-1))
    tracked = x.float().requires_grad_()  # rows that carry a gradient (a user's model outside no_grad)
    assert torch.equal(argmax_ids(tracked), tracked.argmax(dim=-1))
