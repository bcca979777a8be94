import pytest
import torch

from specd.core.probability import softmax, softmax_max_shift, softmax_online
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
