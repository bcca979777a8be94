"""-k auto: the policy's choices from a request's history and the costs, its probes, its
exactness (any K it picks keeps the law), and its independence from batch-mates."""

from types import SimpleNamespace

import pytest

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.model import RowInput
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer, SourceTiming
from specd.core.records import RoundTiming
from specd.core.sources import Offer, Plan
from specd.core.state import History, Request, RequestState
from specd.core.suffix import SuffixProposer
from specd.errors import UsageError
from specd.oracles.engine.exact import Enumerator
from specd.oracles.record import max_abs_diff
from specd.oracles.reference import target_joint
from specd.policy import autok
from specd.policy.autok import (
    COPY_CEILING,
    COPY_MEMORY,
    PROBE_AFTER,
    PROBE_AFTER_MAX,
    AutoK,
    match_prior,
    match_profile,
    probe_due,
    request_profile,
)
from specd.policy.costs import CatchingUp, FixedCosts, OnlineCosts
from specd.policy.ledger import CostModel, best_k, progress_rate, round_time
from specd.sweeps.ledger import ledger_row
from tests.helpers import rig

CHEAP = FixedCosts(CostModel(draft_cost=0.05, row_cost=0.02, draft_row_cost=0.0, state_cost=0.01))
USELESS = FixedCosts(CostModel(draft_cost=2.0, row_cost=0.1, draft_row_cost=0.0, state_cost=0.01))


DRAFT = [Offer(0, "d")]  # the one source of these tests (a model: no match length)


def choose(policy, state, sources=DRAFT) -> int:
    """The K a policy plans for a request whose sources are ``sources``."""
    return policy.plan(state, list(sources)).k


class State:
    """What AutoK reads of a request: its history, remaining budget and output so far."""

    def __init__(self, history=History(), remaining=100, output=(1, 2)):
        self.history, self.remaining, self.output = history, remaining, output

    draft_budget = RequestState.draft_budget  # the real rule, read off ``remaining``


def timing(source=None, **changes):
    """A round's timing; ``source``: the draft source's turn as SourceTiming fields (none: K = 0)."""
    base = dict(batch=1, draft_seconds=0.0, draft_steps=0, sources=(), verify_seconds=0.04, verify_rows=1)
    if source is not None:
        turn = SourceTiming(**{"source": "d", "rows": 1, "first_tokens": 1, "first_seconds": 0.0, **source})
        base.update(draft_seconds=turn.seconds, draft_steps=turn.steps, sources=(turn,))
    return RoundTiming(**{**base, "other_seconds": 0.001, **changes})


def history(*rounds, source="d"):
    h = History()
    for k, accepted in rounds:
        h = h.after(k, accepted, source)
    return h


def test_the_choice_maximizes_the_ledgers_progress_per_time():
    policy = AutoK(8, 1, CHEAP)
    h = history(*[(4, 4)] * 10)  # every draft accepted so far
    k = choose(policy, State(h))
    profile = request_profile(h, 8)
    rates = [progress_rate(profile, CHEAP.model, j) for j in range(9)]
    assert k == max(range(9), key=lambda j: rates[j]) and k >= 6
    # the same rate as the ledger's own row (one formula): E[G] / E[T_round]
    row = ledger_row(profile, CHEAP.model, k)
    assert rates[k] == pytest.approx(row.expected_progress / row.round_time)


def test_rejections_lower_k_and_a_hopeless_draft_goes_to_zero():
    good, bad = history(*[(4, 4)] * 6), history(*[(4, 0)] * 6)
    policy = AutoK(8, 1, CHEAP)
    assert choose(policy, State(bad)) < choose(policy, State(good))
    assert choose(AutoK(8, 1, USELESS), State(good)) == 0  # a draft step costing 2 target steps never pays


def test_the_budget_caps_k():
    assert choose(AutoK(8, 1, CHEAP), State(history(*[(4, 4)] * 6), remaining=3)) <= 2
    assert choose(AutoK(8, 1, CHEAP), State(remaining=1)) == 0


