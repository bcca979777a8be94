"""The authoritative per-request state vector S = (O, C, F, P, G, R, V) of 0x06A."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specd.core.processors import PolicyState
from specd.core.rng import RngState


@dataclass(frozen=True)
class Request:
    """What a caller asks for: a prompt, a budget, a seed, optionally its own K."""

    request_id: str
    prompt: tuple[int, ...]
    max_new_tokens: int
    seed: int = 0
    k: int | None = None


@dataclass(frozen=True)
class RequestState:
    request_id: str
    slot: int
    prompt_len: int
    output: tuple[int, ...]  # O: prompt + published tokens
    cache_tokens: tuple[int, ...]  # C: identities of committed target K/V rows
    target_proc: PolicyState  # G (target side)
    draft_proc: PolicyState  # proposal-side processor state at the published output
    rng: RngState  # R
    generation: int  # V: bumped by every publication
    max_new_tokens: int
    k: int
    rounds: int = 0  # published speculative rounds
    finish_reason: str | None = None  # "eos" | "length" | None
    # Layout state: raw p_1 retained from the call that materialized the frontier.
    retained_logits: torch.Tensor | None = field(default=None, compare=False, repr=False)

    @property
    def generated(self) -> int:
        return len(self.output) - self.prompt_len

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - self.generated

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None or self.remaining <= 0

    @property
    def frontier(self) -> int | None:
        """F: the emitted token whose K/V row does not exist yet (None if cached)."""
        return self.output[-1] if len(self.cache_tokens) == len(self.output) - 1 else None

    @property
    def new_tokens(self) -> tuple[int, ...]:
        return self.output[self.prompt_len :]
