"""Logit processors and sampling policies (the target's and the draft's).

A policy is an ordered tuple of processors. Processors act on a batch of raw
logit rows float[N, V]; stateful ones read one state per row. States are
immutable values and ``advance(token)`` returns the successor, so a candidate
branch advances its own copy while the round-start state stays untouched, and
only published tokens move the committed state (article: "RNG And Stateful
Processors Follow Reached Events").

The value checks for every processor parameter live here, once; option objects
call them with their flag names.

Temperature 0 means greedy: the processed distribution is the point mass on the
argmax of the processed logits (lowest index on ties).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from specd.core.probability import softmax
from specd.errors import UsageError

NEG_INF = float("-inf")


# -- value checks: the one home of each rule ----------------------------------------------
def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_temperature(value, name: str = "temperature") -> None:
    if value is None or not _finite(value) or value < 0:
        raise UsageError(f"{name} must be a finite number >= 0 (0 means greedy), got {value}")


def check_top_k(value, name: str = "top-k") -> None:
    """An integer >= 0; 0 (like None) means no top-k filter, as in Hugging Face."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise UsageError(f"{name} must be an integer >= 0 (0: off), got {value}")


def check_top_p(value, name: str = "top-p") -> None:
    if value is not None and not (_finite(value) and 0.0 < value <= 1.0):
        raise UsageError(f"{name} must be in (0, 1], got {value}")


def check_penalty(value, name: str = "repetition penalty") -> None:
    if value is not None and not (_finite(value) and value > 0):
        raise UsageError(f"{name} must be a finite number > 0, got {value}")


def check_bias(bias: Mapping[int, float] | None, name: str = "logit bias", vocab: int | None = None) -> None:
    for token, value in (bias or {}).items():
        if vocab is not None and not 0 <= token < vocab:
            raise UsageError(f"{name}: token {token} is outside the vocabulary 0..{vocab - 1}")
        if not _finite(value):
            raise UsageError(f"{name}: the bias of token {token} must be a finite number, got {value}")


@dataclass(frozen=True)
class RepetitionState:
    """The set of token ids already in the history (prompt + published output)."""

    seen: frozenset[int] = frozenset()

    def advance(self, token: int) -> RepetitionState:
        if token in self.seen:
            return self
        return RepetitionState(self.seen | {token})


class Processor:
    """Base class. Stateless processors ignore ``states``."""

    name = "processor"
    stateful = False

    def describe(self) -> dict:
        return {"name": self.name}

    def initial_state(self, prompt: Sequence[int]):
        return None

    def apply(self, logits: torch.Tensor, states: Sequence) -> torch.Tensor:
        raise NotImplementedError


@dataclass(frozen=True)
class Temperature(Processor):
    temperature: float
    name = "temperature"

    def describe(self) -> dict:
        return {"name": self.name, "temperature": self.temperature}

    def apply(self, logits, states):
        return logits / self.temperature


@dataclass(frozen=True)
class TopK(Processor):
    k: int
    name = "top_k"

    def describe(self) -> dict:
        return {"name": self.name, "k": self.k}

    def apply(self, logits, states):
        if self.k >= logits.shape[-1]:
            return logits
        kth = torch.topk(logits, self.k, dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, NEG_INF)