def test_probes_come_back_after_zero_runs_with_a_doubling_wait():
    assert not probe_due((1,) + (0,) * (PROBE_AFTER - 1)) and probe_due((1,) + (0,) * PROBE_AFTER)
    failed_once = (1,) + (0,) * PROBE_AFTER + (1,) + (0,) * PROBE_AFTER
    assert not probe_due(failed_once) and probe_due((1,) + (0,) * PROBE_AFTER + (1,) + (0,) * (2 * PROBE_AFTER))
    paid = (0,) * PROBE_AFTER + (1, 2, 3) + (0,) * PROBE_AFTER  # the probe brought speculation back
    assert probe_due(paid)
    # a policy at K = 0 on a draft that could pay probes; one that cannot pay even at alpha = 1 does
    # not, except a re-timing round every PROBE_AFTER_MAX rounds
    mid = FixedCosts(CostModel(draft_cost=0.5, row_cost=0.1, draft_row_cost=0.0, state_cost=0.01))
    rejected = history(*([(1, 0)] * 3 + [(0, 0)] * PROBE_AFTER))
    assert choose(AutoK(8, 1, mid), State(rejected)) >= 1
    assert choose(AutoK(8, 1, USELESS), State(rejected)) == 0
    long_off = history(*([(1, 0)] * 3 + [(0, 0)] * PROBE_AFTER_MAX))
    assert choose(AutoK(8, 1, USELESS), State(long_off)) == 2


def test_a_lookup_drafts_when_its_match_pays_and_is_never_tried_or_probed_otherwise():
    """A lookup is priced every round from the match its offer continues: at rows this dear a
    one-token match (match_prior 0.28) never drafts, not as a first try nor as a probe however long
    the request has been at K = 0, where a model in the same place is tried; a long match drafts."""
    dear_rows = FixedCosts(CostModel(draft_cost=0.0, row_cost=0.45, draft_row_cost=0.0, state_cost=0.07))
    policy = AutoK(8, 1, dear_rows)
    for zeros in (0, PROBE_AFTER, 2 * PROBE_AFTER, PROBE_AFTER_MAX):
        state = State(history(*[(0, 0)] * zeros))
        assert choose(policy, state, [Offer(0, "s", match=1)]) == 0
        assert choose(policy, state, [Offer(0, "d")]) >= 1  # never tried: its prior is no evidence
    assert choose(policy, State(), [Offer(0, "s", match=12)]) >= 1


def test_a_source_that_cannot_pay_at_alpha_one_is_not_priced(monkeypatch):
    read = []
    monkeypatch.setattr(
        autok, "offer_profile", lambda h, offer, *a, **kw: read.append(offer.identity) or request_profile(h, 8)
    )
    costs = FixedCosts(CHEAP.model, per_source={"slow": USELESS.model})
    sources = [Offer(0, "slow"), Offer(1, "d")]
    for rounds in (PROBE_AFTER, PROBE_AFTER_MAX):
        read.clear()
        plan = AutoK(8, 1, costs).plan(State(history(*([(1, 0)] * 3 + [(0, 0)] * rounds))), sources)
        assert read == ["d"] and plan.source == 1  # the cheap draft probes; the slow one is never read
    # alone, the slow source is re-timed every PROBE_AFTER_MAX rounds, and not priced before
    read.clear()
    assert AutoK(8, 1, costs).plan(State(history(*([(0, 0)] * PROBE_AFTER_MAX))), sources[:1]) == Plan(0, 2)
    assert AutoK(8, 1, costs).plan(State(history(*([(0, 0)] * PROBE_AFTER))), sources[:1]) == Plan(None, 0)
    assert read == []
    # the re-timing round drafts from the slow source, not from one listed before it that is not worth
    # a try this late in the request
    mid = FixedCosts(CostModel(draft_cost=0.5, row_cost=0.1, draft_row_cost=0.0, state_cost=0.01))
    costs = FixedCosts(mid.model, per_source={"slow": USELESS.model})
    late = State(history(*([(0, 0)] * PROBE_AFTER_MAX)), remaining=6)
    assert AutoK(8, 1, costs).plan(late, [Offer(0, "d")]) == Plan(None, 0)
    assert AutoK(8, 1, costs).plan(late, [Offer(0, "d"), Offer(1, "slow")]) == Plan(1, 2)


