"""Block verification (specd.core.block): against an independent scalar reference of Sun et al.'s
Algorithm 2, exact in law on the paper's example, token-wise in law for point masses, and exact at
its thresholds."""

from fractions import Fraction
from itertools import product

import pytest
import torch

from specd.core import block
from specd.core.sampler import RejectionSampler, Rows


def reference(p_rows, q_rows, drafts, etas):
    """Algorithm 2 for one request, in Fractions: p_rows k + 1 rows, q_rows k rows (None: the point
    mass on the draft), etas k uniforms -> (A, the terminal law up to normalization)."""
    k = len(drafts)
    q_rows = [
        [Fraction(int(x == d)) for x in range(len(p_rows[0]))] if q is None else q for q, d in zip(q_rows, drafts)
    ]
    rho, rhos, tau = Fraction(1), [Fraction(1)], 0
    for i in range(k):
        rho = min(Fraction(1), rho * p_rows[i][drafts[i]] / q_rows[i][drafts[i]])
        rhos.append(rho)
        if i < k - 1:
            z = sum(max(Fraction(0), rho * a - b) for a, b in zip(p_rows[i + 1], q_rows[i + 1]))
            h = Fraction(1) if rho == 1 else z / (z + 1 - rho)
        else:
            h = rho
        if etas[i] < h:
            tau = i + 1
    if tau == k:
        return tau, list(p_rows[k])
    return tau, [max(Fraction(0), rhos[tau] * a - b) for a, b in zip(p_rows[tau], q_rows[tau])]


def random_rows(gen, n, vocab):
    return torch.softmax(torch.randn(n, vocab, generator=gen, dtype=torch.float64) * 1.5, -1)


def test_decide_block_equals_the_reference_on_ragged_batches_of_model_and_point_mass_drafts():
    gen = torch.Generator().manual_seed(7)
    vocab, k_lens = 5, [3, 0, 1, 4, 2]
    k_max = max(k_lens)
    p = random_rows(gen, sum(k + 1 for k in k_lens), vocab)
    q_model = random_rows(gen, sum(k_lens), vocab)
    drafts, q_index, used, point = [], [], 0, []
    for b, k in enumerate(k_lens):
        row_d, row_i = [], []
        for i in range(k):
            lookup = b == 3 and i % 2 == 1  # a request mixing point masses and model rows
            row_d.append(int(torch.multinomial(q_model[used + i], 1, generator=gen)))
            row_i.append(-1 if lookup else used + i)
        used += k
        drafts.append(row_d + [-1] * (k_max - k))
        q_index.append(row_i + [-1] * (k_max - k))
        point.append([i == -1 for i in row_i])
    rows = Rows(
        p,
        torch.tensor([sum(k + 1 for k in k_lens[:b]) for b in range(len(k_lens))]),
        q_model,
        torch.tensor(q_index),
        torch.tensor(drafts),
        torch.tensor(k_lens),
        vocab,
    )
    for trial in range(20):
        eta = torch.rand(len(k_lens), k_max, generator=gen, dtype=torch.float64)
        decision = RejectionSampler().decide_block(rows, eta)
        start = 0
        for b, k in enumerate(k_lens):
            p_rows = [[Fraction(x) for x in p[start + i].tolist()] for i in range(k + 1)]
            q_rows = [None if point[b][i] else [Fraction(x) for x in q_model[q_index[b][i]].tolist()] for i in range(k)]
            tau, law = reference(p_rows, q_rows, drafts[b][:k], [Fraction(float(e)) for e in eta[b, :k]])
            assert int(decision.accepted[b]) == tau, (trial, b)
            assert decision.terminal_rows[b].tolist() == pytest.approx([float(x) for x in law], abs=1e-15)
            start += k + 1


def emitted_joint(p, q, k, horizon):
    """The block rule's joint over ``horizon`` tokens for context-free rows p (target) and q
    (draft), in Fractions: drafts from q, A's law from the thresholds (P(A = j) = h_j prod_{i>j}
    (1 - h_i)), the terminal from the rule's law, the rest from p. Thresholds and laws come from
    ``reference``'s arithmetic, the same as the module's."""
    joint = {}
    v = len(p)

    def complete(seq, mass):
        if len(seq) >= horizon:
            joint[seq[:horizon]] = joint.get(seq[:horizon], 0) + mass
            return
        for x in range(v):
            if p[x]:
                complete(seq + (x,), mass * p[x])

    for drafts in product(range(v), repeat=k):
        q_mass = 1
        for d in drafts:
            q_mass *= q[d]
        if not q_mass:
            continue
        # P(A = j) = h_j prod_{i > j} (1 - h_i): the eta cells the thresholds cut
        hs = thresholds_of([p] * (k + 1), [q] * k, drafts)
        for j in range(k + 1):
            mass = hs[j - 1] if j else Fraction(1)
            for i in range(j, k):
                mass *= 1 - hs[i]
            if not mass:
                continue
            law = law_at(p, q, drafts, j)
            total = sum(law)
            for x in range(v):
                if law[x]:
                    complete(tuple(drafts[:j]) + (x,), q_mass * mass * law[x] / total)
    return joint


def thresholds_of(p_rows, q_rows, drafts):
    k = len(drafts)
    rho, out = Fraction(1), []
    for i in range(k):
        rho = min(Fraction(1), rho * p_rows[i][drafts[i]] / q_rows[i][drafts[i]])
        if i < k - 1:
            z = sum(max(Fraction(0), rho * a - b) for a, b in zip(p_rows[i + 1], q_rows[i + 1]))
            out.append(Fraction(1) if rho == 1 else z / (z + 1 - rho))
        else:
            out.append(rho)
    return out


