"""What a caller asks for (Request) and the authoritative per-request state (RequestState).

RequestState is the state vector a round reads at its start (S_0) and replaces by
its successor (S_1) only at publication: the output O (prompt + published tokens),
the identities of the committed target K/V rows C, the frontier F (the last
output token while its K/V row does not exist yet), both processor states, the
random-stream counters R and the generation counter V that publication's
compare-and-swap checks.
"""

from __future__ import annotations

from dataclasses import field

import torch

from specd.core.outcome import RoundOutcome, chain_walk
from specd.core.processors import PolicyState
from specd.core.record import record
from specd.core.rng import RngState


@record
class Request:
    """A prompt, a token budget, a seed, and optionally a fixed K for this request alone."""

    request_id: str
    prompt: tuple[int, ...]
    max_new_tokens: int
    seed: int = 0
    k: int | None = None


def positions_reached(k: int, accepted: int) -> int:
    """How many of a round's ``k`` drafts the acceptance test read: draft j is tested only when
    every earlier draft was accepted, so drafts 1..min(accepted + 1, k)."""
    return min(accepted + 1, k)


MATCH_TIERS = 5  # match lengths 1, 2-3, 4-7, 8-15, 16+


def match_tier(match: int) -> int:
    """A lookup's match length (>= 1) to its tier, 0..MATCH_TIERS - 1: lengths that double share one."""
    return min(max(match, 1).bit_length() - 1, MATCH_TIERS - 1)


def tested_ranks(ranks: tuple, walk) -> tuple[tuple[tuple[int, int], ...], ...]:
    """``History.ranks`` once a round's ``walk`` (per level: children tested, whether the last passed)
    is counted in."""
    if not walk:
        return ranks
    out = list(ranks) + [()] * (len(walk) - len(ranks))
    for j, (tested, passed) in enumerate(walk):
        row = list(out[j]) + [(0, 0)] * (tested - len(out[j]))
        for r in range(tested):
            n, a = row[r]
            row[r] = (n + 1, a + (1 if passed and r == tested - 1 else 0))
        out[j] = tuple(row)
    return tuple(out)


