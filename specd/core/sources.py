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

import functools
import time
from collections.abc import Sequence
from dataclasses import replace

import torch

from specd.core.kv import PENDING, KVCache
from specd.core.proposer import DraftContext, ModelProposer, NullProposer, Proposal, Proposer, SourceTiming
from specd.core.record import record
from specd.core.state import RequestState
from specd.core.transfer import to_device
from specd.core.tree import DraftTree
from specd.core.tree_shape import TreeShape


@record
class Offer:
    """A source that can propose for a request this round: its index into the run's sources, its
    identity, a lookup's match length (``Proposer.match_length``; None for a model) and how many
    output tokens a model's cache lacks (``Proposer.behind``: what its first call this round reads)."""

    index: int
    identity: str
    match: int | None = None
    behind: int = 0


@record
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
    also: tuple[int, ...] = ()  # further sources whose children join a static tree's root, in turn


def plan_from(offer: Offer, k: int, shape: TreeShape | None = None) -> Plan:
    """K drafts from ``offer``'s source (``shape``: as that tree, of depth K)."""
    return Plan(offer.index, k, offer.match, shape)


def first_available(offers: Sequence[Offer], k: int) -> Plan:
    """K drafts from the first source on offer (none on offer, or K = 0: a plain target step)."""
    return plan_from(offers[0], k) if offers and k > 0 else Plan(None, 0)


def turn(identity: str, seconds: float, calls: int, proposal: Proposal, rows: int) -> SourceTiming:
    """A source's turn in a round: its ``proposal`` for ``rows`` rows, drafted in ``calls`` calls."""
    return SourceTiming(
        identity,
        seconds,
        calls,
        sum(1 for j in range(rows) if proposal.drafts[j]),
        max((len(proposal.drafts[j]) for j in range(rows)), default=0),
        proposal.first_call_tokens,
        proposal.first_call_seconds,
        proposal.fed_rows,
    )


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


@functools.lru_cache(maxsize=64)
def nothing_proposed(rows: int, vocab: int, dtype: torch.dtype) -> Proposal:
    """The proposal of a round in which no row drafts (one per shape: it is never changed)."""
    empty = ((),) * rows
    return Proposal(
        empty, torch.zeros(0, vocab, dtype=dtype), empty, (0,) * rows, (None,) * rows, sources=(None,) * rows
    )


def remaining_shape(plan: Plan, taken: int) -> TreeShape | None:
    """What of a plan's static tree is left after ``taken`` children of the root (None: nothing)."""
    return plan.shape.ranks_from(taken) if plan.shape is not None else None


