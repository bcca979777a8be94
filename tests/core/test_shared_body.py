"""The shared-body draft (self:vocab=N): the target's own body on the target's cache and a
restricted head. Greedy output is target-only greedy's, alone and in batches, with lookups in
the same round; its rows are the target's; a failed round leaves the target's cache clean; the
sampled joint is exact (the oracle's check, and its lab variant caught by name)."""

import pytest
import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import NgramProposer
from specd.core.records import MIXED
from specd.core.round import speculative_round
from specd.core.shared_body import SharedBodyProposer, check_subset
from specd.core.state import Request
from specd.core.table_model import TableModel
from specd.core.transaction import CHECKPOINTS, RoundTransaction
from specd.errors import UsageError
from specd.models.hf.model import HFCausalLM
from specd.oracles.engine.checks import AUTO_COSTS
from specd.oracles.engine.exact import Enumerator
from specd.oracles.record import EXACT_TOLERANCE, max_abs_diff
from specd.oracles.reference import target_joint
from specd.oracles.rig import shared_body_rig
from specd.policy.autok import AutoK
from tests.helpers import rig as oracle_rig
from tests.hf_helpers import tiny_llama

GREEDY = SamplingPolicy(greedy=True)
REQUESTS = [Request(f"r{i}", tuple((3 * i + j) % 8 for j in range(2 + i % 3)), 14, seed=i) for i in range(5)]


def greedy_tokens(target, proposer, k, requests=REQUESTS, **config):
    engine = SpeculativeEngine(target, proposer, GREEDY, EngineConfig(k=k, **config))
    return engine.run(requests).new_tokens()


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("n", [1, 3, 7])
def test_greedy_is_target_only_greedy_on_a_table_model(k, n):
    target = TableModel(8, seed=3, scale=3.0)
    base = greedy_tokens(target, None, 0)
    assert greedy_tokens(target, SharedBodyProposer(target, range(n), GREEDY), k) == base
    for request in REQUESTS:  # and alone
        alone = greedy_tokens(target, SharedBodyProposer(target, range(n), GREEDY), k, [request])
        assert alone[0] == base[REQUESTS.index(request)]


@pytest.mark.parametrize("stop", [0.3, 0.6])
def test_draft_stop_cuts_the_shared_bodys_drafts_and_keeps_greedy_output(stop):
    """--draft-stop: the draft stops where its restricted head is unsure; the rows it already staged
    (one more than its drafts) are verified as they are, nothing fed twice."""
    target = TableModel(8, seed=3, scale=1.0)
    base = greedy_tokens(target, None, 0)
    engine = SpeculativeEngine(target, SharedBodyProposer(target, range(6), GREEDY, stop), GREEDY, EngineConfig(k=4))
    result = engine.run(REQUESTS)
    assert result.new_tokens() == base
    ks = {r.k for r in result.rounds}
    assert len(ks) >= 2 and max(ks) <= 4, ks  # some drafts were cut short


def test_a_lookup_and_the_shared_body_in_one_round_verify_together():
    """Requests whose lookup matches draft from it, the rest from the shared body: one verification
    with staged and unstaged rows; greedy output unchanged."""
    target = TableModel(8, seed=5, scale=3.0)
    requests = [Request(f"m{i}", (1, 2, 3, 1, 2, i % 8), 12) for i in range(3)] + REQUESTS
    base = greedy_tokens(target, None, 0, requests)
    sources = [NgramProposer(2, 8), SharedBodyProposer(target, range(5), GREEDY)]
    timings = []
    engine = SpeculativeEngine(target, sources, GREEDY, EngineConfig(k=3), observers=[timings.append])
    result = engine.run(requests)
    assert result.new_tokens() == base
    used = {r.source for r in result.rounds if r.source}
    assert len(used) == 2, used  # both sources drafted, some rounds side by side
    # each round's verification is priced as what it was: the shared body's, a target call, or mixed
    kinds = {t.verify_source for t in timings}
    assert {sources[1].identity, MIXED} <= kinds, kinds