def test_a_fresh_request_drafts_once_before_its_prior_can_rule_drafting_out():
    mid = FixedCosts(CostModel(draft_cost=0.6, row_cost=0.06, draft_row_cost=0.0, state_cost=0.03))
    policy = AutoK(8, 1, mid)
    assert progress_rate(request_profile(History(), 8), mid.model, 0) > max(
        progress_rate(request_profile(History(), 8), mid.model, k) for k in range(1, 9)
    )  # the Beta(1, 1) prior alone says K = 0 ...
    assert choose(policy, State()) >= 1  # ... but a request that never drafted tries


def test_online_costs_time_the_first_round_plainly_then_the_draft_once():
    costs = OnlineCosts()
    timed = []
    policy = AutoK(4, 1, costs, time_draft_step=lambda source, rows: timed.append(rows) or 0.02)
    assert choose(policy, State()) == 0 and not timed  # nothing measured: a plain target step
    costs.observe(timing())
    k = choose(policy, State())
    assert timed == [1] and costs.timed_draft("d") and k >= 1
    choose(policy, State())
    assert timed == [1]  # timed once, then from the rounds


def lookup_and_model(**options):
    """(AutoK over a timed target whose source 0 is a lookup and 1 a model, the source indices it timed)."""
    costs = OnlineCosts()
    costs.observe(timing(verify_seconds=0.040, verify_rows=1))
    costs.observe(timing(verify_seconds=0.044, verify_rows=2))
    timed = []

    def time_step(index, rows):
        timed.append(index)
        return 0.0 if index == 0 else 0.03

    return AutoK(8, 1, costs, time_draft_step=time_step, **options), timed


def test_a_model_is_timed_only_when_the_sources_timed_before_it_cannot_beat_k0():
    policy, timed = lookup_and_model()
    long_match = [Offer(0, "suffix", 16), Offer(1, "d", None, 2)]
    assert policy.plan(State(), long_match).source == 0
    assert timed == [0]  # the lookup drafts far: the model's step was not timed
    weak = History()
    for _ in range(20):  # the lookup's one-token matches fail here
        weak = weak.after(2, 0, "suffix", 1)
    policy.plan(State(weak), [Offer(0, "suffix", 1), Offer(1, "d", None, 2)])
    assert timed == [0, 1]  # nothing timed beats K = 0: now the model is timed


def test_a_catch_up_call_is_not_a_draft_step():
    costs = OnlineCosts()
    # first call fed 30 tokens (the draft caught up on its prompt): one step only, no sample
    costs.observe(timing(dict(seconds=0.5, steps=1, first_tokens=30, first_seconds=0.5, max_k=1), verify_rows=2))
    assert not costs.timed_draft("d")
    # two steps: the second is an ordinary step
    costs.observe(timing(dict(seconds=0.56, steps=2, first_tokens=30, first_seconds=0.5, max_k=2), verify_rows=3))
    assert list(costs.draft["d"]) == [(1, pytest.approx(0.06))]
    # ordinary first call (two tokens): both steps count
    costs.observe(timing(dict(seconds=0.08, steps=2, first_tokens=2, first_seconds=0.04, max_k=2), verify_rows=3))
    assert costs.draft["d"][-1] == (1, pytest.approx(0.04))
    # a lookup (no model steps): its time per proposed token
    costs.observe(timing(dict(source="suffix", seconds=0.0004, steps=0, max_k=4), verify_rows=5))
    assert list(costs.draft["suffix"]) == [(1, pytest.approx(0.0001))]


