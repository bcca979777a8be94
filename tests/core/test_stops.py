import pytest

from specd.core.state import Request
from specd.core.stops import apply_stops
from tests.helpers import table_engine

EOS = frozenset({99})


def test_full_acceptance_no_stop_emits_bonus():
    d = apply_stops([1, 2, 3], 4, EOS, remaining=10)
    assert (d.emitted, d.accepted_emitted, d.terminal_emitted, d.finish_reason) == ((1, 2, 3, 4), 3, True, None)


def test_length_cap_inside_prefix_truncates_and_suppresses_terminal():
    d = apply_stops([1, 2, 3], 4, EOS, remaining=3)
    assert (d.emitted, d.accepted_emitted, d.terminal_emitted, d.finish_reason) == ((1, 2, 3), 3, False, "length")
    d = apply_stops([1, 2, 3], 4, EOS, remaining=2)
    assert d.emitted == (1, 2) and not d.terminal_emitted


def test_eos_inside_prefix_truncates_after_it():
    d = apply_stops([1, 99, 3], 4, EOS, remaining=10)
    assert (d.emitted, d.accepted_emitted, d.terminal_emitted, d.finish_reason) == ((1, 99), 2, False, "eos")


def test_terminal_eos_or_cap_is_counted_once_and_finishes():
    assert apply_stops([1], 99, EOS, remaining=10).finish_reason == "eos"
    d = apply_stops([1], 5, EOS, remaining=2)
    assert d.emitted == (1, 5) and d.finish_reason == "length"


def test_zero_budget_runs_no_round():
    with pytest.raises(ValueError):
        apply_stops([], 1, EOS, remaining=0)
    result = table_engine().run([Request("r", (1, 2), 0)])
    assert result.stats.rounds == 0 and result.states[0].output == (1, 2)


def test_engine_stops_at_eos_and_never_exceeds_budget():
    engine = table_engine(vocab=4, k=3, eos_ids=frozenset({3}))
    result = engine.run([Request(f"r{i}", (0, 1), 12, seed=i) for i in range(40)])
    for s in result.states:
        new = s.new_tokens
        assert len(new) <= 12
        if 3 in new:
            assert new.index(3) == len(new) - 1 and s.finish_reason == "eos"
        else:
            assert len(new) == 12 and s.finish_reason == "length"
