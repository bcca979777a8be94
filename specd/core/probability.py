"""Probability backends: processed logits -> probability rows.

Two implementations of the same softmax, selectable by name, so the oracle can
check arithmetic parity between them:

- ``max_shift``: the conventional softmax, exp(x - max) / sum.
- ``online``: the single-pass (m, l) merge over vocabulary blocks used by
  fused kernels: m is the running max, l the running sum of exp(x - m).

Masked entries are -inf and get probability exactly 0.
"""

from __future__ import annotations

import numpy as np
import torch

from specd.core.checks import flagged
from specd.errors import EmptyDistribution, UnknownBackend, shown

BACKENDS = ("max_shift", "online")


def residual_floor(dtype: torch.dtype) -> float:
    """Below this a residual mass formed in ``dtype`` is treated as zero and never divided by.

    Under exact arithmetic a rejection implies q(d) > p(d), hence Z >= q(d) - p(d) > 0;
    a zero or denormal Z can only come from rounding, where the branch has
    (numerically) zero probability and sampling from p is the safe fallback. The rules form
    their residuals in float64 whatever the rows' dtype (a low-precision row's entries convert
    exactly), so they pass float64: a residual of float16 rows can hold 1/256 of mass, below
    float16's own floor (about 7.8e-3), and is the law all the same.
    """
    return torch.finfo(dtype).tiny ** 0.5


def argmax_ids(logits: torch.Tensor) -> torch.Tensor:
    """float[..., V] -> int64[...]: each row's argmax, the lowest index on ties (a NaN counts as the
    largest, the first one wins), as ``torch.argmax`` defines it. On the CPU numpy computes it: its
    argmax is vectorized where torch's is not (a 49,152-wide float32 row: about 3 us against 70)."""
    if logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.float64) and logits.shape[-1]:
        # (right after a model call each crossing into torch costs microseconds: none that is not needed)
        found = (logits.detach() if logits.requires_grad else logits).numpy().argmax(axis=-1)
        return torch.from_numpy(found) if isinstance(found, np.ndarray) else torch.as_tensor(found)
    return logits.argmax(dim=-1)


def softmax_max_shift(
    logits: torch.Tensor, dtype: torch.dtype = torch.float32, overwrite: bool = False, check: bool = True
) -> torch.Tensor:
    """logits: float[N, V] -> probs: dtype[N, V]. ``overwrite``: the logits are a temporary the caller
    gives up, and the rows are computed in their memory (the same values, no new [N, V] tensor).
    ``check``: refuse a row with every logit masked here (a read from the device); without it such a
    row comes back as NaN, for the caller to refuse (``empty_rows``) in a read it makes anyway."""
    x = logits.to(dtype)
    m = x.amax(dim=-1, keepdim=True)
    if check:
        _check_mass(m)
    e = x.sub_(m) if overwrite else x - m  # exp and the division then run in place on it
    e.exp_()
    return e.div_(e.sum(dim=-1, keepdim=True))


def softmax_online(
    logits: torch.Tensor, dtype: torch.dtype = torch.float32, block: int = 1024, check: bool = True
) -> torch.Tensor:
    """logits: float[N, V] -> probs: dtype[N, V], via an online (m, l) merge over blocks of V
    (``check``: as in softmax_max_shift)."""
    x = logits.to(dtype)
    n, v = x.shape
    m = torch.full((n, 1), float("-inf"), dtype=dtype, device=x.device)
    l = torch.zeros((n, 1), dtype=dtype, device=x.device)
    for start in range(0, v, block):
        chunk = x[:, start : start + block]
        m_block = chunk.amax(dim=-1, keepdim=True)
        m_new = torch.maximum(m, m_block)
        # A fully masked prefix (m = -inf) contributes nothing; avoid exp(-inf - -inf) = nan.
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        l = l * torch.exp(m - safe) + torch.exp(chunk - safe).sum(dim=-1, keepdim=True)
        m = m_new
    if check:
        _check_mass(m)
    return torch.exp(x - m) / l


def softmax(
    logits: torch.Tensor,
    backend: str = "max_shift",
    dtype: torch.dtype = torch.float32,
    overwrite: bool = False,
    check: bool = True,
) -> torch.Tensor:
    """Dispatch by backend name; logits float[N, V] -> probs dtype[N, V] (``overwrite``, ``check``:
    see softmax_max_shift)."""
    if check_backend(backend) == "online":
        return softmax_online(logits, dtype, block=max(1, min(1024, logits.shape[-1] // 2 or 1)), check=check)
    return softmax_max_shift(logits, dtype, overwrite, check)


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise UnknownBackend(f"unknown probability backend {shown(name)}; choose one of {', '.join(BACKENDS)}")
    return name


def empty_rows(probs: torch.Tensor) -> torch.Tensor:
    """probs float[N, V] from an unchecked softmax -> bool[N]: the rows with no mass to sample (every
    logit masked; NaN logits come out the same)."""
    return probs.isnan().any(dim=-1)


EMPTY_ROW = "a processed row has every logit masked: no token can be sampled"


def _check_mass(row_max: torch.Tensor) -> None:
    if flagged(torch.isneginf(row_max)):
        raise EmptyDistribution(EMPTY_ROW)
