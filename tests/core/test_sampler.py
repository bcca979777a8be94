import itertools

import pytest
import torch

from specd.core.sampler import RejectionSampler, Rows, sample_categorical
from specd.errors import ImpossibleProposal


def rows(values):
    return torch.tensor(values, dtype=torch.float64)


def rejection_sample(p, q, draft, k_lens, accept_u, terminal_u):
    """The whole rule for a batch -> (accepted int64[B], terminal tokens int64[B])."""
    s = RejectionSampler()
    decision = s.decide(Rows.dense(p, q, draft, k_lens), accept_u)
    return decision.accepted, s.sample_terminal(decision.terminal_rows, terminal_u)


def test_impossible_proposal_is_an_error():
    p = rows([[0.5, 0.5], [0.5, 0.5]]).unsqueeze(0)
    q = rows([[1.0, 0.0]]).unsqueeze(0)
    with pytest.raises(ImpossibleProposal):
        rejection_sample(p, q, torch.tensor([[1]]), torch.tensor([1]), rows([0.3]).unsqueeze(0), rows([0.5]))


def test_the_point_mass_rule_reports_min_1_p_over_q_and_refuses_an_impossible_proposal():
    """match_targets (greedy, invariant): p_i is the point mass on the target's token x_i, so its ratio
    min(1, p/q) is p itself; a draft with q(d) = 0 is refused as the general rule refuses it."""
    s = RejectionSampler()
    q = rows([[0.25, 0.75], [0.6, 0.4]]).unsqueeze(0)  # q_1, q_2: [B = 1, K = 2, V = 2]
    draft, k_lens = torch.tensor([[1, 0]]), torch.tensor([2])
    targets = torch.tensor([[1, 1, 0]])  # x_1 = 1 (d_1 matches), x_2 = 1 (d_2 = 0 does not), x_3
    r = Rows.dense(None, q, draft, k_lens)
    d = s.match_targets(targets, r)
    p_draft = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    q_draft = torch.tensor([[0.75, 0.6]], dtype=torch.float64)
    assert torch.equal(d.ratios, s.acceptance_ratios(p_draft, q_draft, r.valid()))
    assert d.accepted.tolist() == [1] and d.terminal.tolist() == [1] and not bool(d.is_bonus[0])
    impossible = Rows.dense(None, rows([[0.0, 1.0], [0.5, 0.5]]).unsqueeze(0), torch.tensor([[0, 0]]), k_lens)
    with pytest.raises(ImpossibleProposal):
        s.match_targets(torch.tensor([[0, 0, 0]]), impossible)


def test_p_equal_q_is_always_accepted():
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(6, 4, 5, generator=gen, dtype=torch.float64), -1)
    q = p[:, :3].clone()
    draft = torch.multinomial(q.reshape(-1, 5), 1, generator=gen).reshape(6, 3)
    u = torch.rand(6, 3, generator=gen, dtype=torch.float64) * (1 - 1e-12)
    accepted, _ = rejection_sample(p, q, draft, torch.full((6,), 3), u, torch.rand(6, dtype=torch.float64))
    assert accepted.tolist() == [3] * 6


def test_correction_clamps_negative_residuals_and_normalizes():
    s = RejectionSampler()
    p, q = rows([[0.3, 0.55, 0.15]]), rows([[0.6, 0.3, 0.1]])
    r = s.correction_rows(p, q)[0]
    r = r / r.sum()
    assert r[0] == 0.0
    assert abs(r[1].item() - 0.25 / 0.30) < 1e-12
    assert abs(r[2].item() - 0.05 / 0.30) < 1e-12


