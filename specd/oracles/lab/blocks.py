"""The failure lab of the block rule: the block-verification bugs peers shipped or argued over, each
a broken ``RejectionSampler`` (one block step replaced) that ``verify-oracle --rule block`` must catch
and name. Run on the lab's rig with the block rule, a model draft and a lookup."""

from __future__ import annotations

from dataclasses import replace

import torch

from specd.core import block
from specd.core.sampler import RejectionSampler
from specd.oracles.fixture import LAB_MAX_K, LAB_MAX_VOCAB, OracleConfig, build_rig
from specd.oracles.lab.chains import lab_family
from specd.oracles.lab.variant import LabCase, Variant, all_of, drafts, min_vocab, rejection
from specd.oracles.reference import block_branch, block_thresholds
from specd.oracles.rig import ngram_rig


class BlockStopsAtFirstFailure(RejectionSampler):
    """A = the leading run of passed tests (the reading of vllm-ascend #11985's review), not the
    longest passed prefix of Algorithm 2."""

    def block_accepted(self, passed):
        return passed.to(torch.int64).cumprod(dim=-1).sum(dim=-1)


class BlockAcceptanceTokenResidual(RejectionSampler):
    """Block thresholds, but the correction drawn from the token-wise residual [p - q]_+ (rho_A
    dropped): vllm-ascend #7807's recovered token."""

    def block_terminal_rows(self, rows, accepted, rho):
        return block.block_terminal_rows(rows, accepted, torch.ones_like(rho))


class TokenAcceptanceBlockResidual(RejectionSampler):
    """The token-wise acceptance test (U_i < min(1, p/q), stop at the first failure) with block
    verification's residual [rho_A p - q]_+ (the other half of #7807)."""

    def block_thresholds(self, rows, rho):
        valid = rows.valid()
        ratio = self.acceptance_ratios(rows.p_draft(), rows.q_draft(torch.float64), valid)
        return ratio, torch.ones_like(ratio)

    def block_accepted(self, passed):
        return passed.to(torch.int64).cumprod(dim=-1).sum(dim=-1)


class ResidualMassWithoutPrefixRatio(RejectionSampler):
    """The thresholds' residual masses Z_i formed without the running prefix ratio (sum [p - q]_+)."""

    def block_thresholds(self, rows, rho):
        z = block.residual_masses(rows, torch.where(rows.valid(), torch.ones_like(rho), rho))
        return block.thresholds(rho, z, rows.k_lens)


def residual_scale_shows(case: LabCase) -> str | None:
    """block_acceptance_token_residual's need: a correction after A >= 1 drafts with rho_A < 1 (a
    branch with mass) where the target exceeds the draft on two tokens or more. normalize([rho_A p -
    q]_+) and normalize([p - q]_+) are then different laws; on one token they are the same point
    mass, and at rho_A = 1 the same row. Looked for at every round start within the horizon, along
    every path the draft can take."""
    ref, first = case.ref, len(case.rig.prompt)
    for start in case.outputs(case.horizon - 2):
        n = min(case.k, case.horizon - 1 - (len(start) - first))
        for path in case.model_paths(start, n):
            p_rows = [ref.p(start + path[:i]) for i in range(n + 1)]
            q_rows = [ref.q(start + path[:i]) for i in range(n)]
            rhos, _ = block_thresholds(p_rows, q_rows, path)
            for a in range(1, n):
                over = sum(px > qx for px, qx in zip(p_rows[a], q_rows[a]))
                if rhos[a] < 1 and over >= 2 and block_branch(p_rows, q_rows, path, a) is not None:
                    return None
    return (
        "no correction after a rejected block (rho_A < 1) falls where the target exceeds the draft on two tokens: "
        "both residuals are the same law there"
    )


BLOCK_VARIANTS: tuple[Variant, ...] = (
    Variant(
        "block_stops_at_first_failure",
        "block verification's A taken as the leading run of passed thresholds, not the longest (vllm-ascend #11985)",
        lambda r: r.but(sampler_cls=BlockStopsAtFirstFailure),
        all_of(drafts(2), rejection),  # the longest passed prefix and the leading run differ after a failed test
    ),
    Variant(
        "block_acceptance_token_residual",
        "block thresholds with the token-wise residual [p - q]_+ (vllm-ascend #7807)",
        lambda r: r.but(sampler_cls=BlockAcceptanceTokenResidual),
        all_of(
            min_vocab(3, "a residual has at most one token of mass, the same whatever its scale rho_A"),
            drafts(2),  # a correction after A >= 1 drafts (at A = 0, rho_0 = 1: the residuals agree)
            residual_scale_shows,
        ),
    ),
    Variant(
        "token_acceptance_block_residual",
        "the token-wise acceptance test with block verification's residual [rho_A p - q]_+",
        lambda r: r.but(sampler_cls=TokenAcceptanceBlockResidual),
        all_of(drafts(2), rejection),  # at K = 1 block verification is the token-wise rule, and rho_0 = 1
    ),
    Variant(
        "residual_mass_without_prefix_ratio",
        "the thresholds' residual masses Z_i = sum [p - q]_+, without the running prefix ratio",
        lambda r: r.but(sampler_cls=ResidualMassWithoutPrefixRatio),
        all_of(drafts(2), rejection),  # Z_i enters the thresholds h_i of i < k only, and rho_i < 1 needs a failed test
    ),
)


# For a lookup's point mass the two residuals are one law (p without the draft, renormalized): the
# token-wise residual is no bug there, and the oracle rightly finds nothing.
SAME_FOR_LOOKUPS = ("block_acceptance_token_residual",)


def run_block_lab(cfg: OracleConfig) -> list[dict]:
    """Each block variant on the lab's rig under the block rule (a model draft), and on a lookup. At
    V = 3 and K = 3 whatever the checked case: at V = 2 a residual has one token of mass whatever
    its scale, so a wrong scale (#7807's bug) cannot show, and at K = 2 it shows on few tables."""
    case = replace(cfg, vocab=max(cfg.vocab, LAB_MAX_VOCAB), k=max(cfg.k, LAB_MAX_K), horizon=None)
    base = build_rig(case, lab=True).but(rule="block")
    horizon = base.k + 1
    lookup = [v for v in BLOCK_VARIANTS if v.name not in SAME_FOR_LOOKUPS]
    model_rows = lab_family("block/", base, BLOCK_VARIANTS, horizon, cfg.seed)
    return model_rows + lab_family("block/ngram/", ngram_rig(base), lookup, horizon, cfg.seed)
