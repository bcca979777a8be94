"""What the host reads of a round, and when: one vector, copied without waiting, read once.

A round's decision lives on the device: per request A, the terminal token, whether it is a bonus,
the last accepted node, the exactness checks' flags (specd.core.checks), with the acceptance log
its columns, and the drafts a model draft never read (specd.core.device_chain). ``Readback``
packs them into one float64 vector (a token id or a count below 2^53 is exact in it; a round that
drafted nothing sends its terminal tokens alone, as they are) as the round
is launched, and on CUDA starts its copy into pinned host memory without waiting; ``values()``
waits for that copy alone (the kernels queued after it, a next round's, go on) and parses it.
So a round's one read can be made a round later, while the device runs the next.

``RoundClock`` times a round's draft and verify blocks without waiting for the device either: on
CUDA by events read once the round's copy has arrived, on a CPU (where work is done when its call
returns) by the wall clock. A round's rest is the host's own time in it: its launch and its
settling, not the wait between them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import contextmanager

import torch

from specd.core import checks
from specd.core.records import log_columns


class Readback:
    """A round's outcome on its way to the host (module docstring)."""

    def __init__(
        self,
        decision,
        kept: Sequence[list[torch.Tensor]],
        log: bool,
        drafts: torch.Tensor | None = None,
        ks: Sequence[int] | None = None,
    ) -> None:
        """``kept``: lists of exactness flags, each read as one (an empty list is known unset, not sent);
        ``log``: send the acceptance log's columns; ``drafts`` int64[B, K]: drafts never read; ``ks``:
        each request's drafts, where the round knows them: a round without any sends its terminal
        tokens alone (A = 0, a bonus, no accepted node: known on the host)."""
        accepted = decision.accepted
        b, device = accepted.shape[0], accepted.device
        self.known = ks is not None and not any(ks)  # A, bonus and leaf known: nothing was drafted
        columns = log_columns(decision) if log else []
        flags = [checks.any_set(k, device).reshape(1) for k in kept if k]
        if self.known:
            parts = [decision.terminal, *flags]
        else:
            leaf = decision.leaf if decision.leaf is not None else accepted - 1
            parts = [accepted, decision.terminal, decision.is_bonus, leaf, *flags]
        parts += [c.to(device=device, dtype=torch.float64).flatten() for c in columns]
        if drafts is not None:
            parts.append(drafts.to(device).flatten())
        # [A..., terminal..., is_bonus..., leaf..., flags..., columns..., drafts...] (A, bonus, leaf: if not known)
        # (a lone part, the terminal tokens of a round that drafted nothing, is read as it is: int64)
        vector = torch.cat(parts).to(torch.float64) if len(parts) > 1 else parts[0]
        self.batch, self.kept = b, [bool(k) for k in kept]
        self.width = columns[0].shape[1] if columns else 0
        self.columns, self.drafts_width = len(columns), drafts.shape[1] if drafts is not None else None
        self.event = None
        self._values: tuple[list[list[int]], tuple[bool, ...], list, list[list[int]] | None] | None = None
        if vector.device.type == "cuda":  # copied as it is computed; the host waits for this copy alone
            self.host = torch.empty(vector.shape, dtype=vector.dtype, pin_memory=True)
            self.host.copy_(vector, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(vector.device))
        else:
            self.host = vector

    def values(self) -> tuple[list[list[int]], tuple[bool, ...], list, list[list[int]] | None]:
        """The round's one read -> (per request [A, terminal token, is bonus, last accepted node], per
        flag list whether any of its checks is set, the log's columns as lists [C][B][K] (else []), each
        row's drafts never read (else None)). Read once; asked again, the same values."""
        values = self._values
        if values is None:
            values = self._values = self._read()
        return values

    def _read(self):
        if self.event is not None:
            self.event.synchronize()
        values = self.host.tolist()
        b, n_flags = self.batch, sum(self.kept)
        if self.known:
            fours, start = [[0, int(values[i]), 1, -1] for i in range(b)], b
        else:
            fours, start = [[int(values[j * b + i]) for j in range(4)] for i in range(b)], 4 * b
        read_flags = iter(values[start : start + n_flags])
        flags = tuple(bool(next(read_flags)) if k else False for k in self.kept)
        rest, k = values[start + n_flags :], self.width
        read = [[rest[c * b * k + r * k : c * b * k + (r + 1) * k] for r in range(b)] for c in range(self.columns)]
        tokens = None
        if self.drafts_width is not None:
            width, flat = self.drafts_width, rest[self.columns * b * k :]
            tokens = [[int(t) for t in flat[r * width : (r + 1) * width]] for r in range(b)]
        return fours, flags, read, tokens


class RoundClock:
    """The wall time of a round's draft and verify blocks, and the host's own time in the round
    (module docstring). ``device``: where the round runs (CUDA: timed by events)."""

    def __init__(self, device=None):
        self.cuda = getattr(device, "type", None) == "cuda"
        self.marks: dict[str, list] = {"draft": [], "verify": []}
        self.seconds = {"draft": 0.0, "verify": 0.0}
        self.host = 0.0
        self._since = time.perf_counter()

    @contextmanager
    def timed(self, block: str):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end.record()
                self.marks[block].append((start, end))
            return
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[block] += time.perf_counter() - t

    def pause(self) -> None:
        """The round is launched: the host's time in it stops until ``resume`` (settling)."""
        self.host += time.perf_counter() - self._since

    def resume(self) -> None:
        self._since = time.perf_counter()

    def read(self) -> None:
        """The blocks' device times, once the round's copy has arrived (its events are done)."""
        for block, marks in self.marks.items():
            self.seconds[block] += sum(start.elapsed_time(end) for start, end in marks) / 1000.0
            marks.clear()

    def elapsed(self) -> float:
        """The round's time: its blocks' and the host's own beside them (launch and settling)."""
        host = self.host + time.perf_counter() - self._since
        return max(host, self.seconds["draft"] + self.seconds["verify"]) if self.cuda else host
