"""Why two greedy runs of one target differ, when they do: the first position where target-only and
speculative decoding part, and the target's top-2 margin there.

A verify call over K + 1 rows and a one-row call run different kernels, so in half precision a
near-tie between the two best tokens can round either way (vLLM #41758, llama.cpp #25618): both
texts are greedy decodings of the target, up to that rounding. A difference where the two tokens
are not the two best, or their margin is beyond the dtype's rounding, is a bug. The margin is the
target's processed logits at that position, from one forward over the common prefix. On the
llama.cpp backend every call runs the same kernels (docs/llamacpp.md): its two runs' rows are
bit-identical, so there a difference beyond its float32 logits' rounding is a bug too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specd.core.model import RowInput
from specd.errors import OutputsDiffer

ROUNDING_STEPS = 8  # a near-tie: the two best within this many of the dtype's steps at their size


@dataclass(frozen=True)
class Divergence:
    request_id: str
    index: int  # the first generated token where the runs part (0-based)
    tokens: tuple[int | None, int | None]  # (target-only's, speculative's); None: that run had ended
    top2: tuple[int, int] | None  # the target's two best tokens there
    margin: float | None  # their logit difference
    tolerance: float | None  # the dtype's rounding at their size (ROUNDING_STEPS steps)
    dtype: str

    @property
    def near_tie(self) -> bool:
        """Both tokens are the target's two best, and within the dtype's rounding of each other."""
        if self.margin is None or self.top2 is None or self.tolerance is None:
            return False
        return set(self.tokens) == set(self.top2) and self.margin <= self.tolerance

    def describe(self) -> str:
        if self.near_tie:
            return (
                f"{self.request_id}: numerical near-tie at token {self.index}: margin {self.margin:.2g} in "
                f"{self.dtype} (the two runs' kernels rounded a tie apart; both are the target's greedy text)"
            )
        if self.margin is None:
            return f"{self.request_id}: the outputs part at token {self.index}: one run ended there"
        return (
            f"{self.request_id}: the outputs part at token {self.index} ({self.tokens[0]} target-only, "
            f"{self.tokens[1]} speculative): the target's margin there is {self.margin:.3g} in {self.dtype}, "
            f"not a rounding near-tie: a bug"
        )

    def as_dict(self) -> dict:
        return {
            "request_id": self.request_id,
            "index": self.index,
            "tokens": list(self.tokens),
            "top2": list(self.top2) if self.top2 else None,
            "margin": self.margin,
            "tolerance": self.tolerance,
            "dtype": self.dtype,
            "near_tie": self.near_tie,
        }


def divergences(pipe, items, target_only, speculative) -> list[Divergence]:
    """The first parting of each request whose tokens differ between the two runs (``GenerationRun``s of
    ``items`` on ``pipe``, a specd.models.run.pipeline.Pipeline)."""
    out = []
    for item, a, b in zip(items, target_only.results, speculative.results):
        if a.tokens == b.tokens:
            continue
        j = next((i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x != y), min(len(a.tokens), len(b.tokens)))
        pair = (a.tokens[j] if j < len(a.tokens) else None, b.tokens[j] if j < len(b.tokens) else None)
        out.append(_at(pipe, item, a.request_id, j, pair, a.tokens[:j]))
    return out


def _at(pipe, item, request_id: str, j: int, pair, common) -> Divergence:
    lm = pipe.target
    dtype = str(lm.dtype).removeprefix("torch.")
    if None in pair:
        return Divergence(request_id, j, pair, None, None, None, dtype)
    prefix = pipe.encode(item) + tuple(common)
    raw = last_row(lm, prefix)
    policy = pipe.target_policy
    state = policy.initial_state(prefix[: len(prefix) - len(common)])
    for token in common:
        state = state.advance(token)
    processed = policy.logits(raw.float(), [state])[0, : lm.vocab_size]
    values, indices = processed.topk(2)
    margin = float(values[0] - values[1])
    step = torch.finfo(lm.dtype).eps * max(abs(float(values[0])), 1.0)
    return Divergence(request_id, j, pair, (int(indices[0]), int(indices[1])), margin, ROUNDING_STEPS * step, dtype)


def last_row(lm, prefix: tuple[int, ...]) -> torch.Tensor:
    """The target's raw logit row after ``prefix``, float[1, V]: a Hugging Face model's plain forward,
    any other causal LM's own step on a fresh cache."""
    if hasattr(lm, "model"):
        with torch.no_grad():
            return lm.model(input_ids=torch.tensor([prefix], device=lm.device)).logits[0, -1:]
    cache = lm.new_cache()
    cache.open(0)
    return lm.step(cache, [RowInput(0, prefix, tuple(range(len(prefix))))], logits_for=1).logits[0]


def refuse_bugs(found: list[Divergence]) -> None:
    """OutputsDiffer (exit 1) naming the first divergence that is not a rounding near-tie, if any."""
    bugs = [d for d in found if not d.near_tie]
    if bugs:
        more = f" (and {len(bugs) - 1} more)" if len(bugs) > 1 else ""
        raise OutputsDiffer(bugs[0].describe() + more)
