"""Running ahead (specd.core.round.launch_ahead): the round after one that drafts nothing is launched
before that one is read, from provisional successors whose last token stays on the device. The
tokens, outcomes and counters are a synchronous run's, requests joining, ending by their budget, an
end-of-sequence token or a stop string; where it cannot run ahead, it does not."""

import pytest

from specd.core import round as round_module
from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer, NgramProposer
from specd.core.readback import Readback
from specd.core.round import decode
from specd.core.state import Request
from specd.core.stops import StopStrings
from specd.core.table_model import TableModel

REQUESTS = [Request(f"r{i}", (i % 3, 1, 2), 6 + 3 * i, seed=i) for i in range(5)]


def engine(
    ahead: bool, temperature: float = 0.9, rule: str = "invariant", proposer=None, k: int = 0, eos=(4,), **policy
):
    target = TableModel(5, seed=3, name="t")
    target_policy = SamplingPolicy.build(temperature=temperature, **policy)
    config = EngineConfig(k=k, rule=rule, ahead=ahead, eos_ids=frozenset(eos))
    return SpeculativeEngine(target, proposer, target_policy, config)


def outcomes(result):
    """Each request's rounds, in order (joiners start a round later when running ahead: the order of
    publication across requests may differ, a request's own rounds may not)."""
    rounds = [(c.request_id, c.round_index, c.emitted, c.rng_after, c.finish_reason) for c in result.commits]
    return sorted(rounds)


@pytest.fixture
def ahead_launches(monkeypatch):
    """How many rounds were launched ahead of a read."""
    seen = []
    real = round_module.launch_ahead
    monkeypatch.setattr(round_module, "launch_ahead", lambda *a: (lambda r: seen.append(r is not None) or r)(real(*a)))
    return seen


@pytest.mark.parametrize("rule,temperature", [("invariant", 0.9), ("maximal", 0.9), ("maximal", 0.0)])
@pytest.mark.parametrize("batch_size", [None, 2])
def test_running_ahead_gives_the_synchronous_runs_rounds(ahead_launches, rule, temperature, batch_size):
    """Target-only decoding, requests ending by their budget or EOS (token 4) and joining a batch of 2."""
    sync = engine(False, temperature, rule).run(REQUESTS, batch_size=batch_size)
    ahead = engine(True, temperature, rule).run(REQUESTS, batch_size=batch_size)
    assert outcomes(ahead) == outcomes(sync) and ahead.new_tokens() == sync.new_tokens()
    assert any(s.finish_reason == "eos" for s in sync.states) and sum(ahead_launches) >= 3
    # the rounds run ahead for a request that had just ended are computed, never published
    assert ahead.stats.rounds == sync.stats.rounds
    assert sync.stats.target_forwards <= ahead.stats.target_forwards <= sync.stats.target_forwards + len(REQUESTS)


def test_the_host_launches_the_next_round_before_reading_this_one(monkeypatch):
    """One read a round, and each round's read made after the next round was launched."""
    events = []
    real_launch, real_read = round_module.launch, Readback._read
    monkeypatch.setattr(round_module, "launch", lambda *a, **k: events.append("launch") or real_launch(*a, **k))
    monkeypatch.setattr(Readback, "_read", lambda self: events.append("read") or real_read(self))
    decode(engine(True, eos=()).start([Request("solo", (0, 1, 2), 8, seed=1)]))
    assert events.count("read") == 8 and events.count("launch") == 8
    assert events[:4] == ["launch", "launch", "read", "launch"]  # round 2 enqueued before round 1 is read


def test_a_stop_string_found_late_drops_what_was_launched_after_it():
    decode_text = lambda tokens: "".join("abcde"[t] for t in tokens)  # noqa: E731
    texts = {}
    for ahead in (False, True):
        session = engine(ahead).start([Request(r.request_id, r.prompt, 12, seed=r.seed) for r in REQUESTS])
        events = list(round_module.decode_events(session, None, StopStrings(decode_text, ("c",))))
        texts[ahead] = [(s.request_id, s.output, s.finish_reason) for finished, s, _ in events if finished]
    assert texts[True] == texts[False] and any(reason == "stop_string" for *_, reason in texts[True])


