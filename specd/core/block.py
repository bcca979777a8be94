"""Block verification (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro and Suresh, "Block
Verification Accelerates Speculative Decoding", ICLR 2025, Algorithm 2) as pure tensor functions
over a round's packed rows (``specd.core.rows.Rows``; shapes and p, q, d as defined there).

The drafts d_1..d_k are judged as a block. With p_i the target's row before d_i (p_{k+1}: after
the last) and q_i the row d_i was drawn from (a lookup's: the point mass on d_i), define

    rho_0 = 1,  rho_i = min(1, rho_{i-1} p_i(d_i) / q_i(d_i))       the running prefix ratio
    Z_i = sum_x [rho_i p_{i+1}(x) - q_{i+1}(x)]_+   (1 <= i < k)      the residual mass after i drafts
    h_i = Z_i / (Z_i + 1 - rho_i)   (1 <= i < k),   h_k = rho_k       the thresholds

and read one acceptance uniform eta_i per draft. The accepted length is

    A = the largest i with eta_i < h_i   (0 if there is none),

every one of the k tests counting, not only those before the first failure: h_i is the chance
that the best continuation of the block is to stop after d_i, given that the longer prefixes were
refused, and the induction that makes the rule exact runs from the longest prefix down. After
d_1..d_A comes the terminal token: the bonus from p_{k+1} when A = k, otherwise the correction from
normalize([rho_A p_{A+1} - q_{A+1}]_+) (at A = 0 the token-wise correction [p_1 - q_1]_+).
Sun et al. prove (Theorem 1) that the emitted tokens have the target's law for every draft law,
and (Theorem 2) that E[A] is at least the token-wise rule's for every p, q and k; the oracle
checks both exactly (``specd verify-oracle --rule block``).

A lookup's point mass is a draft law like any other. There rho_i = p_1(d_1) ... p_i(d_i),
Z_i = rho_i (1 - p_{i+1}(d_{i+1})), and the correction after A drafts is p_{A+1} without d_{A+1},
renormalized: P(A >= i) = rho_i and the correction are the token-wise rule's, so block verification
of a lookup is exact and gains nothing (the outcome of a given set of uniforms may differ; the law
does not).

Arithmetic: rho, Z and the residual are formed in float64 (the rows' entries convert exactly); a
test eta_i < h_i is decided as eta_i (Z_i + 1 - rho_i) < Z_i, and wherever the two sides lie within
a bound of float64's rounding of each other it is decided again in exact rational arithmetic from
the rows themselves (``exact_block_test``), so every test equals the exact rule's.
"""

from __future__ import annotations

from fractions import Fraction

import torch

from specd.core.checks import flagged
from specd.core.probability import residual_floor
from specd.core.rows import Rows
from specd.core.transfer import to_device

EPS = torch.finfo(torch.float64).eps
RESIDUAL_CHUNK = 1 << 21  # row entries formed at once for the residual masses


