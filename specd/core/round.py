"""One speculative round, top to bottom (propose -> verify -> decide -> commit), and the
loop over rounds.

This is the only place a round happens, and every write a round makes is here:
the frontier's K/V row (retained layout), the temporary draft and target rows, the
staged successor (its output, which K/V rows it keeps, its processor states and
its stream counters), the compare-and-swap publication, and the caches following
what was published. Every command (generate, trace, sweep-k --measure, the
oracle's enumeration and Monte Carlo) runs ``speculative_round``.

The helpers below it only read: the verification call's rows. What a round launched and
not read yet holds, and what running ahead reads of it, are specd.core.launched's; the
round's packed rows for the rule, specd.core.round_rows'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import torch

from specd.core import checks
from specd.core.kv import PENDING, KVRows, same_tokens
from specd.core.launched import Launched, only_live, provisional
from specd.core.layouts import Verified
from specd.core.model import RowInput
from specd.core.outcome import RoundOutcome
from specd.core.proposer import DraftContext
from specd.core.readback import Readback, RoundClock
from specd.core.records import RunResult, acceptance_rows, round_timing
from specd.core.round_rows import round_rows
from specd.core.rules import Rule
from specd.core.session import DecodeSession
from specd.core.state import RequestState
from specd.core.stops import StopStrings, apply_stops
from specd.core.transaction import RoundTransaction
from specd.core.tree import DraftTree
from specd.errors import CacheIdentityError

PublishCallback = Callable[[RequestState, tuple[int, ...]], None]


def speculative_round(session: DecodeSession) -> list[RoundOutcome]:
    """One round for every live request -> each request's published RoundOutcome: ``launch`` enqueues
    its proposal, verification and decision, ``settle`` reads it once and commits it. Nothing
    authoritative changes before a request's commit: S_1 is staged aside and published by
    compare-and-swap; a failure leaves every unpublished request at S_0 (its temporary K/V rows
    dropped); a retry re-reads the same draws (stream counters move only at publication)."""
    launched = launch(session)
    return settle(session, launched) if launched is not None else []


def launch(
    session: DecodeSession, states: list[RequestState] | None = None, deferring: bool = True, plans=None
) -> Launched | None:
    """Enqueue one round (propose -> verify -> decide) for ``states`` (None: the live requests, their
    frontiers materialized first) -> Launched, or None without a request. Reads nothing from the
    device: the drafts, the decision and the exactness checks' flags come back in one read
    (``Readback``), made by ``settle``. Writes the round's temporary K/V rows (target and draft).
    ``plans``: each request's source and K, chosen already (else here)."""
    eng, clock = session.engine, RoundClock(session.device)
    active = materialize_frontiers(session, clock) if states is None else states
    if not active:
        return None
    if plans is None:
        plans = [eng.plan_for(s, session.draft_cache) for s in active]  # each request's source and K
    ctx = DraftContext(session.draws, eng.config.backend, eng.config.prob_dtype, eng.rule.draft_noise())
    try:
        with checks.deferred(deferring) as kept:
            # 1. propose: each row drafts up to k tokens from its source (temporary rows in that source's
            #    cache, or for a shared-body draft in the target's) and reports the q rows it drew them from.
            with clock.timed("draft"):
                proposal = eng.proposer.propose(active, plans, session.draft_cache, ctx, session.cache)

            # 2. verify: one target call scores every row's tree (a chain: its drafts) and the bonus
            #    position (its K/V rows stay temporary in the target cache; rows a shared-body draft
            #    staged are not fed again).
            trees = [proposal.tree(b) for b in range(len(active))]
            with clock.timed("verify"):
                verified = verify(session, active, trees, proposal.staged)
            drawn = len(kept)  # the draft's flags come first

            # 3. decide: the run's rule over the round's packed rows (p: the target's processed rows).
            rows = round_rows(eng, active, verified, proposal, trees, session.scratch)
            decision = eng.rule.decide(rows, active, session.draws)
    except BaseException:
        session.discard_temporary(active)  # S_0 stays; the round's temporary rows go
        raise
    readback = Readback(decision, (kept[:drawn], kept[drawn:]), eng.config.record_log, proposal.draft_ids, rows.ks())
    clock.pause()
    return Launched(active, plans, proposal, trees, verified, decision, readback, clock)