def test_rounds_that_draft_lookups_or_penalties_do_not_run_ahead(ahead_launches):
    draft = TableModel(5, seed=4, name="d")
    model = ModelProposer(draft, SamplingPolicy.build(temperature=0.9))
    sync = engine(False, proposer=model, k=2).run(REQUESTS[:2])
    assert outcomes(engine(True, proposer=model, k=2).run(REQUESTS[:2])) == outcomes(sync)
    assert not any(ahead_launches)  # every round drafts: each is read before the next
    lookup = engine(True, proposer=NgramProposer(2, 5), k=0)
    assert not lookup.start([]).runs_ahead  # a lookup reads the output: never ahead
    penalized = engine(True, repetition_penalty=1.3).run(REQUESTS[:2])
    assert outcomes(penalized) == outcomes(engine(False, repetition_penalty=1.3).run(REQUESTS[:2]))
    assert not any(ahead_launches)


def test_a_round_in_flight_taken_again_drops_the_round_after_it(monkeypatch):
    """p = (1/2, 1/2) and a terminal uniform on the boundary: the round's flag is set, the round launched
    after it goes, and the round is taken again exactly, as a synchronous run takes it."""
    target = TableModel(2, scale=0.0, name="t")
    again = []
    real = round_module.taken_again
    monkeypatch.setattr(
        round_module, "taken_again", lambda s, launched, redraft: again.append(redraft) or real(s, launched, redraft)
    )

    def draws(state, stream, n):
        return [0.5] * n

    runs = []
    for ahead in (False, True):
        config = EngineConfig(k=0, rule="maximal", ahead=ahead)
        eng = SpeculativeEngine(target, None, SamplingPolicy.build(temperature=1.0), config)
        runs.append(outcomes(decode(eng.start([Request("b", (0, 1), 5, seed=0)], draws=draws))))
    assert runs[0] == runs[1] and runs[0][0][2] == (1,)  # the first index whose mass exceeds u * total
    assert again.count(True) >= 4  # run ahead: every round taken again from its states


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_hugging_face_model_run_ahead_gives_the_synchronous_tokens(hf_pair, temperature):
    """Its slot cache keeps the round launched ahead as temporary rows after the round in flight's, and
    the frontier it feeds stays on the device until read."""
    target, _ = hf_pair
    policy = SamplingPolicy.build(temperature=temperature)
    requests = [Request(f"h{i}", (1, 2, 3 + i), 7 + 2 * i, seed=i) for i in range(4)]
    runs = [
        SpeculativeEngine(target, None, policy, EngineConfig(k=0, rule="invariant", ahead=ahead)).run(
            requests, batch_size=3
        )
        for ahead in (False, True)
    ]
    assert outcomes(runs[0]) == outcomes(runs[1])


def test_a_round_run_ahead_taken_again_leaves_out_a_request_that_ended_before_it():
    """Round 1 is read unflagged and ends "ends" (token 0, the end of sequence); round 2, launched ahead
    for both requests, is flagged (a terminal uniform on the boundary): it is taken again for "goes"
    alone, from its published state, as a synchronous run takes it (it raised KeyError on the ended slot)."""
    target = TableModel(2, scale=0.0, name="t")

    def draws(state, stream, n):
        if state.request_id == "ends":
            return [0.1] * n  # token 0 in its first round
        return [0.9 if state.rounds == 0 else 0.5] * n  # token 1; from its second round on the boundary

    runs = []
    for ahead in (False, True):
        config = EngineConfig(k=0, rule="maximal", ahead=ahead, eos_ids=frozenset({0}))
        eng = SpeculativeEngine(target, None, SamplingPolicy.build(temperature=1.0), config)
        requests = [Request("ends", (0, 1), 5, seed=0), Request("goes", (0, 1), 5, seed=1)]
        runs.append(outcomes(decode(eng.start(requests, draws=draws))))
    assert runs[0] == runs[1]
    assert [r[4] for r in runs[1] if r[0] == "ends"] == ["eos"] and len([r for r in runs[1] if r[0] == "goes"]) == 5
