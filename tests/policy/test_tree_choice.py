"""-k auto chooses the shape too (--tree auto): its evidence by depth and rank, its choice a function of
the request's history and the costs alone, a tree where extra rows are free and a chain at this CPU's
curve, the texts of greedy and invariant decoding unchanged, and what cannot serve a tree refused."""

import random

import pytest

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.outcome import RoundOutcome
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer, SourceTiming
from specd.core.records import RoundTiming
from specd.core.shared_body import SharedBodyProposer
from specd.core.sources import Offer
from specd.core.state import History, Request, RequestState
from specd.core.table_model import TableModel
from specd.errors import UsageError
from specd.policy.autok import SIBLING_FIRST, SIBLING_POWER, TREE_EVIDENCE, AutoK, request_profile, request_tree_profile
from specd.policy.costs import FixedCosts, OnlineCosts
from specd.policy.ledger import CostModel
from specd.policy.row_costs import RowCosts
from specd.policy.trees import tree_round_time

DRAFT = [Offer(0, "d")]
# This project's 2-core CPU, one torch thread: a call of R rows in one-row calls (docs/choosing-k.md, 2026-12-02)
CPU = RowCosts(((1, 1.0), (2, 1.10), (3, 1.49), (5, 1.96), (9, 2.37), (17, 2.77), (33, 3.76)))
FREE_ROWS = RowCosts(((1, 1.0), (256, 1.0)))  # a call of up to 256 rows costs one of 1 (an idealized GPU)


class State:
    """What AutoK reads of a request (its history and budget); ``output`` and ``request_id`` it must not."""

    def __init__(self, history=History(), remaining=100, output=(1, 2), request_id="r"):
        self.history, self.remaining, self.output, self.request_id = history, remaining, output, request_id

    draft_budget = RequestState.draft_budget


def outcome(parents, path, accepted, k=None, terminal="correction") -> RoundOutcome:
    n = len(parents) if parents is not None else k
    return RoundOutcome(
        "r", "r/round-0", 0, 0, "replay_frontier", "d", None, tuple(range(n)), accepted, terminal, 0,
        (0,) * (accepted + 1), 2, accepted + 1, (), (), 0, 0, (0, 0, 0), (0, 0, 0), "", "", None,
        parents, path,
    )  # fmt: skip


@pytest.mark.parametrize(
    "parents,path,accepted,walk",
    [
        (None, None, 2, ((1, True), (1, True), (1, False))),  # a chain of 4 that kept 2 (k below)
        ((-1, -1, -1, 0, 1), (1, 4), 2, ((2, True), (1, True))),  # root's 2nd child, then its only child: a leaf
        ((-1, -1, -1, 0, 1), (), 0, ((3, False),)),  # every root child refused
        ((-1, -1, 0, 0, 2), (0, 3), 2, ((1, True), (2, True))),  # first child, then its 2nd: a leaf
        ((-1, -1, 0, 0, 2), (0,), 1, ((1, True), (2, False))),  # first child, both its children refused
    ],
)
def test_a_rounds_walk_is_what_its_tests_found_level_by_level(parents, path, accepted, walk):
    o = outcome(parents, path, accepted, k=4)
    assert o.walk == walk
    h = History().add(o)
    assert [[n for n, _ in row] for row in h.ranks] == [[1] * n for n, _ in walk]
    assert [sum(a for _, a in row) for row in h.ranks] == [int(p) for _, p in walk]
    assert h.k_schedule == ((4,) if parents is None else (o.levels,))


def test_a_chain_only_history_gives_the_same_profile_as_before():
    h = History()
    for k, a in [(4, 4), (4, 1), (3, 0), (0, 0), (6, 6)]:
        h = h.after(k, a, "d")
    assert h.first_children() == (h.reached, h.accepted_at)
    # a tree round adds depth evidence whichever rank passed, but rank 0's alone for a chain's profile
    t = h.after(2, 2, "d", walk=((3, True), (1, True)))
    assert t.reached[0] == h.reached[0] + 1 and t.accepted_at[0] == h.accepted_at[0] + 1
    assert t.first_children()[0][0] == h.reached[0] + 1 and t.first_children()[1][0] == h.accepted_at[0]
    assert request_profile(t, 4).alphas[0] < request_profile(h, 4).alphas[0]


