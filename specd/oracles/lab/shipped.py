"""Sampler bugs other engines shipped this year, rebuilt on specd's engine (one component replaced
through an extension point) for the failure lab, each to be caught and named by the oracle. The
draft sampled from bfloat16 while the ratio used float32 (deepseek-ai/DeepSpec#31) is the lab's
``q_recorded_in_bfloat16``."""

from __future__ import annotations

from dataclasses import replace

import torch

from specd.core.processors import Temperature
from specd.core.proposer import ModelProposer
from specd.core.sampler import RejectionSampler, Rows
from specd.oracles.lab.variant import Variant, all_of, drafts, rejection, soft_draft, soft_target


class DraftReadsAcceptanceUniforms(ModelProposer):
    """The draft samples its tokens with the uniforms the acceptance tests then read: its noise keyed
    like the acceptance uniform (vllm-project/vllm#47386)."""

    def propose(self, states, ks, cache, ctx):
        def shared(state, stream, n):
            return ctx.draws(state, "acceptance" if stream == "proposal" else stream, n)

        return super().propose(states, ks, cache, replace(ctx, draws=shared))


class ModelDraftAsPointMass(ModelProposer):
    """A model draft's q dropped and each draft treated as its point mass (draft_probs=None read as
    one-hot on a sampled draft, vllm-project/vllm#40149)."""

    def propose(self, states, ks, cache, ctx):
        proposal = super().propose(states, ks, cache, ctx)
        empty = torch.zeros(0, proposal.q.shape[-1], dtype=proposal.q.dtype)
        return replace(proposal, q=empty, q_index=tuple(() for _ in proposal.drafts))


class SamplingReturnsArgmax(RejectionSampler):
    """The correction or bonus "sampled" as the argmax of its law (mistral.rs#2424)."""

    def sample_terminal(self, terminal_rows, terminal_u):
        return terminal_rows.argmax(dim=-1)


class FirstDraftWithoutTest(RejectionSampler):
    """The first draft committed without its acceptance test (ohdearquant/lattice#243)."""

    def acceptance_tests(self, p_draft, q_draft, accept_u, valid):
        passed = super().acceptance_tests(p_draft, q_draft, accept_u, valid)
        passed[:, :1] |= valid[:, :1]  # where a first draft exists, it passes
        return passed


def temperature_ignored(temperature: float) -> type[RejectionSampler]:
    """A rule that reads the target's rows at temperature 1 whatever the run's (lattice#388): the
    processed p_T raised to T (p_1 is proportional to p_T ** T), renormalized."""

    class TemperatureHardCodedToOne(RejectionSampler):
        def decide(self, rows: Rows, accept_u):
            p, start = rows.target()
            at_one = p.to(torch.float64) ** temperature
            at_one = (at_one / at_one.sum(dim=-1, keepdim=True)).to(p.dtype)
            return super().decide(replace(rows, p=at_one), accept_u)

    return TemperatureHardCodedToOne


def _temperature(rig) -> float:
    found = [p.temperature for p in rig.target_policy.processors if isinstance(p, Temperature)]
    return found[0] if found else 1.0


def temperature_not_one(case) -> str | None:
    """temperature_hard_coded_to_one's need: a target temperature other than 1 (at 1 the rows it
    reads are the run's own)."""
    return None if _temperature(case.rig) != 1.0 else "the target's temperature is 1: the rows read at 1 are the run's"


SHIPPED_VARIANTS: tuple[Variant, ...] = (
    Variant(
        "draft_reads_acceptance_uniforms",
        "the draft sampled with the acceptance tests' uniforms (vllm#47386: draft noise keyed like the acceptance "
        "uniform)",
        lambda r: r.but(proposer_factory=lambda rig: DraftReadsAcceptanceUniforms(rig.draft, rig.draft_policy)),
        drafts(1),
    ),
    Variant(
        "model_draft_as_point_mass",
        "a sampled model draft's q dropped and read as one-hot (vllm#40149: draft_probs=None)",
        lambda r: r.but(proposer_factory=lambda rig: ModelDraftAsPointMass(rig.draft, rig.draft_policy)),
        all_of(drafts(1), soft_draft),  # a draft drawn from a point mass has that point mass as its q
    ),
    Variant(
        "sampling_returns_argmax",
        "the correction or bonus taken as the argmax of its law (mistral.rs#2424)",
        lambda r: r.but(sampler_cls=SamplingReturnsArgmax),
        soft_target,  # the argmax of a point mass (or of its residual) is its draw
    ),
    Variant(
        "first_draft_without_test",
        "the first draft committed without its acceptance test (lattice#243)",
        lambda r: r.but(sampler_cls=FirstDraftWithoutTest),
        rejection,  # where no test can fail, skipping one changes nothing
    ),
    Variant(
        "temperature_hard_coded_to_one",
        "the rule reads the target's rows at temperature 1 whatever the run's (lattice#388)",
        lambda r: r.but(sampler_cls=temperature_ignored(_temperature(r))),
        all_of(temperature_not_one, soft_target),  # p ** T renormalized is p at T = 1
    ),
)
