"""Every draft source is exact: greedy output equals the target's, token for token."""

import pytest
import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import DraftContext, NgramProposer
from specd.core.state import Request
from specd.errors import UsageError
from specd.models.hf.model import HFCausalLM
from specd.models.run.drafts import build_proposer, early_exit_model, parse_draft, parse_drafts
from tests.hf_helpers import tiny_llama

GREEDY = SamplingPolicy.build(temperature=0)
REPEATING = [Request("r", (3, 4, 5, 3, 4, 5, 3, 4), 20), Request("s", (7, 8, 7, 8, 7), 16)]


@pytest.fixture(scope="module")
def target():
    return HFCausalLM(tiny_llama(48, seed=2, layers=3), "t")


@pytest.mark.parametrize("spec", ["self:bf16", "self:fp16", "self:layers=1", "self:layers=2", "ngram:1", "ngram:3"])
def test_each_draft_source_is_exact_for_greedy(target, spec):
    expected = SpeculativeEngine.baseline(target, GREEDY).run(REPEATING).new_tokens()
    proposer = build_proposer(parse_draft(spec), target, GREEDY)
    result = SpeculativeEngine(target, proposer, GREEDY, EngineConfig(k=3)).run(REPEATING)
    assert result.new_tokens() == expected
    assert result.stats.proposed > 0


def test_bf16_copy_agrees_with_its_target_most_of_the_time(target):
    proposer = build_proposer(parse_draft("self:bf16"), target, GREEDY)
    stats = SpeculativeEngine(target, proposer, GREEDY, EngineConfig(k=4)).run(REPEATING).stats
    assert stats.figures()["draft_acceptance_rate"] > 0.8
    assert next(proposer.model.model.parameters()).dtype == torch.bfloat16


def test_early_exit_shares_weights_and_leaves_the_target_intact(target):
    n_before = len(target.model.model.layers)
    shallow = early_exit_model(target.model, 1)
    assert len(shallow.model.layers) == 1 and len(target.model.model.layers) == n_before
    assert shallow.model.layers[0] is target.model.model.layers[0]
    assert shallow.lm_head is target.model.lm_head
    assert target.model.config.num_hidden_layers == n_before and shallow.config.num_hidden_layers == 1
    with pytest.raises(UsageError):
        early_exit_model(target.model, n_before)


def test_ngram_lookup_and_point_mass_q():
    ng = NgramProposer(2, 10)
    assert ng.lookup((1, 2, 3, 1, 2), 3) == (3, 1, 2)
    assert ng.lookup((1, 2, 3, 9, 2), 2) == (3, 9)  # falls back to a 1-gram match
    assert ng.lookup((1, 2, 3), 2) == ()
    from specd.core.processors import PolicyState
    from specd.core.rng import RngState, stream_draws
    from specd.core.state import RequestState

    state = RequestState("x", 0, 5, (1, 2, 3, 1, 2), (), PolicyState(), PolicyState(), RngState(0, "x"), 0, 9, 3)
    proposal = ng.propose([state], [3], None, DraftContext(stream_draws, "max_shift", torch.float64))
    assert proposal.drafts == ((3, 1, 2),) and proposal.draws == (0,)
    assert proposal.q.shape == (0, ng.vocab_size) and proposal.q_index == ((-1, -1, -1),)  # ids, no q rows
    rows = torch.stack([proposal.q_row(0, i) for i in range(3)])  # the point masses they stand for
    assert torch.equal(rows.argmax(-1), torch.tensor([3, 1, 2])) and (rows.sum(-1) == 1).all()


@pytest.mark.slow
def test_ngram_under_sampling_matches_the_target_law(target):
    """Point-mass q: the joint of the first tokens through the real adapter equals the target's."""
    from specd.oracles.engine.montecarlo import bernstein_bound
    from tests.hf_helpers import exact_joint

    small = HFCausalLM(tiny_llama(6, seed=5, hidden=32), "t6")
    policy = SamplingPolicy.build(temperature=1.0)
    prompt, horizon, n = (1, 2, 1, 2, 1), 3, 3000
    engine = SpeculativeEngine(small, NgramProposer(2, 6), policy, EngineConfig(k=2, record_log=False))
    result = engine.run([Request(f"n{i}", prompt, horizon, seed=4) for i in range(n)])
    assert result.stats.proposed > 0 and 0 < result.stats.figures()["draft_acceptance_rate"] < 1
    counts = {}
    for seq in result.new_tokens():
        counts[seq] = counts.get(seq, 0) + 1
    reference = exact_joint(small, prompt, horizon, policy)
    assert max(abs(counts.get(s, 0) / n - p) / bernstein_bound(p, n, 6**horizon) for s, p in reference.items()) <= 1


@pytest.mark.parametrize("bad", ["self:int3", "ngram:x", "self:layers=abc", "suffix:maybe", "ngram:0"])
def test_unknown_draft_specs(bad):
    with pytest.raises(UsageError):
        parse_draft(bad)


@pytest.mark.parametrize(
    "text,message",
    [
        ("suffix,,ngram:3", "an empty element"),
        ("suffix,", "an empty element"),
        ("ngram:3,suffix,ngram:3", "named twice"),
        ("suffix,self:int3", "unknown draft source 'self:int3'"),
        ("ngram:0,suffix", "ngram:N needs N >= 1"),
    ],
)
def test_bad_source_lists_are_refused_naming_the_element(text, message):
    with pytest.raises(UsageError, match=message):
        parse_drafts(text)


SOURCE_LISTS = [
    "suffix",
    "suffix,ngram:2",
    "ngram:2,self:bf16",
    "suffix,self:layers=1",
    "self:bf16,suffix",
    "suffix:run,self:bf16",
]


@pytest.mark.parametrize("sources", SOURCE_LISTS)
@pytest.mark.parametrize("auto", [False, True])
def test_greedy_output_equals_the_targets_for_every_source_list_alone_and_in_a_batch(target, sources, auto):
    from specd.policy.autok import AutoK
    from specd.policy.costs import OnlineCosts

    batch = REPEATING + [Request("t", (9, 2, 9, 2, 9, 2), 18), Request("u", (1,), 12)]
    expected = SpeculativeEngine.baseline(target, GREEDY).run(batch).new_tokens()

    def engine():
        proposers = [build_proposer(spec, target, GREEDY) for spec in parse_drafts(sources)]
        costs = OnlineCosts()
        policy = AutoK(6, len(batch), costs, lambda i, rows: proposers[i].step_seconds(rows)) if auto else None
        return SpeculativeEngine(
            target, proposers, GREEDY, EngineConfig(k=3), k_policy=policy, observers=(costs.observe,)
        )

    together = engine().run(batch)
    assert together.new_tokens() == expected
    assert engine().run(batch, batch_size=2).new_tokens() == expected  # later requests join finished ones
    assert [engine().run([r]).new_tokens()[0] for r in batch] == expected
    if not auto:  # the first source that proposes: the lookups find matches in these prompts
        assert together.stats.proposed > 0 and set(together.stats.source_hist) <= set(engine().proposer.identities)
