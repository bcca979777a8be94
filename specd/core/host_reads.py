"""Counting a round's reads from the device to the host.

Each read of a tensor's value into Python (``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``,
``bool()``, ``int()``, ``float()``, an index taken from a tensor, ``nonzero``) waits, on CUDA, for
every kernel queued before it: the host stops feeding the device. ``HostReads`` counts them while
it is active, the same on a CPU as on a GPU (there a CPU run shows what a GPU run would wait
for), and says where each was made. On CUDA, ``torch.cuda.set_sync_debug_mode("warn")`` names
the synchronizing calls as well. ``TorchCalls``, which it narrows, counts any torch functions
(``benchmarks/round_ops.py``: every operation of a round).
"""

from __future__ import annotations

import traceback
from collections import Counter

from torch.overrides import TorchFunctionMode

READS = frozenset({"item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero"})


class TorchCalls(TorchFunctionMode):
    """``with TorchCalls(names) as calls: ...`` -> ``calls.count``: the torch functions called while
    active (those named in ``names``; every one when None), and ``calls.where``: how many at each
    (function, file, line, caller) of the first caller outside torch."""

    def __init__(self, names: frozenset[str] | None = None) -> None:
        super().__init__()
        self.names = names
        self.count = 0
        self.where: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if self.names is None or name in self.names:
            self.count += 1
            caller = next(
                (f for f in reversed(traceback.extract_stack()[:-1]) if "/torch/" not in f.filename),
                None,
            )
            if caller is not None:
                self.where[(name, caller.filename.rsplit("/", 2)[-1], caller.lineno, caller.name)] += 1
        return func(*args, **(kwargs or {}))


class HostReads(TorchCalls):
    """``with HostReads() as reads: ...`` -> ``reads.count``, and ``reads.where``: how many were made
    at each (file, line, function) of the caller outside torch."""

    def __init__(self) -> None:
        super().__init__(READS)
