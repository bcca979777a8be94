"""The failure lab: known-wrong variants the oracle must catch.

Each variant is the production engine with exactly one component replaced by a
broken subclass, through the engine's extension points (listed in
``specd/core/engine.py``): a sampler method, a layout method, the proposer, or
the transaction's processor staging. ``run_lab`` (in ``report``) runs the
oracle's checks on each and reports which check caught it and with what figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from specd.core.layouts import ReplayFrontier, RetainedFrontier, Verified, make_layout
from specd.core.model import RowInput
from specd.core.probability import softmax
from specd.core.proposer import ModelProposer, NgramProposer, Proposal
from specd.core.rows import packed
from specd.core.sampler import RejectionSampler
from specd.core.shared_body import SharedBodyProposer
from specd.core.sources import SourceSet
from specd.core.transaction import RoundTransaction
from specd.errors import SpecdError
from specd.oracles.engine_checks import batch_difference, dtype_edges_of
from specd.oracles.exact import Reference, speculative_joint, target_joint
from specd.oracles.fixture import LAB_MC_SAMPLES, OracleConfig, build_rig
from specd.oracles.montecarlo import run_monte_carlo
from specd.oracles.record import EXACT_TOLERANCE, max_abs_diff
from specd.oracles.rig import NGRAM_N, Rig, multi_source_rig, ngram_rig, shared_body_rig
from specd.policy.kpolicy import FixedK


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
        proposal = super().propose(states, ks, cache, ctx)
        q = proposal.q.clone()
        for b, (state, drafts) in enumerate(zip(states, proposal.drafts)):
            for i in range(len(drafts)):
                raw = self.model.raw_logits(state.output + drafts[:i]).unsqueeze(0)
                q[proposal.q_index[b][i]] = softmax(raw, ctx.backend, ctx.dtype)[0]
        return replace(proposal, q=q)


class BFloat16RecordedQ(ModelProposer):
    """Draws from float rows but records q rounded to bfloat16 (the row compared is not the row drawn from)."""

    def propose(self, states, ks, cache, ctx):
        proposal = super().propose(states, ks, cache, ctx)
        return replace(proposal, q=proposal.q.to(torch.bfloat16).to(proposal.q.dtype))


class ArgmaxDraftsSoftQ(ModelProposer):
    """Drafts greedily (argmax) but records the soft q it did not sample from."""

    def draw(self, q_rows, u):
        return q_rows.argmax(dim=-1), None


class KFromBatchConfidence(ModelProposer):
    """Keeps one draft for the rows less confident in their first draft (max q_1) than the batch's
    mean: each row's K, and so its draws and tokens, then depend on its batch-mates."""

    def propose(self, states, ks, cache, ctx):
        proposal = super().propose(states, ks, cache, ctx)
        live = [b for b, d in enumerate(proposal.drafts) if d]
        if not live or max(len(d) for d in proposal.drafts) < 2:
            return proposal
        confidence = {b: proposal.q_row(b, 0).amax() for b in live}
        mean = torch.stack(list(confidence.values())).mean()
        keep = [1 if b in live and confidence[b] < mean else len(d) for b, d in enumerate(proposal.drafts)]
        return _truncated(proposal, keep)


class KAfterTargetP(ModelProposer):
    """Chooses K after looking at the round's target rows: cuts each draft before the first token
    the target gives less probability than the draft did (so no rejection can happen)."""

    def __init__(self, rig: Rig):
        super().__init__(rig.draft, rig.draft_policy)
        self.reference = Reference(rig)

    def propose(self, states, ks, cache, ctx):
        proposal = super().propose(states, ks, cache, ctx)
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
        proposal = super().propose(states, ks, cache, ctx)
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
        proposal = super().propose(states, ks, cache, ctx)
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