def law_at(p, q, drafts, j):
    k = len(drafts)
    if j == k:
        return list(p)
    rho = Fraction(1)
    for i in range(j):
        rho = min(Fraction(1), rho * p[drafts[i]] / q[drafts[i]])
    return [max(Fraction(0), rho * a - b) for a, b in zip(p, q)]


def test_the_papers_example_is_exact_and_accepts_more_than_token_wise():
    """Sun et al., section 2: M_b = (1/3, 2/3), M_s = (2/3, 1/3), k = 2: E[A] is 11/9 under block
    verification (10/9 token-wise), and the emitted joint is the target's. In the reference's
    arithmetic, which the test above ties the module to."""
    p, q = [Fraction(1, 3), Fraction(2, 3)], [Fraction(2, 3), Fraction(1, 3)]
    expected_a = Fraction(0)
    for drafts in product(range(2), repeat=2):
        hs = thresholds_of([p] * 3, [q] * 2, drafts)
        q_mass = q[drafts[0]] * q[drafts[1]]
        expected_a += q_mass * (2 * hs[1] + 1 * hs[0] * (1 - hs[1]))
    assert expected_a == Fraction(11, 9)
    joint = emitted_joint(p, q, 2, 3)
    for seq in product(range(2), repeat=3):
        assert joint.get(seq, 0) == p[seq[0]] * p[seq[1]] * p[seq[2]]


def test_point_mass_drafts_accept_like_the_token_wise_rule():
    """A lookup's drafts (q = the point mass): P(A >= i) = p_1(d_1) ... p_i(d_i) and the correction is
    p without the draft: the token-wise rule's law."""
    p_rows = [[Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], [Fraction(1, 4)] * 2 + [Fraction(1, 2)]] * 2
    drafts = (1, 2, 0)
    q_rows = [[Fraction(int(x == d)) for x in range(3)] for d in drafts]
    hs = thresholds_of(p_rows, q_rows, drafts)
    for i in range(1, 4):
        tail = Fraction(1)
        for h in hs[i - 1 :]:
            tail *= 1 - h
        reach = Fraction(1)
        for j in range(i):
            reach *= p_rows[j][drafts[j]]
        assert 1 - tail == reach


def test_a_test_on_its_threshold_is_decided_exactly():
    """eta exactly at h_k = rho_k fails (eta < h is strict); one float64 step below passes."""
    p = torch.tensor([[0.5, 0.5], [0.25, 0.75]], dtype=torch.float64)
    rows = Rows(
        p, torch.tensor([0]), p.new_zeros(0, 2), torch.tensor([[-1]]), torch.tensor([[0]]), torch.tensor([1]), 2
    )
    at = RejectionSampler().decide_block(rows, torch.tensor([[0.5]], dtype=torch.float64))
    below = RejectionSampler().decide_block(
        rows, torch.tensor([[float(torch.nextafter(torch.tensor(0.5), torch.tensor(0.0)))]], dtype=torch.float64)
    )
    assert at.accepted.tolist() == [0] and below.accepted.tolist() == [1]
    # at a tie in float64 the rational path decides: eta = h_1 exactly at an inner threshold
    assert block.exact_block_test(0.5, rows, 0, 0) is False


def test_every_acceptance_uniform_of_the_block_is_read():
    """A is the longest passed prefix: a failed test before a passed one does not stop it."""
    passed = torch.tensor([[False, True, False], [True, False, False], [False, False, False]])
    assert block.longest_passed(passed).tolist() == [2, 1, 0]


def test_inner_thresholds_are_decided_exactly_at_and_beside_h():
    """eta at the float nearest h_1 and one float step either side: the batched test (which falls
    back to rationals near h) and the rational test agree with h computed in Fractions."""
    gen = torch.Generator().manual_seed(11)
    p = random_rows(gen, 3, 4)
    q = random_rows(gen, 2, 4)
    first = int((q[0] - p[0]).argmax())  # p(d_1) < q(d_1): rho_1 < 1, h_1 strictly inside (0, 1)
    drafts = [first, 2]
    rows = Rows(p, torch.tensor([0]), q, torch.tensor([[0, 1]]), torch.tensor([drafts]), torch.tensor([2]), 4)
    p_rows = [[Fraction(x) for x in r.tolist()] for r in p]
    q_rows = [[Fraction(x) for x in r.tolist()] for r in q]
    h1 = thresholds_of(p_rows, q_rows, tuple(drafts))[0]
    at = torch.tensor(float(h1), dtype=torch.float64)
    for eta in (
        torch.nextafter(at, torch.tensor(0.0, dtype=torch.float64)),
        at,
        torch.nextafter(at, torch.tensor(1.0, dtype=torch.float64)),
    ):
        expected = Fraction(float(eta)) < h1
        assert block.exact_block_test(float(eta), rows, 0, 0) is expected
        rho = block.prefix_ratios(rows.p_draft(), rows.q_draft(torch.float64), rows.valid())
        num, den = block.thresholds(rho, block.residual_masses(rows, rho), rows.k_lens)
        eta_row = torch.tensor([[float(eta), 0.999]], dtype=torch.float64)
        assert bool(block.block_tests(eta_row, num, den, rows)[0, 0]) is expected