def settle(
    session: DecodeSession, launched: Launched, later: dict[str, int] | None = None, redraft: bool = False
) -> list[RoundOutcome]:
    """Read a launched round once and commit it -> each request's published RoundOutcome. Where an
    exactness check's flag is set (specd.core.checks) the round is taken again with each check reading
    at once: from its proposal where a device-drawn draft's is (specd.core.device_chain) or ``redraft``
    says its rows are gone, else its decision. ``later``: per request, its temporary target rows of a
    round launched after this one (run ahead: ``decode_events``), which stay temporary. A request that
    ended after this round was launched (run ahead: the round before it emitted its end) is skipped."""
    eng, clock = session.engine, launched.clock
    clock.resume()
    decided, (draft_flag, rule_flag), logged, drafts = launched.readback.values()  # the one read
    clock.read()
    if draft_flag or rule_flag:
        again = taken_again(session, launched, draft_flag or redraft)
        return [] if again is None else settle(session, again)
    live = [session.is_live(s.request_id) for s in launched.active]
    if not all(live):
        launched, decided, logged, drafts = only_live(launched, live, decided, logged, drafts)
    active, proposal = launched.active, launched.proposal
    txns = [eng.transaction_cls(session.store.get(s.request_id), eng.layout) for s in active]  # from S_0
    try:
        trees, verified = resolve(session, txns, launched.trees, launched.verified, drafts)
        for txn, t, v, used, src, plan in zip(txns, trees, verified, proposal.draws, proposal.sources, launched.plans):
            txn.verified(t, v, used, src, plan.match)
        for txn, (accepted, terminal, is_bonus, leaf) in zip(txns, decided):
            txn.decided(accepted, terminal, bool(is_bonus), leaf)
        # 4. commit: stage every successor off to the side, then publish each by compare-and-swap;
        #    the caches keep exactly the rows of what was published (and a later round's, run ahead).
        for txn in txns:
            stage(txn, eng.config.eos_ids, eng.rule)
        for txn in txns:
            successor, new = txn.publish(session.store)
            if new:
                rows_after = (later or {}).get(successor.request_id, 0)
                session.cache.commit(successor.slot, txn.kv_keep, rows_after)  # accepted rows become history
                eng.proposer.settle(session.draft_cache, successor.slot, successor.output)
                if successor.finished:
                    session.retire(successor)
    except BaseException:
        session.abort(txns)  # S_0 stays; temporary target and draft rows are dropped
        raise
    session.compact()
    outcomes = [txn.outcome for txn in txns]
    timing = round_timing(outcomes, proposal, clock.seconds, clock.elapsed())
    session.stats.add_published(outcomes, timing)
    eng.publish_timing(timing)
    if eng.config.record_log:
        for outcome, acceptance in zip(outcomes, acceptance_rows(outcomes, logged)):
            session.log(outcome.request_id).add(outcome, acceptance)
    return outcomes


def taken_again(session: DecodeSession, launched: Launched, redraft: bool) -> Launched | None:
    """A round whose read showed a set exactness flag, taken again with every check reading at once:
    launched again where a draft drawn on the device was flagged or its rows are gone (its rows
    dropped first), from its requests' published states (a round launched ahead was launched from
    provisional ones) and without those that ended since (None: none left), else decided again over
    the same verification. The draws are the same."""
    if redraft:
        session.discard_temporary(launched.active)
        live = [session.store.get(s.request_id) for s in launched.active if session.is_live(s.request_id)]
        return launch(session, live, deferring=False) if live else None
    eng, active = session.engine, launched.active
    with checks.deferred(False):
        rows = round_rows(eng, active, launched.verified, launched.proposal, launched.trees, session.scratch)
        decision = eng.rule.decide(rows, active, session.draws)
    readback = Readback(decision, ([], []), eng.config.record_log, launched.proposal.draft_ids, rows.ks())
    return replace(launched, decision=decision, readback=readback)


