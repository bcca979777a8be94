"""One speculative round, top to bottom (propose -> verify -> decide -> commit), and the
loop over rounds.

This is the only place a round happens, and every write a round makes is here:
the frontier's K/V row (retained layout), the temporary draft and target rows, the
staged successor (its output, which K/V rows it keeps, its processor states and
its stream counters), the compare-and-swap publication, and the caches following
what was published. Every command (generate, trace, sweep-k --measure, the
oracle's enumeration and Monte Carlo) runs ``speculative_round``.

The helpers below it only read: the verification call's rows and the round's
packed rows for the rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import cast

import torch

from specd.core import checks
from specd.core.kv import KVRows, same_tokens
from specd.core.layouts import Verified
from specd.core.model import RowInput
from specd.core.outcome import RoundOutcome
from specd.core.probability import argmax_ids
from specd.core.proposer import DraftContext, Proposal
from specd.core.records import RunResult, acceptance_rows, log_columns, round_timing
from specd.core.rows import Rows, joined, per_request, row_starts
from specd.core.rules import Rule
from specd.core.scratch import Scratch
from specd.core.session import DecodeSession
from specd.core.state import RequestState
from specd.core.stops import StopStrings, apply_stops
from specd.core.transaction import RoundTransaction
from specd.core.tree import DraftTree, TreeBatch
from specd.errors import CacheIdentityError

PublishCallback = Callable[[RequestState, tuple[int, ...]], None]
HALF = (torch.float16, torch.bfloat16)


def speculative_round(session: DecodeSession) -> list[RoundOutcome]:
    """One round for every live request -> each request's published RoundOutcome. Nothing authoritative changes
    before a request's commit: S_1 is staged aside and published by compare-and-swap; a failure leaves every
    unpublished request at S_0 (its temporary K/V rows dropped); a retry re-reads the same draws (stream counters
    move only at publication). Exactness checks are read with the decision; where one is set, it is taken again."""
    eng, clock = session.engine, RoundClock(session.sync)
    active = materialize_frontiers(session, clock)  # writes the frontier's K/V row (retained layout)
    if not active:
        return []
    plans = [eng.plan_for(s, session.draft_cache) for s in active]  # each request's source and K
    txns = [eng.transaction_cls(s, eng.layout) for s in active]
    ctx = DraftContext(session.draws, eng.config.backend, eng.config.prob_dtype, eng.rule.draft_noise())
    try:
        # The round's exactness checks keep their flags and are read with the decision (specd.core.checks).
        # Where the rule's is set the rule decides again; where a device-drawn draft's is set (its tokens
        # were never read, specd.core.device_chain) the round is taken again from its proposal. Either
        # way each check then reads at once; the draws are the same (stream counters have not moved).
        proposal: Proposal | None = None
        for deferring in (True, False):
            with checks.deferred(deferring) as kept:
                if proposal is None:
                    # 1. propose: each row drafts up to k tokens from its source (temporary rows in that
                    #    source's cache, or for a shared-body draft in the target's) and reports the q rows
                    #    it drew them from.
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
            flags = (kept[:drawn], kept[drawn:])
            decided, (draft_flag, rule_flag), logged, drafts = read_decision(
                decision, flags, eng.config.record_log, proposal.draft_ids
            )
            if draft_flag:
                session.discard_temporary(active)  # the proposal's rows go: it is drafted again
                proposal = None
            elif not rule_flag:
                break
        proposal = cast(Proposal, proposal)  # the loop's first take always proposes
        trees, verified = resolve(session, active, trees, verified, drafts)
        for txn, t, v, used, src, plan in zip(txns, trees, verified, proposal.draws, proposal.sources, plans):
            txn.verified(t, v, used, src, plan.match)
        for txn, (accepted, terminal, is_bonus, leaf) in zip(txns, decided):
            txn.decided(accepted, terminal, bool(is_bonus), leaf)
        # 4. commit: stage every successor off to the side, then publish each by compare-and-swap;
        #    the caches keep exactly the rows of what was published.
        for txn in txns:
            stage(txn, eng.config.eos_ids, eng.rule)
        for txn in txns:
            successor, new = txn.publish(session.store)
            if new:
                session.cache.commit(successor.slot, txn.kv_keep)  # accepted rows become history, the rest go
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
    early leaves the unfinished requests where their last round left them."""
    while True:
        session.fill(batch_size)
        if session.done:
            break
        for outcome in speculative_round(session):
            state = session.store.get(outcome.request_id)
            if stop_strings is not None and stop_strings.push(state.request_id, outcome.emitted):
                state = session.finish(state.request_id, "stop_string")
            yield False, state, outcome.emitted
        for state in session.take_finished():
            yield True, state, ()
    for state in session.take_finished():  # requests that finished at admission (zero budget)
        yield True, state, ()


