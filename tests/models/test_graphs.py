"""Captured steps (specd.models.hf.graphs): what a CPU can check of them (buckets, padding, the static
inputs, pricing by bucket, --graphs refused where it cannot run) through the same padded,
static-buffer path without CUDA graphs, and on CUDA the captured graphs themselves."""

import pytest
import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.records import RoundTiming
from specd.core.state import Request
from specd.core.tree_shape import parse_tree
from specd.errors import GraphsUnavailable
from specd.models.hf.graphs import Buckets, StepGraphs
from specd.models.hf.model import HFCausalLM
from specd.policy.costs import OnlineCosts
from tests.helpers import run_cli
from tests.hf_helpers import noisy_copy, tiny_llama

REQUESTS = [Request(f"g{i}", tuple(range(1 + i, 4 + 2 * i)), 10 + i, seed=i) for i in range(5)]


def test_a_call_is_padded_to_the_smallest_bucket_that_holds_it():
    b = Buckets(rows=(1, 2, 3, 5, 9), batch=(1, 2, 4, 8))
    assert b.of(1, 1) == (1, 1) and b.of(3, 4) == (4, 5) and b.of(8, 9) == (8, 9)
    assert b.of(9, 1) is None and b.of(1, 10) is None  # past the largest: eager
    assert b.priced(3, 4) == 20 and b.priced(1, 6) == 9 and b.priced(1, 10) == 10


def pair(graphs: bool):
    model = tiny_llama(64, seed=0, layers=2)
    target, draft = HFCausalLM(model, "t"), HFCausalLM(noisy_copy(model, 0.3, seed=1), "d")
    if graphs:  # the captured path without CUDA: padded to buckets, static inputs, replayed eagerly
        target.graphs, draft.graphs = StepGraphs(capture=False), StepGraphs(capture=False)
    return target, draft


def run(graphs: bool, temperature: float, layout: str, tree=None, batch_size=None):
    target, draft = pair(graphs)
    policy = SamplingPolicy.build(temperature=temperature)
    config = EngineConfig(k=3, layout=layout, tree=parse_tree(tree) if tree else None)
    engine = SpeculativeEngine(target, ModelProposer(draft, policy), policy, config)
    result = engine.run(REQUESTS, batch_size=batch_size)
    return result.new_tokens(), target.graphs


@pytest.mark.parametrize("layout,temperature", [("replay_frontier", 0.9), ("retained_frontier", 0.0)])
def test_padded_static_calls_give_the_eager_tokens(layout, temperature):
    """Every call padded to its bucket (batch rows to 1/2/4/8, rows to 1/2/3/5), requests joining
    and leaving a batch of 3: the same tokens as eager calls, every round."""
    eager, _ = run(False, temperature, layout, batch_size=3)
    padded, graphs = run(True, temperature, layout, batch_size=3)
    assert padded == eager
    assert graphs.replays > 0 and {(4, 1), (4, 5)} & set(graphs.graphs)  # 3 rows padded to 4


def test_a_tree_round_through_padded_calls_is_target_only_greedy():
    tree, graphs = run(True, 0.0, "replay_frontier", tree="2,2")
    baseline = SpeculativeEngine.baseline(pair(False)[0], SamplingPolicy.build(temperature=0)).run(REQUESTS)
    assert tree == baseline.new_tokens() and graphs.replays > 0


def test_a_store_that_grows_drops_its_graphs():
    target, _ = pair(True)
    engine = SpeculativeEngine.baseline(target, SamplingPolicy.build(temperature=0))
    engine.run([Request("long", (1, 2, 3), 90)])  # past the first 64 columns: the store doubles
    assert target.graphs.replays > 0 and target.graphs._store_key[1] >= 128


def test_a_model_that_cannot_be_captured_runs_eagerly_and_says_so_once(monkeypatch):
    target, _ = pair(True)
    target.graph_mode = "auto"
    monkeypatch.setattr(StepGraphs, "run", lambda *a: (_ for _ in ()).throw(RuntimeError("stream is capturing")))
    policy = SamplingPolicy.build(temperature=0)
    got = SpeculativeEngine.baseline(target, policy).run(REQUESTS[:2]).new_tokens()
    assert got == SpeculativeEngine.baseline(pair(False)[0], policy).run(REQUESTS[:2]).new_tokens()
    assert target.graphs is None
    notes = target.take_notes()
    assert len(notes) == 1 and "runs eagerly" in notes[0] and "stream is capturing" in notes[0]
    assert target.take_notes() == []


def test_graphs_on_where_a_model_cannot_be_captured_is_refused(monkeypatch):
    target, _ = pair(True)
    target.graph_mode = "on"
    monkeypatch.setattr(StepGraphs, "run", lambda *a: (_ for _ in ()).throw(RuntimeError("stream is capturing")))
    with pytest.raises(GraphsUnavailable, match="cannot be captured"):
        SpeculativeEngine.baseline(target, SamplingPolicy.build(temperature=0)).run(REQUESTS[:1])


def test_graphs_on_without_cuda_is_refused_and_auto_is_eager():
    model = tiny_llama(32)
    with pytest.raises(GraphsUnavailable, match="needs CUDA"):
        HFCausalLM(model, "t", graphs="on")
    assert HFCausalLM(model, "t", graphs="auto").graphs is None


@pytest.mark.parametrize("extra", [[], ["--backend", "llama.cpp"]])
def test_graphs_on_is_one_line_and_exit_2_where_it_cannot_run(tiny_models, capsys, extra):
    args = ["generate", "--target", tiny_models[0], "-p", "hi", "--max-new-tokens", "2", "--graphs", "on"]
    if extra:  # llama.cpp runs GGUF files: its own steps
        args = ["generate", "-p", "hi", "--max-new-tokens", "2", "--graphs", "on", *extra]
    code, out, err = run_cli(args, capsys)
    assert code == 2 and err.count("\n") == 1 and "--graphs on" in err and not out


def test_auto_k_prices_a_call_as_its_bucket():
    """With calls padded to buckets, a call is timed and priced as its bucket's rows: a verification of
    K = 5 (6 rows) costs what the 9-row bucket's does, and K = 6, 7 the same."""
    costs = OnlineCosts()
    costs.buckets = Buckets()
    for rows, seconds in ((1, 1.0), (2, 1.1), (3, 1.2), (5, 1.5), (9, 2.0)):
        costs.observe(RoundTiming(1, 0.0, 0, (), seconds, rows, 0.0))
    costs.record_draft_step("d", 1, 0.1)
    ledger = costs.ledger_costs(1, 8, "d")
    assert ledger.verify[(5, 1)] == ledger.verify[(6, 1)] == ledger.verify[(8, 1)] == pytest.approx(2.0)
    assert ledger.verify[(3, 1)] == pytest.approx(1.5)  # 4 rows: the 5-row bucket
    assert costs.priced(3, 6) == 4 * 2  # 3 requests of 2 rows: the (4, 2) bucket


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_captured_graphs_give_the_eager_tokens_on_cuda():
    model = tiny_llama(64, seed=0, layers=2).cuda()
    policy = SamplingPolicy.build(temperature=0)
    eager = SpeculativeEngine.baseline(HFCausalLM(model, "t", graphs="off"), policy).run(REQUESTS)
    lm = HFCausalLM(model, "t", graphs="on")
    captured = SpeculativeEngine.baseline(lm, policy).run(REQUESTS)
    assert captured.new_tokens() == eager.new_tokens() and lm.graphs.captures > 0
