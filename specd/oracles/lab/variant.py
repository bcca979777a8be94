"""A failure-lab variant, and the cases in which any check can see it.

A variant is the engine with one component replaced (``Variant.build``). Whether any check can tell
it from the correct engine depends on the case the lab runs it on (``LabCase``: the family's rig,
so its V, K, rule, layout, prompt and policies; the horizon; the seed; the oracle's own rows of
the case). A variant that changes only the correction cannot be seen where no draft can be
rejected; one that acts only from a round's second draft cannot be seen where a round drafts one
token. So each variant declares what it ``needs``: a condition on the case that returns None where
it holds and, where it does not, the reason no check can distinguish the variant from the correct
engine there. It is decided before the variant runs, from what the variant breaks (an argument
about the case's sizes and policies, or the oracle's exact rows of the case), never from whether a
check happened to catch it. A variant whose needs are unmet is reported as not applicable at this
size, with the reason, never as a failure of the engine; a variant whose needs are met must be
caught.

The conditions are proofs of invisibility only where they give a reason: each looks at a superset
of the places the variant could act (every output within the horizon, not only those a round
reaches), so it gives a reason only where the variant cannot act at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch

from specd.oracles.engine.checks import outputs_within
from specd.oracles.record import NOT_APPLICABLE
from specd.oracles.reference import Reference
from specd.oracles.rig import Rig

Condition = Callable[["LabCase"], "str | None"]  # None: the variant can be seen; else why it cannot


def always(case: LabCase) -> str | None:
    """Seen in every case (the variant acts in every round; its docstring or description says how)."""
    return None


@dataclass(frozen=True)
class Variant:
    """A known-wrong engine: ``build`` replaces one component of a rig; ``needs``: the condition
    under which some check can tell it from the correct engine (``always`` by default)."""

    name: str
    description: str
    build: Callable[[Rig], Rig]
    needs: Condition = always


@dataclass(frozen=True)
class LabCase:
    """What a variant is run on: the family's ``rig``, the ``horizon`` its checks run to, the run's
    ``seed``, the oracle's rows ``ref``; ``sources``: the drafting sources the checks use, where
    they are more than the rig's own (the invariant checks also draft with a lookup)."""

    rig: Rig
    horizon: int
    seed: int
    ref: Reference
    sources: tuple = ()

    @property
    def vocab(self) -> int:
        return self.rig.vocab

    @property
    def k(self) -> int:
        """The most drafts a round of the rig may ask for (its K, or its K policy's)."""
        policy = self.rig.k_policy_factory(self.rig) if self.rig.k_policy_factory else None
        return max(self.rig.k, getattr(policy, "k", 0), getattr(policy, "k_max", 0))

    def outputs(self, tokens: int) -> list[tuple[int, ...]]:
        """The prompt, and the prompt followed by each sequence of 1..``tokens`` tokens."""
        return outputs_within(self.rig, tokens) if tokens >= 0 else []

    @cached_property
    def draft_rows(self) -> list[tuple[tuple[int, ...], list[float]]]:
        """(output, the declared q row) at every place a draft can be made within the horizon: after
        every output of at most horizon - 2 tokens (a draft needs a token of budget after it), for
        each drafting source: a model's processed row, or a lookup's point mass on its token."""
        sources = self.sources or self.rig.proposer()
        sources = sources if isinstance(sources, (list, tuple)) else [sources]
        rows: list = []
        starts = self.outputs(self.horizon - 2)
        for source in sources:
            if not getattr(source, "deterministic", False):
                rows += [(o, self.ref.q(o)) for o in starts]
                continue
            for start in starts:  # each round a lookup can start: its drafts along its own path
                budget = self.horizon - 1 - (len(start) - len(self.rig.prompt))
                drafts = source.lookup(start, min(self.k, budget))
                rows += [(start + drafts[:i], point_mass(d, self.vocab)) for i, d in enumerate(drafts)]
        return rows

    def model_paths(self, start: tuple[int, ...], n: int) -> list[tuple[int, ...]]:
        """Every path of ``n`` drafts the model draft can take after ``start`` (q > 0 at each step)."""
        paths: list[tuple[int, ...]] = [()]
        for _ in range(n):
            paths = [path + (x,) for path in paths for x, qx in enumerate(self.ref.q(start + path)) if qx > 0]
        return paths

    def target_rows(self) -> list[tuple[tuple[int, ...], list[float]]]:
        """(output, p row) after every output within the horizon (each row a token is drawn from)."""
        return [(o, self.ref.p(o)) for o in self.outputs(self.horizon - 1)]


def point_mass(token: int, vocab: int) -> list[float]:
    return [1.0 if x == token else 0.0 for x in range(vocab)]


def all_of(*conditions: Condition) -> Condition:
    """Every condition (the first unmet one's reason)."""

    def condition(case: LabCase) -> str | None:
        return next((r for r in (c(case) for c in conditions) if r is not None), None)

    return condition