class Drafting:
    """A round's drafts as the sources return them, per row: its nodes, each node's q row, the
    proposal uniforms read, the source, what a shared-body draft staged, the tree, the timings."""

    def __init__(self, rows: int):
        self.drafts: list[tuple[int, ...]] = [() for _ in range(rows)]
        self.parents: list[tuple[int, ...] | None] = [None] * rows  # None: a chain
        self.drawn: list[str] = ["sampled"] * rows
        self.q_index: list[tuple[int, ...]] = [() for _ in range(rows)]
        self.used = [0] * rows
        self.names: list[str | None] = [None] * rows
        self.staged: list = [None] * rows
        self.parts: list[torch.Tensor] = []
        self.timings: list[SourceTiming] = []
        self.on_device: list[tuple[list[int], torch.Tensor]] = []  # (rows, their drafts int64[n, K]) never read

    def tree(self, b: int) -> DraftTree:
        parents = self.parents[b]
        if parents is None:
            return DraftTree.chain(self.drafts[b])
        return DraftTree(self.drafts[b], parents, self.drawn[b])

    def roots(self, b: int) -> int:
        return len(self.root_tokens(b))

    def root_tokens(self, b: int) -> tuple[int, ...]:
        tree = self.tree(b)
        return tuple(tree.tokens[n] for n in tree.children.get(-1, ()))

    def after_draws(self, ctx: DraftContext, states, rows) -> DraftContext:
        """``ctx`` whose proposal uniforms start after those the rows' earlier sources read."""
        skip = {states[b].request_id: self.used[b] for b in rows}

        def draws(state, stream: str, n: int) -> list[float]:
            off = skip.get(state.request_id, 0) if stream == "proposal" else 0
            return ctx.draws(state, stream, n + off)[off:]

        return replace(ctx, draws=draws)

    def take(self, source, rows, states, plans, cache, ctx: DraftContext, kw: dict, merge: bool = False) -> None:
        """Run one source's turn for ``rows`` (``kw``: its shapes and exclusions) and keep what it drafted
        (``merge``: beside each row's earlier nodes, as more children of the root)."""
        calls, started = source.forward_calls, time.perf_counter()
        proposal = source.propose([states[b] for b in rows], [plans[b].k for b in rows], cache, ctx, **kw)
        seconds = time.perf_counter() - started
        shift = sum(len(part) for part in self.parts)  # this turn's q rows follow the earlier turns'
        for j, b in enumerate(rows):
            new = proposal.tree(j)
            index = tuple(i + shift if i >= 0 else -1 for i in proposal.q_index[j][: len(new)])
            if merge and len(new):
                tree, at = self.tree(b), len(self.drafts[b])
                self.drafts[b] = tree.tokens + new.tokens
                self.parents[b] = tree.parents + tuple(p + at if p >= 0 else p for p in new.parents)
                self.drawn[b] = "iid" if "iid" in (tree.drawn, new.drawn) else tree.drawn
                self.q_index[b] += index
                self.used[b] += proposal.draws[j]
            elif not merge:
                self.drafts[b], self.q_index[b], self.used[b] = new.tokens, index, proposal.draws[j]
                # a merged tree's tokens are read: only a first turn's chain stays on the device
                self.parents[b] = None if new.is_chain else new.parents
                self.drawn[b] = new.drawn
                self.names[b] = source.identity if new.tokens else None
                if proposal.staged is not None:
                    self.staged[b] = proposal.staged[j]
        self.parts.append(proposal.q)
        if proposal.draft_ids is not None and not merge:
            self.on_device.append((list(rows), proposal.draft_ids))
        self.timings.append(turn(source.identity, seconds, source.forward_calls - calls, proposal, len(rows)))

    def proposal(self, vocab: int | None, dtype: torch.dtype) -> Proposal:
        device = next((part.device for part in self.parts if len(part)), "cpu")  # a model's rows stay there
        empty = [torch.zeros(0, vocab or 0, dtype=dtype)]
        q = torch.cat([part.to(device=device, dtype=dtype) for part in self.parts] or empty)
        trees = tuple(None if p is None else self.tree(b) for b, p in enumerate(self.parents))
        return Proposal(
            tuple(self.drafts),
            q,
            tuple(self.q_index),
            tuple(self.used),
            tuple(self.staged),
            sources=tuple(self.names),
            timings=tuple(self.timings),
            trees=trees if any(t is not None for t in trees) else (),
            draft_ids=self.draft_ids(),
        )

    def draft_ids(self) -> torch.Tensor | None:
        """Every row's drafts as int64[B, K] on the device, where some source's were never read (those
        rows' from the device, the rest's from the host; -1 past a row's drafts). None: all known."""
        if not self.on_device:
            return None
        k = max(len(d) for d in self.drafts)
        device = self.on_device[0][1].device
        known = [list(d) + [PENDING] * (k - len(d)) for d in self.drafts]  # a pending draft is PENDING too
        ids = torch.tensor(known, dtype=torch.int64).to(device, non_blocking=True)
        for rows, part in self.on_device:
            ids[to_device(rows, torch.int64, device), : part.shape[1]] = part
        return ids


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
        shared-body source drafts into ``target_cache`` (the target's cache). A row whose tree takes
        several sources (``Plan.also``) gets the rest of its root's children from each of them in turn,
        never a token an earlier source put there (specd.core.tree_draft: the law of a later source's
        children is its row without them), each source's proposal uniforms after the earlier ones'."""
        if not any(plan.k for plan in plans):  # nobody drafts this round: no source runs
            return nothing_proposed(len(states), self.vocab_size or 0, ctx.dtype)
        acc = Drafting(len(states))
        for index, source in enumerate(self.sources):
            rows = [b for b, plan in enumerate(plans) if plan.source == index and plan.k > 0]
            if rows:
                cache = target_cache if source.shares_target_cache else caches.caches[index]
                shapes = [plans[b].shape for b in rows]
                kw = {"shapes": shapes} if any(shape is not None for shape in shapes) else {}
                acc.take(source, rows, states, plans, cache, ctx, kw)
        for turn in range(max((len(plan.also) for plan in plans), default=0)):
            for index, source in enumerate(self.sources):
                rows = [b for b, plan in enumerate(plans) if len(plan.also) > turn and plan.also[turn] == index]
                rest = {b: remaining_shape(plans[b], acc.roots(b)) for b in rows}
                rows = [b for b in rows if rest[b] is not None]
                if rows:
                    more = {"shapes": [rest[b] for b in rows], "exclude": [acc.root_tokens(b) for b in rows]}
                    shifted = acc.after_draws(ctx, states, rows)
                    acc.take(source, rows, states, plans, caches.caches[index], shifted, more, merge=True)
        return acc.proposal(self.vocab_size, ctx.dtype)

    def resolve(self, caches: SourceCaches, slot: int, drafts: Sequence[int]) -> None:
        """Every source's cache: its rows of drafts never read take the drafts read."""
        for source, cache in zip(self.sources, caches.caches):
            source.resolve(cache, slot, drafts)

    def settle(self, caches: SourceCaches, slot: int, output: tuple[int, ...] | None) -> None:
        """Every source's cache follows the published output (None: the round aborted)."""
        for source, cache in zip(self.sources, caches.caches):
            source.settle(cache, slot, output)
