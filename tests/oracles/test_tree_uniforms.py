"""The tree protocol's uniform stream: every outcome of a sampler with its exact probability."""

import random
from fractions import Fraction

import pytest
import torch

from specd.errors import SamplerFailed, UniformAsNumber
from specd.oracles.samplers.tree_uniforms import ConcreteUniforms, explore


def law(run):
    out = {}
    for result, mass, _ in explore(run):
        out[result] = out.get(result, 0) + mass
    return out


def test_one_comparison_splits_the_uniform_at_its_threshold():
    assert law(lambda u: u.node(0) < 0.3) == {True: Fraction(0.3), False: 1 - Fraction(0.3)}


def test_one_uniform_against_several_thresholds_is_one_uniform():
    """SGLang's coin: one uniform compared with cumulative sums; the masses are the gaps."""

    def coin(u):
        c = u.node(-1)
        for i, acc in enumerate((Fraction(1, 5), Fraction(1, 2), Fraction(9, 10))):
            if c <= acc:
                return i
        return 3

    assert law(coin) == {0: Fraction(1, 5), 1: Fraction(3, 10), 2: Fraction(2, 5), 3: Fraction(1, 10)}


def test_independent_uniforms_multiply_and_decided_comparisons_do_not_branch():
    def two(u):
        a = u.node(0) < Fraction(1, 4)
        again = u.node(0) < Fraction(1, 2)  # decided by the first when it was below 1/4
        return a, again, u.node(1) >= Fraction(2, 3)

    got = law(two)
    assert got[(True, True, False)] == Fraction(1, 4) * Fraction(2, 3)
    assert got[(False, True, True)] == Fraction(1, 4) * Fraction(1, 3)
    assert got[(False, False, True)] == Fraction(1, 2) * Fraction(1, 3)
    assert (True, False, True) not in got and sum(got.values()) == 1


def test_scaled_and_flipped_uniforms_and_tensor_thresholds():
    assert law(lambda u: u.node(0) * 2 < 1) == {True: Fraction(1, 2), False: Fraction(1, 2)}
    assert law(lambda u: 1 - u.terminal() < 0.25) == {True: Fraction(1, 4), False: Fraction(3, 4)}
    assert law(lambda u: torch.tensor(0.5, dtype=torch.float64) > u.node(3)) == {
        True: Fraction(1, 2),
        False: Fraction(1, 2),
    }
    assert law(lambda u: u.node(0) <= torch.tensor(float("nan"))) == {False: 1}
    assert law(lambda u: u.node(0) < float("inf")) == {True: 1}


def test_a_draw_gives_each_token_its_mass_and_respects_earlier_comparisons():
    row = torch.tensor([0.0, 1.0, 2.0, 1.0])
    assert law(lambda u: u.draw(row)) == {1: Fraction(1, 4), 2: Fraction(1, 2), 3: Fraction(1, 4)}
    # a comparison on the terminal uniform first: below 1/2 only tokens 1 and 2 (its first half) remain
    assert law(lambda u: (u.terminal() < 0.5, u.draw(row))) == {
        (True, 1): Fraction(1, 4),
        (True, 2): Fraction(1, 4),
        (False, 2): Fraction(1, 4),
        (False, 3): Fraction(1, 4),
    }


def test_a_draw_from_a_row_of_fractions_is_exact_and_kept_apart_from_the_floats_near_it():
    """A draw's answer is kept by its row's exact values (a Fraction as its numerator and denominator): the
    same row drawn again gives the same law, and the row of floats nearest it (1/3 rounded) its own."""
    row = [Fraction(1, 3), Fraction(3, 5)]  # total 14/15
    for _ in range(2):
        assert law(lambda u: u.draw(row)) == {0: Fraction(5, 14), 1: Fraction(9, 14)}
    assert law(lambda u: (u.terminal() < 0.5, u.draw(row))) == {
        (True, 0): Fraction(5, 14),
        (True, 1): Fraction(1, 7),
        (False, 1): Fraction(1, 2),
    }
    rounded = law(lambda u: u.draw([1 / 3, 0.6]))
    assert rounded[0] == Fraction(1 / 3) / (Fraction(1 / 3) + Fraction(0.6)) != Fraction(5, 14)


def test_a_uniform_used_as_a_number_is_refused():
    with pytest.raises(UniformAsNumber):
        explore(lambda u: float(u.node(0)) < 0.5)
    with pytest.raises(TypeError):
        explore(lambda u: u.node(0) < torch.tensor([0.5, 0.5]))


def test_a_sampler_with_randomness_of_its_own_is_named():
    rng = random.Random(0)
    with pytest.raises(SamplerFailed) as err:
        explore(lambda u: u.node(0) < rng.random() and u.node(1) < rng.random())
    assert err.value.finding == "own_randomness"


def test_concrete_uniforms_decide_as_the_integrated_ones_say():
    rng = random.Random(1)
    hits = sum(ConcreteUniforms(rng).node(0) < 0.3 for _ in range(4000))
    assert abs(hits / 4000 - 0.3) < 0.03
    u = ConcreteUniforms(random.Random(2))
    assert u.node(5) == u.node(5) and u.draw([0.0, 1.0]) == 1