def prefix_ratios(p_draft: torch.Tensor, q_draft: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """rho_i = min(1, rho_{i-1} p_i(d_i) / q_i(d_i)), rho_0 = 1: p_draft, q_draft float[B, K] (q > 0
    where valid), valid bool[B, K] -> float64[B, K] (0 past k_b)."""
    p64, q64 = p_draft.to(torch.float64), q_draft.to(torch.float64)
    ratio = torch.where(valid, p64 / torch.where(valid, q64, torch.ones_like(q64)), torch.zeros_like(p64))
    rho = torch.zeros_like(ratio)
    running = torch.ones(ratio.shape[0], dtype=torch.float64, device=ratio.device)
    for i in range(ratio.shape[1]):  # K steps: the min makes it a scan, not a cumulative product
        running = torch.clamp(running * ratio[:, i], max=1.0)
        rho[:, i] = running
    return torch.where(valid, rho, torch.zeros_like(rho))


def residual_rows(rows: Rows, positions: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[scale p_{i+1} - q_{i+1}]_+ for pairs (request b, 0-based draft index i): positions int64[N, 2]
    (b, i), i < k_b, scale float64[N] -> (the residual rows float64[N, V], their masses float64[N]).
    q_{i+1} is the draft's row of d_{i+1}, or its point mass for a lookup."""
    p, start = rows.target()
    b, i = positions[:, 0], positions[:, 1]
    out = p[start[b] + i].to(torch.float64) * scale.unsqueeze(1)
    index, token = rows.q_index[b, i], rows.draft[b, i]
    model = index >= 0
    # Masked, not selected: selecting the model rows would read from the device which rows they are.
    if rows.q.shape[0]:  # a shape: known on the host
        out -= rows.q[index.clamp_min(0)].to(torch.float64) * model.unsqueeze(1)
    out.scatter_add_(1, token.clamp_min(0).unsqueeze(1), -(~model).to(torch.float64).unsqueeze(1))
    out.clamp_(min=0.0)
    return out, out.sum(dim=-1)


def residual_masses(rows: Rows, rho: torch.Tensor) -> torch.Tensor:
    """Z_i = sum_x [rho_i p_{i+1}(x) - q_{i+1}(x)]_+ for every 1 <= i < k_b: rho float64[B, K] ->
    float64[B, K] (0 where i >= k_b). Formed a few rows at a time: a round's rows at a large
    vocabulary would otherwise make an [R, V] float64 temporary."""
    k_max = rows.draft.shape[1]
    z = torch.zeros_like(rho)
    if k_max < 2:
        return z
    # (b, i-1): d_i has a successor d_{i+1}; from the drafts per request the host knows (no read)
    pairs = to_device([(b, i) for b, k in enumerate(rows.ks()) for i in range(k - 1)], torch.int64, rho.device)
    pairs = pairs.reshape(-1, 2)
    step = max(1, RESIDUAL_CHUNK // max(rows.vocab, 1))
    for s in range(0, len(pairs), step):
        chunk = pairs[s : s + step]
        b, i = chunk[:, 0], chunk[:, 1]
        z[b, i] = residual_rows(rows, torch.stack([b, i + 1], dim=1), rho[b, i])[1]
    return z


def thresholds(rho: torch.Tensor, z: torch.Tensor, k_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The tests' two sides: eta_i < h_i iff eta_i * den_i < num_i, with num_i = Z_i and
    den_i = Z_i + 1 - rho_i for i < k_b, num_k = rho_k and den_k = 1, and at padding 0 < 0 (never
    passes). rho, z float64[B, K], k_lens int64[B] -> (num, den) float64[B, K]."""
    k_max = rho.shape[1]
    column = torch.arange(k_max, device=rho.device).unsqueeze(0)
    last = column == (k_lens - 1).unsqueeze(1)
    inner = column < (k_lens - 1).unsqueeze(1)
    num = torch.where(last, rho, torch.where(inner, z, torch.zeros_like(z)))
    den = torch.where(inner, z + 1.0 - rho, torch.ones_like(z))
    return num, den


def block_tests(eta: torch.Tensor, num: torch.Tensor, den: torch.Tensor, rows: Rows) -> torch.Tensor:
    """eta_i < h_i for every draft, exactly: eta float64[B, K], num, den float64[B, K] (``thresholds``)
    -> bool[B, K], False past k_b. Decided in float64, and again in rational arithmetic from the rows
    wherever the two sides are within the rounding bound of rho (k products), Z (V terms) and the
    products here (``exact_block_test``)."""
    eta = eta.to(device=num.device, dtype=torch.float64)
    lhs, rhs = eta * den, num
    k_max = num.shape[1]
    bound = 8 * (rows.vocab + 4 * k_max + 8) * EPS * (1.0 + num.abs() + den.abs())
    valid = rows.valid()
    passed = valid & (lhs < rhs)
    near = valid & ((lhs - rhs).abs() <= bound)
    if flagged(near):
        for b, i in near.nonzero().tolist():
            passed[b, i] = exact_block_test(float(eta[b, i]), rows, b, i)
    return passed


def exact_block_test(eta: float, rows: Rows, b: int, i: int) -> bool:
    """eta < h_{i+1} for request b's 0-based draft i, in exact rational arithmetic from the float
    rows (every float converts exactly to a Fraction)."""
    k = int(rows.k_lens[b])
    p, start = rows.target()
    first = int(start[b])

    def p_row(j: int) -> list[Fraction]:
        return [Fraction(x) for x in p[first + j].to(torch.float64).tolist()]

    def q_row(j: int) -> list[Fraction]:
        index, token = int(rows.q_index[b, j]), int(rows.draft[b, j])
        if index < 0:
            return [Fraction(int(x == token)) for x in range(rows.vocab)]
        return [Fraction(x) for x in rows.q[index].to(torch.float64).tolist()]

    def q_at(j: int, d: int) -> Fraction:
        index = int(rows.q_index[b, j])
        return Fraction(1) if index < 0 else Fraction(float(rows.q[index, d]))

    rho = Fraction(1)
    for j in range(i + 1):  # only the drafts' entries: whole rows only for the residual below
        d = int(rows.draft[b, j])
        rho = min(Fraction(1), rho * Fraction(float(p[first + j, d])) / q_at(j, d))
    u = Fraction(eta)
    if i == k - 1:
        return u < rho
    if rho == 1:  # h = Z / Z = 1, and 1 at Z = 0 too (then p_{i+2} = q_{i+2}: nothing to correct)
        return u < 1
    z = sum((max(Fraction(0), rho * a - c) for a, c in zip(p_row(i + 1), q_row(i + 1))), Fraction(0))
    return u * (z + 1 - rho) < z


def longest_passed(passed: torch.Tensor) -> torch.Tensor:
    """A = the largest i with eta_i < h_i (1-based), 0 if none: passed bool[B, K] -> int64[B]."""
    k_max = passed.shape[1]
    index = torch.arange(1, k_max + 1, device=passed.device).unsqueeze(0)
    if not k_max:
        return torch.zeros(passed.shape[0], dtype=torch.int64, device=passed.device)
    return torch.where(passed, index, torch.zeros_like(index)).amax(dim=1)


def block_terminal_rows(rows: Rows, accepted: torch.Tensor, rho: torch.Tensor) -> torch.Tensor:
    """The terminal token's law up to normalization: p_{k+1} after k accepted drafts, else
    [rho_A p_{A+1} - q_{A+1}]_+ (rho_0 = 1), or p_{A+1} where that residual has no usable mass
    (rounding only: see ``residual_floor``). accepted int64[B], rho float64[B, K] -> float64[B, V]."""
    is_bonus = accepted >= rows.k_lens
    out = rows.p_at(accepted).to(torch.float64)
    if not rows.draft.shape[1]:  # no request drafted: every terminal is a bonus
        return out
    # Every row's residual, the bonus rows' discarded (no read of which rows correct): at a position
    # each request has (A itself for a correction).
    a = torch.minimum(accepted, (rows.k_lens - 1).clamp_min(0))
    before = rho.gather(1, (a - 1).clamp_min(0).unsqueeze(1)).squeeze(1)
    scale = torch.where(a > 0, before, torch.ones_like(before))
    b = torch.arange(len(a), device=a.device)
    residual, mass = residual_rows(rows, torch.stack([b, a], dim=1), scale)
    usable = (mass > residual_floor(torch.float64)) & ~is_bonus  # the dtype the residual is formed in
    return torch.where(usable.unsqueeze(1), residual, out)
