"""Host values sent to the device without waiting for it.

A synchronous copy to a CUDA device (``torch.tensor(values, device=...)``, ``.to(device)``) waits
for every kernel queued before it: the host stops feeding the device, as a read does. A round
builds small index and uniform tensors from host values (the drafts' positions, a row's banned
tokens, the acceptance uniforms); ``to_device`` makes each on the host and copies it without a
wait (the copy is queued like a kernel; its source is staged at once, so it may be freed).
"""

from __future__ import annotations

import torch


def to_device(values, dtype: torch.dtype, device) -> torch.Tensor:
    """``values`` (a number, a list, nested lists) as a ``dtype`` tensor on ``device``, without waiting
    for the device."""
    out = torch.tensor(values, dtype=dtype)
    if device is None or (device if isinstance(device, torch.device) else torch.device(device)).type == "cpu":
        return out  # (a torch.device is not made again: a round makes many of these)
    return out.to(device, non_blocking=True)
