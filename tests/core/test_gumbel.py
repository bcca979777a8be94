"""The invariant rule's noise: SplitMix64 in integer tensor ops, Gumbel-max's law, and the rule."""

import numpy as np
import pytest
import torch

from specd.core.gumbel import (
    gumbel,
    position_bits,
    position_bits_of,
    race,
    race_tokens,
    request_key,
    splitmix64,
    uniforms,
)
from specd.core.sampler import RejectionSampler, Rows

MASK = (1 << 64) - 1


def reference_splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def test_splitmix64_in_int64_tensors_equals_the_reference_on_unsigned_integers():
    values = [0, 1, 2, 12345678901234567, (1 << 63) - 1, 1 << 63, MASK - 4, MASK]
    signed = torch.tensor([v - (1 << 64) if v >= 1 << 63 else v for v in values], dtype=torch.int64)
    assert [v & MASK for v in splitmix64(signed).tolist()] == [reference_splitmix64(v) for v in values]


def test_the_per_position_bits_in_python_integers_are_the_tensors_bits():
    keys = [request_key(seed, f"r{seed}") for seed in range(64)] + [0, -1, (1 << 63) - 1, -(1 << 63)]
    positions = [7 * i + (i % 3) * 1000003 for i in range(64)] + [0, 1, 1 << 40, (1 << 62) + 5]
    assert position_bits_of(keys, positions) == position_bits(torch.tensor(keys), torch.tensor(positions)).tolist()


def test_the_noise_is_a_function_of_key_position_and_token_only():
    key = request_key(5, "req")
    a = uniforms(key, torch.tensor([3, 7]), 11)
    b = uniforms(key, torch.tensor([7]), 11)
    assert torch.equal(a[1], b[0])  # position 7 alone or with another: the same draws
    assert torch.equal(uniforms(key, torch.tensor([3]), 20)[0, :11], a[0])  # a wider vocabulary: a prefix
    assert not torch.equal(uniforms(request_key(6, "req"), torch.tensor([3]), 11), a[:1])
    assert bool(((a > 0) & (a < 1)).all()) and a.dtype == torch.float64


def test_the_uniforms_are_uniform_and_the_race_draws_from_p():
    u = uniforms(request_key(1, "r"), torch.arange(4000), 50).flatten()
    counts = torch.histc(u, bins=10, min=0.0, max=1.0)
    assert (counts - u.numel() / 10).abs().max() < 5 * (u.numel() / 10) ** 0.5
    p = torch.tensor([0.5, 0.25, 0.15, 0.1, 0.0], dtype=torch.float64)
    n = 100_000
    tokens = race(p.expand(n, 5), gumbel(request_key(2, "r"), torch.arange(n), 5))
    freq = torch.bincount(tokens, minlength=5).double() / n
    assert freq[4] == 0 and (freq - p).abs().max() < 5 * (0.25 / n) ** 0.5


def test_race_tokens_uses_each_rows_own_key_and_position():
    rows = torch.softmax(torch.randn(6, 9, generator=torch.Generator().manual_seed(0)), -1)
    keys = [request_key(0, "a"), request_key(0, "b")] * 3
    positions = [0, 0, 1, 1, 2, 2]
    together = race_tokens(rows, keys, positions)
    alone = torch.stack([race_tokens(rows[i : i + 1], keys[i : i + 1], positions[i : i + 1])[0] for i in range(6)])
    assert torch.equal(together, alone)


class Out:
    def __init__(self, n):
        self.new_tokens = (0,) * n
        self.request_id = "r"

        class Rng:
            seed = 3

        self.rng = Rng()


