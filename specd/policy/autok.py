"""-k auto: each request's K, every round, from the speedup ledger, its own acceptance and
the machine's measured costs.

For each request and round K maximizes the ledger's predicted progress per unit time,
E[G(K)] / E[T_round(K)] (``specd.policy.ledger.progress_rates``, the one home of the
formula), over K in 0..k_max, where

- the acceptance profile is the request's own (its ``History``: reach-conditioned
  alpha_j from its published rounds of that source), each position's rate shrunk toward
  the one above it, the first toward the request's pooled rate, and that toward a
  Beta(1, 1) prior: nothing from other
  requests, so a request's K does not depend on its batch-mates. A lookup reports how
  long a match its proposal continues (``Offer.match``, a function of the published
  output), and a long match is a copy where a short one is a guess: its profile is the
  request's own acceptance at matches of that tier (``match_tier``: lengths that double
  share one), shrunk toward ``match_prior(L)`` for a match of length L (1: 0.28; 2: 0.51;
  8: 0.89; fit on the held-out corpus's fit half), so the first long match already drafts
  far and a one-token match (a bigram guess, not a copy) little, and with a greedy target rising along the
  draft, since a copy that has gone on is likelier to go on (``match_profile``; sampled,
  each draft is kept with the target's chance of the copied token, alike along the draft);
- the costs are the run's, measured as it goes (``OnlineCosts``): a target call and a
  draft step as functions of their row counts, from moving medians of recent rounds,
  and the rest of a round (the rule, staging, cache commit) by the rows it verified, a K = 0
  round's as the state cost and what more rows add as part of each K's price. They are facts about the
  machine, shared by every request; ``batch`` (the number of requests the run decodes
  together, a setting of the run) is the B at which they are read;
- a model draft whose cache is behind the output (``Offer.behind``: the tokens emitted in
  rounds it did not draft, or the prompt at its first) reads them in its first call of the
  round, priced as a draft step scaled like a target call over that many rows
  (``OnlineCosts.catch_up``, specd.policy.costs), added to that round's draft time (``CatchingUp``): on a CPU a
  model that joins after a lookup's rounds pays for its catch-up, which a K = 1 round that
  gains a few per cent does not repay;
- in a batch, a request's K is priced with the whole batch's cost: a batched verification
  call is as wide as its longest row, so the B - 1 other requests (counted as drafting
  nothing, each emitting one token) pay for this request's drafts too
  (``progress_rates(..., companions=B - 1)``). At B = 1 this is the plain rate.

K = 0 is a plain target step for that request. A model the request never drafted from is
tried (first, or by a probe) when nothing beats K = 0 only if drafting perfectly for the
rest of the request's budget would save more than the try costs: its draft steps and its
catch-up. A request at K = 0 probes a model (the best
K >= 1) after PROBE_AFTER consecutive K = 0 rounds, the wait doubling after every probe
that did not bring it back, so that it returns when drafting would pay again and a
useless draft costs almost nothing. A lookup is neither tried nor probed: it is priced
every round from the match its offer continues (a new long match drafts at once), and a
round that drafts from it against its price is a row thrown away (on llama.cpp's CPU
backend a row costs nearly half a step; docs/choosing-k.md counts those probes). When the
draft is so slow that even perfect
acceptance would lose, there is nothing to probe for, nor to price (its request's profile
is not read): only every PROBE_AFTER_MAX rounds is one K = 2 round spent re-timing it (the
machine's load may have changed). What depends on the costs alone (each K's round time,
the perfect draft's rates) is read once per cost record, not once per request.
A model's step is timed (``Proposer.step_seconds``) when the sources timed before it cannot
beat K = 0; in a run that also has a lookup, only once a request has gone PROBE_AFTER rounds
in a row at K = 0, so that a request that copies never pays for it.

Exactness: K depends on the request's committed history and on past timings only
(see specd.policy.kpolicy). With sampling, timings decide which uniforms a request
consumes, so another machine (or another load) can give another, equally exact,
sample: the K schedule is recorded per request and ``ScheduleK`` replays it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from specd.core.sources import Offer, Plan, plan_from
from specd.core.state import History, RequestState, match_tier
from specd.core.tree_shape import TreeShape
from specd.errors import UsageError
from specd.policy.costs import CatchingUp, OnlineCosts
from specd.policy.kpolicy import DEFAULT_K_MAX, KPolicy, check_k_max, check_tree_budget
from specd.policy.ledger import best_of, progress_rates, round_times
from specd.policy.profile import AcceptanceProfile
from specd.policy.trees import TreeProfile, best_tree

TIMING_K = 2  # a round of two drafts times a draft step (none timed yet, or re-timing a slow draft)
PROBE_AFTER = 4  # K = 0 rounds before a probe; doubles after each probe that did not pay
PROBE_AFTER_MAX = 128  # also: K = 0 rounds before re-timing a draft too slow to ever pay
PRIOR = (1.0, 1.0)  # Beta(a, b) for a request's pooled acceptance rate
POSITION_STRENGTH = 2.0  # pseudo-rounds pulling alpha_j toward alpha_{j-1} (alpha_1: toward the pooled rate)
MATCH_STRENGTH = 2.0  # pseudo-drafts pulling a match tier's acceptance toward match_prior(L)
# match_prior's odds L^POWER / ODDS: fit by maximum likelihood to the first draft's acceptance after a
# match of length L on the fit half of the held-out corpus (benchmarks/fit_match_prior.py --k 8: benchmarks/
# corpus/fit.jsonl, 60 prompts, SmolLM2, greedy, --draft suffix -k 8; 1,368 drafts: 0.27 at L = 1, 0.53 at 2,
# 0.69 at 3, 0.80 at 4-5, 0.96 past 8). The test half never read it (its held-out figure: docs/choosing-k.md).
MATCH_PRIOR_POWER, MATCH_PRIOR_ODDS = 1.45, 2.6
# Along a greedy copy the draft at position j is kept with (m COPY_MEMORY + COPY_CEILING (j - 1)) /
# (COPY_MEMORY + j - 1): pseudo-drafts of the match's rate m, then each kept draft raising it toward a
# ceiling below 1, since a copy that has gone on still ends about one token in 36 (where the answer
# leaves its source). Both fit jointly by maximum likelihood to the drafts at positions 2..32 of fixed
# K = 32 rounds on the fit half (benchmarks/fit_match_prior.py: -0.3596 per draft, and -0.3822 on the
# test half; the rule before, 1.75 pseudo-drafts rising toward 1 and fit on K = 8 rounds: -0.3722 and
# -0.3910). Rising toward 1, a long copy looked nearly sure to go on, and -k auto drafted it 32 deep.
COPY_MEMORY, COPY_CEILING = 1.25, 0.972
# A tree's later siblings before the request's own tree rounds (request_tree_profile): the r-th child
# (r >= 1), tested where the earlier ones were refused, is kept SIBLING_FIRST r^-SIBLING_POWER times as
# often as a chain's draft, a rank law fit by maximum likelihood to the later siblings' tests on the
# fit half of the held-out corpus (benchmarks/tree_rounds.py --half fit --fit: three drafts, greedy
# and temperature 0.7); RANK_STRENGTH: the prior's weight, in tests.
SIBLING_FIRST, SIBLING_POWER, RANK_STRENGTH = 0.35, 0.95, 2.0
TREE_DEPTH_STRENGTH = 2.0
# A request drafts chains until its own first drafts were tested this many times: before that its rates
# are the Beta(1, 1) prior's 0.5, a draft neither good nor bad, at which a tree's extra siblings look
# cheap where the draft is in fact good (SmolLM2: trees chosen on cold priors lost 16% of tokens per
# round). Chosen on the fit half (benchmarks/tree_rounds.py replay; worst -k auto / chain over the
# three drafts: 0 tests 0.84, 1: 0.97, 4: 0.996, 8: 0.993, 16: 0.988). A tree must beat the best
# chain's predicted rate, and no more: a margin of 5% over it, tried on the fit half, put 5 of 18
# cells below the chain (worst 0.993) against 3 (0.996) without one (both with
# the depths shrunk toward the pooled rate, before _shrunk's prior from the depth above).
TREE_EVIDENCE = 4


def request_profile(history: History, k_max: int) -> AcceptanceProfile:
    """alpha_1..alpha_kmax for one request: (accepted at j + s * alpha_{j-1}) / (reached j + s), with
    alpha_0 = pooled = (accepted + a) / (reached + a + b) over all its positions (``_shrunk``). The
    evidence is a chain's draft j: the first child at depth j (``History.first_children``; a tree
    round's other ranks are a tree's evidence, ``request_tree_profile``)."""
    tested, passed = history.first_children()
    return AcceptanceProfile(_shrunk(tested, passed, _pooled(tested, passed, PRIOR), k_max), False, "request history")


def _pooled(tested, passed, prior: tuple[float, float]) -> float:
    """(passed + a) / (tested + a + b) over every depth: the rate the first position's is shrunk toward."""
    return (sum(passed) + prior[0]) / (sum(tested) + prior[0] + prior[1])


