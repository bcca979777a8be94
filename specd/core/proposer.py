"""Proposal sources: who drafts d_1..d_k and reports the q rows they were drawn from.

A proposer is stateless; the session owns its cache (``new_cache``) and passes
it in. Three sources:

- ``NullProposer`` proposes nothing: with it the engine is target-only decoding.
- ``ModelProposer`` runs a draft causal LM autoregressively under its own policy,
  drawing d_i from the processed row q_i with the request's ``proposal`` stream
  and recording that same row. Its cache follows the published output by token
  identity: after a round it keeps exactly the rows whose tokens were published,
  so rows of rejected drafts never survive.
- ``NgramProposer`` (prompt lookup) copies what followed an earlier occurrence of
  the output's last n tokens; q is the point mass on each proposed token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specd.core.kv import KVCache
from specd.core.model import CausalLM, RowInput
from specd.core.processors import SamplingPolicy
from specd.core.rng import Draws
from specd.core.sampler import sample_categorical
from specd.core.state import RequestState
from specd.errors import UsageError


@dataclass(frozen=True)
class Proposal:
    drafts: tuple[tuple[int, ...], ...]  # per row, len k_b
    q: torch.Tensor  # float[B, K, V] the rows each d_i was drawn from (zeros past k_b)
    sampled: bool  # draws were taken from the proposal stream


class Proposer:
    """The interface. ``deterministic``: the proposal is a function of the published
    output alone (no draws), so the oracle enumerates one path with mass 1."""

    identity = "proposer"
    policy = SamplingPolicy()
    deterministic = False
    vocab_size = 0

    def new_cache(self) -> KVCache | None:
        return None

    @property
    def forward_calls(self) -> int:
        return 0

    def propose(
        self,
        states: Sequence[RequestState],
        ks: Sequence[int],
        cache: KVCache | None,
        draws: Draws,
        backend: str,
        dtype: torch.dtype,
    ) -> Proposal:
        raise NotImplementedError

    def settle(self, cache: KVCache | None, slot: int, output: tuple[int, ...] | None) -> None:
        """Align the cache with the published output (None: the round aborted)."""


class NullProposer(Proposer):
    identity = "none"

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def propose(self, states, ks, cache, draws, backend, dtype):
        return Proposal(tuple(() for _ in states), torch.zeros(len(states), 0, self.vocab_size, dtype=dtype), False)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class ModelProposer(Proposer):
    def __init__(self, model: CausalLM, policy: SamplingPolicy):
        self.model = model
        self.policy = policy
        self.identity = model.identity
        self.vocab_size = model.vocab_size

    def new_cache(self) -> KVCache:
        return self.model.new_cache()

    @property
    def forward_calls(self) -> int:
        return getattr(self.model, "forward_calls", 0)

    def pending(self, cache: KVCache, state: RequestState) -> tuple[int, ...]:
        """Output tokens the draft cache does not hold yet (all of them if it diverged)."""
        committed = cache.committed(state.slot)
        if state.output[: len(committed)] != committed:
            cache.reset(state.slot)
            committed = ()
        return state.output[len(committed) :]

    def draw(self, q_rows: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        """d_i from q_i: inverse CDF at the proposal uniform u float64[N] (argmax when the draft is
        greedy, u None). q_rows float[N, V] -> int64[N]. The row drawn from is the row recorded as q."""
        return q_rows.argmax(dim=-1) if u is None else sample_categorical(q_rows, u)

    def propose(self, states, ks, cache, draws, backend, dtype):
        b_total = len(states)
        k_max = max(ks, default=0)
        q = torch.zeros(b_total, k_max, self.vocab_size, dtype=dtype, device=getattr(self.model, "device", "cpu"))
        drafts: list[list[int]] = [[] for _ in states]
        sampled = not self.policy.greedy
        live = [b for b in range(b_total) if ks[b] > 0]
        if not live:
            return Proposal(tuple(() for _ in states), q, sampled)
        uniforms = {b: draws(states[b], "proposal", ks[b]) for b in live} if sampled else {}
        proc = {b: states[b].draft_proc for b in live}
        rows = []
        for b in live:
            tokens = self.pending(cache, states[b])
            start = cache.length(states[b].slot)
            rows.append(RowInput(states[b].slot, tokens, tuple(range(start, start + len(tokens)))))
        out = self.model.step(cache, rows, logits_for=1)
        raw = {b: logits[-1] for b, logits in zip(live, out.logits)}
        for i in range(k_max):
            here = [b for b in live if ks[b] > i]
            q_rows = self.policy.probabilities(
                torch.stack([raw[b] for b in here]), [proc[b] for b in here], backend, dtype
            )
            u = torch.tensor([uniforms[b][i] for b in here], dtype=torch.float64) if sampled else None
            tokens = self.draw(q_rows, u).tolist()
            q[torch.tensor(here, device=q.device), i] = q_rows.to(q)
            for b, tok in zip(here, tokens):
                drafts[b].append(tok)
                proc[b] = proc[b].advance(tok)
            feed = [b for b in here if ks[b] > i + 1]
            if feed:
                step_rows = [RowInput(states[b].slot, (drafts[b][-1],), (cache.length(states[b].slot),)) for b in feed]
                out = self.model.step(cache, step_rows, logits_for=1)
                raw.update({b: logits[-1] for b, logits in zip(feed, out.logits)})
        return Proposal(tuple(tuple(d) for d in drafts), q, sampled)

    def settle(self, cache, slot, output):
        if output is None:
            cache.discard(slot)
            return
        committed = len(cache.committed(slot))
        # Never cache the frontier: the next proposal must start with a real input row.
        keep = min(common_prefix(cache.temporary(slot), output[committed:]), len(output) - 1 - committed)
        cache.commit(slot, max(keep, 0))


class NgramProposer(Proposer):
    """Prompt lookup: the draft is what followed the most recent earlier occurrence
    of the output's last n tokens (n = N down to 1), up to k tokens.

    The proposal is a function of the published prefix, so q_i is the point mass
    on d_i: acceptance is p_i(d_i), and the correction normalize([p_i - q_i]_+) is
    p_i with d_i removed, renormalized. A row with no match proposes nothing and
    the round is an ordinary target step.
    """

    deterministic = True

    def __init__(self, n: int, vocab_size: int):
        if n < 1:
            raise UsageError(f"ngram:N needs N >= 1, got {n}")
        self.n = n
        self.vocab_size = vocab_size
        self.identity = f"ngram:{n}"
        self.policy = SamplingPolicy(greedy=True)

    def lookup(self, seq: tuple[int, ...], k: int) -> tuple[int, ...]:
        for size in range(min(self.n, len(seq) - 1), 0, -1):
            tail = seq[-size:]
            for start in range(len(seq) - size - 1, -1, -1):  # most recent earlier occurrence first
                if seq[start : start + size] == tail:
                    follow = seq[start + size : start + size + k]
                    if follow:
                        return follow
        return ()

    def propose(self, states, ks, cache, draws, backend, dtype):
        drafts = tuple(self.lookup(s.output, k) if k > 0 else () for s, k in zip(states, ks))
        k_max = max((len(d) for d in drafts), default=0)
        q = torch.zeros(len(states), k_max, self.vocab_size, dtype=dtype)
        for b, d in enumerate(drafts):
            if d:
                q[b, torch.arange(len(d)), torch.tensor(d)] = 1.0
        return Proposal(drafts, q, False)
