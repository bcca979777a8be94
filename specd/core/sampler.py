"""The exact accept/reject/correction rule as pure, batched tensor functions.

Shapes (B requests, K = max drafts in the batch, V vocabulary):

    p         float[B, K+1, V]  target processed rows p_1..p_{K+1} (rows past k_len+1 unused)
    q         float[B, K, V]    draft processed rows q_1..q_K that sampled the drafts
    draft     int64[B, K]       proposed tokens d_1..d_K, -1 past k_len
    k_lens    int64[B]          drafts per row (rows may differ; 0 is a plain target step)
    accept_u  float[B, K]       acceptance uniforms U_i in [0, 1)
    terminal_u float[B]         one uniform for the correction/bonus sample

Rule (0x03A-0x03H): accept d_i iff U_i < min(1, p_i(d_i) / q_i(d_i)); at the
first rejection emit a correction from normalize([p_i - q_i]_+) and stop; if
all k drafts pass, emit a bonus from p_{k+1}. Output tokens int64[B, K+1]
padded with -1, and accepted counts int64[B].

``RejectionSampler`` groups the steps as methods so the oracle's failure lab can
replace exactly one of them; the production behaviour lives only here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specd.errors import ImpossibleProposal

PAD = -1


def residual_floor(dtype: torch.dtype) -> float:
    """Below this a residual mass is treated as zero and never divided by.

    Under exact arithmetic a rejection implies q(d) > p(d), hence Z >= q(d) - p(d) > 0;
    a zero or denormal Z can only come from rounding, where the branch has
    (numerically) zero probability and sampling from p is the safe fallback.
    """
    return torch.finfo(dtype).tiny ** 0.5


def valid_positions(k_lens: torch.Tensor, k_max: int) -> torch.Tensor:
    """k_lens int64[B] -> bool[B, K]: True where a draft exists."""
    return torch.arange(k_max, device=k_lens.device).unsqueeze(0) < k_lens.unsqueeze(1)


def token_probabilities(rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """rows float[B, K, V], tokens int64[B, K] (-1 pad) -> float[B, K] (0 at padding)."""
    safe = tokens.clamp_min(0)
    picked = rows.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(tokens >= 0, picked, torch.zeros_like(picked))


def sample_categorical(rows: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling. rows float[B, V] (need not be normalized), u float[B] -> int64[B].

    The chosen index always has positive mass: it is the first index whose
    cumulative mass exceeds u * total, clamped to the last positive entry.
    """
    cdf = rows.cumsum(dim=-1)
    total = cdf[:, -1:]
    target = u.to(device=rows.device, dtype=rows.dtype).unsqueeze(-1) * total
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    last_positive = (rows > 0).to(torch.int64).cumsum(-1).argmax(dim=-1)
    return torch.minimum(idx, last_positive)


@dataclass(frozen=True)
class Decision:
    """Everything the rule decides before the terminal draw."""

    accepted: torch.Tensor  # int64[B]  accepted draft prefix length A
    terminal_rows: torch.Tensor  # float[B, V] distribution of the terminal token
    is_bonus: torch.Tensor  # bool[B]   A == k_len (terminal is a bonus, else a correction)
    ratios: torch.Tensor  # float[B, K] min(1, p(d)/q(d)), 0 at padding
    p_draft: torch.Tensor  # float[B, K] p_i(d_i)
    q_draft: torch.Tensor  # float[B, K] q_i(d_i)