class RoundClock:
    """Wall time of a round and of its draft and verify blocks (device-synchronized on CUDA, so the
    time is the work's, not its launch's)."""

    def __init__(self, sync: Callable[[], None] | None):
        self.sync = sync
        self.started = time.perf_counter()
        self.seconds = {"draft": 0.0, "verify": 0.0}

    @contextmanager
    def timed(self, block: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            if self.sync is not None:
                self.sync()
            self.seconds[block] += time.perf_counter() - t

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


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


def read_decision(
    decision, kept: Sequence[list[torch.Tensor]], log: bool, drafts: torch.Tensor | None = None
) -> tuple[list[list[int]], tuple[bool, ...], list, list[list[int]] | None]:
    """The round's one read from the device -> (per request [A, terminal token, is bonus, last accepted
    node], per list of ``kept`` whether any of its exactness checks (specd.core.checks) is set, with ``log`` the
    acceptance log's columns as lists [B][K] (records.log_columns; else []), and with ``drafts``
    (int64[B, K]: drafts never read, specd.core.device_chain) each row's drafts as lists). Sent as one
    float64 vector: a token id or a count below 2^53 is exact in it."""
    accepted = decision.accepted
    b, device = accepted.shape[0], accepted.device
    leaf = decision.leaf if decision.leaf is not None else accepted - 1
    columns = log_columns(decision) if log else []
    # one vector [A..., terminal..., is_bonus..., leaf..., flags..., columns..., drafts...], one dtype by cat
    flags = [checks.any_set(k, device).reshape(1) for k in kept if k]  # an empty list is known unset
    parts = [accepted, decision.terminal, decision.is_bonus, leaf, *flags]
    parts += [c.to(device=device, dtype=torch.float64).flatten() for c in columns]
    if drafts is not None:
        parts.append(drafts.to(device).flatten())
    values = torch.cat(parts).tolist()
    fours = [[int(values[j * b + i]) for j in range(4)] for i in range(b)]
    k = columns[0].shape[1] if columns else 0
    rest = values[4 * b + len(flags) :]
    read = [[rest[c * b * k + r * k : c * b * k + (r + 1) * k] for r in range(b)] for c in range(len(columns))]
    tokens = None
    if drafts is not None:
        width, flat = drafts.shape[1], rest[len(columns) * b * k :]
        tokens = [[int(t) for t in flat[r * width : (r + 1) * width]] for r in range(b)]
    read_flags = iter(values[4 * b : 4 * b + len(flags)])
    return fours, tuple(bool(next(read_flags)) if k else False for k in kept), read, tokens


def resolve(session: DecodeSession, active, trees: list[DraftTree], verified: list[Verified], drafts):
    """The round's trees and verifications with the drafts it read (``read_decision``: per row, or None)
    where they were pending on the device, and the caches' PENDING rows (target and draft) resolved
    to them -> (trees, verified)."""
    if drafts is None:
        return trees, verified
    out_trees, out_verified = [], []
    for s, tree, v, row in zip(active, trees, verified, drafts):
        if tree.ids is not None:
            tokens = row[: len(tree)]
            session.cache.resolve(s.slot, tokens)
            session.engine.proposer.resolve(session.draft_cache, s.slot, tokens)
            tree = tree.resolved(tokens)
            v = replace(v, kv_draft=KVRows(s.slot, tree.tokens, v.kv_draft.positions))
        out_trees.append(tree)
        out_verified.append(v)
    return out_trees, out_verified


def round_rows(
    engine,
    active: Sequence[RequestState],
    verified: Sequence[Verified],
    proposal: Proposal,
    trees: Sequence[DraftTree],
    scratch: Scratch,
) -> Rows:
    """The round's rows for the rule (specd.core.rows.Rows), packed: the target's processed rows
    (request b's k_b + 1 rows: the root's, then each node's, each at its own logical prefix: the
    target policy's processor state advanced over the node's branch), or when the target policy is
    greedy only their argmax ids; q as the draft models drew it (a lookup's drafts are ids); the
    drafts and their q rows by request, and the trees' structure where one is not a chain. The
    target's rows are processed in ``scratch`` (p lives there until the next round)."""
    policy, cfg, drafts = engine.target_policy, engine.config, proposal.drafts
    states = []
    for s, tree in zip(active, trees):
        at = [s.target_proc]  # the root's, then each node's: its parent's advanced over its token
        for token, parent in zip(tree.tokens, tree.parents):
            at.append(at[parent + 1].advance(token))
        states.extend(at)
    raw = joined([v.p_raw for v in verified])
    work = None  # where the rows are processed: greedy without processors reads raw's argmax as it is
    if policy.processors or not policy.greedy:  # half-precision logits are processed in float32
        work = scratch.rows(tuple(raw.shape), torch.float32 if raw.dtype in HALF else raw.dtype, raw.device)
    device = raw.device
    ks = [len(d) for d in drafts]
    k_max = max(ks, default=0)
    k_lens = torch.tensor(ks, dtype=torch.int64, device=device)
    p = argmax = None
    if policy.greedy:  # p_i is the point mass on the argmax: its id stands for the row
        argmax = per_request(argmax_ids(policy.logits(raw, states, work)), ks, k_max)
    else:
        p = policy.probabilities(raw, states, cfg.backend, cfg.prob_dtype, work)
    if not k_max:  # no request drafted: no draft, no q row
        index = draft = torch.empty(len(ks), 0, dtype=torch.int64, device=device)
    else:
        index = torch.tensor([list(i) + [-1] * (k_max - len(i)) for i in proposal.q_index], device=device)
        if proposal.draft_ids is not None:  # drafts never read (specd.core.device_chain), -1 past a row's
            draft = proposal.draft_ids[:, :k_max].to(device)
        else:
            draft = torch.tensor([list(d) + [-1] * (k_max - len(d)) for d in drafts], device=device)
    return Rows(
        p,
        None if p is None else row_starts(k_lens),
        proposal.q.to(device),
        index,  # each draft's row of q, int64[B, K]
        draft,
        k_lens,
        proposal.q.shape[-1],
        argmax,
        tuple(ks),
        None if all(t.is_chain for t in trees) else TreeBatch.of(trees, k_max, device),
    )