def test_draft_rows_are_the_targets_and_only_published_rows_stay():
    target = TableModel(8, seed=1, scale=2.0)
    engine = SpeculativeEngine(target, SharedBodyProposer(target, range(3), GREEDY), GREEDY, EngineConfig(k=3))
    session = engine.start(REQUESTS[:3])
    while not session.done:
        speculative_round(session)
        for state in session.live():
            assert session.cache.committed(state.slot) == state.output[:-1]
            assert session.cache.temporary(state.slot) == ()


class Boom(Exception):
    pass


@pytest.mark.parametrize("point", CHECKPOINTS)
def test_a_failed_round_drops_the_drafts_rows_from_the_targets_cache(point):
    class Faulty(RoundTransaction):
        armed = False

        def checkpoint(self, where):
            if Faulty.armed and where == point:
                raise Boom(where)

    target = TableModel(8, seed=2, scale=2.0)
    policy = SamplingPolicy.build(temperature=0.8)
    engine = SpeculativeEngine(
        target, SharedBodyProposer(target, range(3), policy), policy, EngineConfig(k=3), transaction_cls=Faulty
    )
    clean = SpeculativeEngine(target, SharedBodyProposer(target, range(3), policy), policy, EngineConfig(k=3))
    expected = clean.run(REQUESTS[:3]).new_tokens()
    session = engine.start(REQUESTS[:3])
    speculative_round(session)
    before = [(s, session.cache.committed(s.slot)) for s in session.states()]
    Faulty.armed = True
    with pytest.raises(Boom):
        speculative_round(session)
    assert [(s, session.cache.committed(s.slot)) for s in session.states()] == before
    assert all(session.cache.temporary(s.slot) == () for s in session.states())
    Faulty.armed = False
    from specd.core.round import decode

    assert decode(session).new_tokens() == expected  # the retry re-read the same draws


def test_the_retained_layout_and_bad_vocabularies_are_refused():
    target = TableModel(6, seed=1)
    with pytest.raises(UsageError, match="replay_frontier"):
        SpeculativeEngine(
            target, SharedBodyProposer(target, range(3), GREEDY), GREEDY, EngineConfig(layout="retained_frontier")
        )
    for columns, message in (((), r"\[1, 6\)"), (range(6), r"\[1, 6\)"), ((1, 1), "twice"), ((0, 9), "outside")):
        with pytest.raises(UsageError, match=message):
            check_subset(tuple(columns), 6)
    with pytest.raises(UsageError, match=r"\[2, 6\)"):
        check_subset((0,), 6, smallest=2)


@pytest.mark.parametrize("layers", [2])
def test_greedy_on_a_hugging_face_model_is_target_only_greedy_and_reads_the_targets_rows(layers):
    model = tiny_llama(64, seed=0, layers=layers)
    target = HFCausalLM(model, "t")
    requests = [Request(f"r{i}", tuple((5 * i + j) % 64 for j in range(3 + i)), 16) for i in range(4)]
    base = greedy_tokens(target, None, 0, requests)
    for k, n in ((1, 48), (4, 48), (3, 8)):
        proposer = SharedBodyProposer(target, range(n), GREEDY)
        assert greedy_tokens(target, proposer, k, requests) == base
    # The restricted head is the full head at those columns.
    hidden = torch.randn(3, model.config.hidden_size)
    columns = torch.tensor([0, 5, 17, 63])
    full = target.head_logits(hidden)
    torch.testing.assert_close(target.subset_head(columns)(hidden), full[:, columns], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy", ["fixed", "auto", "draft_stop"])
@pytest.mark.parametrize("vocab,k", [(3, 2), (4, 2)])
def test_the_sampled_joint_is_the_targets(vocab, k, policy):
    base = oracle_rig(vocab, k)
    if policy == "auto":
        base = base.but(k_policy_factory=lambda r: AutoK(max(r.k, 2), 1, AUTO_COSTS))
    if policy == "draft_stop":  # drafts cut where the restricted head is unsure
        base = base.but(draft_stop=0.7)
    rig = shared_body_rig(base)
    horizon = k + 1
    enumerator = Enumerator(rig, horizon, "rounds")
    assert max_abs_diff(target_joint(rig, horizon), enumerator.joint()) <= EXACT_TOLERANCE
    assert len(enumerator.k_seen) >= 2
