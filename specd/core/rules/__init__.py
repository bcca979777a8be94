"""The acceptance rules a round can run: one object per rule, one file each.

A rule is what ``speculative_round`` calls once per round to decide every request's
accepted prefix A and its terminal token (the correction at the first rejection, or
the bonus after k accepted drafts), over the round's packed rows (``specd.core.rows.Rows``).
It says what it reads and how a model draft must draw for it:

- ``decide(rows, states, draws) -> Decision``: the decision for the batch, its terminal tokens set. ``draws`` are the
  requests' random streams; a rule that reads them (``reads_streams``) takes the acceptance and
  terminal uniforms there, and the round advances the streams over what it read at publication.
- ``draft_noise()``: None when a model draft draws its tokens from the proposal stream (inverse CDF
  of q); otherwise the noise it races under (the invariant rule's shared Gumbel noise).

The rules (``rule_for`` picks one for a run):

- ``greedy`` (``rules/greedy.py``): a target at temperature 0; every test is decided without a uniform.
- ``maximal`` (``rules/maximal.py``): the accept/reject rule, acceptance 1 - TV per position.
- ``invariant`` (``rules/invariant.py``): shared Gumbel noise; the text is target-only decoding's.
- ``block`` (``rules/block.py``): the drafts verified as a block (Sun et al.); acceptance at least
  the maximal rule's in expectation.

The probability math stays in ``specd.core.sampler.RejectionSampler`` (the extension point the
failure lab breaks); a rule object only chooses which of its functions run and what they read.
A new rule is one new file here plus its oracle proofs.
"""

from __future__ import annotations

from collections.abc import Callable

from specd.core.rules.base import Rule
from specd.core.rules.block import BlockRule
from specd.core.rules.greedy import GreedyRule
from specd.core.rules.invariant import InvariantRule
from specd.core.rules.maximal import MaximalRule
from specd.core.sampler import RejectionSampler
from specd.errors import UsageError, shown

RULES = ("maximal", "invariant", "block")  # what a user may ask for; greedy follows from a temperature of 0
__all__ = ["RULES", "BlockRule", "GreedyRule", "InvariantRule", "MaximalRule", "Rule", "rule_for"]


def rule_for(name: str, greedy: bool, sampler: RejectionSampler | None = None) -> Rule:
    """The rule a run decides with: ``name`` (one of RULES) for a sampled target, greedy for a target
    at temperature 0 (there every rule is the argmax match). ``sampler``: the rule's math."""
    if name not in RULES:
        raise UsageError(f"unknown rule {shown(name)}; choose one of {', '.join(RULES)}")
    sampler = sampler or RejectionSampler()
    if greedy:
        return GreedyRule(sampler)
    rules: dict[str, Callable[[RejectionSampler], Rule]] = {
        "invariant": InvariantRule,
        "block": BlockRule,
        "maximal": MaximalRule,
    }
    return rules[name](sampler)