def drafts(n: int) -> Condition:
    """A round of at least ``n`` drafts: K >= n and a horizon with room for n drafts and the
    terminal token after them (horizon >= n + 1). A variant that acts only from a round's n-th draft
    on (a test after a rejection, a K cut to fewer than n) acts nowhere without one."""

    def condition(case: LabCase) -> str | None:
        room = min(case.k, case.horizon - 1)
        if room >= n:
            return None
        return (
            f"a round drafts at most {room} here (K = {case.k}, horizon {case.horizon}), and this variant acts only "
            f"in a round of {n} or more drafts"
        )

    return condition


def rejection(case: LabCase) -> str | None:
    """Some draft can be rejected: at a place a draft is made, a token the draft proposes with more
    probability than the target gives it (q(x) > p(x)). Where there is none, every test passes for
    every uniform (min(1, p/q) = 1): no draft is rejected and no correction is drawn."""
    for output, q in case.draft_rows:
        if any(qx > px for qx, px in zip(q, case.ref.p(output))):
            return None
    return "no draft can be rejected here: q(x) <= p(x) for every token, wherever a draft is made within the horizon"


def soft_draft(case: LabCase) -> str | None:
    """Some draft is drawn from a row with two tokens of mass. Where every row is a point mass, a
    draft is its row's one token whatever the uniform, and its q is that point mass."""
    if any(sum(x > 0 for x in q) >= 2 for _, q in case.draft_rows):
        return None
    return "every draft here is drawn from a point mass (one token of mass in each draft row)"


def soft_target(case: LabCase) -> str | None:
    """Some target row within the horizon has two tokens of mass. Where each is a point mass, every
    draw from a row (a bonus, a correction, a Gumbel race) has one outcome, whatever its uniform."""
    if any(sum(x > 0 for x in p) >= 2 for _, p in case.target_rows()):
        return None
    return "every target row within the horizon is a point mass: a draw from it has one outcome"


def processed_draft(case: LabCase) -> str | None:
    """The draft's policy changes some row it drafts from: q differs from the softmax of the raw
    logits. Where it changes none, the raw rows are the processed ones."""
    for output, q in case.draft_rows:
        raw = torch.softmax(case.rig.draft.raw_logits(output).double(), dim=-1).tolist()
        if max(abs(a - b) for a, b in zip(raw, q)) > 1e-12:
            return None
    return "the draft's policy leaves every row it drafts from as the raw softmax"


def stateful_target(case: LabCase) -> str | None:
    """The target's policy keeps a state (a penalty on tokens seen): only then can advancing it over
    the wrong tokens change a later row."""
    if case.rig.target_policy.stateful:
        return None
    return "the target's policy keeps no state that a token could advance"


def bfloat16_inexact(case: LabCase) -> str | None:
    """Some draft row has an entry bfloat16 cannot hold: only there does q rounded to bfloat16 differ."""
    for _, q in case.draft_rows:
        row = torch.tensor(q, dtype=torch.float64)
        if not torch.equal(row, row.to(torch.bfloat16).to(torch.float64)):
            return None
    return "every draft row here is exact in bfloat16"


def min_vocab(n: int, why: str) -> Condition:
    """At least ``n`` tokens (``why``: what the variant needs them for)."""

    def condition(case: LabCase) -> str | None:
        return None if case.vocab >= n else f"V = {case.vocab} < {n}: {why}"

    return condition


def min_horizon(n: int, why: str) -> Condition:
    """A horizon of at least ``n`` tokens (``why``: what the variant needs them for)."""

    def condition(case: LabCase) -> str | None:
        return None if case.horizon >= n else f"horizon {case.horizon} < {n}: {why}"

    return condition


def lab_row(name: str, description: str, caught: bool, by: str | None, detail: str) -> dict:
    """One variant's row of the report's failure lab: applicable, caught (or not) by ``by``."""
    row = {"variant": name, "description": description, "caught": caught, "caught_by": by, "detail": detail}
    return {**row, "applicable": True}


def not_applicable_row(name: str, description: str, reason: str) -> dict:
    """A variant no check can see in this case: ``caught`` None, and the reason."""
    row = {"variant": name, "description": description, "caught": None, "caught_by": None}
    return {**row, "detail": NOT_APPLICABLE + reason, "applicable": False}


def put_to_checks(
    variant: Variant, case: LabCase, name: str, catch: Callable[[Rig], tuple], seen_anywhere=None
) -> dict:
    """The report row of ``variant`` in ``case`` (``name``: with its family's prefix): not applicable
    with the reason where its needs are unmet (it is not run), else ``catch(its rig)`` -> (caught,
    check name, evidence). ``seen_anywhere(its rig)``: whether a check that reads nothing of the
    case (dtype_edges puts a rule to rows of its own) sees it: then it is applicable at every size."""
    reason = variant.needs(case)
    broken = variant.build(case.rig)
    if reason is not None and not (seen_anywhere and seen_anywhere(broken)):
        return not_applicable_row(name, variant.description, reason)
    return lab_row(name, variant.description, *catch(broken))
