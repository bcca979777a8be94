"""A model's steps captured as CUDA graphs, one per bucket of the call's shape.

On a GPU a small step's time is mostly the host launching its kernels, one per operation, while
the device waits. A CUDA graph records a step's kernels once and replays them with one launch.
A graph's shapes are fixed, so a call is padded up to a bucket: its batch rows to the next of
``Buckets.batch`` and its rows per request to the next of ``Buckets.rows`` (a draft step's one or
two tokens, a verification's k + 1); a call past the largest bucket, or over a subset of the
cache's rows (joiners' prompts), runs eagerly. Padding is harmless by construction
(specd.models.hf.step_call): a padded row's K/V goes to a column after its slot's rows, which the
next step writes over, and its query sees only what it may.

A graph reads its inputs from static tensors (token ids, positions, the write columns, the 4D
mask over the whole store) and writes its hidden states to a static tensor; a replay copies the
call's inputs in and returns that output. Attention reads every column the store holds (its
capacity: the mask hides what is not the query's), so a store that grows (more rows, more
columns) drops the graphs, which are captured again at the next call. The store keeps ``SPARE``
columns past what any slot uses: capturing writes there.

Capturing needs a step that never reads from the device and never changes shape with the data;
a model that cannot be captured (the capture raises) runs eagerly, and ``failure`` says why.
``capture=False`` runs the same padded, static-buffer path without CUDA graphs: what a CPU can
test of it (buckets, padding, static inputs), with the same tokens as the eager step.

``Buckets.priced`` is what a call of ``rows`` rows per request costs in rows once padded: -k auto
prices that (specd.policy.costs), not the raw rows.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

import torch

ROW_BUCKETS = (1, 2, 3, 5, 9, 17, 33)  # rows per request: a draft step's 1-2, a verification's k + 1
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
SPARE = ROW_BUCKETS[-1]  # columns the store keeps past every slot's rows: a capture writes there
MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class Buckets:
    """The shapes a captured call is padded to."""

    rows: tuple[int, ...] = ROW_BUCKETS
    batch: tuple[int, ...] = BATCH_BUCKETS

    def of(self, batch: int, rows: int) -> tuple[int, int] | None:
        """The bucket (batch rows, rows per request) a call of ``batch`` x ``rows`` is padded to, or
        None past the largest (it runs eagerly)."""
        b, n = bisect.bisect_left(self.batch, batch), bisect.bisect_left(self.rows, rows)
        if b == len(self.batch) or n == len(self.rows):
            return None
        return self.batch[b], self.rows[n]

    def priced(self, batch: int, rows: int) -> int:
        """The rows a call of ``batch`` requests x ``rows`` rows each costs once padded to its bucket
        (the call's own rows past the largest bucket)."""
        shape = self.of(batch, rows)
        return shape[0] * shape[1] if shape is not None else batch * rows


@dataclass
class Captured:
    """One bucket's static inputs, its static output, and its graph (None: replayed eagerly)."""

    ids: torch.Tensor  # int64[B, n]
    positions: torch.Tensor  # int64[B, n]
    write: torch.Tensor  # int64[B, n]
    mask: torch.Tensor  # bool or float[B, 1, n, capacity]
    hidden: torch.Tensor | None = None  # float[B, n, D], the graph's output
    graph: object | None = None


class StepGraphs:
    """The captured steps of one model over its slot store (module docstring). ``forward(ids,
    positions, mask) -> hidden float[B, n, D]`` runs the body; the store's ``write`` and ``span``
    are set around each run."""

    def __init__(self, buckets: Buckets = Buckets(), capture: bool = True):
        self.buckets = buckets
        self.capture = capture
        self.graphs: dict[tuple[int, int], Captured] = {}
        self.failure: str | None = None  # why the model could not be captured (then it runs eagerly)
        self._store_key: tuple | None = None
        self._pool = None
        self.replays = 0
        self.captures = 0

    def usable(self, batch: int, rows: int) -> tuple[int, int] | None:
        """The bucket a call runs in, or None where it runs eagerly."""
        return None if self.failure is not None else self.buckets.of(batch, rows)

    def run(self, store, call, forward: Callable) -> torch.Tensor:
        """The body's hidden states float[B, n, D] for a call already padded to its bucket (B x n,
        its mask over the store's whole capacity), replayed from that bucket's graph."""
        key = _store_key(store)
        if key != self._store_key:  # the store grew: every graph read the old tensors
            self.graphs.clear()
            self._pool, self._store_key = None, key
        shape = tuple(call.ids.shape)
        captured = self.graphs.get(shape)
        if captured is None:
            captured = self.graphs[shape] = self._captured(store, call, forward)
        captured.ids.copy_(call.ids)
        captured.positions.copy_(call.positions)
        captured.write.copy_(call.write)
        captured.mask.copy_(call.mask)
        store.write, store.batch, store.span = captured.write, None, store.capacity
        self.replays += 1
        if captured.graph is None:
            return forward(captured.ids, captured.positions, captured.mask)
        captured.graph.replay()
        return captured.hidden

    def _captured(self, store, call, forward: Callable) -> Captured:
        """A bucket's static tensors, and on CUDA its graph (captured writing to the store's spare
        columns, which no slot uses)."""
        b, n = call.ids.shape
        spare = store.capacity - n + torch.arange(n, device=call.ids.device)
        captured = Captured(
            torch.zeros_like(call.ids),
            spare.expand(b, n).clone(),
            spare.expand(b, n).clone(),
            torch.ones_like(call.mask),  # every column visible while capturing: no row without one
        )
        if not self.capture:
            return captured
        store.write, store.batch, store.span = captured.write, None, store.capacity
        side = torch.cuda.Stream(device=call.ids.device)
        side.wait_stream(torch.cuda.current_stream(call.ids.device))
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up: kernels chosen, workspaces allocated, outside the graph
                forward(captured.ids, captured.positions, captured.mask)
        torch.cuda.current_stream(call.ids.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool):
            captured.hidden = forward(captured.ids, captured.positions, captured.mask)
        captured.graph = graph
        self.captures += 1
        return captured

    def fail(self, why: str) -> None:
        """The model cannot be captured: every call runs eagerly from now on."""
        self.failure = why
        self.graphs.clear()
        self._pool = None


def _store_key(store) -> tuple:
    """What a captured graph read of the store: its tensors' addresses and sizes."""
    first = store.keys[0].data_ptr() if store.keys else 0
    return store.rows, store.capacity, len(store.keys), first


def graphs_for(mode: str, device: torch.device, splits_head: bool) -> tuple[StepGraphs | None, str | None]:
    """The step graphs ``--graphs`` asks for on a model on ``device`` -> (the graphs or None, why there
    are none where auto wanted them: None when it did not). ``on`` where graphs cannot run is the
    caller's to refuse (``refusal``)."""
    if mode == "off" or device.type != "cuda":
        return None, None
    if not splits_head:
        return None, "its head does not run apart from its body (specd captures the body's steps)"
    return StepGraphs(), None


def refusal(mode: str, device: torch.device, backend: str) -> str | None:
    """Why ``--graphs`` ``mode`` cannot be honoured on ``device`` with ``backend`` (None: it can)."""
    if mode != "on":
        return None
    if backend != "hf":
        return f"--graphs on: {backend} runs its own steps (CUDA graphs are Hugging Face models' on CUDA)"
    if device.type != "cuda":
        return f"--graphs on needs CUDA; this run is on {device.type} (use --graphs auto or off)"
    return None