def test_before_any_tree_round_a_later_sibling_is_priced_at_the_decayed_pooled_rate():
    h = History()
    for _ in range(30):
        h = h.after(4, 2, "d")
    profile = request_tree_profile(h, 4, 4)
    pooled = (sum(h.accepted_at) + 1) / (sum(h.reached) + 2)
    for j in range(4):
        assert profile.betas[j][0] == pytest.approx(request_profile(h, 4).alphas[j])
        for r in range(1, 4):
            assert profile.betas[j][r] == pytest.approx(pooled * SIBLING_FIRST * r**-SIBLING_POWER)
    # the request's own tree rounds move rank 1 toward what they found
    for _ in range(40):
        h = h.after(1, 1, "d", walk=((2, True),))
    assert request_tree_profile(h, 4, 4).betas[0][1] > 0.8


def tree_history(rounds=30, first=0.55, second=0.4, seed=0):
    """A request whose "2,2,2" rounds kept rank 0 at ``first`` and rank 1 (rank 0 refused) at ``second``."""
    rng, h = random.Random(seed), History()
    for _ in range(rounds):
        walk = []
        for _depth in range(3):
            if rng.random() < first:
                walk.append((1, True))
            elif rng.random() < second:
                walk.append((2, True))
            else:
                walk.append((2, False))
                break
        accepted = sum(1 for _, passed in walk if passed)
        h = h.after(len(walk), accepted, "d", walk=tuple(walk))
    return h


@pytest.mark.parametrize(
    "curve,draft_cost,tree",
    [
        (FREE_ROWS, 0.05, True),  # extra rows free, a cheap draft: a tree's later siblings pay
        (CPU, 0.05, False),  # this CPU: a row costs a tenth of a step and more, the chain wins
        (FREE_ROWS, 0.6, True),  # a dear draft step: still a tree (fewer levels than a chain of as many nodes)
    ],
)
def test_a_tree_where_extra_rows_are_free_a_chain_at_this_cpus_curve(curve, draft_cost, tree):
    costs = FixedCosts(curve.costs(draft_cost, state_cost=0.01))  # a FixedCosts of any cost record
    plan = AutoK(8, 1, costs, tree_budget=8).plan(State(tree_history()), DRAFT)
    assert plan.k >= 1 and (plan.shape is not None) == tree
    if tree:
        assert not plan.shape.is_chain and plan.shape.size <= 8 and plan.k == plan.shape.depth
    chains = AutoK(8, 1, costs).plan(State(tree_history()), DRAFT)
    assert chains.shape is None and (plan.k == chains.k or tree)


def test_the_tree_beats_the_chain_by_the_ledgers_own_numbers():
    costs = FixedCosts(FREE_ROWS.costs(0.05, state_cost=0.01))
    policy = AutoK(8, 1, costs, tree_budget=8)
    state = State(tree_history())
    plan = policy.plan(state, DRAFT)
    shape, rate = policy.tree_option(state.history, costs.model, 8)
    assert shape == plan.shape
    chains = AutoK(8, 1, costs).plan(state, DRAFT)
    chain_rate = (1 + sum(_survival(request_profile(state.history, 8), chains.k))) / (
        tree_round_time(costs.model, __import__("specd").core.tree_shape.TreeShape.chain(chains.k))
    )
    assert rate > chain_rate


def test_a_request_drafts_chains_until_its_own_first_drafts_were_tested():
    """Before TREE_EVIDENCE tests the prior's rates would decide; the tree comes with the request's own."""
    costs = FixedCosts(FREE_ROWS.costs(0.05, state_cost=0.01))
    policy = AutoK(8, 1, costs, tree_budget=8)
    cold = History()
    assert policy.plan(State(cold), DRAFT).shape is None and policy.tree_option(cold, costs.model, 8) is None
    h = History()
    while sum(h.first_children()[0]) < TREE_EVIDENCE - 1:
        h = h.after(1, 1, "d", walk=((2, True),))
    assert policy.tree_option(h, costs.model, 8) is None
    h = h.after(1, 1, "d", walk=((2, True),))
    assert sum(h.first_children()[0]) == TREE_EVIDENCE
    shape, _ = policy.tree_option(h, costs.model, 8)
    assert not shape.is_chain and policy.plan(State(h), DRAFT).shape == shape