@record
class History:
    """What one request's published rounds did (its own acceptance, nobody else's).

    reached[j-1] counts rounds whose draft j was tested (every earlier draft accepted);
    accepted_at[j-1] those that accepted it: alpha_j = accepted_at / reached is the
    reach-conditioned acceptance at position j. k_schedule is the number of drafts
    proposed in each round, in order, and source_schedule the source each round drafted
    from ("" for a round without drafts); ``of(source)`` is the same history restricted to
    the rounds of one source (its own acceptance, for choosing between sources).
    ``at_match`` pools a lookup's rounds by the tier of their match length (``match_tier``):
    ((source, tier), drafts reached, drafts accepted), the evidence ``matched`` reads.
    ``ranks[j-1][r]`` is (tested, passed) for the children of rank r at depth j: a child is tested
    only when the walk stood at its parent and refused its earlier siblings, so passed / tested is
    the chance the r-th child is accepted given the earlier ones refused (rank 0 at depth j: a
    chain's draft j, reach-conditioned like ``reached``/``accepted_at``, which a tree round fills
    with the chain its walk tested: acceptance by depth, whichever rank passed).
    """

    draft_tokens: int = 0
    accepted_tokens: int = 0
    reached: tuple[int, ...] = ()
    accepted_at: tuple[int, ...] = ()
    k_schedule: tuple[int, ...] = ()
    source_schedule: tuple[str, ...] = ()
    solo: str | None = None  # the one source every drafting round so far used (then of(solo) is self)
    by_source: tuple[tuple[str, History], ...] = ()  # once a second source drafted: each source's own
    at_match: tuple[tuple[tuple[str, int], int, int], ...] = ()
    ranks: tuple[tuple[tuple[int, int], ...], ...] = ()

    def add(self, outcome: RoundOutcome) -> History:
        """The history once ``outcome``'s round is published (a tree's round counts as the chain its
        walk tested: acceptance by depth; and by rank in ``ranks``)."""
        if outcome.draft_parents is None:
            return self.after(outcome.k, outcome.accepted, outcome.source, outcome.match)
        return self.after(outcome.levels, outcome.accepted, outcome.source, outcome.match, outcome.walk)

    def after(self, k: int, accepted: int, source: str | None = None, match: int | None = None, walk=None) -> History:
        """The history once a round with ``k`` drafts from ``source`` (a lookup: at match length
        ``match``) accepted ``accepted`` of them; ``walk``: a tree round's tests by level
        (``RoundOutcome.walk``; None: a chain's)."""
        if not k:  # a round without drafts (most of target-only's and -k auto's): only the schedules grow
            schedules = {"k_schedule": (*self.k_schedule, 0), "source_schedule": (*self.source_schedule, "")}
            return History(**{**self.__dict__, **schedules})  # RequestState.evolve's copy, every field kept
        width = max(len(self.reached), k)
        reached = list(self.reached) + [0] * (width - len(self.reached))
        accepted_at = list(self.accepted_at) + [0] * (width - len(self.accepted_at))
        for j in range(positions_reached(k, accepted)):
            reached[j] += 1
        for j in range(accepted):
            accepted_at[j] += 1
        solo, by_source = self.solo, self.by_source
        if source and k:
            if solo is None and not by_source:
                solo = source  # the first source to draft
            elif source != solo or by_source:
                if solo is not None:  # a second source: from now on every source keeps its own
                    by_source, solo = ((solo, self),), None
                mine = self.of(source).after(k, accepted, walk=walk)
                by_source = tuple((name, h) for name, h in by_source if name != source) + ((source, mine),)
        at_match = self.at_match
        if source and k and match:
            key = (source, match_tier(match))
            reached_n, accepted_n = self.matched(*key)
            entry = (key, reached_n + positions_reached(k, accepted), accepted_n + accepted)
            at_match = tuple(e for e in at_match if e[0] != key) + (entry,)
        if walk is None:  # a chain: its draft j is rank 0 at depth j
            walk = chain_walk(k, accepted)
        return History(
            self.draft_tokens + k,
            self.accepted_tokens + accepted,
            tuple(reached),
            tuple(accepted_at),
            (*self.k_schedule, k),
            (*self.source_schedule, source if (source and k) else ""),
            solo,
            by_source,
            at_match,
            tested_ranks(self.ranks, walk),
        )

    def first_children(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(tested, passed) per depth for the children of rank 0: a chain's draft j, counted in a tree
        round's walk too (``reached``/``accepted_at`` count a tree round's depth, whichever rank
        passed). For a request that drafted only chains, ``(reached, accepted_at)``."""
        return tuple(row[0][0] if row else 0 for row in self.ranks), tuple(
            row[0][1] if row else 0 for row in self.ranks
        )

    def matched(self, source: str, tier: int) -> tuple[int, int]:
        """(drafts reached, drafts accepted) over the rounds of ``source`` at match tier ``tier``."""
        return next(((r, a) for key, r, a in self.at_match if key == (source, tier)), (0, 0))

    def of(self, source: str) -> History:
        """The rounds that drafted from ``source`` only."""
        if source == self.solo:
            return self
        return next((h for name, h in self.by_source if name == source), History())

    def as_dict(self) -> dict:
        return {
            "rounds": len(self.k_schedule),
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "reached_per_position": list(self.reached),
            "accepted_per_position": list(self.accepted_at),
            "k_schedule": list(self.k_schedule),
            "source_schedule": list(self.source_schedule),
        }


@record
class RequestState:
    request_id: str
    slot: int  # the request's row in every cache
    prompt_len: int
    output: tuple[int, ...]  # O: prompt + published tokens
    cache_tokens: tuple[int, ...]  # C: identities of committed target K/V rows
    target_proc: PolicyState  # processor state of the target policy at the published output
    draft_proc: PolicyState  # processor state of the draft policy at the published output
    rng: RngState  # R: stream counters
    generation: int  # V: bumped by every publication
    max_new_tokens: int
    k: int | None = None  # a fixed K for this request (None: the engine's K policy decides)
    rounds: int = 0  # published rounds
    finish_reason: str | None = None  # "eos" | "length" | "stop_string" | None
    history: History = History()  # this request's own acceptance so far
    # Layout state: raw p_1 retained from the call that materialized the frontier.
    retained_logits: torch.Tensor | None = field(default=None, compare=False, repr=False)
    # int64[1] on the device: the output's last token where ``output`` holds it as PENDING (specd.core.kv):
    # a provisional state a round is launched from before the round that emits that token is read.
    pending_ids: torch.Tensor | None = field(default=None, compare=False, repr=False)

    def evolve(self, **changes) -> RequestState:
        """A copy with ``changes`` (every field is an argument of the constructor, so this is
        dataclasses.replace without its per-call checks: a round makes one per request)."""
        return RequestState(**{**self.__dict__, **changes})

    @property
    def generated(self) -> int:
        return len(self.output) - self.prompt_len

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - self.generated

    @property
    def draft_budget(self) -> int:
        """The most drafts a round may ask for: the last token of a budget is always a terminal
        token (correction or bonus), so remaining - 1."""
        return max(0, self.remaining - 1)

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
