"""A reusable buffer for the round's target rows (processed logits, then p, float[R, V]).

Why: a new tensor of that size is fresh memory every round, and on a host touching fresh
memory costs more than the arithmetic done in it (at R = 264, V = 262,144: about 70 ms of
page faults against 21 ms for the division by the temperature). The buffer lives as long as
its session and grows to the largest round seen; what a round writes in it is read within
that round only (the rule copies out what it keeps), and the next round overwrites it.
"""

from __future__ import annotations

import torch


class Scratch:
    """One flat buffer, handed out as a tensor of the shape asked for (its contents undefined)."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None

    def rows(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """An uninitialized dtype[shape] tensor on ``device``, backed by the buffer (valid until the next call)."""
        n = 1
        for size in shape:
            n *= size
        buffer = self._buffer
        if buffer is None or buffer.numel() < n or buffer.dtype != dtype or buffer.device != device:
            self._buffer = buffer = None  # the old buffer goes before the new one is made
            buffer = self._buffer = torch.empty(n, dtype=dtype, device=device)
        return buffer[:n].view(shape)