def test_online_costs_follow_the_target_call_by_row_count_piece_by_piece():
    costs = OnlineCosts()
    step = dict(seconds=0.01, steps=1, max_k=1)
    for rows, seconds in [(1, 0.010), (1, 0.011), (2, 0.016), (5, 0.017), (5, 0.018), (9, 0.021)]:
        costs.observe(timing(step, verify_seconds=seconds, verify_rows=rows))
    ledger = costs.ledger_costs(1, 8, "d")
    assert ledger.verify[(0, 1)] == pytest.approx(1.0)  # units: a one-row call (its median, 0.0105)
    assert ledger.verify[(1, 1)] == pytest.approx(0.016 / 0.0105)
    # between the row counts seen: piecewise linear
    assert ledger.verify[(3, 1)] == pytest.approx((0.016 + (0.0175 - 0.016) * 2 / 3) / 0.0105)
    assert ledger.verify[(8, 1)] == pytest.approx(0.021 / 0.0105)
    assert costs.ledger_costs(1, 8, "d") is ledger  # read once per round


def test_past_the_row_counts_seen_a_call_is_priced_by_its_fixed_part_not_by_a_line():
    costs = OnlineCosts()
    for rows, seconds in [(1, 0.010), (2, 0.013)]:  # only K = 0 and K = 1 tried so far
        costs.observe(timing(dict(seconds=0.01, steps=1, max_k=1), verify_seconds=seconds, verify_rows=rows))
    ledger = costs.ledger_costs(1, 8, "d")
    # a line through (1, 2) would say 9 rows cost 3.4 one-row calls; anchored at the last row count seen,
    # with a fixed part of 16 rows: 1.3 x 25 / 18
    assert ledger.verify[(8, 1)] == pytest.approx(1.3 * 25 / 18)


def test_a_shared_body_verification_is_priced_by_its_own_curve_not_the_target_calls():
    """A shared-body draft verifies with a body step of one row and the full head over its K + 1
    staged rows: such rounds feed their own curve; until one is timed, a one-row target call per
    request prices it; a round where only some rows were staged feeds neither curve."""
    costs = OnlineCosts()
    costs.share_body("s")
    step = dict(source="s", seconds=0.005, steps=1, max_k=1)
    costs.observe(timing(verify_seconds=0.010, verify_rows=1))  # K = 0: an ordinary target call
    costs.observe(timing(step, verify_seconds=0.010))  # times the draft step (an ordinary 1-row verification)
    before = costs.ledger_costs(1, 4, "s")
    assert all(before.verify[(k, 1)] == pytest.approx(1.0) for k in range(5))  # the prior: one target row
    costs.observe(timing(step, verify_seconds=0.012, verify_rows=3, verify_source="s"))
    costs.observe(timing(step, verify_seconds=0.030, verify_rows=9, verify_source="mixed"))
    after = costs.ledger_costs(1, 4, "s")
    assert after.verify[(2, 1)] == pytest.approx(0.012 / 0.010)
    assert list(costs.target) == [(1, 0.010), (1, 0.010)]  # neither shared round joined the target curve
    assert costs.ledger_costs(1, 4, "d") is None  # another source: no step timed yet


def test_the_source_with_the_best_rate_is_chosen_and_each_source_keeps_its_own_acceptance():
    cheap_lookup = CostModel(draft_cost=0.001, row_cost=0.02, draft_row_cost=0.0, state_cost=0.01)
    costs = FixedCosts(CHEAP.model, {"lookup": cheap_lookup})
    sources = [Offer(0, "lookup"), Offer(1, "model")]
    policy = AutoK(8, 1, costs)
    # the lookup accepts everything, the model nothing: the lookup
    h = history(*[(4, 4)] * 6, source="lookup")
    for k, a in [(4, 0)] * 6:
        h = h.after(k, a, "model")
    assert policy.plan(State(h), sources).source == 0
    # the other way round: the model (each source's own history decides, not the pooled one)
    h = history(*[(4, 0)] * 6, source="lookup")
    for k, a in [(4, 4)] * 6:
        h = h.after(k, a, "model")
    assert policy.plan(State(h), sources).source == 1
    # a lookup with no match this round is not offered: only the model is
    assert policy.plan(State(h), [Offer(1, "model")]).source == 1
    assert policy.plan(State(h), []) == Plan(None, 0)


