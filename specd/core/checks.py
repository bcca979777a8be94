"""The exactness checks a round reads together with its decision, instead of one read each.

The rule's arithmetic guards against rare events with checks: a processed row with no mass
(refused), a draft with q(d) = 0 (refused), a uniform within a few float64 steps of a boundary
it is compared with (decided again in exact rational arithmetic). Each check reads a flag from
the device, and on a GPU every read waits for all the kernels queued before it.

Inside ``deferred()`` a check reads nothing: it keeps its flag and answers "not flagged", so the
float64 result stands. The round then reads every kept flag in the same read as its decision, and
where one is set it decides again outside ``deferred()``, where each check reads and acts as it
always did (the redraw, the refusal). Both paths give the same decision, because the deferred path
skips only work that runs when a flag is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

_KEPT: ContextVar[list[torch.Tensor] | None] = ContextVar("specd_deferred_checks", default=None)


def flagged(condition: torch.Tensor) -> bool:
    """Whether any element of ``condition`` (bool, any shape) is set and must be acted on now.
    Inside ``deferred()``: False, with the flag kept for the round's read. An empty condition
    (a round without drafts) is never flagged and reads nothing."""
    if condition.numel() == 0:
        return False
    kept = _KEPT.get()
    if kept is None:
        return bool(condition.any())
    kept.append(condition.any())
    return False


@contextmanager
def deferred(defer: bool = True) -> Iterator[list[torch.Tensor]]:
    """Checks run inside keep their flags (bool 0-d tensors, in the yielded list) instead of reading
    them; with ``defer`` False they read at once, as outside (the list stays empty)."""
    kept: list[torch.Tensor] = []
    token = _KEPT.set(kept if defer else None)
    try:
        yield kept
    finally:
        _KEPT.reset(token)


def any_set(kept: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Whether any kept flag is set, as one bool 0-d tensor on ``device`` (False without flags)."""
    if not kept:
        return torch.zeros((), dtype=torch.bool, device=device)
    return torch.stack([k.to(device) for k in kept]).any()