class SourceAfterTargetP(SourceSet):
    """Drafts from every source, then keeps, per row, the source whose first draft the round's target
    row likes better (reading p, and the model's sampled draft, before the rule decides)."""

    def __init__(self, rig: Rig, sources):
        super().__init__(sources)
        self.reference = Reference(rig)

    def propose(self, states, plans, caches, ctx, target_cache=None):
        k = max((p.k for p in plans), default=0)
        runs = [src.propose(states, [k] * len(states), c, ctx) for src, c in zip(self.sources, caches.caches)]
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


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    build: Callable[[Rig], Rig]


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
    # Bugs shipped by other engines (the README names them), each rebuilt on specd's engine.
    Variant(
        "q_recorded_in_bfloat16",
        "q recorded in bfloat16 while the draft token was drawn from float rows (DeepSpec #31)",
        lambda r: r.but(proposer_factory=lambda rig: BFloat16RecordedQ(rig.draft, rig.draft_policy)),
    ),
    Variant(
        "argmax_drafts_with_soft_q",
        "greedy (argmax) drafts recorded with the soft q they were not drawn from",
        lambda r: r.but(proposer_factory=lambda rig: ArgmaxDraftsSoftQ(rig.draft, rig.draft_policy)),
    ),
    Variant(
        "lossy_threshold_accept",
        f"accept a draft whenever p(d) > {LossyThreshold.threshold}, with no uniform and no q",
        lambda r: r.but(sampler_cls=LossyThreshold),
    ),
    Variant(
        "k_from_batch_mean_confidence",
        "K cut to 1 for rows less confident than the batch's mean draft confidence (rows depend on batch-mates)",
        lambda r: r.but(proposer_factory=lambda rig: KFromBatchConfidence(rig.draft, rig.draft_policy)),
    ),
    Variant(
        "k_after_target_p",
        "K chosen after looking at the round's target rows: each draft cut before the first token with p < q",
        lambda r: r.but(proposer_factory=KAfterTargetP),
    ),
    Variant(
        "draft_stop_reads_acceptance_uniform",
        "drafting stopped before the first position whose acceptance uniform is >= 1/2",
        lambda r: r.but(proposer_factory=lambda rig: StopOnAcceptanceUniform(rig.draft, rig.draft_policy)),
    ),
    Variant(
        "float32_uniform_comparison",
        "the 53-bit acceptance uniform rounded to float32 before the test (U >= 1 - 2^-25 rejects a sure accept)",
        lambda r: r.but(sampler_cls=Float32UniformComparison),
    ),
)


# Not applicable to prompt lookup: the proposer variants need a draft model's rows, which
# the n-gram proposer has none of; and processor_advanced_over_rejected is harmless there
# (n-gram drafts are copied from the output, so a seen-set state such as the repetition
# penalty already holds them: not a bug the oracle could or should flag).
MODEL_DRAFT_ONLY = (
    "raw_draft_logits_as_q",
    "processor_advanced_over_rejected",
    "q_recorded_in_bfloat16",
    "argmax_drafts_with_soft_q",
    "k_from_batch_mean_confidence",
    "k_after_target_p",
    "draft_stop_reads_acceptance_uniform",
)
NGRAM_VARIANTS: tuple[Variant, ...] = tuple(v for v in VARIANTS if v.name not in MODEL_DRAFT_ONLY) + (
    Variant(
        "ngram_uniform_q",
        "n-gram draft recorded with a uniform q instead of its point mass",
        lambda r: r.but(proposer_factory=lambda rig: NgramUniformQ(NGRAM_N, rig.vocab)),
    ),
)

# On the two-source rig (a lookup and the model draft, chosen per round).
MULTI_SOURCE_VARIANTS: tuple[Variant, ...] = (
    Variant(
        "source_after_target_p",
        "the draft source picked after reading the round's target row (the lookup where p likes its token)",
        lambda r: r.but(proposer_factory=lambda rig: SourceAfterTargetP(rig, r.proposer())),
    ),
)


