"""The model protocol every model family implements (table models, Hugging Face, ...).

A model step takes input token rows with their absolute positions and a cache
handle, and returns one logit row per input row plus the identities of the new
K/V rows. The new rows are *temporary* in the cache until the caller commits a
prefix of them (``KVCache.commit``) or discards them; a model never decides
which rows become history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specd.core.kv import KVCache, KVRows


@dataclass(frozen=True)
class RowInput:
    """Input rows of one request (cache slot) for one step."""

    slot: int
    tokens: tuple[int, ...]
    positions: tuple[int, ...]


@dataclass(frozen=True)
class StepOutput:
    logits: list[torch.Tensor]  # one float[n_i, V] per RowInput: its last n_i rows (see logits_for);
    # the logit row of input j scores the token after input j
    kv: list[KVRows]  # one per RowInput: identities of the rows this step staged
    # step(hidden=True): one float[n_i, D] per RowInput, the final hidden states of the rows that
    # would have had logits (the head not applied; ``head_logits`` applies it). None otherwise.
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
