"""The greedy rule, for a target at temperature 0: p_i is the point mass on the target's argmax x_i,
so d_i is accepted iff d_i == x_i, and the terminal is x at the first mismatch (or the bonus x_{k+1}).
Every test is decided without a uniform: no stream is read. It is the maximal rule on point-mass
rows (``RejectionSampler.decide_greedy`` proves the equality), computed from the argmax ids alone."""

from __future__ import annotations

from specd.core.record import record
from specd.core.rng import Draws
from specd.core.sampler import Decision, RejectionSampler, Rows
from specd.core.tree import DraftTree


@record
class GreedyRule:
    sampler: RejectionSampler  # the rule's math
    name = "greedy"
    reads_streams = False

    def draft_noise(self) -> None:
        return None  # a sampled draft still draws from its proposal stream

    def tests_read(
        self, tree: DraftTree, path: tuple[int, ...], accepted_emitted: int, correction_emitted: bool
    ) -> int:
        return 0  # no test reads a uniform

    def decide(self, rows: Rows, states, draws: Draws) -> Decision:
        if rows.target_argmax is None:
            raise TypeError("the greedy rule reads the target's argmax ids, which these rows lack")
        return self.sampler.decide_greedy(rows.target_argmax, rows)
