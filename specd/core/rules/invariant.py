"""The invariant rule: the token at output position t is the target's Gumbel-max token
x_t = argmax_v log p_t(v) + G_t(v) under noise keyed by (seed, request, t) (``specd.core.gumbel``).
A model draft proposes with the same noise on its own rows (``draft_noise``); d_i is accepted iff
d_i == x_i, and the terminal is x at the first mismatch (or the bonus). No stream is read: the
text is that of target-only decoding with the same seed, whatever the draft, K or batch."""

from __future__ import annotations

from specd.core.gumbel import SharedNoise
from specd.core.record import record
from specd.core.rng import Draws
from specd.core.sampler import Decision, RejectionSampler, Rows
from specd.core.tree import DraftTree


@record
class InvariantRule:
    sampler: RejectionSampler  # the rule's math
    name = "invariant"
    reads_streams = False

    def draft_noise(self) -> SharedNoise:
        return SharedNoise(self.sampler)

    def tests_read(
        self, tree: DraftTree, path: tuple[int, ...], accepted_emitted: int, correction_emitted: bool
    ) -> int:
        return 0  # no test reads a uniform

    def decide(self, rows: Rows, states, draws: Draws) -> Decision:
        return self.sampler.decide_invariant(rows, states)