# A free lookup on a CPU-like target: each further verified row costs a fifth of a step.
FREE_LOOKUP = FixedCosts(CostModel(draft_cost=0.0, row_cost=0.2, draft_row_cost=0.0, state_cost=0.01))


def test_a_lookup_drafts_far_on_a_long_match_and_little_on_a_short_one():
    policy = AutoK(8, 1, FREE_LOOKUP)
    ks = [choose(policy, State(), [Offer(0, "suffix", n)]) for n in (1, 4, 8, 16)]
    assert ks == sorted(ks) and ks[0] < ks[1] < ks[-1] == 8  # no evidence yet: the prior, rising with L
    profile = match_profile(History(), "suffix", 16, 8, rising=True)
    assert profile.alpha(1) == pytest.approx(match_prior(16)) and match_prior(16) > 0.95
    assert choose(policy, State(), [Offer(0, "suffix")]) == best_k(
        request_profile(History(), 8), FREE_LOOKUP.model, range(1, 9)
    )  # a source without a match length: the request's plain profile


def test_a_longer_match_has_the_higher_prior_and_one_token_is_a_guess():
    priors = [match_prior(n) for n in range(1, 40)]
    assert all(0 < a < b < 1 for a, b in zip(priors, priors[1:]))
    # the measured first-draft acceptance it was fit to (21 benchmark prompts): 0.18 at 1, 0.61 at 2,
    # 0.84 at 5, 0.95 past 16
    assert match_prior(1) == pytest.approx(0.27, abs=0.01) and match_prior(1) < 0.5
    assert [round(match_prior(n), 2) for n in (2, 5, 16)] == [0.51, 0.80, 0.96]


def test_a_copy_that_has_gone_on_is_likelier_to_go_on():
    rate = match_prior(1)  # a match of 1 token, no evidence: the bigram guess's prior
    profile = match_profile(History(), "suffix", 1, 8, rising=True)
    alphas = [profile.alpha(j) for j in range(1, 9)]
    assert alphas[0] == pytest.approx(rate)
    assert alphas == sorted(alphas) and alphas[-1] < 1.0  # rising along the draft, never certain
    c, u = COPY_MEMORY, COPY_CEILING
    assert alphas[3] == pytest.approx((rate * c + 3 * u) / (c + 3))  # 3 accepted drafts before position 4
    # however long a copy has gone on, its drafts tend to COPY_CEILING, not to certainty: copies end
    deep = match_profile(History(), "suffix", 40, 32, rising=True)
    assert COPY_CEILING < 1.0 and deep.alpha(32) == pytest.approx(COPY_CEILING, abs=0.001)
    certain = History()
    for _ in range(40):
        certain = certain.after(8, 8, "suffix", match=16)
    assert match_profile(certain, "suffix", 16, 8, rising=True).alpha(8) == pytest.approx(
        match_profile(certain, "suffix", 16, 8, rising=True).alpha(1), abs=0.01
    )  # a tier that always copied stays near its rate
    sampled = match_profile(History(), "suffix", 1, 8, rising=False)  # each draft kept with p's chance
    assert [sampled.alpha(j) for j in range(1, 9)] == [rate] * 8
    greedy_k = choose(AutoK(8, 1, FREE_LOOKUP, greedy=True), State(), [Offer(0, "suffix", 4)])
    assert greedy_k > choose(AutoK(8, 1, FREE_LOOKUP), State(), [Offer(0, "suffix", 4)])