def _shrunk(tested, passed, pooled: float, depth: int, strength: float = POSITION_STRENGTH) -> tuple[float, ...]:
    """Per depth j = 1..depth: (passed_j + s * prior_j) / (tested_j + s), s = ``strength`` pseudo-tests,
    where prior_1 is ``pooled`` and prior_j (j >= 2) is depth j - 1's own estimate. So a depth with few
    tests takes its rate from the depth above it, not from the mean over every depth: a draft's
    reach-conditioned acceptance tends to rise with depth (a round that got deep is one where draft
    and target agree), and the deep positions, the least tested, were pulled down to the pooled rate,
    which priced a chain's tail below its worth against a tree of as many nodes (benchmarks/tree_rounds.py,
    -k auto below the chain, rows free: fit half 3 of 18 cells at 0.996, 0.996, 0.996 with the pooled
    rate, 2 at 0.998, 0.996 with this prior; the test half, read after the choice: 3 at 0.986, 0.996,
    0.998, then 2 at 0.993, 0.996)."""
    out, prior = [], pooled
    for j in range(max(depth, 1)):
        tests, kept = (tested[j] if j < len(tested) else 0), (passed[j] if j < len(passed) else 0)
        prior = (kept + strength * prior) / (tests + strength)
        out.append(prior)
    return tuple(out)


