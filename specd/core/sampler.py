"""The exact accept/reject/correction rule as pure, batched tensor functions.

This module is the rule's only home. A round's rows are packed (``specd.core.rows.Rows``,
where p, q, q_index, draft and k_lens and their shapes are defined), and the rule reads

    accept_u   float64[B, K]     acceptance uniforms U_i in [0, 1)
    terminal_u float64[B]        one uniform for the correction/bonus draw

The rule: accept d_i iff U_i < min(1, p_i(d_i) / q_i(d_i)), testing i = 1, 2, ...
and stopping at the first rejection. At that first rejection the correction
token is drawn from normalize([p_i - q_i]_+) and the round ends; if all k drafts
pass, the bonus token is drawn from p_{k+1}. Why this is exact: at one position,
the accept branch puts mass min(p, q) on each token and the rejection branch
puts (1 - sum min(p, q)) * [p - q]_+ / Z = [p - q]_+ on it, which adds up to p;
by induction over the accepted prefix the emitted block has the target's law.
A lookup's draft is the point mass q = e_d: its ratio is p(d) / 1 and its
correction [p - e_d]_+ is p with d removed; no row of q is ever stored for it.

Temperature 0 (greedy) is the same rule on point-mass rows p_i = onehot(argmax_i):
the ratio is 1 when d_i is the argmax and 0 otherwise, so every test is decided
without a uniform, and the correction and the bonus are both the point mass on
the argmax at the first mismatch. ``decide_greedy`` computes exactly that without
materializing the point-mass rows.

``RejectionSampler`` groups the steps as methods: they are the sampler's
extension points (see ``specd/core/engine.py``), the only way the failure lab
breaks the rule.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cached_property
from itertools import accumulate

import torch

from specd.core import block
from specd.core.checks import flagged
from specd.core.gumbel import race_tokens, request_key
from specd.core.probability import residual_floor
from specd.core.record import record
from specd.core.rows import Rows, constant, per_request
from specd.core.tree import ROOT, leaf_of, walk
from specd.errors import ImpossibleProposal


def sample_categorical(rows: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling, exact. rows float[B, V] (any float dtype, need not be normalized),
    u float64[B] in [0, 1) -> int64[B].

    The token is the first index whose cumulative mass exceeds u * total; it always
    has positive mass. The cumulative sums run in float64 (rows of any dtype convert
    exactly), and where u * total lies within a few float64 steps of the chosen
    interval's ends the choice is made again in exact rational arithmetic, so it
    equals the exact rule for every uniform, u near 0 and near 1 included.
    """
    idx, near = categorical_draw(rows, u)
    if flagged(near):
        idx = exact_redraw(rows, u, idx, near.nonzero().flatten().tolist())
    return idx