def test_a_requests_acceptance_at_a_match_tier_moves_only_that_tier():
    policy = AutoK(8, 1, FREE_LOOKUP)
    h = History()
    for _ in range(6):  # long matches that did not copy
        h = h.after(8, 0, "suffix", match=20)
    assert match_profile(h, "suffix", 20, 8, rising=True).alpha(1) == pytest.approx((0 + 2 * match_prior(20)) / (6 + 2))
    assert choose(policy, State(h), [Offer(0, "suffix", 20)]) <= 1
    assert choose(policy, State(h), [Offer(0, "suffix", 5)]) == choose(policy, State(), [Offer(0, "suffix", 5)])
    for _ in range(6):  # short matches that did
        h = h.after(4, 4, "suffix", match=1)
    assert choose(policy, State(h), [Offer(0, "suffix", 1)]) > choose(policy, State(), [Offer(0, "suffix", 1)])


def slow_draft_costs(step: float) -> OnlineCosts:
    """Online costs with a target call timed at 1 and 2 rows and a model draft step of ``step`` s."""
    costs = OnlineCosts()
    costs.observe(timing(verify_seconds=0.040, verify_rows=1))
    costs.observe(timing(verify_seconds=0.044, verify_rows=2))
    costs.record_draft_step("d", 1, step)
    return costs


def test_a_fresh_model_draft_is_tried_only_if_perfect_drafts_would_repay_the_try():
    costs = slow_draft_costs(0.030)  # 0.75 of a target step: pays a little, if every draft is accepted
    policy = AutoK(8, 1, costs)
    assert policy.could_pay(costs.ledger_costs(1, 8, "d"), 8)
    fresh = [Offer(0, "d", None, 100)]  # a first try reads the whole prompt into the draft's cache
    assert costs.catch_up("d", 100) > costs.catch_up("d", 10) > 0 == costs.catch_up("d", 2)
    assert choose(policy, State(remaining=20), fresh) == 0  # 20 tokens cannot repay it
    assert choose(policy, State(remaining=5000), fresh) >= 1  # 5000 can
    waited = history(*[(0, 0)] * PROBE_AFTER)  # a probe is due: it is no back door for the same try
    assert probe_due(waited.k_schedule) and choose(policy, State(waited, remaining=20), fresh) == 0


def test_a_model_behind_the_output_pays_for_reading_it_in_that_round():
    """The same model, the same history: an ordinary round drafts, but one whose first call must
    first read 60 tokens emitted without it (a lookup's rounds) does not, when the catch-up costs
    more than the round gains."""
    costs = slow_draft_costs(0.030)
    policy = AutoK(8, 1, costs)
    h = history(*[(4, 3)] * 4)  # it drafts and is accepted fairly well
    current = choose(policy, State(h), [Offer(0, "d", None, 2)])
    assert current >= 1
    extra = costs.catch_up("d", 60)
    assert extra > 0
    assert choose(policy, State(h), [Offer(0, "d", None, 60)]) == 0
    behind = CatchingUp(costs.ledger_costs(1, 8, "d"), extra)
    plain = costs.ledger_costs(1, 8, "d")
    assert behind.draft_time(0, 1) == plain.draft_time(0, 1) == 0
    assert behind.draft_time(3, 1) == pytest.approx(plain.draft_time(3, 1) + extra)


def test_a_model_is_behind_by_what_its_cache_lacks_and_a_lookup_never_is(hf_pair):
    _, draft = hf_pair
    state = SimpleNamespace(slot=0, output=(3, 4, 5))
    model = ModelProposer(draft, SamplingPolicy.build(temperature=0))
    cache = model.new_cache()
    cache.open(0)
    assert model.behind(state, cache) == 3  # an empty cache lacks the whole prompt
    model.forward(cache, [RowInput(0, (3, 4), (0, 1))], {})
    model.settle(cache, 0, (3, 4, 5))  # its rows of 3 and 4 are kept
    assert model.behind(state, cache) == 1
    assert model.behind(SimpleNamespace(slot=0, output=(3, 9, 5, 6)), cache) == 4  # diverged: all of it
    assert SuffixProposer(draft.vocab_size).behind(state, None) == 0


def test_a_draft_timed_inside_a_round_is_not_charged_to_that_round():
    costs = OnlineCosts()
    costs.record_draft_step("d", 1, 0.02, spent=0.05)  # -k auto timed it while planning the round
    costs.observe(timing(other_seconds=0.052))
    costs.observe(timing(other_seconds=0.002))
    assert [seconds for _, seconds in costs.other] == [pytest.approx(0.002), pytest.approx(0.002)]


