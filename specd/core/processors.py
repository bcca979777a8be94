"""Logit processors and sampling policies (the target's and the draft's).

A policy is an ordered tuple of processors. Processors act on a batch of logit
rows float[N, V] in place (the policy hands them a copy of the raw rows, so a
round's rows cost one [N, V] tensor, not one per processor); stateful ones read
one state per row. States are
immutable values and ``advance(token)`` returns the successor, so a candidate
branch advances its own copy while the round-start state stays untouched, and
only published tokens move the committed state (article: "RNG And Stateful
Processors Follow Reached Events").

The value checks of every processor parameter live in ``specd.core.controls``, the
processors' states in ``specd.core.processor_states``.

Temperature 0 means greedy: the processed distribution is the point mass on the
argmax of the processed logits (lowest index on ties).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import field
from functools import cached_property

import torch

from specd.core.controls import (
    check_additive_penalty,
    check_bias,
    check_count,
    check_min_p,
    check_penalty,
    check_temperature,
    check_top_k,
    check_top_p,
)
from specd.core.probability import argmax_ids, softmax
from specd.core.processor_states import History, NewTokens, OutputCounts, RepetitionState
from specd.core.record import record
from specd.core.transfer import to_device

NEG_INF = float("-inf")


class Processor:
    """Base class. Stateless processors ignore ``states``."""

    name = "processor"
    stateful = False

    def describe(self) -> dict:
        return {"name": self.name}

    def initial_state(self, prompt: Sequence[int]):
        return None

    def apply_(self, logits: torch.Tensor, states: Sequence) -> torch.Tensor:
        """logits float[N, V], changed in place and returned; ``states``: one per row (stateful only)."""
        raise NotImplementedError

    def apply_into(self, raw: torch.Tensor, states: Sequence, out: torch.Tensor) -> torch.Tensor:
        """``apply_`` on a copy of ``raw`` made in ``out`` (the first processor of a policy: one pass
        over the rows where the processor can write its result directly)."""
        return self.apply_(out.copy_(raw), states)

    def apply(self, logits: torch.Tensor, states: Sequence) -> torch.Tensor:
        """The processed rows as a new tensor; ``logits`` stays as it was."""
        return self.apply_into(logits, states, torch.empty_like(logits))


@record
class Temperature(Processor):
    temperature: float
    name = "temperature"

    def describe(self) -> dict:
        return {"name": self.name, "temperature": self.temperature}

    def apply_(self, logits, states):
        return logits.div_(self.temperature)

    def apply_into(self, raw, states, out):
        if raw.dtype != out.dtype:  # divide in out's precision, as a converted copy would
            return super().apply_into(raw, states, out)
        return torch.div(raw, self.temperature, out=out)  # the same quotients as raw / T, written once


@record
class TopK(Processor):
    k: int
    name = "top_k"

    def describe(self) -> dict:
        return {"name": self.name, "k": self.k}

    def apply_(self, logits, states):
        if self.k >= logits.shape[-1]:
            return logits
        kth = torch.topk(logits, self.k, dim=-1).values[..., -1:]
        return logits.masked_fill_(logits < kth, NEG_INF)


@record
class TopP(Processor):
    """Nucleus filter with Hugging Face semantics: drop the low tail holding <= 1 - p mass."""

    p: float
    name = "top_p"

    def describe(self) -> dict:
        return {"name": self.name, "p": self.p}

    def apply_(self, logits, states):
        if self.p >= 1.0:
            return logits
        sorted_logits, order = torch.sort(logits, dim=-1, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= (1.0 - self.p)
        drop_sorted[..., -1] = False  # always keep the most likely token
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        return logits.masked_fill_(drop, NEG_INF)


@record
class LogitBias(Processor):
    """Additive bias per token id."""

    bias: tuple[tuple[int, float], ...]
    name = "logit_bias"

    def describe(self) -> dict:
        return {"name": self.name, "bias": [list(item) for item in self.bias]}

    def apply_(self, logits, states):
        for token, value in self.bias:
            logits[..., token] += value
        return logits


@record
class RepetitionPenalty(Processor):
    """CTRL-style penalty on tokens already in the history (Hugging Face semantics)."""

    penalty: float
    name = "repetition_penalty"
    stateful = True

    def describe(self) -> dict:
        return {"name": self.name, "penalty": self.penalty}

    def initial_state(self, prompt):
        return RepetitionState(frozenset(int(t) for t in prompt))

    def apply_(self, logits, states):
        rows: list[int] = []
        cols: list[int] = []
        for row, state in enumerate(states):
            rows.extend([row] * len(state.seen))
            cols.extend(state.seen)
        if not rows:
            return logits
        at = (to_device(rows, torch.int64, logits.device), to_device(cols, torch.int64, logits.device))
        seen = logits[at]  # each (row, token) once: a row's seen tokens are a set
        logits[at] = torch.where(seen < 0, seen * self.penalty, seen / self.penalty)
        return logits


def _banned(logits: torch.Tensor, banned: Sequence[Sequence[int]]) -> torch.Tensor:
    """-inf at banned[row] token ids of each row, in place."""
    rows = [r for r, ids in enumerate(banned) for _ in ids]
    if not rows:
        return logits
    cols = [t for ids in banned for t in ids]
    logits[to_device(rows, torch.int64, logits.device), to_device(cols, torch.int64, logits.device)] = NEG_INF
    return logits


@record
class PresenceFrequencyPenalty(Processor):
    """vLLM/OpenAI penalties on the output so far: logit(t) -= frequency * count(t) + presence * [count(t) > 0]."""

    presence: float
    frequency: float
    name = "presence_frequency_penalty"
    stateful = True

    def describe(self) -> dict:
        return {"name": self.name, "presence": self.presence, "frequency": self.frequency}

    def initial_state(self, prompt):
        return OutputCounts()

    def apply_(self, logits, states):
        rows = [row for row, state in enumerate(states) for _ in state.counts]
        if not rows:
            return logits
        tokens = [token for state in states for token, _ in state.counts]
        counts = to_device([count for state in states for _, count in state.counts], torch.float64, logits.device)
        values = (self.frequency * counts + self.presence).to(dtype=logits.dtype)
        at = (to_device(rows, torch.int64, logits.device), to_device(tokens, torch.int64, logits.device))
        logits[at] = logits[at] - values  # one gather and one scatter for the whole batch; (row, token) unique
        return logits


@record
class NoRepeatNGram(Processor):
    """Hugging Face's no_repeat_ngram_size: a token that would complete an n-gram already in
    prompt + output is banned."""

    n: int
    name = "no_repeat_ngram"
    stateful = True

    def describe(self) -> dict:
        return {"name": self.name, "n": self.n}

    def initial_state(self, prompt):
        return History(tuple(int(t) for t in prompt))

    def apply_(self, logits, states):
        n, banned = self.n, []
        for state in states:
            seq = state.tokens
            if len(seq) + 1 < n:
                banned.append(())
                continue
            prefix = seq[len(seq) - n + 1 :]
            banned.append(tuple({seq[i + n - 1] for i in range(len(seq) - n + 1) if seq[i : i + n - 1] == prefix}))
        return _banned(logits, banned)


@record
class BadWords(Processor):
    """Hugging Face's bad_words_ids: a one-token sequence is always banned; a longer one bans its
    last token when the output ends with the rest of it."""

    sequences: tuple[tuple[int, ...], ...]
    name = "bad_words"
    stateful = True

    def describe(self) -> dict:
        return {"name": self.name, "sequences": [list(s) for s in self.sequences]}

    def initial_state(self, prompt):
        longest = max(len(s) for s in self.sequences)
        return History(tuple(int(t) for t in prompt)[-(longest - 1) :] if longest > 1 else (), max(longest - 1, 0))

    def apply_(self, logits, states):
        banned = []
        for state in states:
            tail = state.tokens
            banned.append(
                tuple(
                    s[-1]
                    for s in self.sequences
                    if len(s) == 1 or (len(tail) >= len(s) - 1 and tail[len(tail) - len(s) + 1 :] == s[:-1])
                )
            )
        return _banned(logits, banned)


@record
class MinNewTokens(Processor):
    """Hugging Face's min_new_tokens: every end-of-sequence id is banned until this many tokens
    have been generated."""

    min_new: int
    eos_ids: tuple[int, ...]
    name = "min_new_tokens"
    stateful = True

    def describe(self) -> dict:
        return {"name": self.name, "min_new_tokens": self.min_new, "eos_ids": list(self.eos_ids)}

    def initial_state(self, prompt):
        return NewTokens(0, self.min_new)

    def apply_(self, logits, states):
        return _banned(logits, [self.eos_ids if s.count < self.min_new else () for s in states])


@record
class MinP(Processor):
    """Hugging Face's min_p: drop tokens whose probability is below min_p times the largest one
    (after temperature, top-k and top-p); the most likely token always stays."""

    p: float
    name = "min_p"

    def describe(self) -> dict:
        return {"name": self.name, "p": self.p}

    def apply_(self, logits, states):
        probs = torch.softmax(logits.to(torch.float32) if logits.dtype != torch.float64 else logits, dim=-1)
        threshold = self.p * probs.max(dim=-1, keepdim=True).values
        drop = probs < threshold
        drop.scatter_(-1, logits.argmax(dim=-1, keepdim=True), False)
        return logits.masked_fill_(drop, NEG_INF)


@record
class VocabMask(Processor):
    """Mask logit columns past the tokenizer's real vocabulary (padded embedding rows)."""

    real_vocab: int
    name = "vocab_mask"

    def describe(self) -> dict:
        return {"name": self.name, "real_vocab": self.real_vocab}

    def apply_(self, logits, states):
        logits[..., self.real_vocab :] = NEG_INF  # nothing when the rows are no wider than the vocabulary
        return logits