def test_zero_residual_is_never_divided_by():
    p = rows([[0.2, 0.8]])
    out = RejectionSampler().correction_rows(p, p.clone())
    assert torch.isfinite(out).all()
    assert torch.equal(out, p)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_a_small_residual_of_low_precision_rows_is_the_correction_not_p(dtype):
    """Rows one 1/256 apart in a low precision: the residual's mass, 1/256, is below float16's own floor
    (about 7.8e-3), yet it is exact (formed in float64) and the law: the correction is token 1, never p."""
    s = RejectionSampler()
    p = torch.tensor([[0.5, 0.5]], dtype=dtype)
    q = torch.tensor([[0.5 + 1 / 256, 0.5 - 1 / 256]], dtype=dtype)
    assert s.correction_rows(p, q).tolist() == [[0.0, 1 / 256]]
    terminal = s.decide(
        Rows.dense(torch.cat([p, p]).unsqueeze(0), q.unsqueeze(0), torch.tensor([[0]]), torch.tensor([1])),
        rows([[0.999]]),
    )
    assert terminal.accepted.tolist() == [0] and s.sample_terminal(terminal.terminal_rows, rows([0.0])).tolist() == [1]


def test_fixed_shape_padding_and_rows_with_different_k():
    gen = torch.Generator().manual_seed(1)
    b, k, v = 4, 3, 6
    p = torch.softmax(torch.randn(b, k + 1, v, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(b, k, v, generator=gen, dtype=torch.float64), -1)
    k_lens = torch.tensor([3, 2, 0, 1])
    draft = torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(b, k)
    for row, n in enumerate(k_lens.tolist()):
        draft[row, n:] = -1
        q[row, n:] = 0
    accepted, terminal = rejection_sample(
        p, q, draft, k_lens, torch.rand(b, k, generator=gen, dtype=torch.float64), torch.rand(b, dtype=torch.float64)
    )
    assert terminal.shape == (b,) and (terminal >= 0).all()
    for row in range(b):
        assert accepted[row].item() <= k_lens[row].item()
    assert accepted[2] == 0  # k = 0: the bonus row p_1 is sampled


def test_k_zero_row_samples_the_bonus_from_p1():
    p = rows([[[0.0, 1.0, 0.0]]])
    accepted, terminal = rejection_sample(
        p,
        torch.zeros(1, 0, 3, dtype=torch.float64),
        torch.zeros(1, 0, dtype=torch.int64),
        torch.tensor([0]),
        torch.zeros(1, 0, dtype=torch.float64),
        rows([0.99]),
    )
    assert terminal.tolist() == [1] and accepted.tolist() == [0]


def test_one_position_law_is_exactly_p():
    """Integrate the rule over the acceptance cell and the terminal inverse CDF."""
    p1 = rows([0.3, 0.55, 0.15])
    q1 = rows([0.6, 0.3, 0.1])
    s = RejectionSampler()
    law = torch.zeros(3, dtype=torch.float64)
    for d in range(3):
        p = torch.stack([p1, p1]).unsqueeze(0)
        q = q1.view(1, 1, 3)
        ratio = min(1.0, (p1[d] / q1[d]).item())
        for accept, mass in ((True, ratio), (False, 1 - ratio)):
            if mass == 0:
                continue
            u = rows([[ratio / 2 if accept else (1 + ratio) / 2]])
            dec = s.decide(Rows.dense(p, q, torch.tensor([[d]]), torch.tensor([1])), u)
            if dec.accepted.item() == 1:
                law[d] += q1[d] * mass  # the bonus is a later position
            else:
                law += q1[d] * mass * dec.terminal_rows[0] / dec.terminal_rows[0].sum()
    assert torch.allclose(law, p1, atol=1e-15)


@pytest.mark.parametrize("soft_q", [True, False])
def test_greedy_decision_is_the_rule_on_point_mass_rows(soft_q):
    """decide_greedy(argmax) == decide(onehot(argmax)) for every uniform: same Decision, no draw read."""
    gen = torch.Generator().manual_seed(2)
    b, k, v = 64, 4, 3
    argmax = torch.randint(0, v, (b, k + 1), generator=gen)
    k_lens = torch.randint(0, k + 1, (b,), generator=gen)
    if soft_q:
        q = torch.softmax(torch.randn(b, k, v, generator=gen, dtype=torch.float64), -1)
        draft = torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(b, k)
    else:  # a greedy draft: q is the point mass on its own argmax
        draft = torch.randint(0, v, (b, k), generator=gen)
        q = torch.nn.functional.one_hot(draft, v).to(torch.float64)
    for row, n in enumerate(k_lens.tolist()):
        draft[row, n:] = -1
        q[row, n:] = 0
    s = RejectionSampler()
    greedy = s.decide_greedy(argmax, Rows.dense(None, q, draft, k_lens))
    one_hot = torch.nn.functional.one_hot(argmax, v).to(torch.float64)
    for _ in range(3):  # any uniforms: the point-mass rule never depends on them
        u = torch.rand(b, k, generator=gen, dtype=torch.float64)
        general = s.decide(Rows.dense(one_hot, q, draft, k_lens), u)
        assert torch.equal(greedy.accepted, general.accepted) and torch.equal(greedy.is_bonus, general.is_bonus)
        law = general.terminal_rows / general.terminal_rows.sum(-1, keepdim=True)
        assert torch.equal(greedy.terminal_rows, law)
        assert torch.equal(greedy.ratios, general.ratios)
        # the decided terminal is what a draw from the point mass returns, for any uniform
        u = torch.rand(b, generator=gen, dtype=torch.float64)
        assert torch.equal(greedy.terminal, s.sample_terminal(greedy.terminal_rows, u))
        assert general.terminal is None  # a sampled rule's terminal is drawn
    assert 0 < greedy.accepted.sum() < k_lens.sum()  # both acceptances and rejections were exercised


@pytest.mark.parametrize("model_q", [True, False])
def test_a_round_without_drafts_decides_as_padded_rows_do(model_q):
    """K = 0 (root_targets, no node to walk) gives the Decision the general walk gives the same
    requests padded to one draft slot that none of them fills: every field, dtype and shape."""
    gen = torch.Generator().manual_seed(3)
    b, v = 5, 7
    targets = torch.randint(0, v, (b, 2), generator=gen)
    dtype = torch.float32 if model_q else torch.float64
    none = Rows(
        None,
        None,
        torch.zeros(0, v, dtype=dtype),
        *(torch.zeros(b, 0, dtype=torch.int64),) * 2,
        torch.zeros(b, dtype=torch.int64),
        v,
        targets[:, :1],
    )
    padded = Rows(
        None,
        None,
        torch.zeros(0, v, dtype=dtype),
        *(torch.full((b, 1), -1),) * 2,
        torch.zeros(b, dtype=torch.int64),
        v,
        targets,
    )
    s = RejectionSampler()
    fast, general = s.match_targets(targets[:, :1], none), s.match_targets(targets, padded)
    for field in ("accepted", "terminal_rows", "is_bonus", "terminal", "leaf"):
        assert torch.equal(getattr(fast, field), getattr(general, field)), field
    for field in ("ratios", "p_draft", "q_draft"):  # [B, 0] where the padded rows have [B, 1] of zeros
        mine, theirs = getattr(fast, field), getattr(general, field)
        assert mine.shape == (b, 0) and mine.dtype == theirs.dtype and not theirs.any(), field
    assert fast.is_bonus.all() and fast.terminal.tolist() == targets[:, 0].tolist()


def test_inverse_cdf_never_picks_zero_mass_and_matches_probabilities():
    row = rows([[0.0, 0.25, 0.0, 0.75, 0.0]])
    for u in (0.0, 0.2499999, 0.25, 0.9999999999999999):
        tok = sample_categorical(row, rows([u])).item()
        assert row[0, tok] > 0
    grid = torch.arange(4000, dtype=torch.float64) / 4000
    picks = sample_categorical(row.expand(4000, 5), grid)
    assert (picks == 1).double().mean().item() == 0.25


def test_first_rejection_stops_even_if_later_tests_would_pass():
    s = RejectionSampler()
    # every acceptance pattern: count = length of the leading run of passes
    for pattern in itertools.product((0, 1), repeat=3):
        lead = next((i for i, bit in enumerate(pattern) if not bit), 3)
        assert s.count_accepted(torch.tensor([pattern], dtype=torch.bool)).item() == lead
    p_draft, q_draft = rows([[1.0, 0.1, 1.0]]), rows([[0.5, 0.5, 0.5]])
    passed = s.acceptance_tests(p_draft, q_draft, rows([[0.5, 0.5, 0.0]]), torch.ones(1, 3, dtype=torch.bool))
    assert passed.tolist() == [[True, False, True]] and s.count_accepted(passed).item() == 1


def test_inverse_cdf_equals_the_rational_rule_at_every_interval_end(monkeypatch):
    """Uniforms on both sides of each exact cumulative boundary (the places float64 sums misplace)."""
    from fractions import Fraction

    import specd.core.sampler as sampler

    gen = torch.Generator().manual_seed(5)
    row = torch.rand(1, 300, generator=gen, dtype=torch.float64) * (torch.rand(1, 300, generator=gen) > 0.3)
    masses = [Fraction(x) for x in row[0].tolist()]
    total = sum(masses)
    cums, boundaries = Fraction(0), []
    for m in masses[:60]:
        cums += m
        boundaries.append(cums / total)
    us = []
    for b in boundaries:
        n = (b * 2**53).__floor__()
        us += [Fraction(m, 2**53) for m in (n - 1, n, n + 1) if 0 <= m < 2**53]

    def rule(u: Fraction) -> int:
        below = Fraction(0)
        for i, m in enumerate(masses):
            below += m
            if m > 0 and below > u * total:
                return i
        raise AssertionError

    picks = sample_categorical(row.expand(len(us), 300), torch.tensor([float(u) for u in us], dtype=torch.float64))
    assert picks.tolist() == [rule(u) for u in us]

    # A one-hot row (the greedy terminal) at u = 0 is exact in float64: no rational work.
    monkeypatch.setattr(sampler, "_exact_inverse_cdf", lambda *_: (_ for _ in ()).throw(AssertionError("slow path")))
    one_hot = torch.zeros(3, 49152)
    one_hot[torch.arange(3), torch.tensor([5, 0, 49151])] = 1.0
    assert sample_categorical(one_hot, torch.zeros(3, dtype=torch.float64)).tolist() == [5, 0, 49151]


def test_packed_rows_decide_as_the_padded_rows_and_a_lookup_is_its_point_mass():
    """The rule over packed rows (p only for the real rows, q only for model drafts, a lookup's drafts
    as ids) decides exactly as over the padded one-hot form it stands for, bit for bit."""
    gen = torch.Generator().manual_seed(5)
    b, k, v = 6, 4, 5
    k_lens = torch.tensor([4, 0, 2, 1, 3, 4])
    lookup = torch.tensor([False, False, True, False, True, False])  # these rows' drafts are point masses
    p = torch.softmax(torch.randn(b, k + 1, v, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(b, k, v, generator=gen, dtype=torch.float64), -1)
    draft = torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(b, k)
    q[lookup] = torch.nn.functional.one_hot(draft[lookup], v).to(torch.float64)
    for row, n in enumerate(k_lens.tolist()):
        draft[row, n:] = -1
        q[row, n:] = 0
    valid = torch.arange(k).unsqueeze(0) < k_lens.unsqueeze(1)
    model = valid & ~lookup.unsqueeze(1)
    q_index = torch.full((b, k), -1)
    q_index[model] = torch.arange(int(model.sum()))
    p_start = torch.cumsum(k_lens + 1, 0) - (k_lens + 1)
    packed = Rows(
        p[torch.arange(k + 1).unsqueeze(0) <= k_lens.unsqueeze(1)], p_start, q[model], q_index, draft, k_lens, v
    )
    assert packed.p.shape == (int((k_lens + 1).sum()), v) and packed.q.shape == (int(model.sum()), v)
    s = RejectionSampler()
    for _ in range(20):
        u = torch.rand(b, k, generator=gen, dtype=torch.float64)
        dense, lean = s.decide(Rows.dense(p, q, draft, k_lens), u), s.decide(packed, u)
        for name in ("accepted", "terminal_rows", "is_bonus", "ratios", "p_draft", "q_draft"):
            assert torch.equal(getattr(dense, name), getattr(lean, name)), name