# On the shared-body rig (the target's own rows, a head restricted to half the vocabulary).
SHARED_BODY_VARIANTS: tuple[Variant, ...] = (
    Variant(
        "verify_with_small_head",
        "drafted positions verified with the draft's restricted head instead of the full head",
        lambda r: shared_body_rig(r, VerifyWithSmallHead),
    ),
    *(v for v in VARIANTS if v.name in ("rejected_kv_committed", "logit_rows_off_by_one", "correction_from_p")),
)


# prefix -> (its rig, built on the lab's base rig; its variants): a model draft, a lookup, two sources, shared body
LAB_FAMILIES: dict[str, tuple[Callable[[Rig], Rig], tuple[Variant, ...]]] = {
    "": (lambda base: base, VARIANTS),
    "ngram/": (ngram_rig, NGRAM_VARIANTS),
    "multi/": (lambda base: multi_source_rig(base, lambda r: FixedK(max(r.k, 2))), MULTI_SOURCE_VARIANTS),
    "shared/": (lambda base: shared_body_rig(base.but(layout_name="replay_frontier")), SHARED_BODY_VARIANTS),
}


def run_lab(cfg: OracleConfig, variants: tuple[Variant, ...] | None = None, families=None) -> list[dict]:
    """The lab's families (LAB_FAMILIES), each with its variants; ``variants``: these instead, on the
    families named in ``families`` ("" the model draft)."""
    base = build_rig(cfg, lab=True)
    horizon = base.k + 1
    results: list[dict] = []
    for prefix in families or LAB_FAMILIES:
        family_rig, variants_here = LAB_FAMILIES[prefix]
        results += lab_family(prefix, family_rig(base), variants or variants_here, horizon, cfg.seed)
    return results


def lab_family(prefix: str, rig: Rig, variants, horizon: int, seed: int) -> list[dict]:
    """Each variant built on ``rig`` and put to the checks: one report row each, named prefix + name."""
    ref = Reference(rig)  # the variants replace engine components, never the rows: computed once
    reference = target_joint(rig, horizon, ref=ref)
    rows = []
    for variant in variants:
        caught, by, detail = _catch(variant.build(rig), horizon, reference, seed, ref)
        row = {"variant": prefix + variant.name, "description": variant.description, "caught": caught}
        rows.append({**row, "caught_by": by, "detail": detail})
    return rows


def _catch(rig: Rig, horizon: int, reference, seed: int, ref: Reference) -> tuple[bool, str | None, str]:
    """The first check that catches the variant -> (caught, check name, evidence). Cheapest first."""
    try:
        diff = max_abs_diff(reference, speculative_joint(rig, horizon, "target", ref))
        if diff > EXACT_TOLERANCE:
            return True, "exact_joint", f"max |speculative - target| = {diff:.3g} > {EXACT_TOLERANCE:g}"
        edges = dtype_edges_of(rig.sampler_cls)
        if not edges.passed:
            cx = edges.counterexample
            return (
                True,
                "dtype_edges",
                (
                    f"{edges.figures['wrong']} of {edges.figures['decisions']} decisions differ from the exact rule, "
                    f"e.g. {cx['case']}, U = {cx['acceptance_uniform']!r}: rule accepts {cx['rule']['accepted']}, "
                    f"variant {cx['sampler']['accepted']}"
                ),
            )
        diff = max_abs_diff(reference, speculative_joint(rig, horizon, "rounds", ref))
        if diff > EXACT_TOLERANCE:
            return True, "exact_joint_rounds", f"max |speculative - target| = {diff:.3g} > {EXACT_TOLERANCE:g}"
        mc = run_monte_carlo(rig, horizon, LAB_MC_SAMPLES, seed, audit=True)
        if mc.audit_errors:
            return True, "state_audit", mc.audit_errors[0]
        if mc.accounting_errors:
            return True, "rng_accounting", mc.accounting_errors[0]
        differs = batch_difference(rig, horizon, seed)
        if differs:
            return True, "batch_invariance", differs
    except SpecdError as err:
        return True, err.code, str(err)
    return False, None, "not caught"