def request_tree_profile(history: History, depth: int, ranks: int) -> TreeProfile:
    """beta[j-1][r] for one request (specd.policy.trees), depths 1..depth, ranks 0..ranks - 1. Rank 0
    is ``request_profile``'s alpha_j. Rank r >= 1 is its tests at depth j shrunk toward depth j - 1's
    estimate, the first depth toward its pooled rate over every depth (``_shrunk``), and that, with
    the weight of RANK_STRENGTH tests, toward the rate of rank r - 1 scaled by the rank law:
    SIBLING_FIRST for rank 1, ((r - 1) / r)^SIBLING_POWER past it. So before its first tree round a
    request's r-th child is priced at SIBLING_FIRST r^-SIBLING_POWER times its chain's pooled rate
    (``sibling_prior``), and its own tree rounds move it from there."""
    tested, passed = history.first_children()
    pooled = _pooled(tested, passed, PRIOR)
    columns = [_shrunk(tested, passed, pooled, depth, TREE_DEPTH_STRENGTH)]
    for r in range(1, ranks):
        at = [row[r] if r < len(row) else (0, 0) for row in history.ranks]
        tests, kept = [n for n, _ in at], [a for _, a in at]
        prior = pooled * sibling_prior(r) / sibling_prior(r - 1)
        pooled = (sum(kept) + RANK_STRENGTH * prior) / (sum(tests) + RANK_STRENGTH)
        columns.append(_shrunk(tests, kept, pooled, depth, TREE_DEPTH_STRENGTH))
    return TreeProfile(tuple(zip(*columns)), "request history")


def sibling_prior(rank: int) -> float:
    """How much less often than a chain's draft a node's child of ``rank`` is kept where its earlier
    siblings were refused, before any evidence: 1 for rank 0, SIBLING_FIRST rank^-SIBLING_POWER past it."""
    return 1.0 if rank == 0 else SIBLING_FIRST * rank**-SIBLING_POWER


def match_prior(match: int) -> float:
    """A lookup draft's acceptance after a match of length L >= 1, before the request's own evidence:
    L^1.45 / (L^1.45 + 2.6) (MATCH_PRIOR_POWER, MATCH_PRIOR_ODDS; 1: 0.28, 2: 0.51, 4: 0.74, 8: 0.89,
    16: 0.96). A longer match is likelier a copy; one token is the lookup's bigram guess, kept about
    one time in four where L / (L + 1) would say even odds."""
    odds = match**MATCH_PRIOR_POWER / MATCH_PRIOR_ODDS
    return odds / (1.0 + odds)