def test_the_rest_of_a_round_that_verified_more_rows_is_charged_to_its_k():
    """A round that drafted does more of its own work (the rule over its rows, staging) than a K = 0
    round: the state cost is a K = 0 round's rest, and each K's verification carries what its rows
    add to it, read off the rest's own curve (flat past the row counts seen)."""
    costs = OnlineCosts()
    step = dict(seconds=0.0001, steps=0, max_k=1)
    for rows, rest in [(1, 0.001), (1, 0.001), (2, 0.0016), (5, 0.0019)]:
        costs.observe(timing(step, verify_seconds=0.010, verify_rows=rows, other_seconds=rest))
    ledger = costs.ledger_costs(1, 8, "d")
    assert ledger.state_cost == pytest.approx(0.1)  # units: the one-row call's 0.010 s
    assert ledger.verify[(0, 1)] == pytest.approx(1.0)
    assert ledger.verify[(1, 1)] == pytest.approx(1.0 + 0.06)
    assert ledger.verify[(2, 1)] == pytest.approx(1.0 + 0.07)  # between 2 and 5 rows: linear
    assert ledger.verify[(8, 1)] == pytest.approx(25 / 21 + 0.09)  # the call by its fixed part; the rest as at 5
    assert round_time(ledger, 1) - round_time(ledger, 0) == pytest.approx(0.01 + 0.06)  # its draft step and rest


@pytest.mark.parametrize("k_max", [0, 65])
def test_k_max_out_of_range_is_refused(k_max):
    with pytest.raises(UsageError, match="--k-max"):
        AutoK(k_max)


@pytest.mark.parametrize("layout", ["replay_frontier", "retained_frontier"])
def test_auto_k_and_draft_stop_keep_the_target_law_over_rounds(layout):
    """Exact enumeration, K from each path's own acceptance history and drafts cut by the draft's
    confidence: the joint over the horizon equals the target's."""
    r = rig(3, 3, layout=layout)
    costs = FixedCosts(CostModel(draft_cost=0.15, row_cost=0.05, draft_row_cost=0.0, state_cost=0.02))
    auto = r.but(draft_stop=0.6, k_policy_factory=lambda x: AutoK(3, 1, costs))
    enumerator = Enumerator(auto, 4, "rounds")
    assert max_abs_diff(target_joint(r, 4), enumerator.joint()) <= 1e-12
    assert len(enumerator.k_seen) >= 2  # K really varied


def test_greedy_output_does_not_depend_on_k(hf_pair):

    greedy = SamplingPolicy.build(temperature=0)
    target, draft = hf_pair
    requests = [Request("a", (3, 4), 20), Request("b", (5, 6, 7, 8), 20), Request("c", (9,), 16)]
    expected = SpeculativeEngine.baseline(target, greedy).run(requests).new_tokens()
    for costs in (CHEAP, USELESS, OnlineCosts()):
        proposer = ModelProposer(draft, greedy, draft_stop=0.3)
        observers = (costs.observe,) if isinstance(costs, OnlineCosts) else ()  # timings reach online costs
        engine = SpeculativeEngine(
            target, proposer, greedy, EngineConfig(), k_policy=AutoK(6, 3, costs), observers=observers
        )
        assert engine.run(requests).new_tokens() == expected
        alone = [engine.run([r]).new_tokens()[0] for r in requests]
        assert alone == expected