def stage(txn: RoundTransaction, eos_ids: frozenset[int], rule: Rule) -> None:
    """Assemble S_1 and the round's outcome for one request without touching S_0: stops, the K/V
    rows it keeps (the accepted path's), its output, processor states and stream counters. ``rule``:
    whether it read uniforms from the request's streams, and how many acceptance tests it read."""
    start, (accepted, terminal, is_bonus), tree = txn.start, txn.decision, txn.tree
    stop = apply_stops(tree.path_tokens(txn.path[-1]) if txn.path else (), terminal, eos_ids, start.remaining)
    rows = txn.temporary_rows
    count = txn.layout.rows_to_commit(stop.accepted_emitted, stop.terminal_emitted, len(rows))
    kv_rows = txn.layout.commit_order(tree, txn.path)[:count]
    kept = tuple(rows[r] for r in kv_rows)
    # Streams advance over the draws the rule read for what was emitted (unread ones are read next round).
    correction = stop.terminal_emitted and not is_bonus
    reached = rule.tests_read(tree, txn.path, stop.accepted_emitted, correction)  # 0 for a rule that reads none
    rng = start.rng.advance_all(txn.proposal_draws, reached, 1 if stop.terminal_emitted and rule.reads_streams else 0)
    target_proc = txn.stage_processor(start.target_proc, stop.emitted)
    outcome = RoundOutcome(
        request_id=start.request_id,
        round_id=txn.round_id,
        round_index=start.rounds,
        expected_generation=start.generation,
        layout=txn.layout.name,
        source=txn.source,
        match=txn.match,
        draft_token_ids=txn.drafts,
        accepted=accepted,
        terminal_kind=("bonus" if is_bonus else "correction") if stop.terminal_emitted else "stop",
        terminal_token=terminal,
        emitted=stop.emitted,
        start_position=len(start.output),
        committed_token_count=start.generated + len(stop.emitted),
        committed_kv_token_ids=kept,
        discarded_kv_token_ids=tuple(rows[r] for r in range(len(rows)) if r not in kv_rows),
        reached_acceptance_tests=reached,
        proposal_draws=txn.proposal_draws,
        rng_before=start.rng.counters,
        rng_after=rng.counters,
        processor_before_hash=start.target_proc.digest() if start.target_proc.stateful else "",
        processor_after_hash=target_proc.digest() if target_proc.stateful else "",
        finish_reason=stop.finish_reason,
        draft_parents=None if tree.is_chain else tree.parents,
        accepted_path=None if tree.is_chain else txn.path,
    )
    successor = start.evolve(
        output=start.output + stop.emitted,
        cache_tokens=start.cache_tokens + kept,
        target_proc=target_proc,
        draft_proc=txn.stage_processor(start.draft_proc, stop.emitted),
        rng=rng,
        generation=start.generation + 1,
        rounds=start.rounds + 1,
        history=start.history.add(outcome),
        finish_reason=stop.finish_reason,
        retained_logits=None,
    )
    txn.staged(outcome, successor, kv_rows)


def decode(
    session: DecodeSession,
    on_publish: PublishCallback | None = None,
    batch_size: int | None = None,
    on_finish: Callable[[RequestState], None] | None = None,
    stop_strings: StopStrings | None = None,
) -> RunResult:
    """Rounds until every submitted request has finished (``decode_events``, its events as callbacks):
    on_publish(state, emitted) after each request's published round, on_finish(state) once per
    request, as it finishes."""
    for finished, state, emitted in decode_events(session, batch_size, stop_strings):
        if finished:
            if on_finish is not None:
                on_finish(state)
        elif on_publish is not None:
            on_publish(state, emitted)
    return session.result()