@dataclass(frozen=True)
class TopP(Processor):
    """Nucleus filter with Hugging Face semantics: drop the low tail holding <= 1 - p mass."""

    p: float
    name = "top_p"

    def describe(self) -> dict:
        return {"name": self.name, "p": self.p}

    def apply(self, logits, states):
        if self.p >= 1.0:
            return logits
        sorted_logits, order = torch.sort(logits, dim=-1, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= (1.0 - self.p)
        drop_sorted[..., -1] = False  # always keep the most likely token
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        return logits.masked_fill(drop, NEG_INF)


@dataclass(frozen=True)
class LogitBias(Processor):
    """Additive bias per token id."""

    bias: tuple[tuple[int, float], ...]
    name = "logit_bias"

    def describe(self) -> dict:
        return {"name": self.name, "bias": [list(item) for item in self.bias]}

    def apply(self, logits, states):
        out = logits.clone()
        for token, value in self.bias:
            out[..., token] += value
        return out


@dataclass(frozen=True)
class RepetitionPenalty(Processor):
    """CTRL-style penalty on tokens already in the history (Hugging Face semantics)."""

    penalty: float
    name = "repetition_penalty"
    stateful = True

    def describe(self) -> dict:
        return {"name": self.name, "penalty": self.penalty}

    def initial_state(self, prompt):
        return RepetitionState(frozenset(int(t) for t in prompt))

    def apply(self, logits, states):
        rows: list[int] = []
        cols: list[int] = []
        for row, state in enumerate(states):
            rows.extend([row] * len(state.seen))
            cols.extend(state.seen)
        if not rows:
            return logits
        mask = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
        mask[torch.tensor(rows), torch.tensor(cols)] = True
        penalized = torch.where(logits < 0, logits * self.penalty, logits / self.penalty)
        return torch.where(mask, penalized, logits)


@dataclass(frozen=True)
class VocabMask(Processor):
    """Mask logit columns past the tokenizer's real vocabulary (padded embedding rows)."""

    real_vocab: int
    name = "vocab_mask"

    def describe(self) -> dict:
        return {"name": self.name, "real_vocab": self.real_vocab}

    def apply(self, logits, states):
        if logits.shape[-1] <= self.real_vocab:
            return logits
        out = logits.clone()
        out[..., self.real_vocab :] = NEG_INF
        return out


@dataclass(frozen=True)
class PolicyState:
    """One state per processor of a policy (None for stateless processors)."""

    states: tuple = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stateful", any(s is not None for s in self.states))

    def advance(self, token: int) -> PolicyState:
        if not self.stateful:
            return self
        successor = object.__new__(PolicyState)  # same processors, so still stateful: skip __post_init__
        successor.__dict__.update(states=tuple(s.advance(token) if s is not None else None for s in self.states))
        successor.__dict__["stateful"] = True
        return successor

    def digest(self) -> str:
        """A short hash of the state (the commit record's processor hashes); computed once per state."""
        cached = self.__dict__.get("_digest")
        if cached is None:
            canonical = repr(tuple(sorted(s.seen) if isinstance(s, RepetitionState) else s for s in self.states))
            cached = hashlib.sha256(canonical.encode()).hexdigest()[:16]
            self.__dict__["_digest"] = cached
        return cached


@dataclass(frozen=True)
class SamplingPolicy:
    """An ordered processor list plus the greedy flag (temperature 0)."""

    processors: tuple[Processor, ...] = ()
    greedy: bool = False
    stateful: bool = field(default=False, compare=False)

    @classmethod
    def build(
        cls,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        logit_bias: Mapping[int, float] | None = None,
        repetition_penalty: float | None = None,
        real_vocab: int | None = None,
    ) -> SamplingPolicy:
        """Hugging Face order: bias and penalties on raw logits, then temperature, top-k, top-p."""
        check_temperature(temperature)
        check_top_k(top_k)
        check_top_p(top_p)
        check_penalty(repetition_penalty)
        check_bias(logit_bias)
        procs: list[Processor] = []
        if real_vocab is not None:
            procs.append(VocabMask(real_vocab))
        if logit_bias:
            procs.append(LogitBias(tuple(sorted((int(k), float(v)) for k, v in logit_bias.items()))))
        if repetition_penalty is not None and repetition_penalty != 1.0:
            procs.append(RepetitionPenalty(float(repetition_penalty)))
        greedy = temperature == 0
        if not greedy and temperature != 1.0:
            procs.append(Temperature(float(temperature)))
        if top_k:  # None or 0: no filter (Hugging Face's top_k=0)
            procs.append(TopK(int(top_k)))
        if top_p is not None and top_p < 1.0:
            procs.append(TopP(float(top_p)))
        return cls(tuple(procs), greedy, any(p.stateful for p in procs))

    def describe(self) -> dict:
        return {"greedy": self.greedy, "processors": [p.describe() for p in self.processors]}

    def initial_state(self, prompt: Sequence[int]) -> PolicyState:
        return PolicyState(tuple(p.initial_state(prompt) for p in self.processors))

    def logits(self, raw: torch.Tensor, states: Sequence[PolicyState]) -> torch.Tensor:
        """raw: float[N, V], states: N policy states -> processed logits float[N, V]."""
        x = raw
        for i, proc in enumerate(self.processors):
            x = proc.apply(x, [s.states[i] for s in states] if proc.stateful else ())
        return x

    def probabilities(
        self,
        raw: torch.Tensor,
        states: Sequence[PolicyState],
        backend: str = "max_shift",
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """raw: float[N, V] -> processed probability rows dtype[N, V] (one-hot when greedy)."""
        processed = self.logits(raw, states)
        if self.greedy:
            out = torch.zeros(processed.shape, dtype=dtype, device=processed.device)
            out.scatter_(-1, processed.argmax(dim=-1, keepdim=True), 1.0)
            return out
        return softmax(processed, backend, dtype)
