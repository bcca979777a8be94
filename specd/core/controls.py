"""The value checks of every sampling control (temperature, top-k, top-p, min-p, penalties, logit
bias, counts): the one home of each rule. ``SamplingPolicy.build`` and the option objects call them
with their flag names, so a bad value is one line naming the flag."""

from __future__ import annotations

import math
from collections.abc import Mapping

from specd.errors import UsageError, shown


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_temperature(value, name: str = "temperature") -> None:
    if value is None or not _finite(value) or value < 0:
        raise UsageError(f"{name} must be a finite number >= 0 (0 means greedy), got {shown(value)}")


def check_top_k(value, name: str = "top-k") -> None:
    """An integer >= 0; 0 (like None) means no top-k filter, as in Hugging Face."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise UsageError(f"{name} must be an integer >= 0 (0: off), got {shown(value)}")


def check_top_p(value, name: str = "top-p") -> None:
    if value is not None and not (_finite(value) and 0.0 < value <= 1.0):
        raise UsageError(f"{name} must be in (0, 1], got {shown(value)}")


def check_penalty(value, name: str = "repetition penalty") -> None:
    if value is not None and not (_finite(value) and value > 0):
        raise UsageError(f"{name} must be a finite number > 0, got {shown(value)}")


def check_min_p(value, name: str = "min-p") -> None:
    if value is not None and not (_finite(value) and 0.0 <= value <= 1.0):
        raise UsageError(f"{name} must be in [0, 1] (0: off), got {shown(value)}")


ADDITIVE_PENALTY_RANGE = (-2.0, 2.0)  # vLLM's and the OpenAI API's range


def check_additive_penalty(value, name: str) -> None:
    """Presence and frequency penalties (vLLM/OpenAI): in [-2, 2] as they take them (0: off; a
    negative value favours repeating). Bounded, so the shift stays finite for any output length."""
    low, high = ADDITIVE_PENALTY_RANGE
    if value is not None and not (_finite(value) and low <= value <= high):
        raise UsageError(
            f"{name} must be in [{low:g}, {high:g}] (0: off; vLLM's and OpenAI's range), got {shown(value)}"
        )


def check_count(value, name: str) -> None:
    """An integer >= 0 (0: off): --no-repeat-ngram-size, --min-new-tokens."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise UsageError(f"{name} must be an integer >= 0 (0: off), got {shown(value)}")


def check_bias(bias: Mapping[int, float] | None, name: str = "logit bias", vocab: int | None = None) -> None:
    for token, value in (bias or {}).items():
        if vocab is not None and not 0 <= token < vocab:
            raise UsageError(f"{name}: token {token} is outside the vocabulary 0..{vocab - 1}")
        if not _finite(value):
            raise UsageError(f"{name}: the bias of token {token} must be a finite number, got {shown(value)}")