def decode_events(
    session: DecodeSession, batch_size: int | None = None, stop_strings: StopStrings | None = None
) -> Iterator[tuple[bool, RequestState, tuple[int, ...]]]:
    """Rounds until every submitted request has finished, at most ``batch_size`` decoding at once,
    as events: (False, state, emitted) after each request's published round, (True, state, ())
    once per request, as it finishes. After a published round a request whose text now holds one
    of ``stop_strings`` ends (finish reason "stop_string") before its event. A consumer that stops
    early leaves the unfinished requests where their last round left them.

    Where the session runs ahead (``runs_ahead``), the next round is launched before the one in
    flight is read, from provisional successors (``launch_ahead``): the device computes round N + 1
    while the host reads and commits round N."""
    launched: Launched | None = None
    while True:
        if launched is None:
            session.fill(batch_size)
            if session.done:
                break
            launched = launch(session)
            if launched is None:
                continue
        ahead = launch_ahead(session, launched)
        later, redraft = None, False
        if ahead is not None and any(launched.readback.values()[1]):  # the round in flight is taken again:
            session.discard_temporary(ahead.active)  # the one launched after it goes, and its own rows with it
            ahead, redraft = None, True
        elif ahead is not None:  # each provisional request's frontier row, staged after the round in flight's
            later = {s.request_id: 1 for s in ahead.active if s.pending_ids is not None}
        for outcome in settle(session, launched, later, redraft):
            state = session.store.get(outcome.request_id)
            if stop_strings is not None and stop_strings.push(state.request_id, outcome.emitted):
                state = session.finish(state.request_id, "stop_string")
            yield False, state, outcome.emitted
        for state in session.take_finished():
            yield True, state, ()
        launched = ahead
        if launched is not None:
            session.fill(batch_size)  # joiners are launched with the round after the one in flight
    for state in session.take_finished():  # requests that finished at admission (zero budget)
        yield True, state, ()


def launch_ahead(session: DecodeSession, launched: Launched) -> Launched | None:
    """The round after ``launched``, enqueued before ``launched`` is read, or None where it cannot be.

    It can where the round in flight drafts nothing (each live request emits exactly one token, so its
    successor is known but for that token's value, which stays on the device: ``provisional``) and
    the next one drafts nothing either (its K chosen from the history known: a round late), under
    processors without a state (a penalty's would follow the unread token) and sources that draft on
    the device (a lookup reads the output). The requests not in flight (joiners) launch from their
    own states; one that may finish by its budget this round is left out."""
    eng = session.engine
    if not session.runs_ahead or any(plan.k for plan in launched.plans) or launched.proposal.draft_ids is not None:
        return None
    flying = {s.request_id for s in launched.active}
    states = [
        provisional(session, s, launched)
        for s in launched.active
        if s.remaining > 1 and session.is_live(s.request_id)  # ended since (read already): not launched again
    ]
    states += [s for s in session.live() if s.request_id not in flying]
    if not states or any(s.target_proc.stateful for s in states):
        return None
    plans = [eng.plan_for(s, session.draft_cache) for s in states]
    if any(plan.k for plan in plans):
        return None
    return launch(session, states, plans=plans)


# -- what a round reads ---------------------------------------------------------------------
def materialize_frontiers(session: DecodeSession, clock: RoundClock) -> list[RequestState]:
    """The live requests at round start. A layout that keeps the frontier cached (retained) gets
    it materialized first by one ordinary target step, which commits its K/V row and yields p_1."""
    active = session.live()
    layout = session.engine.layout
    need = [(s, row) for s in active if (row := layout.frontier_input(s)) is not None]
    if not need:
        return active
    with clock.timed("verify"):
        out = session.engine.target.step(session.cache, [row for _, row in need], logits_for=1)
    session.stats.count_target_call(len(need))
    for (s, row), logits in zip(need, out.logits):
        session.cache.commit(s.slot, 1)
        updated = s.evolve(
            cache_tokens=s.cache_tokens + row.tokens, retained_logits=logits[-1], generation=s.generation + 1
        )
        session.store.replace_unpublished(updated, s.generation)
    return [session.store.get(s.request_id) for s in active]


