"""What a rule is (``Rule``; see ``specd.core.rules``) and what it returns: a ``Decision``
(specd.core.sampler) whose terminal token is set."""

from __future__ import annotations

from typing import Protocol

from specd.core.gumbel import SharedNoise
from specd.core.rng import Draws
from specd.core.sampler import Decision, Rows
from specd.core.tree import DraftTree


class Rule(Protocol):
    name: str
    reads_streams: bool  # acceptance and terminal uniforms come from the requests' streams

    def draft_noise(self) -> SharedNoise | None:
        """The noise a sampled model draft races under, or None: it reads its proposal stream."""
        ...

    def tests_read(
        self, tree: DraftTree, path: tuple[int, ...], accepted_emitted: int, correction_emitted: bool
    ) -> int:
        """How many of a request's k acceptance uniforms the decision read, given what was emitted
        (a stop may cut the round short); its stream advances by that many at publication."""
        ...

    def decide(self, rows: Rows, states, draws: Draws) -> Decision:
        """The batch's decision, its ``terminal`` tokens set."""
        ...
