"""The broken components the failure lab's variants are built from (specd.oracles.lab.chains lists the
variants): each a subclass of one production component, replacing one method through the engine's
extension points (``specd/core/engine.py``): a sampler method, a layout method, the proposer, the
draft sources, or the transaction's processor staging. Production code carries no switches for them.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import torch

from specd.core.layouts import ReplayFrontier, RetainedFrontier, Verified
from specd.core.model import RowInput
from specd.core.probability import softmax
from specd.core.proposer import ModelProposer, NgramProposer, Proposal
from specd.core.rows import packed
from specd.core.sampler import RejectionSampler
from specd.core.shared_body import SharedBodyProposer
from specd.core.sources import SourceSet
from specd.core.transaction import RoundTransaction
from specd.oracles.reference import Reference
from specd.oracles.rig import Rig


# -- broken samplers -----------------------------------------------------------------
class CorrectionFromP(RejectionSampler):
    def correction_rows(self, p_rows, q_rows):
        return p_rows


class CorrectionFromQ(RejectionSampler):
    def correction_rows(self, p_rows, q_rows):
        return q_rows


class ContinueAfterRejection(RejectionSampler):
    """Counts every passed test, not the leading run."""

    def count_accepted(self, passed):
        return passed.to(torch.int64).sum(dim=-1)


class BonusFromQ(RejectionSampler):
    """Draws the bonus from the last draft's row q_k instead of p_{k+1}."""

    def terminal_rows(self, p_at, q_at, is_bonus):
        usable = is_bonus & (q_at.sum(-1) > 0)  # a row with no drafts has no q_k
        return torch.where(usable.unsqueeze(-1), q_at, super().terminal_rows(p_at, q_at, is_bonus))


class Float32UniformComparison(RejectionSampler):
    """Rounds the 53-bit acceptance uniform to float32 before comparing it with a float32 ratio:
    any U >= 1 - 2^-25 becomes 1.0 and a sure accept (ratio 1) is rejected."""

    def acceptance_tests(self, p_draft, q_draft, accept_u, valid):
        ratio = (p_draft.float() / torch.where(valid, q_draft.float(), torch.ones_like(q_draft.float()))).clamp(max=1)
        return valid & (accept_u.float() < ratio)


class LossyThreshold(RejectionSampler):
    """Accepts a draft whenever the target gives it more than a fixed probability (no uniform, no q)."""

    threshold = 0.3

    def acceptance_tests(self, p_draft, q_draft, accept_u, valid):
        return valid & (p_draft > self.threshold)


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

    def verification_input(self, state, tree):
        start = len(state.cache_tokens)
        parents = None if tree.is_chain else (-1, *(p + 1 for p in tree.parents))
        positions = (start, *(start + d for d in tree.depths))
        return RowInput(state.slot, (state.output[-1], *tree.tokens), positions, parents)

    extract = ReplayFrontier.extract  # what it reads back and commits is the replay layout's (F's row first)
    rows_to_commit = ReplayFrontier.rows_to_commit
    commit_order = ReplayFrontier.commit_order


# -- broken proposer and transaction ------------------------------------------------------
class RawLogitsAsQ(ModelProposer):
    """Samples from the processed rows but records softmax of the raw draft logits as q."""

    def propose(self, states, ks, cache, ctx):
        proposal = super().propose(states, ks, cache, ctx).read(cache, states)
        q = proposal.q.clone()
        for b, (state, drafts) in enumerate(zip(states, proposal.drafts)):
            for i in range(len(drafts)):
                raw = self.model.raw_logits(state.output + drafts[:i]).unsqueeze(0)
                q[proposal.q_index[b][i]] = softmax(raw, ctx.backend, ctx.dtype)[0]
        return replace(proposal, q=q)


class BFloat16RecordedQ(ModelProposer):
    """Draws from float rows but records q rounded to bfloat16 (the row compared is not the row drawn from)."""

    def propose(self, states, ks, cache, ctx):
        proposal = super().propose(states, ks, cache, ctx).read(cache, states)
        return replace(proposal, q=proposal.q.to(torch.bfloat16).to(proposal.q.dtype))


class ArgmaxDraftsSoftQ(ModelProposer):
    """Drafts greedily (argmax) but records the soft q it did not sample from."""

    def draw(self, q_rows, u):
        return q_rows.argmax(dim=-1), None


class KFromBatchConfidence(ModelProposer):
    """Keeps one draft for the rows less confident in their first draft (max q_1) than the batch's
    mean: each row's K, and so its draws and tokens, then depend on its batch-mates. The mean is
    exact, so a batch of rows alike (a request alone) is never cut: a float mean of equal values
    can round above them and cut a request alone, which is not the bug this variant stands for."""

    def propose(self, states, ks, cache, ctx):
        proposal = super().propose(states, ks, cache, ctx).read(cache, states)
        live = [b for b, d in enumerate(proposal.drafts) if d]
        if not live or max(len(d) for d in proposal.drafts) < 2:
            return proposal
        confidence = {b: Fraction(proposal.q_row(b, 0).amax().item()) for b in live}
        mean = sum(confidence.values()) / len(confidence)
        keep = [1 if b in live and confidence[b] < mean else len(d) for b, d in enumerate(proposal.drafts)]
        return _truncated(proposal, keep)