class RejectionSampler:
    """The production rule. Every method is a pure function of its tensors."""

    name = "rejection_sampler"

    def acceptance_ratios(self, p_draft: torch.Tensor, q_draft: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """p_draft, q_draft float[B, K], valid bool[B, K] -> min(1, p/q) float[B, K], 0 where invalid."""
        if bool((valid & (q_draft <= 0)).any()):
            raise ImpossibleProposal("a proposed token has q(d) = 0: it cannot have been sampled from q")
        ratio = torch.where(valid, p_draft / torch.where(valid, q_draft, torch.ones_like(q_draft)), 0.0)
        return ratio.clamp(max=1.0)

    def count_accepted(self, ratios: torch.Tensor, accept_u: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Length of the accepted prefix: stop at the first U_i >= ratio_i. -> int64[B]."""
        passed = (accept_u.to(device=ratios.device, dtype=ratios.dtype) < ratios) & valid
        return passed.to(torch.int64).cumprod(dim=-1).sum(dim=-1)

    def correction_rows(self, p_rows: torch.Tensor, q_rows: torch.Tensor) -> torch.Tensor:
        """normalize([p - q]_+): p_rows, q_rows float[B, V] -> float[B, V].

        Negative residuals are clamped to 0; a residual whose mass is not
        materially positive is never divided by (see ``residual_floor``).
        """
        residual = (p_rows - q_rows).clamp_min(0.0)
        mass = residual.sum(dim=-1, keepdim=True)
        usable = mass > residual_floor(p_rows.dtype)
        return torch.where(usable, residual / torch.where(usable, mass, torch.ones_like(mass)), p_rows)

    def bonus_rows(self, p_next: torch.Tensor, q: torch.Tensor, k_lens: torch.Tensor) -> torch.Tensor:
        """The all-accepted branch samples p_{k+1}: p_next float[B, V] -> float[B, V]."""
        return p_next

    def decide(
        self,
        p: torch.Tensor,
        q: torch.Tensor,
        draft: torch.Tensor,
        k_lens: torch.Tensor,
        accept_u: torch.Tensor,
    ) -> Decision:
        """Accepted counts and the terminal distribution per row (no terminal draw yet)."""
        b, k_max = draft.shape
        valid = valid_positions(k_lens, k_max)
        p_draft = token_probabilities(p[:, :k_max], draft)
        q_draft = token_probabilities(q, draft)
        ratios = self.acceptance_ratios(p_draft, q_draft, valid)
        accepted = self.count_accepted(ratios, accept_u, valid)
        rows = torch.arange(b, device=p.device)
        p_at = p[rows, accepted]
        is_bonus = accepted >= k_lens
        if k_max > 0:
            q_at = q[rows, accepted.clamp(max=k_max - 1)]
            correction = self.correction_rows(p_at, q_at)
        else:
            correction = p_at
        bonus = self.bonus_rows(p_at, q, k_lens)
        terminal_rows = torch.where(is_bonus.unsqueeze(-1), bonus, correction)
        return Decision(accepted, terminal_rows, is_bonus, ratios, p_draft, q_draft)

    def sample_terminal(self, terminal_rows: torch.Tensor, terminal_u: torch.Tensor) -> torch.Tensor:
        return sample_categorical(terminal_rows, terminal_u)


def assemble(draft: torch.Tensor, accepted: torch.Tensor, terminal: torch.Tensor) -> torch.Tensor:
    """draft int64[B, K], accepted int64[B], terminal int64[B] -> tokens int64[B, K+1] padded with -1."""
    b, k_max = draft.shape
    cols = torch.arange(k_max + 1, device=draft.device).unsqueeze(0)
    padded = torch.cat([draft, torch.full((b, 1), PAD, dtype=draft.dtype, device=draft.device)], dim=1)
    out = torch.where(cols < accepted.unsqueeze(1), padded, torch.full_like(padded, PAD))
    return out.scatter(1, accepted.unsqueeze(1), terminal.unsqueeze(1))


def rejection_sample(
    p: torch.Tensor,
    q: torch.Tensor,
    draft: torch.Tensor,
    k_lens: torch.Tensor,
    accept_u: torch.Tensor,
    terminal_u: torch.Tensor,
    sampler: RejectionSampler | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole rule in one call -> (tokens int64[B, K+1] padded -1, accepted int64[B])."""
    sampler = sampler or RejectionSampler()
    decision = sampler.decide(p, q, draft, k_lens, accept_u)
    terminal = sampler.sample_terminal(decision.terminal_rows, terminal_u)
    return assemble(draft, decision.accepted, terminal), decision.accepted


def greedy_verify(
    target_argmax: torch.Tensor, draft: torch.Tensor, k_lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature 0: the argmax check (Stern et al.), no randomness.

    target_argmax int64[B, K+1] (argmax of p_1..p_{K+1}), draft int64[B, K] (-1 pad),
    k_lens int64[B] -> (tokens int64[B, K+1] padded -1, accepted int64[B]).
    Identical to ``rejection_sample`` on one-hot p rows.
    """
    k_max = draft.shape[1]
    valid = valid_positions(k_lens, k_max)
    match = (draft == target_argmax[:, :k_max]) & valid
    accepted = match.to(torch.int64).cumprod(dim=-1).sum(dim=-1)
    terminal = target_argmax.gather(1, accepted.unsqueeze(1)).squeeze(1)
    return assemble(draft, accepted, terminal), accepted
