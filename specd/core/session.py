"""A decode session: what persists between the rounds of one run.

The session owns the authoritative request store (states are replaced only by
publication), the target's and the draft's K/V caches (one slot per request), the
run's counters and the acceptance log. It admits requests and prefills their
prompts, and it ends them (``retire``, ``finish``) or rolls a failed round back
(``abort``). It never runs a round: ``specd.core.round`` does, and every write a
round makes is there.

Continuous batching: requests wait in a queue (``submit``) and join the batch
(``fill``, which prefills their prompts) as finished ones leave; a finished
request's cache rows are freed at once and reused by the next to join, so
finishing costs no work proportional to the batch.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from specd.core.model import RowInput, device_sync
from specd.core.outcome import RoundOutcome
from specd.core.records import AcceptanceRecord, RunResult
from specd.core.rng import Draws, RngState, stream_draws
from specd.core.scratch import Scratch
from specd.core.state import Request, RequestState
from specd.core.stats import StatsAccumulator
from specd.core.transaction import RequestStore, RoundTransaction
from specd.errors import UsageError, shown


def runs_ahead(engine, cache, device) -> bool:
    """Whether a session launches rounds before reading the one in flight (specd.core.round.launch_ahead):
    as its config says (auto: on CUDA), with the replay layout (the retained one steps the frontier
    apart), a cache that keeps a later round's rows (llama.cpp's calls are done when they return), and
    no source that drafts on the host (a lookup reads the output, so it needs each round read)."""
    wanted = engine.config.ahead if engine.config.ahead is not None else getattr(device, "type", None) == "cuda"
    return bool(
        wanted
        and engine.layout.name == "replay_frontier"
        and getattr(cache, "keeps_later", True)
        and not any(source.deterministic for source in engine.proposer.sources)
    )


@dataclass
class RequestLog:
    """One request's acceptance log: a row per proposed token and one per round."""

    acceptance: list[AcceptanceRecord] = field(default_factory=list)
    rounds: list[RoundOutcome] = field(default_factory=list)

    def add(self, outcome: RoundOutcome, acceptance: list[AcceptanceRecord]) -> None:
        """A published round: its outcome and its per-draft rows."""
        self.rounds.append(outcome)
        self.acceptance.extend(acceptance)