class KAfterTargetP(ModelProposer):
    """Chooses K after looking at the round's target rows: cuts each draft before the first token
    the target gives less probability than the draft did (so no rejection can happen)."""

    def __init__(self, rig: Rig):
        super().__init__(rig.draft, rig.draft_policy)
        self.reference = Reference(rig)

    def propose(self, states, ks, cache, ctx):
        proposal = super().propose(states, ks, cache, ctx).read(cache, states)
        keep = []
        for b, (state, drafts) in enumerate(zip(states, proposal.drafts)):
            cut = len(drafts)
            for i, token in enumerate(drafts):
                if self.reference.p(state.output + drafts[:i])[token] < proposal.q_row(b, i)[token].item():
                    cut = i
                    break
            keep.append(cut)
        return _truncated(proposal, keep)


class StopOnAcceptanceUniform(ModelProposer):
    """Stops drafting before the first position whose acceptance uniform is >= 1/2 (it read the
    uniform the acceptance test will use): the drafts tested are the ones likely to pass."""

    def propose(self, states, ks, cache, ctx):
        proposal = super().propose(states, ks, cache, ctx).read(cache, states)
        keep = []
        for state, drafts in zip(states, proposal.drafts):
            u = ctx.draws(state, "acceptance", len(drafts))
            keep.append(next((i for i, x in enumerate(u) if x >= 0.5), len(drafts)))
        return _truncated(proposal, keep)


def _truncated(proposal: Proposal, keep: list[int]) -> Proposal:
    """Each row's first keep[b] drafts (the q rows past them are never read)."""
    cut = lambda rows: tuple(r[:n] for r, n in zip(rows, keep))  # noqa: E731
    return replace(proposal, drafts=cut(proposal.drafts), q_index=cut(proposal.q_index))


class NgramUniformQ(NgramProposer):
    """Records q as uniform instead of the point mass the lookup really is."""

    def propose(self, states, ks, cache, ctx):
        proposal = super().propose(states, ks, cache, ctx).read(cache, states)
        uniform = torch.full((self.vocab_size,), 1.0 / self.vocab_size, dtype=ctx.dtype)
        q, q_index = packed([[uniform] * len(d) for d in proposal.drafts], self.vocab_size, ctx.dtype)
        return replace(proposal, q=q, q_index=q_index)


class VerifyWithSmallHead(SharedBodyProposer):
    """The drafted positions verified through the draft's restricted head instead of the full one:
    the hidden states it hands to verification are its small head's view (on a table model, whose
    hidden states are its logits, the logits outside the draft vocabulary become -inf)."""

    def staged_rows(self, states, staged):
        rows = super().staged_rows(states, staged)
        return tuple(None if h is None else self._restricted(h) for h in rows)

    def _restricted(self, hidden: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(hidden, float("-inf"))
        out[:, self.columns] = hidden[:, self.columns]
        return out


class AdvanceOverRejected(RoundTransaction):
    def stage_processor(self, state, emitted):
        for token in (*self.drafts, self.decision[1]):  # every draft and the terminal token
            state = state.advance(token)
        return state


class EosDraftIgnored(RoundTransaction):
    """A stop token checked on the correction or bonus only: an EOS among the accepted drafts is
    emitted (the drafts after it dropped) and the request decodes on past it. Injected once the round is
    staged (``checkpoint``, the transaction's extension point): the staging itself is production's."""

    def checkpoint(self, point: str) -> None:
        outcome = self.outcome
        if point == "staged_output" and outcome.finish_reason == "eos" and outcome.terminal_kind == "stop":
            self.outcome = replace(outcome, finish_reason=None)
            self.successor = replace(self.successor, finish_reason=None)


class SourceAfterTargetP(SourceSet):
    """Drafts from every source (each row its own plan's K), then keeps, per row, the source whose
    first draft the round's target row likes better (reading p, and the model's sampled draft,
    before the rule decides). Each row's choice reads its own rows only: the bug is the choice."""

    def __init__(self, rig: Rig, sources):
        super().__init__(sources)
        self.reference = Reference(rig)

    def propose(self, states, plans, caches, ctx, target_cache=None):
        ks = [p.k for p in plans]
        runs = [src.propose(states, ks, c, ctx).read(c, states) for src, c in zip(self.sources, caches.caches)]
        drafts, used, names, rows = [], [], [], []
        for b, state in enumerate(states):
            liked = [self.reference.p(state.output)[r.drafts[b][0]] if r.drafts[b] else -1.0 for r in runs]
            i = max(range(len(runs)), key=lambda j: liked[j])
            drafts.append(tuple(runs[i].drafts[b]))
            used.append(runs[i].draws[b])
            names.append(self.sources[i].identity if drafts[-1] else None)
            rows.append([runs[i].q_row(b, j) for j in range(len(drafts[-1]))])
        q, q_index = packed(rows, self.vocab_size, ctx.dtype)
        return Proposal(tuple(drafts), q, q_index, tuple(used), sources=tuple(names))
