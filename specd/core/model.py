"""The model protocol every model family implements (table models, Hugging Face, ...).

A model step takes input token rows with their absolute positions and a cache
handle, and returns one logit row per input row plus the identities of the new
K/V rows. The new rows are *temporary* in the cache until the caller commits a
prefix of them (``KVCache.commit``) or discards them; a model never decides
which rows become history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from specd.core.kv import KVCache, KVRows
from specd.core.record import record

# A step's input rows of one request (cache slot): tokens at absolute positions. They are the K/V
# rows the step stages, so they are one type (``KVRows``) under the name a caller writes.
RowInput = KVRows


@record
class StepOutput:
    logits: list[torch.Tensor]  # one float[n_i, V] per RowInput: its last n_i rows (see logits_for);
    # the logit row of input j scores the token after input j
    kv: list[KVRows]  # one per RowInput: identities of the rows this step staged
    # body_step (SplitHeadLM): one float[n_i, D] per RowInput, the final hidden states of the rows
    # that would have had logits (the head not applied; ``head_logits`` applies it). None otherwise.
    hidden: list[torch.Tensor] | None = None


class CausalLM(Protocol):
    identity: str  # names weights + configuration + dtype: part of the round coordinate
    vocab_size: int  # logit row width

    def new_cache(self) -> KVCache:
        """An empty cache; the caller opens one slot per request."""
        ...

    def step(self, cache: KVCache, rows: Sequence[RowInput], logits_for: int | None = None) -> StepOutput:
        """logits_for: logit rows wanted per input, counted from its end (None: all, 0: none)."""
        ...


class SplitHeadLM(CausalLM, Protocol):
    """A causal LM whose head runs apart from its body (``splits_head`` True): what the shared-body
    draft (specd.core.shared_body) and its verification need."""

    splits_head: bool

    def body_step(self, cache: KVCache, rows: Sequence[RowInput], logits_for: int | None = None) -> StepOutput:
        """``step`` without the head: the rows' final hidden states in ``StepOutput.hidden`` (logits empty)."""
        ...

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The full head: hidden float[N, D] -> logits float[N, V]."""
        ...

    def subset_head(self, columns: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """A head holding only the rows ``columns`` int64[N_sub]: hidden float[N, D] -> float[N, N_sub],
        the full head's logits at those columns."""
        ...


def device_sync(device) -> Callable[[], None] | None:
    """A function that waits for every kernel queued on ``device`` (a CUDA device: that one, not the
    current one), or None where work is done when its call returns (a CPU)."""
    if getattr(device, "type", None) != "cuda":
        return None
    return lambda: torch.cuda.synchronize(device)
