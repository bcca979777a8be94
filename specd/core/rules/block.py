"""The block rule: the drafts are verified as a block (Sun et al., ICLR 2025; the rule in words, its
terms and its arithmetic: ``specd.core.block``). A = the largest i whose acceptance uniform falls
below its threshold h_i, then the bonus from p_{k+1} or the correction from [rho_A p_{A+1} - q_{A+1}]_+.
It reads all k acceptance uniforms of a request and one terminal uniform from the request's own
streams; a model draft draws from its proposal stream."""

from __future__ import annotations

from dataclasses import replace

from specd.core.record import record
from specd.core.rng import Draws
from specd.core.rules.maximal import uniforms
from specd.core.sampler import Decision, RejectionSampler, Rows
from specd.core.tree import DraftTree


@record
class BlockRule:
    sampler: RejectionSampler  # the rule's math
    name = "block"
    reads_streams = True

    def draft_noise(self) -> None:
        return None  # a model draft draws from its proposal stream

    def tests_read(
        self, tree: DraftTree, path: tuple[int, ...], accepted_emitted: int, correction_emitted: bool
    ) -> int:
        return len(tree)  # every test decides A, so every one is read (a block is a chain)

    def decide(self, rows: Rows, states, draws: Draws) -> Decision:
        accept_u, terminal_u = uniforms(rows, states, draws)
        d = self.sampler.decide_block(rows, accept_u)
        return replace(d, terminal=self.sampler.sample_terminal(d.terminal_rows, terminal_u), uniforms=accept_u)
