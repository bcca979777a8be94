"""The shared-body draft (``self:vocab=N``): the target's own body and a head restricted to N
frequent tokens.

The draft runs the target's body, one token at a time, on the target's own cache. Every body
row it computes for the frontier F and the drafts d_1, d_2, .. is the row the target itself
computes for them (same weights, inputs and positions): its K/V rows are written into the
target's cache as temporary rows of the round, and its final hidden states are kept
(``Proposal.staged``). q_i is the draft policy's processed softmax over the subset's logits (the
full head's logits at those columns, -inf elsewhere), so q_i is 0 outside the subset and a token
outside it is emitted only as a correction or bonus token.

Verification (specd.core.round.verify) feeds the target only the rows the draft did not (d_K,
the draft drawn last), applies the full head to the round's K + 1 hidden states in one product,
and the rule is the usual one. The commit keeps the layout's rows of what was published and
drops the rest, exactly as for a draft with a cache of its own. Because the draft feeds F, it
serves the replay_frontier layout only (the retained layout caches F before the round).

Exactness is the rule's: q is a function of the committed history and the drafts before it,
and p is the target's full head over its own hidden states.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specd.core.kv import KVCache
from specd.core.model import RowInput, SplitHeadLM
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.errors import CacheIdentityError, UsageError


def check_size(n: int, vocab_size: int, where: str = "self:vocab=N", smallest: int = 1) -> None:
    """The draft vocabulary's size: smallest <= N < V."""
    if not smallest <= n < vocab_size:
        raise UsageError(
            f"{where}: N must be in [{smallest}, {vocab_size}) (the vocabulary has {vocab_size} tokens), got {n}"
        )


def check_subset(columns: Sequence[int], vocab_size: int, where: str = "self:vocab=N", smallest: int = 1) -> None:
    """The draft vocabulary: smallest <= N < V distinct token ids, each in [0, V) (a user's N is at
    least 2; the oracle's tiny vocabularies use N = 1, a draft that always proposes one token)."""
    n = len(columns)
    check_size(n, vocab_size, where, smallest)
    if len(set(columns)) != n:
        raise UsageError(f"{where}: the draft vocabulary names a token twice")
    bad = next((c for c in columns if not 0 <= c < vocab_size), None)
    if bad is not None:
        raise UsageError(f"{where}: token id {bad} is outside the vocabulary [0, {vocab_size})")


class SharedBodyProposer(ModelProposer):
    """``target``: a model whose head runs apart from its body (``splits_head``: ``body_step``,
    ``head_logits``, ``subset_head``); ``columns``: the draft vocabulary, N distinct token ids."""

    shares_target_cache = True
    model: SplitHeadLM  # the target itself

    def __init__(self, target, columns: Sequence[int], policy: SamplingPolicy, draft_stop: float = 0.0, label=None):
        if not getattr(target, "splits_head", False):
            raise UsageError(
                f"self:vocab=N: {target.identity} does not run its head apart from its body, which a shared-body "
                "draft needs"
            )
        check_subset(columns, target.vocab_size)
        super().__init__(target, policy, draft_stop)
        device = getattr(target, "device", "cpu")
        self.columns = torch.tensor(sorted(columns), dtype=torch.int64, device=device)
        self.small_head = target.subset_head(self.columns)
        self.identity = label or f"self:vocab={len(columns)}({target.identity})"
        self.calls = 0

    def new_cache(self) -> KVCache | None:
        return None  # it drafts into the target's cache

    def with_policy(self, policy: SamplingPolicy, draft_stop: float) -> SharedBodyProposer:
        return SharedBodyProposer(self.model, self.columns.tolist(), policy, draft_stop, self.identity)

    @property
    def forward_calls(self) -> int:
        return self.calls

    def pending(self, cache: KVCache, state) -> tuple[int, ...]:
        """The frontier F: the target's cache must hold the output minus F, nothing temporary."""
        held = cache.prefix_held(state.slot, state.output)
        if (
            held != len(state.output) - 1
            or held != cache.committed_length(state.slot)
            or cache.length(state.slot) > held
        ):
            raise CacheIdentityError(
                f"{state.request_id}: self:vocab=N drafts from the target's cache holding the output minus its "
                "frontier (the replay_frontier layout), which this round's cache is not"
            )
        return state.output[-1:]

    def behind(self, state, cache) -> int:
        return 0  # the target's cache, which every round commits, holds all but the frontier

    def forward(self, cache, rows: Sequence[RowInput], staged: dict) -> list[torch.Tensor]:
        """A body step of the target on its own cache (temporary rows), its hidden states kept per
        slot, and the restricted head -> float[V] rows, -inf outside the draft vocabulary."""
        self.calls += 1
        hidden = self.model.body_step(cache, rows, logits_for=1).hidden
        if hidden is None:
            raise TypeError(f"{self.model.identity}: body_step returned no hidden states")
        last = torch.stack([h[-1] for h in hidden])
        for r, h in zip(rows, hidden):
            staged.setdefault(r.slot, []).append(h[-1:])
        small = self.small_head(last)
        full = torch.full((len(rows), self.vocab_size), float("-inf"), dtype=small.dtype, device=small.device)
        full[:, self.columns] = small
        return list(full)

    def staged_rows(self, states, staged: dict) -> tuple:
        return tuple(torch.cat(staged[s.slot]) if s.slot in staged else None for s in states)

    def settle(self, cache, slot, output) -> None:
        """Nothing of its own to align: the round commits the target's cache."""

    def resolve(self, cache, slot, drafts) -> None:
        """Nothing of its own: the round resolves the target's cache, where this draft's rows are."""
