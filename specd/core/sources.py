"""Several draft sources in one run: each round, each request drafts from one of them.

``SourceSet`` holds the run's sources in the user's order (a lookup such as ``suffix``
or ``ngram:N``, a draft model, ...), one cache each. A request's ``Plan`` for a round
names the source and K (the K policy chooses it; see specd.policy). A source with
nothing to propose this round (a lookup without a match) is not available and is
skipped. ``propose`` runs each source on the rows that chose it and returns one
``Proposal`` for the round: per row the drafts, the q rows they were drawn from, the proposal
uniforms consumed and the source; per source its timing.

Exactness is the single source's: the choice reads the request's committed history,
the availability of a lookup (a function of the published output), how far a model's
cache is behind the output (a function of the published output and of which sources
the request drafted from before) and measured time,
never the round's target rows or uniforms, so the number of drafts and their source
form a stopping time of the draft process and the rule stays exact.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specd.core.kv import KVCache
from specd.core.proposer import DraftContext, ModelProposer, NullProposer, Proposal, Proposer, SourceTiming
from specd.core.state import RequestState
from specd.core.tree_shape import TreeShape


@dataclass(frozen=True)
class Offer:
    """A source that can propose for a request this round: its index into the run's sources, its
    identity, a lookup's match length (``Proposer.match_length``; None for a model) and how many
    output tokens a model's cache lacks (``Proposer.behind``: what its first call this round reads)."""

    index: int
    identity: str
    match: int | None = None
    behind: int = 0


@dataclass(frozen=True)
class Plan:
    """What a request does this round: draft up to ``k`` tokens from source ``source`` (an index
    into the run's sources; None with k = 0: a plain target step). ``match``: the chosen source's
    match length this round (its offer's), kept in the request's history as the evidence the
    round's acceptance is filed under. ``shape``: the tree it drafts (specd.core.tree_shape; None:
    a chain of k), whose depth is at most k."""

    source: int | None
    k: int
    match: int | None = None
    shape: TreeShape | None = None


def plan_from(offer: Offer, k: int) -> Plan:
    """K drafts from ``offer``'s source."""
    return Plan(offer.index, k, offer.match)


def first_available(offers: Sequence[Offer], k: int) -> Plan:
    """K drafts from the first source on offer (none on offer, or K = 0: a plain target step)."""
    return plan_from(offers[0], k) if offers and k > 0 else Plan(None, 0)


class SourceCaches:
    """One cache per source (None for a source without one), opened and closed together."""

    def __init__(self, caches: Sequence):
        self.caches = tuple(caches)

    def _each(self):
        return (c for c in self.caches if c is not None)

    def kv_caches(self) -> list:
        """The K/V caches among them (the draft models'), for audits."""
        return [c for c in self._each() if isinstance(c, KVCache)]

    def open(self, slot: int) -> None:
        for c in self._each():
            c.open(slot)

    def close(self, slot: int) -> None:
        for c in self._each():
            c.close(slot)

    def compact(self) -> None:
        for c in self._each():
            c.compact()

    def tidy(self) -> None:
        for c in self._each():
            c.tidy()