def categorical_draw(rows: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``sample_categorical`` without reading from the device: -> (the float64 choice int64[B], near
    bool[B]: the rows whose choice must be made again exactly, ``exact_redraw``)."""
    rows64 = rows.to(torch.float64)
    cum = rows64.cumsum(dim=-1)  # float64[B, V]: the mass up to and including each entry
    target = u.to(device=rows.device, dtype=torch.float64).unsqueeze(-1) * cum[:, -1:]  # float64[B, 1]
    last_positive = (rows64 > 0).to(torch.int64).cumsum(-1).argmax(dim=-1, keepdim=True)
    idx = torch.minimum(torch.searchsorted(cum, target, right=True), last_positive)  # int64[B, 1]
    # the interval [lo, hi) drawn, float64[B, 2], from the sums with a leading 0 (lo of the first entry)
    ends = torch.nn.functional.pad(cum, (1, 0)).gather(1, torch.cat([idx, idx + 1], dim=1))
    # A float64 prefix sum of n non-negative terms is within n * eps of its exact value (relative),
    # in any summation order; u * total is within eps. Twice that is the slack, for lo (a sum of
    # idx terms) and hi (idx + 1). A prefix of zeros is exact (slack 0), so a one-hot row (greedy)
    # never takes the rational path.
    terms = torch.cat([idx, idx + 1], dim=1).to(torch.float64)
    slack = 2 * torch.finfo(torch.float64).eps * (terms * ends + target)
    return idx.squeeze(-1), ((ends - target).abs() < slack).any(dim=-1)


def exact_redraw(rows: torch.Tensor, u: torch.Tensor, idx: torch.Tensor, near: list[int]) -> torch.Tensor:
    """idx int64[B] with the rows listed in ``near`` chosen again in exact rational arithmetic."""
    idx = idx.clone()
    for b in near:
        idx[b] = _exact_inverse_cdf(rows[b].to(torch.float64).tolist(), float(u[b]))
    return idx


def _exact_inverse_cdf(row: list[float], u: float) -> int:
    """The first index whose exact cumulative mass exceeds u * total, skipping zero-mass entries."""
    masses = [Fraction(x) for x in row]
    return first_index_above(masses, Fraction(u) * sum(masses))


def first_index_above(masses: list[Fraction], target: Fraction) -> int:
    """The first index whose cumulative mass exceeds ``target``, skipping zero-mass entries
    (u near 1: the last index with mass). Exact: masses and target are Fractions."""
    below, last = Fraction(0), 0
    for i, m in enumerate(masses):
        if m > 0:
            last = i
            below += m
            if below > target:
                return i
    return last


def exact_less(u: torch.Tensor, num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """u < num / den for every element, exactly. u float64, num and den of any float dtype
    (den > 0 where it matters) -> bool. Decided in float64, and again in exact rational
    arithmetic wherever u lies within two float64 steps of the rounded quotient."""
    u64, num64, den64 = u.to(torch.float64), num.to(torch.float64), den.to(torch.float64)
    ratio = num64 / torch.where(den64 > 0, den64, torch.ones_like(den64))
    less = u64 < ratio
    step = torch.nextafter(ratio, torch.full_like(ratio, float("inf"))) - ratio
    near = (den64 > 0) & ((u64 - ratio).abs() <= 2 * step)
    if flagged(near):
        for i in near.nonzero().tolist():
            i = tuple(i)
            less[i] = Fraction(u64[i].item()) * Fraction(den64[i].item()) < Fraction(num64[i].item())
    return less


@record
class Tested:
    """What a round's nodes were tested against (``RejectionSampler.tested_rows``; B requests, K the
    most nodes): ``p_draft`` float[B, K] the tested row's mass on each node's token; a later sibling's
    tested row is ``later`` float64[M, V] at ``later_index`` int64[B, K] (-1: a first child, tested
    against its parent's row)."""

    p_draft: torch.Tensor
    later: torch.Tensor | None = None
    later_index: torch.Tensor | None = None

    def before(self, node: torch.Tensor, parent_row: torch.Tensor) -> torch.Tensor:
        """The row node int64[B] (-1: none) was tested against, float[B, V]: ``parent_row`` (its
        parent's target row) for a first child, a bonus or no node, else its sibling residual."""
        if self.later is None or self.later_index is None:
            return parent_row
        at = self.later_index.gather(1, node.clamp_min(0).unsqueeze(1)).squeeze(1)
        at = torch.where(node >= 0, at, -1)
        return torch.where((at >= 0).unsqueeze(1), self.later[at.clamp_min(0)], parent_row.to(torch.float64))


@record
class Decision:
    """What a rule decides for a batch of B requests (K: the most drafts of any request)."""

    accepted: torch.Tensor  # int64[B]  accepted draft prefix length A
    # float64[B, V] the terminal (correction or bonus) token's law, up to normalization (read it as
    # ``terminal_rows``); None where the rule decided ``terminal`` itself: the law is its point mass
    law: torch.Tensor | None
    is_bonus: torch.Tensor  # bool[B]   A == k_len: the terminal is a bonus, else a correction
    ratios: torch.Tensor  # float[B, K] min(1, p(d)/q(d)), 0 at padding (reported: log, statistics)
    p_draft: torch.Tensor  # float[B, K] p_i(d_i)
    q_draft: torch.Tensor  # float[B, K] q_i(d_i)
    # int64[B] the terminal token: where the rule decides it itself (greedy, the invariant rule;
    # terminal_rows is then its point mass) from the start, else once drawn (specd.core.rules)
    terminal: torch.Tensor | None = None
    uniforms: torch.Tensor | None = None  # float64[B, K] the acceptance uniforms read (None: none read)
    # int64[B] the last accepted node of each request's tree (-1: none); on a chain A - 1
    leaf: torch.Tensor | None = None
    vocab: int = 0  # V, the point mass's width where ``law`` is None

    @cached_property
    def terminal_rows(self) -> torch.Tensor:
        """The terminal token's law float64[B, V], up to normalization: ``law``, or the point mass on
        ``terminal`` (built on first read: a round that reads only the ids never makes B x V floats)."""
        if self.law is not None:
            return self.law
        if self.terminal is None:
            raise TypeError("a Decision without a law must carry its terminal tokens")
        rows = torch.zeros(len(self.terminal), self.vocab, dtype=torch.float64, device=self.terminal.device)
        return rows.scatter_(1, self.terminal.unsqueeze(1), 1.0)


class RejectionSampler:
    """The production rule. Every method is a pure function of its tensors."""

    name = "rejection_sampler"

    def acceptance_ratios(self, p_draft: torch.Tensor, q_draft: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """p_draft, q_draft float[B, K], valid bool[B, K] -> min(1, p/q) float64[B, K], 0 where invalid.

        The ratio is reported (log, statistics); the decision itself is ``acceptance_tests``.
        """
        self.refuse_impossible(q_draft, valid)
        p64, q64 = p_draft.to(torch.float64), q_draft.to(torch.float64)
        ratio = torch.where(valid, p64 / torch.where(valid, q64, torch.ones_like(q64)), 0.0)
        return ratio.clamp(max=1.0)

    def refuse_impossible(self, q_draft: torch.Tensor, valid: torch.Tensor) -> None:
        """q_draft float[B, K], valid bool[B, K]: a proposed token with q(d) = 0 cannot have been drawn
        from q (ImpossibleProposal; a deferred check, specd.core.checks)."""
        if flagged(valid & (q_draft <= 0)):
            raise ImpossibleProposal("a proposed token has q(d) = 0: it cannot have been sampled from q")

    def acceptance_tests(
        self, p_draft: torch.Tensor, q_draft: torch.Tensor, accept_u: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """U_i < min(1, p_i(d_i) / q_i(d_i)) per draft -> bool[B, K], exactly, for every uniform and
        row dtype: the uniform is never rounded to the rows' dtype (a float32 U of 1 - 2^-26
        would round to 1.0 and refuse a sure accept); p >= q passes for every U < 1 without a
        division; otherwise U < p/q is decided exactly (``exact_less``)."""
        u = accept_u.to(device=p_draft.device, dtype=torch.float64)
        sure = p_draft.to(torch.float64) >= q_draft.to(torch.float64)
        return valid & (sure | exact_less(u, p_draft, q_draft))

    def count_accepted(self, passed: torch.Tensor) -> torch.Tensor:
        """Length of the accepted prefix: the first failed test stops the round. bool[B, K] -> int64[B]."""
        return passed.to(torch.int64).cumprod(dim=-1).sum(dim=-1)

    def correction_rows(self, p_rows: torch.Tensor, q_rows: torch.Tensor) -> torch.Tensor:
        """[p - q]_+, the correction's law up to normalization: p_rows, q_rows float[B, V] -> float64[B, V].

        Formed in float64, where the difference of two float32 (or bfloat16, float16)
        rows is exact unless an entry of q is below 2^-29 of its p. Returned
        unnormalized: sampling divides by the mass implicitly (inverse CDF of the
        row), so no rounding from a division enters the draw. A residual whose mass
        is not materially positive is never used: the row falls back to p (see
        ``residual_floor``).
        """
        p64 = p_rows.to(torch.float64)
        residual = (p64 - q_rows.to(torch.float64)).clamp_min(0.0)
        usable = residual.sum(dim=-1, keepdim=True) > residual_floor(torch.float64)  # the dtype it is formed in
        return torch.where(usable, residual, p64)

    def terminal_rows(self, p_at: torch.Tensor, q_at: torch.Tensor, is_bonus: torch.Tensor) -> torch.Tensor:
        """The terminal token's law (up to normalization): p_{k+1} for a bonus, the correction for a rejection.

        p_at float[B, V] = p_{A+1}; q_at float[B, V] = q_{A+1} where a draft was
        rejected (for a bonus, the last draft's row q_k, which the rule never reads);
        is_bonus bool[B] -> float64[B, V].
        """
        return torch.where(is_bonus.unsqueeze(-1), p_at.to(torch.float64), self.correction_rows(p_at, q_at))

    def decide(self, rows: Rows, accept_u: torch.Tensor) -> Decision:
        """Accepted paths and the terminal distribution per request (no terminal draw yet): each node is
        tested against what is left of its parent's row after its earlier siblings were refused
        (``tested_rows``), the walk descends into the first child that passes (``specd.core.tree.walk``),
        and where it ends the terminal is the bonus (a node without children) or the correction from
        what is left after the last child was refused. A chain's is the token-wise rule above."""
        valid = rows.valid()
        tested = self.tested_rows(rows)
        p_draft = tested.p_draft
        q_draft = rows.q_draft(p_draft.dtype)
        ratios = self.acceptance_ratios(p_draft, q_draft, valid)
        passed = self.acceptance_tests(p_draft, q_draft, accept_u, valid)
        accepted, leaf, last = self.walk_tree(passed, rows)
        is_bonus = last < 0
        p_at = tested.before(last, rows.p_at(leaf + 1))
        q_at = rows.q_at(torch.where(is_bonus, leaf, last).clamp_min(0), p_at.dtype) if rows.draft.shape[1] else p_at
        terminal_rows = self.terminal_rows(p_at, q_at, is_bonus)
        return Decision(accepted, terminal_rows, is_bonus, ratios, p_draft, q_draft, leaf=leaf)

    def walk_tree(self, passed: torch.Tensor, rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The walk down each request's tree (``specd.core.tree.walk``) from the nodes' tests passed
        bool[B, K] -> (A int64[B], the last accepted node int64[B] (-1: none), the last child of that
        node, which was refused, int64[B] (-1: it has none, the terminal is a bonus))."""
        if rows.tree is None:  # chains: the walk is the drafts in order, the refused child node A
            accepted = self.count_accepted(passed & rows.valid())
            return accepted, accepted - 1, torch.where(accepted < rows.k_lens, accepted, ROOT)
        tree = rows.structure()
        level_passed, along = walk(passed, rows.valid(), tree)
        accepted = self.count_accepted(level_passed)
        leaf = leaf_of(along, accepted)
        return accepted, leaf, tree.last_child.gather(1, (leaf + 1).unsqueeze(1)).squeeze(1)

    def tested_rows(self, rows: Rows) -> Tested:
        """What each node is tested against: a first child, its parent's row; a later sibling, what
        is left of it once every earlier sibling was refused, normalize([p' - q']_+) with p' and q'
        the previous sibling's tested row and q row (``correction_rows``, the same residual a
        correction is drawn from). Only trees with siblings have later ones."""
        p_draft = rows.p_draft()
        tree = rows.structure()
        later = [(b, n) for b, t in enumerate(tree.trees) for n in range(len(t)) if t.ranks[n] > 0]
        if not later:
            return Tested(p_draft)
        p, _ = rows.target()
        b_all, k_max = rows.draft.shape
        starts = list(accumulate((k + 1 for k in rows.ks()), initial=0))  # each request's first row of p
        index = torch.full((b_all, k_max), -1, dtype=torch.int64)  # each later sibling's row of ``residual``
        residual: list[torch.Tensor] = []
        for rank in range(1, max(max(t.ranks, default=0) for t in tree.trees) + 1):
            here = [(b, n) for b, n in later if tree.trees[b].ranks[n] == rank]
            prev = [(b, tree.trees[b].children[tree.trees[b].parents[n]][rank - 1]) for b, n in here]
            base = torch.stack(
                [
                    p[starts[b] + tree.trees[b].parents[m] + 1].to(torch.float64)
                    if index[b, m] < 0
                    else residual[int(index[b, m])]
                    for b, m in prev
                ]
            )
            q_prev = rows.q_at_nodes([b for b, _ in prev], [m for _, m in prev], torch.float64)
            left = self.correction_rows(base, q_prev)
            for j, (b, n) in enumerate(here):
                index[b, n] = len(residual) + j
            residual.extend((left / left.sum(dim=-1, keepdim=True)).unbind(0))
        rows_at = torch.stack(residual)
        index = index.to(p.device)
        picked = rows_at[index.clamp_min(0), rows.draft.clamp_min(0)]
        p_draft = torch.where(index >= 0, picked, p_draft.to(torch.float64))
        return Tested(p_draft, rows_at, index)

    # -- block verification (specd.core.block: the rule in words, its terms and its arithmetic)
    def block_thresholds(self, rows: Rows, rho: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The tests' sides (num, den) float64[B, K]: eta_i < h_i iff eta_i * den_i < num_i."""
        return block.thresholds(rho, block.residual_masses(rows, rho), rows.k_lens)

    def block_accepted(self, passed: torch.Tensor) -> torch.Tensor:
        """A from the tests bool[B, K]: the longest passed prefix length, every test counting -> int64[B]."""
        return block.longest_passed(passed)

    def block_terminal_rows(self, rows: Rows, accepted: torch.Tensor, rho: torch.Tensor) -> torch.Tensor:
        """The terminal's law: p_{k+1}, or [rho_A p_{A+1} - q_{A+1}]_+ -> float64[B, V]."""
        return block.block_terminal_rows(rows, accepted, rho)

    def decide_block(self, rows: Rows, accept_u: torch.Tensor) -> Decision:
        """Block verification's accepted lengths and terminal laws (no terminal draw yet); accept_u
        float64[B, K] are the eta_i, every one of a request's k read."""
        valid = rows.valid()
        p_draft = rows.p_draft()
        q_draft = rows.q_draft(p_draft.dtype)
        ratios = self.acceptance_ratios(p_draft, q_draft, valid)  # refuses q(d) = 0; reported per draft
        rho = block.prefix_ratios(p_draft, q_draft, valid)
        num, den = self.block_thresholds(rows, rho)
        accepted = self.block_accepted(block.block_tests(accept_u, num, den, rows))
        terminal_rows = self.block_terminal_rows(rows, accepted, rho)
        return Decision(accepted, terminal_rows, accepted >= rows.k_lens, ratios, p_draft, q_draft)

    def decide_greedy(self, target_argmax: torch.Tensor, rows: Rows) -> Decision:
        """The rule at target temperature 0; target_argmax int64[B, K+1] is the argmax of p_1..p_{K+1}.

        p_i(d_i) is 1 when d_i is the argmax and 0 otherwise, so U_i < ratio_i is
        decided for every U_i in [0, 1) and no uniform is read (U = 0 stands in).
        """
        return self.match_targets(target_argmax, rows)

    def match_targets(self, targets: torch.Tensor, rows: Rows) -> Decision:
        """Accept a node while it equals the target's decided token at its parent (targets
        int64[B, K+1], one per target row: the root's, then each node's), descending into the
        matching child; where none matches emit the target's token there, or after a node without
        children the bonus: greedy's rule and the invariant rule's (on a chain: accept d_i while it
        equals x_i, then emit x at the first mismatch, or the bonus x_{k+1})."""
        draft = rows.draft
        if draft.shape[1] == 0:  # no request drafted: nothing is tested, each emits its root's token (a bonus)
            return self.root_targets(targets[:, 0], rows)
        valid = rows.valid()
        q_draft = rows.q_draft(rows.q.dtype)
        # each node's parent's target: a chain's d_i is scored by row i - 1 (the first K of K + 1)
        parent_target = targets[:, :-1] if rows.tree is None else targets.gather(1, rows.structure().parent + 1)
        matched = (draft == parent_target) & valid  # p(d) = 1 here, 0 elsewhere
        p_draft = matched.to(q_draft.dtype)
        self.refuse_impossible(q_draft, valid)
        ratios = matched.to(torch.float64)  # min(1, p/q) for p in {0, 1} and q > 0: p itself
        accepted, leaf, last = self.walk_tree(matched, rows)
        argmax_at = targets.gather(1, (leaf + 1).unsqueeze(1)).squeeze(1)
        return Decision(
            accepted, None, last < 0, ratios, p_draft, q_draft, terminal=argmax_at, leaf=leaf, vocab=rows.vocab
        )

    def root_targets(self, terminal: torch.Tensor, rows: Rows) -> Decision:
        """``match_targets`` where no request drafted (K = 0): terminal int64[B], each request's decided
        token at its root, is its bonus; no node is accepted or tested."""
        b, device = len(terminal), terminal.device
        none = constant(0.0, (b, 0), rows.q.dtype, device)
        return Decision(
            constant(0, (b,), torch.int64, device),  # A: none accepted
            None,
            constant(True, (b,), torch.bool, device),  # the root's token is a bonus
            constant(0.0, (b, 0), torch.float64, device),
            none,
            none,
            terminal=terminal,
            leaf=constant(-1, (b,), torch.int64, device),
            vocab=rows.vocab,
        )

    # -- the invariant rule (specd.core.gumbel): every emitted token is the target's Gumbel-max token
    def noise_key(self, state) -> int:
        """The request's noise key: a function of (seed, request id) only."""
        return request_key(state.rng.seed, state.request_id)

    def draft_noise_key(self, state) -> int:
        """The key a model draft proposes with: the target's (shared noise couples them)."""
        return self.noise_key(state)

    def noise_position(self, state, offset: int) -> int:
        """The output position a round's row ``offset`` (0: its first) stands at for ``state``: the
        noise is keyed by it, never by the round, so the text does not depend on how positions fall
        into rounds."""
        return len(state.new_tokens) + offset

    def decide_invariant(self, rows: Rows, states) -> Decision:
        """The invariant rule: the target's Gumbel-max token x_i at each of the round's positions
        (each request's noise at its own output positions); accept d_i while d_i == x_i, then emit
        x at the first mismatch (or the bonus x_{k+1}). No uniform is read."""
        return self.match_targets(self.race_targets(rows, states), rows)

    def race_targets(self, rows: Rows, states) -> torch.Tensor:
        """The target's Gumbel-max token at each of the round's target rows, raced over the real rows
        only, each under the noise of the output position it scores (a node of depth j: the round's
        offset j) -> int64[B, K+1] (past a request's k_b + 1: 0, never read)."""
        k_lens = rows.ks()
        tree = rows.tree  # None: every proposal is a chain, whose rows stand at depths 0..k
        keys = [self.noise_key(s) for s, k in zip(states, k_lens) for _ in range(k + 1)]
        positions = [
            self.noise_position(s, depth)
            for b, (s, k) in enumerate(zip(states, k_lens))
            for depth in (tree.row_depths(b, k) if tree is not None else range(k + 1))
        ]
        return per_request(race_tokens(rows.target()[0], keys, positions), k_lens, rows.draft.shape[1])

    def sample_terminal(self, terminal_rows: torch.Tensor, terminal_u: torch.Tensor) -> torch.Tensor:
        """terminal_rows float[B, V], terminal_u float64[B] -> the correction/bonus tokens int64[B]."""
        return sample_categorical(terminal_rows, terminal_u)
