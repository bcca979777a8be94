"""The maximal rule: accept d_i iff U_i < min(1, p_i(d_i) / q_i(d_i)), stop at the first rejection,
draw the correction from normalize([p_i - q_i]_+) there or the bonus from p_{k+1} after k accepts
(the rule, its proof and its exact arithmetic: ``specd.core.sampler``). It reads one acceptance
uniform per draft and one terminal uniform per request from the requests' own streams."""

from __future__ import annotations

from dataclasses import replace

import torch

from specd.core.record import record
from specd.core.rng import Draws
from specd.core.sampler import Decision, RejectionSampler, Rows
from specd.core.transfer import to_device
from specd.core.tree import DraftTree, uniforms_reached


@record
class MaximalRule:
    sampler: RejectionSampler  # the rule's math
    name = "maximal"
    reads_streams = True

    def draft_noise(self) -> None:
        return None  # a model draft draws from its proposal stream

    def tests_read(
        self, tree: DraftTree, path: tuple[int, ...], accepted_emitted: int, correction_emitted: bool
    ) -> int:
        return uniforms_reached(tree, path, accepted_emitted, correction_emitted)  # up to the walk's last test

    def decide(self, rows: Rows, states, draws: Draws) -> Decision:
        accept_u, terminal_u = uniforms(rows, states, draws)
        d = self.sampler.decide(rows, accept_u)
        return replace(d, terminal=self.sampler.sample_terminal(d.terminal_rows, terminal_u), uniforms=accept_u)


def uniforms(rows: Rows, states, draws: Draws) -> tuple[torch.Tensor, torch.Tensor]:
    """The round's acceptance uniforms float64[B, K] (1 past k_b: never read) and terminal uniforms
    float64[B], each request's from its own streams."""
    ks = rows.ks()
    k_max = rows.draft.shape[1]
    accept = [draws(s, "acceptance", k) + [1.0] * (k_max - k) for s, k in zip(states, ks)]
    terminal = [draws(s, "terminal", 1)[0] for s in states]
    device = rows.draft.device
    accept_u = to_device(accept, torch.float64, device).reshape(len(states), k_max)
    return accept_u, to_device(terminal, torch.float64, device)
