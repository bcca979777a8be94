"""The one-position coupling matrix, built from the production sampler.

Rows: proposed X ~ q; columns: emitted Y. M[x, y] = q(x) a(x) [x = y] + q(x) (1 - a(x)) r(y)
with a(x) = min(1, p(x)/q(x)) and r = normalize([p - q]_+). Its row sums are q,
its column sums must be p, and its diagonal sum must be 1 - TV(p, q).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specd.core.sampler import RejectionSampler


@dataclass(frozen=True)
class Coupling:
    matrix: torch.Tensor  # float64[V, V]
    diagonal: float
    one_minus_tv: float
    column_error: float  # max |column sum - p|
    row_error: float  # max |row sum - q|


def coupling_matrix(p: torch.Tensor, q: torch.Tensor, sampler: RejectionSampler | None = None) -> Coupling:
    """p, q: float64[V] normalized -> Coupling."""
    sampler = sampler or RejectionSampler()
    support = q > 0
    valid = support.unsqueeze(1)
    safe_q = torch.where(support, q, torch.ones_like(q)).unsqueeze(1)
    ratio = sampler.acceptance_ratios(p.unsqueeze(1), safe_q, valid).squeeze(1)
    ratio = torch.where(support, ratio, torch.zeros_like(ratio))
    residual = sampler.correction_rows(p.unsqueeze(0), q.unsqueeze(0))[0]
    residual = residual / residual.sum()
    accept = torch.diag(q * ratio)
    reject = (q * (1 - ratio)).unsqueeze(1) * residual.unsqueeze(0)
    m = accept + reject
    tv = 0.5 * (p - q).abs().sum().item()
    return Coupling(
        matrix=m,
        diagonal=m.diagonal().sum().item(),
        one_minus_tv=1 - tv,
        column_error=(m.sum(0) - p).abs().max().item(),
        row_error=(m.sum(1) - q).abs().max().item(),
    )
