"""One rule object per rule: what each reads, how a model draft draws for it, and that the round
asks the run's rule once (tests/core/test_round.py checks the round has no branch on the rule)."""

import pytest
import torch

from specd.core.gumbel import SharedNoise
from specd.core.rules import RULES, BlockRule, GreedyRule, InvariantRule, MaximalRule, rule_for
from specd.core.sampler import RejectionSampler, Rows
from specd.core.state import Request
from specd.core.tree import DraftTree
from specd.errors import UsageError
from tests.helpers import table_engine


def test_rule_for_picks_the_greedy_rule_at_temperature_0_and_the_named_one_otherwise():
    assert isinstance(rule_for("maximal", greedy=False), MaximalRule)
    assert isinstance(rule_for("invariant", greedy=False), InvariantRule)
    assert isinstance(rule_for("block", greedy=False), BlockRule)
    for name in RULES:
        assert isinstance(rule_for(name, greedy=True), GreedyRule)
    with pytest.raises(UsageError, match="unknown rule 'tree'"):
        rule_for("tree", greedy=False)


def test_what_each_rule_reads_and_how_a_draft_draws_for_it():
    sampler = RejectionSampler()
    assert MaximalRule(sampler).reads_streams and MaximalRule(sampler).draft_noise() is None
    assert not GreedyRule(sampler).reads_streams and GreedyRule(sampler).draft_noise() is None
    noise = InvariantRule(sampler).draft_noise()
    assert not InvariantRule(sampler).reads_streams and isinstance(noise, SharedNoise) and noise.sampler is sampler
    assert BlockRule(sampler).reads_streams and BlockRule(sampler).draft_noise() is None
    # the tests each rule reads, given what was emitted: maximal up to the first rejection, block all k
    chain = DraftTree.chain((5, 6, 7, 8))
    assert [rule.tests_read(chain, (0, 1), 2, True) for rule in (MaximalRule(sampler), BlockRule(sampler))] == [3, 4]
    no_streams = (GreedyRule(sampler), InvariantRule(sampler))
    assert [rule.tests_read(chain, (0, 1), 2, False) for rule in no_streams] == [0, 0]
    # on a tree, up to the walk's last test: node 2 accepted after 0 and 1 were refused, then node 3, then
    # (a correction) every child of node 3
    tree = DraftTree((5, 6, 7, 8, 9, 4), (-1, -1, -1, 2, 3, 3))
    assert MaximalRule(sampler).tests_read(tree, (2, 3), 2, True) == 6
    assert MaximalRule(sampler).tests_read(tree, (2, 3), 2, False) == 4


def test_the_maximal_rule_reads_each_requests_own_streams_and_sets_its_terminal():
    p = torch.tensor([[[0.5, 0.5], [0.25, 0.75]], [[0.9, 0.1], [0.3, 0.7]]])
    q = torch.tensor([[[0.2, 0.8]], [[0.6, 0.4]]])
    draft, k_lens = torch.tensor([[1], [0]]), torch.tensor([1, 1])
    asked = []

    def draws(state, stream, n):
        asked.append((state, stream, n))
        return [0.999] * n if stream == "acceptance" else [0.0] * n

    decision = MaximalRule(RejectionSampler()).decide(Rows.dense(p, q, draft, k_lens), ["a", "b"], draws)
    assert asked == [("a", "acceptance", 1), ("b", "acceptance", 1), ("a", "terminal", 1), ("b", "terminal", 1)]
    # U = 0.999: request a rejects d = 1 (ratio 0.5 / 0.8), b accepts d = 0 (0.9 >= 0.6)
    assert decision.accepted.tolist() == [0, 1] and decision.is_bonus.tolist() == [False, True]
    assert decision.terminal.tolist() == [0, 0]  # a: [p - q]_+ = (0.3, 0); b: p_2's first token at u = 0
    assert decision.uniforms.tolist() == [[0.999], [0.999]]


@pytest.mark.parametrize("rule", RULES)
def test_a_greedy_target_decides_by_the_greedy_rule_whatever_rule_is_named(rule):
    engine = table_engine(target_temperature=0.0, rule=rule)
    assert isinstance(engine.rule, GreedyRule)
    result = engine.run([Request("a", (0, 1), 8, seed=3)])
    assert all(c.rng_after[1:] == c.rng_before[1:] for c in result.commits)  # no target-side stream read