def target_call(session: DecodeSession, rows: list[RowInput], hidden: bool = False):
    """One counted target call over ``rows`` (none: no call) -> (its StepOutput or None, slot -> index
    of the slot's row in it)."""
    if not rows:
        return None, {}
    target = session.engine.target
    # a shared-body verification runs the body only (SplitHeadLM): the head then runs on every row at once
    out = target.body_step(session.cache, rows) if hidden else target.step(session.cache, rows)
    session.stats.count_target_call(sum(len(r.tokens) for r in rows))
    return out, {row.slot: i for i, row in enumerate(rows)}


def verify(session: DecodeSession, active: Sequence[RequestState], drafts, staged=None) -> list[Verified]:
    """One target call for the batch -> per-row Verified (its rows stay temporary in the cache).
    ``drafts``: per row its proposal tree (specd.core.tree; a chain's tokens stand for the chain).

    ``staged``: per row, the hidden states float[j, D] of the first j rows of its verification
    input that a shared-body draft already wrote into the target's cache (None: none). Such a row
    feeds only the rest, and its logits are the full head over all of its hidden states (one head
    product for the whole batch)."""
    target, layout = session.engine.target, session.engine.layout
    drafts = [d if isinstance(d, DraftTree) else DraftTree.chain(d) for d in drafts]
    inputs = [layout.verification_input(s, d) for s, d in zip(active, drafts)]
    if not staged or not any(h is not None for h in staged):
        out, by_slot = target_call(session, [row for row in inputs if row is not None])
        verified = []
        for s, d in zip(active, drafts):
            i = by_slot.get(s.slot)
            logits = out.logits[i] if i is not None else None
            kv = out.kv[i] if i is not None else None
            verified.append(layout.extract(logits, kv, s, len(d)))
        return verified
    # Some rows were staged by a shared-body draft: the body runs on what is left, the head on all.
    for row, h in zip(inputs, staged):
        if h is not None and not same_tokens(session.cache.temporary(row.slot), row.tokens[: len(h)]):
            raise CacheIdentityError(f"slot {row.slot}: the draft's staged rows are not the verification input's")
    rest = [row.take(len(h)) if h is not None else row for row, h in zip(inputs, staged)]
    out, by_slot = target_call(session, [row for row in rest if row.tokens], hidden=True)
    hidden = []
    for row, h in zip(rest, staged):
        i = by_slot.get(row.slot)
        parts = ([h] if h is not None else []) + ([out.hidden[i]] if i is not None else [])
        hidden.append(torch.cat(parts))
    logits = target.head_logits(torch.cat(hidden)).split([len(h) for h in hidden])
    return [
        layout.extract(lg, KVRows(row.slot, row.tokens, row.positions), s, len(d))
        for lg, row, s, d in zip(logits, inputs, active, drafts)
    ]


def resolve(session: DecodeSession, txns, trees: list[DraftTree], verified: list[Verified], drafts):
    """The round's trees and verifications with what it read where it was pending on the device, and the
    caches' PENDING rows (target and draft) resolved to it -> (trees, verified): the drafts it read
    (``Readback``: per row, or None), and a provisional frontier (run ahead: ``provisional``), now the
    last token of the request's published output (``txns``' starts)."""
    out_trees, out_verified = [], []
    for txn, tree, v, row in zip(txns, trees, verified, drafts or [None] * len(trees)):
        slot = txn.start.slot
        if v.kv_frontier is not None and v.kv_frontier.tokens[0] == PENDING:
            frontier = txn.start.output[-1]
            session.cache.resolve(slot, (frontier,))
            v = replace(v, kv_frontier=KVRows(slot, (frontier,), v.kv_frontier.positions))
        if tree.ids is not None and row is not None:
            tokens = row[: len(tree)]
            session.cache.resolve(slot, tokens)
            session.engine.proposer.resolve(session.draft_cache, slot, tokens)
            tree = tree.resolved(tokens)
            v = replace(v, kv_draft=KVRows(slot, tree.tokens, v.kv_draft.positions))
        out_trees.append(tree)
        out_verified.append(v)
    return out_trees, out_verified