def _survival(profile, k):
    out, s = [], 1.0
    for j in range(1, k + 1):
        s *= profile.alpha(j)
        out.append(s)
    return out


@pytest.mark.parametrize("curve", [FREE_ROWS, CPU])
@pytest.mark.parametrize(
    "history", [History(), tree_history(10), tree_history(40, 0.2, 0.1), tree_history(40, 0.9, 0.5)]
)
def test_the_shape_is_a_function_of_the_requests_history_and_the_costs_alone(curve, history):
    costs = FixedCosts(curve.costs(0.1, state_cost=0.01))
    plans = {
        AutoK(8, 1, costs, tree_budget=8).plan(State(history, 60, output, rid), DRAFT)
        for output, rid in [((1, 2), "a"), ((5, 5, 5, 9), "b"), ((0,), "another")]
    }
    assert len(plans) == 1  # not its output, id, or another instance of the policy


V = 5


def engines(rule: str, temperature: float, budget: int):
    target, draft = TableModel(V, seed=1, name="t"), TableModel(V, seed=2, name="d")
    tp, dp = SamplingPolicy.build(temperature=temperature), SamplingPolicy.build(temperature=temperature)
    costs = FixedCosts(FREE_ROWS.costs(0.05, state_cost=0.01))
    tree = SpeculativeEngine(
        target,
        ModelProposer(draft, dp),
        tp,
        EngineConfig(k=0, rule=rule),
        k_policy=AutoK(3, 1, costs, tree_budget=budget),
    )
    return tree, SpeculativeEngine.baseline(target, tp, EngineConfig(rule=rule))


@pytest.mark.parametrize("rule,temperature", [("maximal", 0.0), ("invariant", 0.9)])
def test_auto_trees_keep_the_text_greedy_and_invariant(rule, temperature):
    requests = [Request(f"id-{i}", (i % V, (3 * i) % V), 12, seed=i) for i in range(40)]
    tree, base = engines(rule, temperature, 6)
    result = tree.run(requests, batch_size=16)
    assert result.new_tokens() == base.run(requests).new_tokens()
    assert sum(1 for o in result.commits if o.draft_parents is not None) > 10  # trees were chosen and verified
    assert all(o.draft_parents is None or len(o.draft_parents) <= 6 for o in result.commits)


def test_what_cannot_serve_a_tree_is_refused_when_auto_may_choose_one():
    target, draft = TableModel(V, seed=1), TableModel(V, seed=2)
    policy = SamplingPolicy.build(temperature=1.0)
    auto = AutoK(3, 1, FixedCosts(CostModel()), tree_budget=4)
    with pytest.raises(UsageError, match="block verification"):
        SpeculativeEngine(target, ModelProposer(draft, policy), policy, EngineConfig(rule="block"), k_policy=auto)
    with pytest.raises(UsageError, match="drafts chains only"):
        SpeculativeEngine(target, SharedBodyProposer(target, [0, 1], policy), policy, EngineConfig(), k_policy=auto)
    for bad in (1, -2, 257, True):
        with pytest.raises(UsageError, match="tree"):
            AutoK(3, 1, FixedCosts(CostModel()), tree_budget=bad)


def test_a_tree_rounds_draft_calls_are_timed_by_their_rows():
    costs = OnlineCosts()
    # a tree of three levels for one request: 3 calls, the two after the first fed 4 and 2 rows
    turn = SourceTiming("d", 0.09, 3, 1, 7, 1, 0.02, fed_rows=6)
    costs.observe(RoundTiming(1, 0.09, 3, (turn,), 0.05, 8, 0.001))
    assert list(costs.draft["d"]) == [(3, pytest.approx(0.035))]
    # a chain's calls: one row each
    chain = SourceTiming("d", 0.06, 3, 1, 3, 1, 0.02, fed_rows=2)
    costs.observe(RoundTiming(1, 0.06, 3, (chain,), 0.05, 4, 0.001))
    assert costs.draft["d"][-1] == (1, pytest.approx(0.02))