def test_the_invariant_decision_accepts_exactly_the_target_tokens():
    sampler = RejectionSampler()
    p = torch.softmax(torch.randn(1, 4, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64), -1)
    state = Out(10)
    q = torch.full((1, 3, 6), 1 / 6, dtype=torch.float64)
    x = sampler.race_targets(Rows.dense(p, q, torch.zeros(1, 3, dtype=torch.int64), torch.tensor([3])), [state])[0]
    for wrong_at in range(3):  # drafts equal to x up to one position
        draft = x[:3].clone().unsqueeze(0)
        draft[0, wrong_at] = (draft[0, wrong_at] + 1) % 6
        d = sampler.decide_invariant(Rows.dense(p, q, draft, torch.tensor([3])), [state])
        assert int(d.accepted) == wrong_at and int(d.terminal_rows.argmax()) == int(x[wrong_at])
    d = sampler.decide_invariant(Rows.dense(p, q, x[:3].unsqueeze(0), torch.tensor([3])), [state])
    assert int(d.accepted) == 3 and bool(d.is_bonus) and int(d.terminal_rows.argmax()) == int(x[3])


@pytest.mark.parametrize("chunk", [1 << 21, 9, 1])
def test_race_tokens_equals_the_race_on_the_full_noise_for_full_and_sparse_rows(monkeypatch, chunk):
    """The batched race (rows a few at a time, each row's half of the formula once, full rows
    raced whole, sparse rows over their support) picks the same tokens as the plain race of each
    row against its whole noise row, and leaves the caller's rows untouched."""
    import specd.core.gumbel as g

    monkeypatch.setattr(g, "RACE_CHUNK", chunk)
    gen = torch.Generator().manual_seed(3)
    rows = torch.softmax(torch.randn(7, 9, generator=gen, dtype=torch.float64), -1)
    rows[1, 2:] = 0.0  # sparse (top-k like)
    rows[4, :8] = 0.0  # a point mass
    before = rows.clone()
    keys = [request_key(0, f"r{i % 3}") for i in range(7)]
    positions = [i // 3 for i in range(7)]
    expected = torch.stack(
        [race(rows[i : i + 1], gumbel(keys[i], torch.tensor([positions[i]]), 9))[0] for i in range(7)]
    )
    assert torch.equal(race_tokens(rows, keys, positions), expected)
    assert torch.equal(
        race_tokens(rows.float(), keys, positions),
        race(rows.float(), torch.cat([gumbel(keys[i], torch.tensor([positions[i]]), 9) for i in range(7)])),
    )
    assert torch.equal(rows, before)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_race_tokens_over_sparse_rows_races_their_support_alone_and_agrees(dtype):
    """Rows of small support (top-k like: the CPU races their support alone), a point mass and a
    row without mass: the same tokens as each row raced against its whole noise row (a row without
    mass: token 0, as its all -inf scores give)."""
    gen = torch.Generator().manual_seed(5)
    rows = torch.zeros(6, 40, dtype=dtype)
    for i in range(4):
        support = torch.randperm(40, generator=gen)[:3]
        rows[i, support] = torch.rand(3, generator=gen, dtype=dtype)
    rows[4, 17] = 1.0
    keys = [request_key(1, f"r{i}") for i in range(6)]
    positions = list(range(6))
    got = race_tokens(rows, keys, positions)
    expected = race(rows, torch.cat([gumbel(keys[i], torch.tensor([positions[i]]), 40) for i in range(6)]))
    assert torch.equal(got, expected) and int(got[4]) == 17 and int(got[5]) == 0
    assert all(rows[i, int(got[i])] > 0 for i in range(5))


def test_the_support_races_numpy_noise_has_the_formulas_bits():
    """race_tokens' support path draws the noise's integer half in numpy: the same bits as
    splitmix64 and unit on torch's int64, edge patterns included."""
    from specd.core.gumbel import _splitmix64_np, _unit_np, splitmix64, unit

    gen = torch.Generator().manual_seed(11)
    x = torch.randint(-(2**63), 2**63 - 1, (4096,), dtype=torch.int64, generator=gen)
    x[:4] = torch.tensor([0, -1, -(2**63), 2**63 - 1])
    ours = torch.from_numpy(_unit_np(_splitmix64_np(x.numpy().view(np.uint64).copy())))
    assert torch.equal(ours, unit(splitmix64(x)))