class DecodeSession:
    """``engine``: the run's components (a SpeculativeEngine: target, proposer, policies, config)."""

    def __init__(self, engine, requests: Sequence[Request] = (), draws: Draws = stream_draws):
        self.engine = engine
        self.draws = draws
        self.store = RequestStore(keep_commits=engine.config.record_log)
        self.cache = engine.target.new_cache()
        self.draft_cache = engine.proposer.new_cache()
        self.stats = StatsAccumulator()
        self.scratch = Scratch()  # the round's target rows (specd.core.scratch)
        self.logs: dict[str, RequestLog] = {}  # by request id, while the engine records a log
        self.order: list[str] = []
        self._live: dict[str, None] = {}  # unfinished request ids, in admission order
        self.waiting: deque[Request] = deque()  # submitted, not admitted yet
        self._finished: list[str] = []  # finished since the last take_finished()
        self._next_slot = 0
        # On CUDA a timed block ends with a sync of the target's device (cuda:N, not the current
        # one), so the time is the work's, not its launch's.
        self.device = getattr(engine.target, "device", None)
        self.sync = device_sync(self.device)
        self.runs_ahead = runs_ahead(engine, self.cache, self.device)
        self._t0 = time.perf_counter()
        if requests:
            self.admit(requests)

    # -- requests join ----------------------------------------------------------------
    def submit(self, requests: Sequence[Request]) -> None:
        """Queue requests; ``fill`` admits them as the batch has room."""
        self.waiting.extend(requests)

    def fill(self, batch_size: int | None = None) -> list[RequestState]:
        """Admit waiting requests until ``batch_size`` are live (all of them without a size)."""
        room = len(self.waiting) if batch_size is None else batch_size - len(self._live)
        joining = [self.waiting.popleft() for _ in range(min(max(room, 0), len(self.waiting)))]
        return self.admit(joining) if joining else []

    @property
    def pending(self) -> bool:
        """Requests still waiting or decoding."""
        return bool(self.waiting) or not self.done

    def take_finished(self) -> list[RequestState]:
        """The requests that finished since the last call, in the order they finished."""
        ids, self._finished = self._finished, []
        return [self.store.get(i) for i in ids]

    def admit(self, requests: Sequence[Request]) -> list[RequestState]:
        """New requests join the session: each gets a slot, and its prompt is prefilled."""
        self._check(requests)
        engine = self.engine
        states = []
        for r in requests:
            state = RequestState(
                request_id=r.request_id,
                slot=self._next_slot,
                prompt_len=len(r.prompt),
                output=tuple(r.prompt),
                cache_tokens=(),
                target_proc=engine.target_policy.initial_state(r.prompt),
                draft_proc=engine.proposer.policy.initial_state(r.prompt),
                rng=RngState(r.seed, r.request_id),
                generation=0,
                max_new_tokens=r.max_new_tokens,
                k=r.k,
            )
            self._next_slot += 1
            self.store.add(state)
            self.order.append(r.request_id)
            self._live[r.request_id] = None
            self.cache.open(state.slot)
            if self.draft_cache is not None:
                self.draft_cache.open(state.slot)
            states.append(state)
        self._prefill(states)
        return [self.store.get(s.request_id) for s in states]

    def admit_at(self, branches: Sequence[tuple[RequestState, Sequence[str]]]) -> list[list[RequestState]]:
        """Admit copies of requests as they stand mid-generation: for each (state, ids), one copy per id,
        with ``state``'s output, processors, counters and committed K/V rows (rebuilt by one target
        step for the whole batch), under its own id and slot (the exact oracle branches requests this
        way) -> the copies, per branch."""
        fresh = iter(
            self.admit([Request(rid, s.output[: s.prompt_len], s.max_new_tokens) for s, ids in branches for rid in ids])
        )  # one prefill for every copy
        copies = [[(state, next(fresh)) for _ in ids] for state, ids in branches]
        pairs = [pair for group in copies for pair in group]
        rows = []
        for state, c in pairs:
            if self.cache.committed(c.slot) == state.cache_tokens:
                continue  # admitting the prompt already built this cache
            self.cache.reset(c.slot)
            if state.cache_tokens:
                rows.append(RowInput(c.slot, state.cache_tokens, tuple(range(len(state.cache_tokens)))))
        if rows:
            self.engine.target.step(self.cache, rows, logits_for=0)
            for row in rows:
                self.cache.commit(row.slot, len(row.tokens))
        for state, c in pairs:
            rng = RngState(state.rng.seed, c.request_id, state.rng.counters)
            self.store.add(state.evolve(request_id=c.request_id, slot=c.slot, rng=rng))
        return [[self.store.get(c.request_id) for _, c in group] for group in copies]

    def _check(self, requests: Sequence[Request]) -> None:
        vocab = self.engine.target.vocab_size
        known = set(self.store.ids())
        for r in requests:
            if r.request_id in known:
                raise UsageError(f"request ids must be unique; {shown(r.request_id)} appears twice")
            known.add(r.request_id)
            if not r.prompt:
                raise UsageError(f"request {shown(r.request_id)} has an empty prompt")
            if r.max_new_tokens < 0:
                raise UsageError(f"request {shown(r.request_id)}: max_new_tokens must be >= 0")
            if any(not 0 <= t < vocab for t in r.prompt):
                raise UsageError(f"request {shown(r.request_id)}: prompt token outside the vocabulary (size {vocab})")

    def _prefill(self, states: list[RequestState]) -> None:
        """Commit K/V for prompt[:-1]; the last prompt token is the first frontier."""
        t = time.perf_counter()
        rows = [RowInput(s.slot, s.output[:-1], tuple(range(len(s.output) - 1))) for s in states if len(s.output) > 1]
        if rows:
            self.engine.target.step(self.cache, rows, logits_for=0)
            self.stats.target_forwards += 1
            for row in rows:
                self.cache.commit(row.slot, len(row.tokens))
        for s in states:
            self.store.replace_unpublished(s.evolve(cache_tokens=s.output[:-1]), s.generation)
            if s.finished:
                self.retire(s)
        self.stats.prefill_time += time.perf_counter() - t

    # -- what persists ------------------------------------------------------------------
    def states(self) -> list[RequestState]:
        return [self.store.get(i) for i in self.order]

    def live(self) -> list[RequestState]:
        """The unfinished requests, in admission order (costs what is live, not what has finished)."""
        return [self.store.get(i) for i in self._live]

    @property
    def done(self) -> bool:
        return not self._live

    def is_live(self, request_id: str) -> bool:
        return request_id in self._live

    def log(self, request_id: str) -> RequestLog:
        return self.logs.setdefault(request_id, RequestLog())

    def pop_log(self, request_id: str) -> RequestLog:
        """Hand over (and forget) one request's log, e.g. to stream it out as the request finishes."""
        return self.logs.pop(request_id, RequestLog())

    # -- requests leave -------------------------------------------------------------------
    def retire(self, state: RequestState) -> None:
        """A finished request stops costing work: its cache slots close and it leaves the live set."""
        self.cache.close(state.slot)
        if self.draft_cache is not None:
            self.draft_cache.close(state.slot)
        self._live.pop(state.request_id, None)
        self._finished.append(state.request_id)

    def finish(self, request_id: str, reason: str) -> RequestState:
        """End a request between rounds, by a rule outside the round (a stop string in its text)."""
        s = self.store.get(request_id)
        if s.finished:
            return s
        done = s.evolve(finish_reason=reason, generation=s.generation + 1)
        self.store.replace_unpublished(done, s.generation)
        self.retire(done)
        return done

    def abort(self, txns: Sequence[RoundTransaction]) -> None:
        """Roll back every unpublished row of a failed round: S_0 stays authoritative and its
        temporary K/V rows (target and draft) go."""
        for txn in txns:
            if txn.abort():
                slot = txn.start.slot
                if self.cache.is_open(slot):
                    self.cache.discard(slot)
                    self.engine.proposer.settle(self.draft_cache, slot, None)

    def discard_temporary(self, states: Sequence[RequestState]) -> None:
        """Drop every temporary row (target and draft) of ``states``' slots: a round taken again starts
        from their committed rows."""
        for s in states:
            if self.cache.is_open(s.slot):
                self.cache.discard(s.slot)
                self.engine.proposer.settle(self.draft_cache, s.slot, None)

    def compact(self) -> None:
        """Between rounds: give back storage nobody reads. Rows freed by finished requests are
        kept while requests wait to join (they reuse them); hole positions are cropped."""
        for cache in (self.cache, self.draft_cache):
            if cache is None:
                continue
            if not self.waiting:
                cache.compact()
            cache.tidy()

    def result(self) -> RunResult:
        counts = self.cache.counts
        logs = [self.logs[i] for i in self.order if i in self.logs]
        return RunResult(
            states=tuple(self.states()),
            stats=self.stats.freeze(counts.staged, counts.committed, counts.discarded, time.perf_counter() - self._t0),
            commits=tuple(self.store.commits),
            acceptance=tuple(r for log in logs for r in log.acceptance),
            rounds=tuple(r for log in logs for r in log.rounds),
        )
