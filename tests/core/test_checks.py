"""The exactness checks a round reads with its decision (specd.core.checks): deferred, a check reads
nothing and keeps its flag; where a kept flag is set the round decides again reading each check,
so a uniform on a boundary is still decided exactly and a refusal is still raised."""

import pytest
import torch

from specd.core import checks
from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.host_reads import HostReads
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.round import speculative_round
from specd.core.sampler import categorical_draw, sample_categorical
from specd.core.state import Request
from specd.core.table_model import TableModel
from specd.errors import EmptyDistribution
from tests.helpers import table_engine


def test_a_check_reads_its_flag_now_or_keeps_it_for_the_round():
    set_, clear = torch.tensor([False, True]), torch.tensor([False, False])
    with HostReads() as reads:
        assert checks.flagged(set_) and not checks.flagged(clear)
    assert reads.count == 2
    with HostReads() as reads, checks.deferred() as kept:
        assert not checks.flagged(set_) and not checks.flagged(clear)
        assert not checks.flagged(torch.zeros(0, dtype=torch.bool))  # no drafts: nothing kept
    assert reads.count == 0 and len(kept) == 2
    assert bool(checks.any_set(kept, set_.device)) and not bool(checks.any_set(kept[1:], set_.device))
    assert not bool(checks.any_set([], set_.device))
    assert checks.flagged(set_)  # outside again: read at once


def test_a_deferred_draw_on_a_boundary_keeps_its_flag_and_the_exact_draw_is_taken_again():
    rows = torch.tensor([[0.5, 0.5], [0.25, 0.75]], dtype=torch.float32)
    u = torch.tensor([0.5, 0.1], dtype=torch.float64)  # row 0: u * total is exactly the first entry's end
    with checks.deferred() as kept:
        fast = sample_categorical(rows, u)
    assert bool(checks.any_set(kept, rows.device))
    assert torch.equal(fast, categorical_draw(rows, u)[0])
    assert sample_categorical(rows, u).tolist() == [1, 0]  # the first index whose mass exceeds u * total


def uniform_pair(k: int = 3) -> SpeculativeEngine:
    """Target and draft with every logit 0 over V = 2: p = q = (1/2, 1/2) exactly."""
    target, draft = TableModel(2, scale=0.0, name="t"), TableModel(2, scale=0.0, name="d")
    policy = SamplingPolicy.build(temperature=1.0)
    return SpeculativeEngine(target, ModelProposer(draft, policy), policy, EngineConfig(k=k, rule="maximal"))


def test_a_round_whose_terminal_uniform_is_on_a_boundary_decides_again_exactly():
    def draws(state, stream, n):  # drafts 0 0 0 (all kept: p = q); the bonus's uniform on the boundary
        return [{"proposal": 0.25, "acceptance": 0.25, "terminal": 0.5}[stream]] * n

    session = uniform_pair().start([Request("r", (0, 1), 8, seed=0)], draws=draws)
    with HostReads() as reads:
        (outcome,) = speculative_round(session)
    assert outcome.emitted == (0, 0, 0, 1)
    again = [n for (_, _, _, function), n in reads.where.items() if function == "exact_redraw"]
    assert again, "the flagged draw was taken again exactly"


@pytest.mark.parametrize("rule", ["maximal", "invariant", "block"])
def test_a_target_row_with_no_mass_found_by_a_deferred_check_is_refused_by_the_round(monkeypatch, rule):
    engine = table_engine(k=2, rule=rule)
    monkeypatch.setattr(engine.target, "raw_logits", lambda prefix: torch.full((4,), float("-inf")))
    session = engine.start([Request("r", (0, 1), 8, seed=0)])
    with pytest.raises(EmptyDistribution, match="every logit masked"):
        speculative_round(session)
    assert session.store.get("r").generated == 0  # nothing published


def test_a_draft_drawn_on_the_device_on_a_boundary_is_drafted_again_exactly():
    """A model draft's chain keeps its tokens on the device (specd.core.device_chain); its draws' flags
    are read with the decision, and a set one takes the round again from its proposal, each level then
    reading its flag at once: the boundary draft is drawn exactly (the first index whose mass exceeds
    u * total: token 1), and the round is the one a read per level gives."""

    def draws(state, stream, n):  # d_1's uniform on the boundary of (1/2, 1/2)
        return [{"proposal": 0.5, "acceptance": 0.25, "terminal": 0.25}[stream]] * n

    session = uniform_pair(k=1).start([Request("r", (0, 1), 8, seed=0)], draws=draws)
    with HostReads() as reads:
        (outcome,) = speculative_round(session)
    assert outcome.draft_token_ids == (1,) and outcome.accepted == 1  # p = q: kept
    assert "exact_redraw" in {function for (_, _, _, function) in reads.where}
    state = session.store.get("r")
    assert session.cache.committed(state.slot) == state.cache_tokens  # the first take's rows went
    assert session.cache.temporary(state.slot) == ()


@pytest.mark.parametrize("rule", ["maximal", "block"])
def test_a_draft_row_with_no_mass_found_by_a_deferred_check_is_refused_by_the_round(monkeypatch, rule):
    engine = table_engine(k=2, rule=rule)
    draft = engine.proposer.sources[0].model
    monkeypatch.setattr(draft, "raw_logits", lambda prefix: torch.full((4,), float("-inf")))
    session = engine.start([Request("r", (0, 1), 8, seed=0)])
    with pytest.raises(EmptyDistribution, match="every logit masked"):
        speculative_round(session)
    assert session.store.get("r").generated == 0  # nothing published