def match_profile(history: History, source: str, match: int, k_max: int, rising: bool) -> AcceptanceProfile:
    """One request's acceptance of ``source``'s drafts when they continue a match of length ``match``.

    The tier's rate m = (accepted + s * match_prior(L)) / (reached + s) over the request's rounds at
    that match tier. ``rising`` (a greedy target, whose copy goes on until its argmax leaves it): a
    copy that has gone on is likelier to go on, so the draft at position j, reached after j - 1
    accepted, is accepted with (m * c + u * (j - 1)) / (c + j - 1): COPY_MEMORY = c pseudo-drafts of
    weight m, and each accepted draft one toward the ceiling u, the tier's rate shrunk toward
    COPY_CEILING instead of match_prior(L) (so a copy that has gone on still ends: without evidence a
    long copy's later drafts are kept about 0.97 of the time; c and COPY_CEILING fit on the held-out
    corpus's fit half). Otherwise (sampled: each draft is kept with the
    target's chance of the copied token) m at every position."""
    reached, accepted = history.matched(source, match_tier(match))
    prior = match_prior(match)
    rate = (accepted + MATCH_STRENGTH * prior) / (reached + MATCH_STRENGTH)
    if not rising:
        return AcceptanceProfile((rate,), True, "request history at this match length")
    ceiling = (accepted + MATCH_STRENGTH * COPY_CEILING) / (reached + MATCH_STRENGTH)  # the request's own, as m
    alphas = tuple((rate * COPY_MEMORY + ceiling * j) / (COPY_MEMORY + j) for j in range(max(k_max, 1)))
    return AcceptanceProfile(alphas, False, "request history at this match length, rising along a copy")


def offer_profile(history: History, offer: Offer, k_max: int, greedy: bool = False) -> AcceptanceProfile:
    """The acceptance profile a request's plan reads for one offer (see the module docstring);
    ``greedy``: the target decodes greedily."""
    if offer.match:
        return match_profile(history, offer.identity, offer.match, k_max, rising=greedy)
    return request_profile(history.of(offer.identity), k_max)


@dataclass(frozen=True)
class Option:
    """One timed source's best K >= 1 for a request this round."""

    offer: Offer
    k: int
    rate: float  # the ledger's progress rate at k (CatchingUp included)
    off: float  # the rate at K = 0 (a plain target step)
    untried: bool  # the request never drafted from this source
    costs: object  # the source's ledger costs, without the catch-up
    extra: float  # the catch-up, in target steps, a K >= 1 round from it would pay
    shape: TreeShape | None = None  # a tree that beats every chain (depth k), or None: the chain of k


def trailing_zeros(schedule: tuple[int, ...]) -> int:
    """How many of the last rounds had K = 0."""
    zeros = 0
    for k in reversed(schedule):
        if k:
            break
        zeros += 1
    return zeros


def probe_due(schedule: tuple[int, ...]) -> bool:
    """After a run of K = 0 rounds: PROBE_AFTER of them, doubled for each earlier probe (a lone
    K > 0 round between runs of K = 0) that did not bring speculation back."""
    zeros = trailing_zeros(schedule)
    if zeros == 0:
        return False
    failed, i = 0, len(schedule) - zeros
    while i >= 2 and schedule[i - 1] > 0 and schedule[i - 2] == 0:
        failed += 1
        i -= 1
        while i > 0 and schedule[i - 1] == 0:
            i -= 1
    return zeros >= min(PROBE_AFTER * 2**failed, PROBE_AFTER_MAX)