@record
class PolicyState:
    """One state per processor of a policy (None for stateless processors)."""

    states: tuple = ()
    stateful: bool = field(init=False, compare=False, repr=False)  # some processor keeps a state

    def __post_init__(self) -> None:
        object.__setattr__(self, "stateful", any(s is not None for s in self.states))

    def advance(self, token: int) -> PolicyState:
        if not self.stateful:
            return self
        states = tuple(s.advance(token) if s is not None else None for s in self.states)
        if all(new is old for new, old in zip(states, self.states)):
            return self  # nothing moved (a token already seen): keep the state and its digest
        return PolicyState(states)

    def digest(self) -> str:
        """A short hash of the state (the round outcome's processor hashes); computed once per state."""
        return self._digest

    @cached_property
    def _digest(self) -> str:
        canonical = repr(tuple(sorted(s.seen) if isinstance(s, RepetitionState) else s for s in self.states))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@record
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
        *,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        no_repeat_ngram_size: int | None = None,
        bad_words_ids: Sequence[Sequence[int]] = (),
        min_new_tokens: int | None = None,
        eos_ids: Sequence[int] = (),
        min_p: float | None = None,
    ) -> SamplingPolicy:
        """Hugging Face order: bias and penalties on raw logits (repetition, then vLLM's presence and
        frequency), the bans (no-repeat n-grams, bad words, EOS before min_new_tokens), then
        temperature, top-k, top-p, min-p."""
        check_temperature(temperature)
        check_top_k(top_k)
        check_top_p(top_p)
        check_penalty(repetition_penalty)
        check_bias(logit_bias)
        check_min_p(min_p)
        check_additive_penalty(presence_penalty, "presence penalty")
        check_additive_penalty(frequency_penalty, "frequency penalty")
        check_count(no_repeat_ngram_size, "no-repeat n-gram size")
        check_count(min_new_tokens, "min new tokens")
        procs: list[Processor] = []
        if real_vocab is not None:
            procs.append(VocabMask(real_vocab))
        if logit_bias:
            procs.append(LogitBias(tuple(sorted((int(k), float(v)) for k, v in logit_bias.items()))))
        if repetition_penalty is not None and repetition_penalty != 1.0:
            procs.append(RepetitionPenalty(float(repetition_penalty)))
        if presence_penalty or frequency_penalty:
            procs.append(PresenceFrequencyPenalty(float(presence_penalty or 0.0), float(frequency_penalty or 0.0)))
        if no_repeat_ngram_size:
            procs.append(NoRepeatNGram(int(no_repeat_ngram_size)))
        sequences = tuple(tuple(int(t) for t in s) for s in bad_words_ids if list(s) not in ([e] for e in eos_ids))
        if sequences:
            procs.append(BadWords(sequences))
        if min_new_tokens and eos_ids:
            procs.append(MinNewTokens(int(min_new_tokens), tuple(sorted(int(e) for e in eos_ids))))
        greedy = temperature == 0
        if not greedy and temperature != 1.0:
            procs.append(Temperature(float(temperature)))
        if top_k:  # None or 0: no filter (Hugging Face's top_k=0)
            procs.append(TopK(int(top_k)))
        if top_p is not None and top_p < 1.0:
            procs.append(TopP(float(top_p)))
        if min_p and not greedy:  # Hugging Face applies it when sampling (it never moves the argmax)
            procs.append(MinP(float(min_p)))
        return cls(tuple(procs), greedy, any(p.stateful for p in procs))

    def describe(self) -> dict:
        return {"greedy": self.greedy, "processors": [p.describe() for p in self.processors]}

    def initial_state(self, prompt: Sequence[int]) -> PolicyState:
        return PolicyState(tuple(p.initial_state(prompt) for p in self.processors))

    def logits(self, raw: torch.Tensor, states: Sequence[PolicyState], out: torch.Tensor | None = None) -> torch.Tensor:
        """raw: float[N, V], states: N policy states -> processed logits float[N, V]. ``raw`` is never
        written: the processors work on a copy of it, in ``out`` where given (a buffer of raw's
        shape, float32 or float64), else in a new tensor; without processors and ``out``, raw itself."""
        if not self.processors:
            return raw if out is None else out.copy_(raw)
        x = torch.empty_like(raw) if out is None else out
        for i, proc in enumerate(self.processors):
            own = [s.states[i] for s in states] if proc.stateful else ()
            x = proc.apply_into(raw, own, x) if i == 0 else proc.apply_(x, own)
        return x

    def probabilities(
        self,
        raw: torch.Tensor,
        states: Sequence[PolicyState],
        backend: str = "max_shift",
        dtype: torch.dtype = torch.float32,
        out: torch.Tensor | None = None,
        check: bool = True,
    ) -> torch.Tensor:
        """raw: float[N, V] -> processed probability rows dtype[N, V] (one-hot when greedy). ``out``:
        a buffer float[N, V] the rows are processed in (see ``logits``); the probabilities then
        overwrite it when its dtype is ``dtype``. ``check``: see probability.softmax_max_shift."""
        processed = self.logits(raw, states, out)
        if self.greedy:
            onehot = torch.zeros(processed.shape, dtype=dtype, device=processed.device)
            onehot.scatter_(-1, argmax_ids(processed).unsqueeze(-1), 1.0)
            return onehot
        # The processed rows are a copy of raw whenever they are not raw itself: the softmax may reuse them.
        return softmax(processed, backend, dtype, overwrite=processed is not raw, check=check)
