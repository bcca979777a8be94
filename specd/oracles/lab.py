"""The failure lab: known-wrong variants the oracle must catch.

Each variant is the production engine with exactly one component replaced by a
broken subclass, through the engine's extension points (listed in
``specd/core/engine.py``): a sampler method, a layout method, the proposer, or
the transaction's processor staging. ``run_lab`` (in ``report``) runs the
oracle's checks on each and reports which check caught it and with what figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specd.core.layouts import ReplayFrontier, RetainedFrontier, Verified, make_layout
from specd.core.model import RowInput
from specd.core.probability import softmax
from specd.core.proposer import ModelProposer, NgramProposer, Proposal
from specd.core.sampler import RejectionSampler
from specd.core.transaction import RoundTransaction
from specd.oracles.rig import Rig


# -- broken samplers -----------------------------------------------------------------
class CorrectionFromP(RejectionSampler):
    def correction_rows(self, p_rows, q_rows):
        return p_rows


class CorrectionFromQ(RejectionSampler):
    def correction_rows(self, p_rows, q_rows):
        return q_rows


class ContinueAfterRejection(RejectionSampler):
    def count_accepted(self, ratios, accept_u, valid):
        return ((accept_u.to(ratios) < ratios) & valid).to(torch.int64).sum(dim=-1)


class BonusFromQ(RejectionSampler):
    """Draws the bonus from the last draft's row q_k instead of p_{k+1}."""

    def terminal_rows(self, p_at, q_at, is_bonus):
        usable = is_bonus & (q_at.sum(-1) > 0)  # a row with no drafts has no q_k
        return torch.where(usable.unsqueeze(-1), q_at, super().terminal_rows(p_at, q_at, is_bonus))


# -- broken layouts ------------------------------------------------------------------
def off_by_one(base: type) -> type:
    class OffByOne(base):
        def extract(self, logits, kv, state, k):
            v = super().extract(logits, kv, state, k)
            shifted = torch.cat([v.p_raw[1:], v.p_raw[-1:]])  # d_i scored by the row after its own
            return Verified(shifted, v.kv_draft, v.kv_frontier)

    return OffByOne


def commit_rejected(base: type) -> type:
    class CommitRejected(base):
        def rows_to_commit(self, accepted_emitted, terminal_emitted, branch_rows):
            return branch_rows

    return CommitRejected


class ReplayIntoRetainedCache(RetainedFrontier):
    """Materializes the frontier (cache holds F), then replays F again in the verification call."""

    name = "replay_frontier"

    def verification_input(self, state, drafts):
        start = len(state.cache_tokens)
        tokens = (state.output[-1], *drafts)
        return RowInput(state.slot, tokens, tuple(range(start, start + len(tokens))))

    def extract(self, logits, kv, state, k):
        return ReplayFrontier.extract(self, logits, kv, state, k)

    def rows_to_commit(self, accepted_emitted, terminal_emitted, branch_rows):
        return ReplayFrontier.rows_to_commit(self, accepted_emitted, terminal_emitted, branch_rows)


# -- broken proposer and transaction ------------------------------------------------------
class RawLogitsAsQ(ModelProposer):
    """Samples from the processed rows but records softmax of the raw draft logits as q."""

    def propose(self, states, ks, cache, draws, backend, dtype):
        proposal = super().propose(states, ks, cache, draws, backend, dtype)
        q = proposal.q.clone()
        for b, (state, drafts) in enumerate(zip(states, proposal.drafts)):
            for i in range(len(drafts)):
                raw = self.model.raw_logits(state.output + drafts[:i]).unsqueeze(0)
                q[b, i] = softmax(raw, backend, dtype)[0]
        return Proposal(proposal.drafts, q, proposal.sampled)


class NgramUniformQ(NgramProposer):
    """Records q as uniform instead of the point mass the lookup really is."""

    def propose(self, states, ks, cache, draws, backend, dtype):
        proposal = super().propose(states, ks, cache, draws, backend, dtype)
        q = torch.where(proposal.q.sum(-1, keepdim=True) > 0, 1.0 / self.vocab_size, 0.0).expand_as(proposal.q)
        return Proposal(proposal.drafts, q.to(dtype).contiguous(), proposal.sampled)


class AdvanceOverRejected(RoundTransaction):
    def stage_processor(self, state, emitted):
        for token in (*self.drafts, self.outcome.terminal):
            state = state.advance(token)
        return state


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    build: Callable[[Rig], Rig]


NGRAM_N = 2


def ngram_rig(rig: Rig) -> Rig:
    """The same fixture with prompt-lookup drafting and a prompt that repeats itself."""
    v = rig.vocab
    prompt = tuple(i % v for i in range(2 * v)) + (0,)
    return rig.but(proposer_factory=lambda r: NgramProposer(NGRAM_N, r.vocab), prompt=prompt)


def _layout_cls(rig: Rig) -> type:
    return type(make_layout(rig.layout_name))


VARIANTS: tuple[Variant, ...] = (
    Variant(
        "correction_from_p",
        "correction sampled from p instead of [p - q]_+",
        lambda r: r.but(sampler_cls=CorrectionFromP),
    ),
    Variant("correction_from_q", "correction sampled from q", lambda r: r.but(sampler_cls=CorrectionFromQ)),
    Variant(
        "continue_after_rejection",
        "acceptance tests continue past the first rejection",
        lambda r: r.but(sampler_cls=ContinueAfterRejection),
    ),
    Variant(
        "bonus_from_q", "bonus sampled from the draft's row instead of p_{K+1}", lambda r: r.but(sampler_cls=BonusFromQ)
    ),
    Variant(
        "logit_rows_off_by_one",
        "draft d_i scored with the logit row after its own",
        lambda r: r.but(layout_factory=off_by_one(_layout_cls(r))),
    ),
    Variant(
        "raw_draft_logits_as_q",
        "q recorded from raw draft logits after sampling from processed q",
        lambda r: r.but(proposer_factory=lambda rig: RawLogitsAsQ(rig.draft, rig.draft_policy)),
    ),
    Variant(
        "processor_advanced_over_rejected",
        "stateful processor advanced over rejected drafts",
        lambda r: r.but(transaction_cls=AdvanceOverRejected),
    ),
    Variant(
        "rejected_kv_committed",
        "K/V rows of rejected drafts committed",
        lambda r: r.but(layout_factory=commit_rejected(_layout_cls(r))),
    ),
    Variant(
        "frontier_replayed_into_cache",
        "frontier replayed into a cache that already holds it",
        lambda r: r.but(layout_factory=ReplayIntoRetainedCache),
    ),
)


# Not applicable to prompt lookup: raw_draft_logits_as_q (no draft logits), and
# processor_advanced_over_rejected (n-gram drafts are copied from the output, so a
# seen-set state such as the repetition penalty already holds them: the variant is
# harmless there, not a bug the oracle could or should flag).
NGRAM_VARIANTS: tuple[Variant, ...] = tuple(
    v for v in VARIANTS if v.name not in ("raw_draft_logits_as_q", "processor_advanced_over_rejected")
) + (
    Variant(
        "ngram_uniform_q",
        "n-gram draft recorded with a uniform q instead of its point mass",
        lambda r: r.but(proposer_factory=lambda rig: NgramUniformQ(NGRAM_N, rig.vocab)),
    ),
)