def test_a_requests_sampled_tokens_do_not_depend_on_its_batch_mates(hf_pair):
    """Given the same costs, K is the request's own business: in a batch or alone, same draws, same tokens."""

    sampler = SamplingPolicy.build(temperature=1.0)
    target, draft = hf_pair
    requests = [Request(f"r{i}", (3 + i, 4, 5 + 2 * i), 24, seed=7) for i in range(5)]
    costs = FixedCosts(CostModel(draft_cost=0.2, row_cost=0.05, draft_row_cost=0.0, state_cost=0.01))

    def engine():
        return SpeculativeEngine(
            target, ModelProposer(draft, sampler, draft_stop=0.2), sampler, EngineConfig(), k_policy=AutoK(6, 1, costs)
        )

    together = engine().run(requests)
    alone = [engine().run([r]) for r in requests]
    assert together.new_tokens() == [a.new_tokens()[0] for a in alone]
    schedules = [s.history.k_schedule for s in together.states]
    assert schedules == [a.states[0].history.k_schedule for a in alone]
    assert len({k for s in schedules for k in s}) >= 2  # the schedule really moved


def test_beside_a_lookup_a_model_is_timed_only_when_the_request_would_probe():
    policy, timed = lookup_and_model(lookup_first=True)
    history = History()
    for _ in range(20):  # the lookup's one-token matches fail
        history = history.after(2, 0, "suffix", 1)
    weak = [Offer(0, "suffix", 1), Offer(1, "d", None, 2)]
    for _ in range(PROBE_AFTER):
        plan = policy.plan(State(history), weak)
        assert plan.k == 0 and timed == [0]  # the lookup timed at once; not due yet: the model untimed
        history = history.after(0, 0, None)
    policy.plan(State(history), weak)
    assert timed == [0, 1]  # PROBE_AFTER rounds at K = 0: now the model is timed
    fresh, timed = lookup_and_model(lookup_first=True)
    assert fresh.plan(State(), [Offer(0, "suffix", 16), Offer(1, "d", None, 2)]).source == 0  # a copy drafts at once
    assert timed == [0]
    lone, timed = lookup_and_model(lookup_first=True)
    assert lone.plan(State(), [Offer(1, "d", None, 2)]).k == 0 and not timed  # no match this round, not due


def test_a_target_whose_rows_are_dear_is_priced_by_its_own_fixed_part_past_the_rows_timed():
    """A call's cost past the row counts timed is anchored with the target's ``fixed_rows_prior``
    (llama.cpp's quantized products: about 1.4 rows), not the float32 prior of 16: with one and two
    rows timed at 1.0 and 1.3, 33 rows are priced at 14.4 one-row calls, not at 2.8."""
    from specd.models.llamacpp.model import LlamaCppLM
    from specd.policy.costs import FIXED_ROWS_PRIOR, row_curve

    samples = [(1, 1.0), (2, 1.3)]
    assert row_curve(samples)(33) == pytest.approx(1.3 * (FIXED_ROWS_PRIOR + 33) / (FIXED_ROWS_PRIOR + 2))
    dear = LlamaCppLM.fixed_rows_prior
    assert row_curve(samples, dear)(33) == pytest.approx(1.3 * (dear + 33) / (dear + 2))
    costs = OnlineCosts()
    autok.auto_k_over([], 8, 1, costs, greedy=True, target=SimpleNamespace(fixed_rows_prior=dear))
    assert costs.fixed_rows == dear
    autok.auto_k_over([], 8, 1, OnlineCosts(), greedy=True, target=SimpleNamespace())  # a model without one


def test_an_untested_depth_takes_its_rate_from_the_depth_above_not_the_pooled_rate():
    # drafts of 4: the first is refused half the time, and a draft that got past it was always kept
    h = history(*[(4, 0), (4, 4)] * 5)
    tested, passed = h.first_children()
    pooled = (sum(passed) + 1) / (sum(tested) + 2)
    alphas = request_profile(h, 8).alphas
    assert alphas[0] == pytest.approx((5 + 2 * pooled) / (10 + 2))
    assert alphas[1] == pytest.approx((5 + 2 * alphas[0]) / (5 + 2))
    assert alphas[3] > alphas[2] > alphas[1] > alphas[0]  # reached, always kept: rising with the evidence
    # depths 5..8 were never drafted: each is the depth above's estimate, well above the pooled rate
    assert alphas[4:] == pytest.approx([alphas[3]] * 4) and alphas[4] > pooled + 0.2
