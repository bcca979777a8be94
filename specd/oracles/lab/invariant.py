"""The failure lab of the invariant rule (proved in specd.oracles.engine.invariant): its known-wrong
variants, each a ``RejectionSampler`` with one method replaced (and the chains' stop-token bug,
``EOS_DRAFT_IGNORED``), put to the rule's own checks."""

from __future__ import annotations

import torch

from specd.core.gumbel import request_key, uniforms_at
from specd.core.proposer import NgramProposer
from specd.core.sampler import RejectionSampler
from specd.errors import SpecdError
from specd.oracles.engine.invariant import INVARIANT_SEEDS, each_invariant_check, reference_texts
from specd.oracles.lab.chains import EOS_DRAFT_IGNORED
from specd.oracles.lab.variant import (
    LabCase,
    Variant,
    all_of,
    drafts,
    min_horizon,
    put_to_checks,
    rejection,
    soft_target,
)
from specd.oracles.reference import Reference
from specd.oracles.rig import Rig


class NoiseByRound(RejectionSampler):
    """Noise keyed by (round, row) instead of the output position: exact in law, but the text then
    depends on how positions fall into rounds (on K)."""

    def noise_position(self, state, offset):
        return 1000 * state.rounds + offset


class IndependentDraftNoise(RejectionSampler):
    """The draft proposes with noise of its own: still exact in law, but not the coupling."""

    def draft_noise_key(self, state):
        return request_key(state.rng.seed + 7919, state.request_id)


class RatioWithSharedNoise(RejectionSampler):
    """Accept d with probability min(1, p/q) (the shared uniform of d as the test's uniform), and
    at the first rejection emit the target's Gumbel-max token: the maximal rule's test mixed
    with the shared noise."""

    def decide_invariant(self, rows, states):
        draft, k_lens = rows.draft, rows.k_lens
        b, k_max = draft.shape
        p_draft, q_draft = rows.p_draft(), rows.q_draft(rows.p.dtype)
        u = torch.ones(b, k_max, dtype=torch.float64)
        for i, s in enumerate(states):
            for j in range(int(k_lens[i])):  # the shared uniform of d at its position
                u[i, j] = uniforms_at(self.noise_key(s), torch.tensor(self.noise_position(s, j)), draft[i, j])
        accepted = self.count_accepted(rows.valid() & (u < p_draft / q_draft.clamp_min(1e-300)))
        targets = self.race_targets(rows, states)
        for i in range(b):
            targets[i, : int(accepted[i])] = draft[i, : int(accepted[i])]
        return self.match_targets(targets, rows)


INVARIANT_VARIANTS: tuple[Variant, ...] = (
    Variant(
        "noise_keyed_by_round",
        "Gumbel noise keyed by the round instead of the output position",
        lambda r: r.but(sampler_cls=NoiseByRound),
        # target-only decoding keys its first token's noise as the chain does (round 0, offset 0): the
        # keys differ from the second position on
        all_of(min_horizon(2, "only the first position is drawn, and round 0's key is the chain's"), soft_target),
    ),
    Variant(
        "draft_with_independent_noise",
        "the draft proposes with independent noise (exact in law, not invariant coupling)",
        lambda r: r.but(sampler_cls=IndependentDraftNoise),
        all_of(drafts(1), soft_target),  # the target as its own draft: a draft that loses a race is rejected
    ),
    Variant(
        "ratio_test_with_shared_noise",
        "accept-on-ratio (U < p/q) mixed with the shared noise's terminal token",
        lambda r: r.but(sampler_cls=RatioWithSharedNoise),
        # where q(x) > p(x) for some x, the noise where the draft's race picks the x of least p/q < 1, the
        # target's race another token, and that x's uniform is below p/q has positive probability: it is
        # accepted, and the text differs; where q <= p everywhere, q = p and both races pick one token
        all_of(drafts(1), rejection),
    ),
    EOS_DRAFT_IGNORED,
)
LAB_SEEDS = 32  # noise draws each variant is first put to; INVARIANT_SEEDS (the checks' own) if not caught


def invariant_lab(rig: Rig, seed: int = 0) -> list[dict]:
    """The invariant rule's variants on the lab's ``rig``, to its horizon (K + 1): each put to the
    checks with LAB_SEEDS noise draws, then, if not caught, with INVARIANT_SEEDS (the draws the checks
    run on the engine; the first LAB_SEEDS are theirs, so this is the checks' own verdict, sooner)."""
    horizon = rig.k + 1
    ref = Reference(rig)
    lookup = NgramProposer(2, rig.vocab)  # the pointwise check also drafts with a lookup and the target
    case = LabCase(rig, horizon, seed, ref, sources=(rig.proposer(), lookup))
    references = {}

    def catch(variant: Rig) -> tuple[bool, str | None, str]:
        for seeds in (LAB_SEEDS, INVARIANT_SEEDS):
            if seeds not in references:  # the variants share the rig's rows
                references[seeds] = reference_texts(rig, seeds, horizon)
            try:
                for check in each_invariant_check(variant, horizon, seeds, references[seeds], first_failure=True):
                    if check.passed is False:
                        return True, check.name, check.detail
            except SpecdError as err:
                return True, err.code, str(err)
        return False, None, "not caught"

    return [put_to_checks(v, case, "invariant/" + v.name, catch) for v in INVARIANT_VARIANTS]