class AutoK(KPolicy):
    """The cost-aware policy (see the module docstring). ``costs``: an OnlineCosts (the caller
    subscribes its ``observe`` to the engine's round timings), or any object with
    ``ledger_costs(batch, k_max, source)`` (the oracle passes fixed costs)."""

    def __init__(
        self,
        k_max: int = DEFAULT_K_MAX,
        batch: int = 1,
        costs=None,
        time_draft_step=None,
        greedy: bool = False,
        lookup_first: bool = False,
        tree_budget: int = 0,
    ):
        """``time_draft_step(source index, rows) -> seconds``: times one step of a draft source when the
        costs have none yet (Proposer.step_seconds), so the first decision need not draft to learn
        what drafting costs. It is called only when the sources already timed (in the user's order)
        cannot beat K = 0 this round: timing a model costs its steps, and a lookup that drafts far
        may never need the model at all. ``lookup_first``: the run also drafts from a lookup, so a
        model is timed only once the request has gone PROBE_AFTER rounds in a row at K = 0 (when it
        would probe): a request that copies keeps its lookup busy and never pays for the timing.
        ``tree_budget``: a model source may draft a tree of up to that many nodes where one beats every
        chain (``tree_option``); 0: chains only."""
        check_k_max(k_max)
        check_tree_budget(tree_budget, allow_zero=True)
        if batch < 1:
            raise UsageError(f"batch must be >= 1, got {batch}")
        self.k_max = k_max
        self.batch = batch
        self.costs = costs if costs is not None else OnlineCosts()
        self.time_draft_step = time_draft_step
        self.greedy = greedy  # the target decodes greedily: a lookup's copy rises along the draft (match_profile)
        self.lookup_first = lookup_first
        self.tree_budget = tree_budget
        self._costs_read: dict = {}

    def plan(self, state: RequestState, sources) -> Plan:
        """``sources``: the ``Offer`` of each source that can propose this round, in the user's order."""
        cap = min(self.k_max, state.draft_budget)
        if cap == 0 or not sources or not self.costs.timed_target:  # the run's first round times a target step
            return Plan(None, 0)
        schedule = state.history.k_schedule
        options: list[Option] = []  # per timed source that could pay, in the user's order
        off = 0.0  # the rate at K = 0, read off the first option's costs (read only when there is one)
        hopeless = None  # the first timed source that even perfect drafts could not make pay at these costs
        for offer in sources:
            if not self.costs.timed_draft(offer.identity):
                if self.time_draft_step is None:
                    return plan_from(offer, min(TIMING_K, cap))
                # timing a model costs its steps: only when the sources timed so far cannot beat K = 0
                if options and max(o.rate for o in options) > off:
                    continue
                if self.lookup_first and offer.match is None and trailing_zeros(schedule) < PROBE_AFTER:
                    continue  # a model (no match length) beside a lookup: not until the request would probe
                started = time.perf_counter()
                seconds = self.time_draft_step(offer.index, self.batch)
                self.costs.record_draft_step(offer.identity, self.batch, seconds, time.perf_counter() - started)
            plain = self.costs.ledger_costs(self.batch, max(self.k_max, self.tree_budget), offer.identity)
            if not self.could_pay(plain, cap):  # no profile can beat K = 0 (the perfect one does not)
                hopeless = offer if hopeless is None else hopeless
                continue
            option = self._option(state, offer, cap, plain)
            options.append(option)
            if len(options) == 1:  # K = 0 is a plain target step, whichever source's costs it is read from
                off = option.off
        if options:
            best = max(options, key=lambda o: (o.rate, -o.offer.index))
            if best.rate > off:
                return plan_from(best.offer, best.k, best.shape)
            # Tries and probes are for a model, whose acceptance a request learns only by drafting; a
            # lookup is priced every round from the match its offer continues, with a prior by length.
            triable = [
                o
                for o in options
                if o.offer.match is None and (not o.untried or self.worth_trying(state, o.costs, o.extra, cap))
            ]
            fresh = [o for o in triable if o.untried]  # never tried: its prior is no evidence against it
            if fresh:
                return plan_from(fresh[0].offer, fresh[0].k, fresh[0].shape)
            if triable and probe_due(schedule):
                best = max(triable, key=lambda o: (o.rate, -o.offer.index))
                return plan_from(best.offer, best.k, best.shape)
        if hopeless is not None and trailing_zeros(schedule) >= PROBE_AFTER_MAX:  # the machine's load may have changed
            return plan_from(hopeless, min(TIMING_K, cap))  # re-time that source, not another
        return Plan(None, 0)  # nothing beats K = 0, or a model not yet due to be timed

    def _option(self, state: RequestState, offer: Offer, cap: int, plain) -> Option:
        """One timed source's best K >= 1 this round (``plain``: its ledger costs) and what it would
        make of the request's progress."""
        name = offer.identity
        extra = self.costs.catch_up(name, offer.behind)
        # a model behind the output (after lookup or K = 0 rounds) reads it first, this round
        costs = CatchingUp(plain, extra) if extra > 0 else plain
        times = self._kept(("times", extra, cap), plain, lambda: round_times(costs, range(cap + 1), self.batch))
        profile = offer_profile(state.history, offer, self.k_max, self.greedy)
        rates = progress_rates(profile, costs, range(cap + 1), self.batch, companions=self.batch - 1, times=times)
        k = best_of(rates, range(1, cap + 1))
        untried = not any(state.history.of(name).k_schedule)
        tree = self.tree_option(state.history.of(name), costs, cap, rates[k]) if offer.match is None else None
        if tree is not None and tree[1] > rates[k]:  # only a tree that beats every chain, strictly
            return Option(offer, tree[0].depth, tree[1], rates[0], untried, plain, extra, tree[0])
        return Option(offer, k, rates[k], rates[0], untried, plain, extra)

    def tree_option(self, history: History, costs, cap: int, beat: float = 0.0) -> tuple[TreeShape, float] | None:
        """The fastest tree (not a chain) of at most ``tree_budget`` nodes and depth ``cap`` for a request
        with ``history`` at ``costs`` and its progress rate (specd.policy.trees.best_tree: per node count
        and depth the tree of the largest E[A] under the request's profile by depth and rank, each priced
        with its own draft levels and verification rows); None without a budget, where every best tree
        is a chain, where no tree could reach the rate ``beat``, or before the request's first drafts
        were tested TREE_EVIDENCE times (its own rates, not the prior's, decide whether a tree pays)."""
        if self.tree_budget < 2 or cap < 1:
            return None
        if sum(history.first_children()[0]) < TREE_EVIDENCE:
            return None
        depth = min(cap, self.tree_budget)
        profile = request_tree_profile(history, depth, self.tree_budget)
        return best_tree(profile, costs, self.tree_budget, depth, self.batch, beat)

    def _kept(self, key, costs, compute):
        """``compute()``, kept while ``costs`` is the same record (every request of a round reads the
        same costs): a fact about the costs alone."""
        key = (id(costs), *key)
        kept = self._costs_read.get(key)
        if kept is None or kept[0] is not costs:
            if len(self._costs_read) > 256:
                self._costs_read.clear()
            kept = self._costs_read[key] = (costs, compute())
        return kept[1]

    def _perfect(self, costs, cap: int) -> tuple[int, float, float]:
        """(best K >= 1, its rate, K = 0's rate) if every draft were accepted, at ``costs``."""

        def perfect():
            profile = AcceptanceProfile((1.0,), True, "perfect")
            rates = progress_rates(profile, costs, range(cap + 1), self.batch, companions=self.batch - 1)
            k = best_of(rates, range(1, cap + 1))
            return k, rates[k], rates[0]

        return self._kept(("perfect", cap), costs, perfect)

    def worth_trying(self, state: RequestState, costs, extra: float, cap: int) -> bool:
        """Would drafting with every draft accepted, over the rest of the request's budget, save more
        time than one try costs: its K draft steps and ``extra``, a model's reading of the output its
        cache lacks (``catch_up``)? A lookup costs (almost) nothing to try."""
        k, rate, off = self._perfect(costs, cap)
        if rate <= off:
            return False
        return state.remaining * (1.0 / off - 1.0 / rate) > costs.draft_time(k, self.batch) + extra

    def could_pay(self, costs, cap: int) -> bool:
        """Would any K >= 1 beat K = 0 if every draft were accepted? If not, no acceptance history can
        make drafting pay at these costs, and probing for one is wasted time."""
        _, rate, off = self._perfect(costs, cap)
        return rate > off


def auto_k_over(sources, k_max: int, batch: int, costs, greedy: bool, tree_budget: int = 0, target=None) -> AutoK:
    """-k auto over a run's draft sources (their order is the run's): each source's draft step timed
    by the source itself, a lookup tried first where there is one, and a shared-body source's calls
    priced as the target's (``costs``: the OnlineCosts the engine's observer feeds); ``tree_budget``:
    a model source may draft trees of up to that many nodes (0: chains). ``target``: the target model,
    whose ``fixed_rows_prior`` (where it has one) prices its calls past the row counts timed."""
    fixed = getattr(target, "fixed_rows_prior", None)
    if fixed is not None and hasattr(costs, "fixed_rows"):
        costs.fixed_rows = fixed
    for source in sources:
        if source.shares_target_cache:
            costs.share_body(source.identity)
    return AutoK(
        k_max,
        batch,
        costs,
        lambda index, rows: sources[index].step_seconds(rows),
        greedy=greedy,
        lookup_first=any(source.deterministic for source in sources),
        tree_budget=tree_budget,
    )