class SourceSet:
    """The run's draft sources, in order (see the module docstring)."""

    def __init__(self, sources: Sequence[Proposer]):
        self.sources = tuple(sources)
        vocab = {s.vocab_size for s in self.sources}
        self.vocab_size = vocab.pop() if len(vocab) == 1 else None
        models = [s for s in self.sources if not s.deterministic]
        # The draft policy whose processor state every request carries (model sources share it).
        self.policy = (models or list(self.sources))[0].policy

    @classmethod
    def of(cls, proposer, vocab_size: int) -> SourceSet:
        """A proposer, a list of them, or None (target-only: a source that proposes nothing)."""
        if proposer is None:
            return cls([NullProposer(vocab_size)])
        if isinstance(proposer, SourceSet):
            return proposer
        return cls(proposer if isinstance(proposer, (list, tuple)) else [proposer])

    @property
    def identities(self) -> tuple[str, ...]:
        return tuple(s.identity for s in self.sources)

    @property
    def models(self) -> list:
        """The draft models among the sources (a lookup has none), in order."""
        return [s.model for s in self.sources if isinstance(s, ModelProposer)]

    @property
    def forward_calls(self) -> int:
        return sum(s.forward_calls for s in self.sources)

    def new_cache(self) -> SourceCaches:
        return SourceCaches([s.new_cache() for s in self.sources])

    def offers(self, state: RequestState, caches: SourceCaches) -> list[Offer]:
        """The sources that could propose for ``state`` this round, in the user's order, each with
        its match length and how far behind the output its cache is. A lookup proposes exactly when
        it has a match, so it is asked once."""
        offers = []
        for i, (source, cache) in enumerate(zip(self.sources, caches.caches)):
            match = source.match_length(state, cache)
            if match if match is not None else source.available(state, cache):
                offers.append(Offer(i, source.identity, match, source.behind(state, cache)))
        return offers

    def propose(
        self, states, plans: Sequence[Plan], caches: SourceCaches, ctx: DraftContext, target_cache=None
    ) -> Proposal:
        """Each source drafts for the rows whose plan names it; rows of K = 0 draft nothing. A
        shared-body source drafts into ``target_cache`` (the target's cache)."""
        b_total = len(states)
        drafts: list[tuple[int, ...]] = [() for _ in states]
        q_index: list[tuple[int, ...]] = [() for _ in states]
        used = [0] * b_total
        names: list[str | None] = [None] * b_total
        staged: list = [None] * b_total
        trees: list = [None] * b_total
        parts: list[torch.Tensor] = []
        timings: list[SourceTiming] = []
        for index, source in enumerate(self.sources):
            rows = [b for b, plan in enumerate(plans) if plan.source == index and plan.k > 0]
            if not rows:
                continue
            calls = source.forward_calls
            started = time.perf_counter()
            mine, ks = [states[b] for b in rows], [plans[b].k for b in rows]
            cache = target_cache if source.shares_target_cache else caches.caches[index]
            shapes = [plans[b].shape for b in rows]
            if any(shape is not None for shape in shapes):
                proposal = source.propose(mine, ks, cache, ctx, shapes=shapes)
            else:
                proposal = source.propose(mine, ks, cache, ctx)
            seconds = time.perf_counter() - started
            shift = sum(len(part) for part in parts)  # this source's q rows follow the earlier sources'
            for j, b in enumerate(rows):
                drafts[b] = tuple(proposal.drafts[j])
                trees[b] = proposal.trees[j] if j < len(proposal.trees) else None
                q_index[b] = tuple(i + shift if i >= 0 else -1 for i in proposal.q_index[j][: len(drafts[b])])
                if proposal.staged is not None:
                    staged[b] = proposal.staged[j]
                used[b] = proposal.draws[j]
                names[b] = source.identity if drafts[b] else None
            parts.append(proposal.q)
            longest = max((len(proposal.drafts[j]) for j in range(len(rows))), default=0)
            timings.append(
                SourceTiming(
                    source.identity,
                    seconds,
                    source.forward_calls - calls,
                    sum(1 for b in rows if drafts[b]),
                    longest,
                    proposal.first_call_tokens,
                    proposal.first_call_seconds,
                )
            )
        device = next((part.device for part in parts if len(part)), "cpu")  # a model's rows stay where they are
        empty = [torch.zeros(0, self.vocab_size or 0, dtype=ctx.dtype)]
        q = torch.cat([part.to(device=device, dtype=ctx.dtype) for part in parts] or empty)
        return Proposal(
            tuple(drafts),
            q,
            tuple(q_index),
            tuple(used),
            tuple(staged),
            sources=tuple(names),
            timings=tuple(timings),
            trees=tuple(trees) if any(t is not None for t in trees) else (),
        )

    def settle(self, caches: SourceCaches, slot: int, output: tuple[int, ...] | None) -> None:
        """Every source's cache follows the published output (None: the round aborted)."""
        for source, cache in zip(self.sources, caches.caches):
            source.settle(cache, slot, output)
