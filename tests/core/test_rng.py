from specd.core.rng import RngState, uniform


def test_draws_are_pure_functions_of_the_coordinate():
    assert uniform(3, "r", "acceptance", 7) == uniform(3, "r", "acceptance", 7)
    assert uniform(3, "r", "acceptance", 7) != uniform(3, "r", "terminal", 7)
    assert uniform(3, "r", "acceptance", 7) != uniform(3, "other", "acceptance", 7)
    assert uniform(3, "r", "acceptance", 7) != uniform(4, "r", "acceptance", 7)


def test_uniforms_lie_in_unit_interval_and_look_uniform():
    draws = [uniform(0, "r", "proposal", i) for i in range(20000)]
    assert all(0.0 <= u < 1.0 for u in draws)
    assert abs(sum(draws) / len(draws) - 0.5) < 0.01
    below = sum(u < 0.1 for u in draws) / len(draws)
    assert abs(below - 0.1) < 0.01


def test_peek_does_not_consume_and_advance_moves_one_stream():
    s = RngState(5, "req")
    first = s.peek("acceptance", 3)
    assert s.peek("acceptance", 3) == first
    t = s.advance("acceptance", 2)
    assert t.counters == (0, 2, 0)
    assert t.peek("acceptance", 1) == [first[2]]
    assert t.peek("terminal", 1) == s.peek("terminal", 1)
    assert s.counters == (0, 0, 0)  # immutable
