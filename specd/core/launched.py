"""A round launched and not read yet (``Launched``), and what running ahead reads of one: a request's
provisional successor while its round is in flight, and the round without the requests that ended
before it was read. Nothing here writes: specd.core.round launches, reads and commits."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import cast

import torch

from specd.core.kv import PENDING
from specd.core.layouts import Verified
from specd.core.proposer import Proposal
from specd.core.readback import Readback, RoundClock
from specd.core.sampler import Decision
from specd.core.session import DecodeSession
from specd.core.sources import Plan
from specd.core.state import RequestState
from specd.core.tree import DraftTree


@dataclass
class Launched:
    """A round enqueued on the device and not read yet: what ``settle`` needs of it."""

    active: list[RequestState]  # the states it was launched from (provisional: ``provisional``)
    plans: list[Plan]
    proposal: Proposal
    trees: list[DraftTree]
    verified: list[Verified]
    decision: Decision
    readback: Readback  # the round's one read, on its way to the host
    clock: RoundClock


def provisional(session: DecodeSession, state: RequestState, launched: Launched) -> RequestState:
    """``state``'s successor after a round in flight that drafts nothing (one token, a bonus), as far as it
    is known before that round is read: its output ends with that token PENDING (``pending_ids``: its
    value on the device); counters, history and generation as the round's staging will make them."""
    b = next(i for i, s in enumerate(launched.active) if s.request_id == state.request_id)
    rng = state.rng.advance_all(0, 0, 1 if session.engine.rule.reads_streams else 0)
    return state.evolve(
        output=state.output + (PENDING,),
        cache_tokens=state.output,
        rng=rng,
        generation=state.generation + 1,
        rounds=state.rounds + 1,
        history=state.history.after(0, 0),
        pending_ids=cast(torch.Tensor, launched.decision.terminal)[b : b + 1],  # a decision's terminal tokens
        retained_logits=None,
    )


def only_live(launched: Launched, live: list[bool], decided: list, logged: list, drafts):
    """A round launched ahead, without the requests that ended before it was read (their rows are gone
    with their slots) -> (the round, its decisions, log columns and drafts, for the rest)."""
    keep = [b for b, alive in enumerate(live) if alive]

    def pick(values):
        return [values[b] for b in keep]

    proposal = replace(
        launched.proposal, draws=tuple(pick(launched.proposal.draws)), sources=tuple(pick(launched.proposal.sources))
    )
    kept = replace(
        launched,
        active=pick(launched.active),
        plans=pick(launched.plans),
        proposal=proposal,
        trees=pick(launched.trees),
        verified=pick(launched.verified),
    )
    return kept, pick(decided), [pick(column) for column in logged], pick(drafts) if drafts is not None else None
