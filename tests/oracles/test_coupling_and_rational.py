from fractions import Fraction

import pytest
import torch

from specd.oracles.engine.coupling import coupling_matrix
from specd.oracles.engine.rational import rational_difference


def test_the_articles_three_token_example():
    p = torch.tensor([0.30, 0.55, 0.15], dtype=torch.float64)
    q = torch.tensor([0.60, 0.30, 0.10], dtype=torch.float64)
    c = coupling_matrix(p, q)
    assert c.diagonal == pytest.approx(0.70, abs=1e-15) == c.one_minus_tv
    assert c.matrix[0, 0].item() == pytest.approx(0.30)  # q(A) * 0.5 accepted
    assert c.matrix[0, 1].item() == pytest.approx(0.30 * 0.25 / 0.30)  # rejected A -> B
    assert c.matrix[0, 2].item() == pytest.approx(0.30 * 0.05 / 0.30)
    assert c.column_error <= 1e-15 and c.row_error <= 1e-15


def test_random_pairs_diagonal_is_one_minus_tv():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        p = torch.softmax(torch.randn(6, generator=gen, dtype=torch.float64) * 2, 0)
        q = torch.softmax(torch.randn(6, generator=gen, dtype=torch.float64) * 2, 0)
        c = coupling_matrix(p, q)
        assert abs(c.diagonal - c.one_minus_tv) <= 1e-14 and c.column_error <= 1e-14


@pytest.mark.parametrize("vocab,k,horizon", [(2, 1, 2), (2, 3, 4), (3, 2, 4), (4, 3, 4)])
def test_rational_difference_is_exactly_zero(vocab, k, horizon):
    assert rational_difference(vocab, k, horizon, seed=vocab * 10 + k) == Fraction(0)
