"""A decode session: the live requests of one run, their caches, counters and log.

The session owns what persists between rounds: the authoritative request store
(states are replaced only by publication), the target's and the draft's K/V
caches (one slot per request), the run statistics and the acceptance log.

Continuous batching: requests wait in a queue (``submit``) and join the batch
(``fill``, which prefills their prompts) as finished ones leave; a finished
request's cache rows are freed at once and reused by the next to join, so
finishing costs no work proportional to the batch.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from specd.core.kpolicy import RoundTiming
from specd.core.layouts import Verified
from specd.core.model import RowInput
from specd.core.proposer import Proposal
from specd.core.records import AcceptanceRecord, RoundRecord
from specd.core.rng import Draws, RngState, stream_draws
from specd.core.sampler import Decision
from specd.core.state import Request, RequestState
from specd.core.stats import StatsAccumulator
from specd.core.transaction import RequestStore, RoundTransaction, SpeculativeCommit
from specd.errors import UsageError


@dataclass
class RequestLog:
    """One request's acceptance log: a row per proposed token and one per round."""

    acceptance: list[AcceptanceRecord] = field(default_factory=list)
    rounds: list[RoundRecord] = field(default_factory=list)


class DecodeSession:
    def __init__(self, engine, requests: Sequence[Request] = (), draws: Draws = stream_draws):
        self.engine = engine
        self.draws = draws
        self.store = RequestStore(keep_commits=engine.config.record_log)
        self.cache = engine.target.new_cache()
        self.draft_cache = engine.proposer.new_cache()
        self.stats = StatsAccumulator()
        self.logs: dict[str, RequestLog] = {}  # by request id, while the engine records a log
        self.order: list[str] = []
        self._live: dict[str, None] = {}  # unfinished request ids, in admission order
        self.waiting: deque[Request] = deque()  # submitted, not admitted yet
        self._finished: list[str] = []  # finished since the last take_finished()
        self._next_slot = 0
        self._draft_calls_seen = engine.proposer.forward_calls
        self._marks = (0.0, 0.0)  # draft and verify time when the last round closed its books
        device = getattr(engine.target, "device", None)
        self._sync = torch.cuda.synchronize if getattr(device, "type", None) == "cuda" else None
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
        vocab = self.engine.target.vocab_size
        known = set(self.store.ids())
        for r in requests:
            if r.request_id in known:
                raise UsageError(f"request ids must be unique; {r.request_id!r} appears twice")
            known.add(r.request_id)
            if not r.prompt:
                raise UsageError(f"request {r.request_id!r} has an empty prompt")
            if r.max_new_tokens < 0:
                raise UsageError(f"request {r.request_id!r}: max_new_tokens must be >= 0")
            if any(not 0 <= t < vocab for t in r.prompt):
                raise UsageError(f"request {r.request_id!r}: prompt token outside the vocabulary (size {vocab})")
        eng = self.engine
        states = []
        for r in requests:
            slot = self._next_slot
            self._next_slot += 1
            state = RequestState(
                request_id=r.request_id,
                slot=slot,
                prompt_len=len(r.prompt),
                output=tuple(r.prompt),
                cache_tokens=(),
                target_proc=eng.target_policy.initial_state(r.prompt),
                draft_proc=eng.proposer.policy.initial_state(r.prompt),
                rng=RngState(r.seed, r.request_id),
                generation=0,
                max_new_tokens=r.max_new_tokens,
                k=r.k,
            )
            self.store.add(state)
            self.order.append(r.request_id)
            self._live[r.request_id] = None
            self.cache.open(slot)
            if self.draft_cache is not None:
                self.draft_cache.open(slot)
            states.append(state)
        self._prefill(states)
        return [self.store.get(s.request_id) for s in states]

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
                self._close(s.slot)
                self._retire(s.request_id)
        self.stats.prefill_time += time.perf_counter() - t

    # -- what a round reads -------------------------------------------------------------
    def states(self) -> list[RequestState]:
        return [self.store.get(i) for i in self.order]

    def live(self) -> list[RequestState]:
        """The unfinished requests, in admission order (costs what is live, not what has finished)."""
        return [self.store.get(i) for i in self._live]

    @property
    def done(self) -> bool:
        return not self._live

    def ready(self) -> list[RequestState]:
        """The live requests at round start; layouts that keep the frontier cached get it
        materialized first by one ordinary target step (which also yields p_1)."""
        active = self.live()
        layout = self.engine.layout
        need = [(s, row) for s in active if (row := layout.frontier_input(s)) is not None]
        if not need:
            return active
        with self.timed("verify"):
            out = self.engine.target.step(self.cache, [row for _, row in need], logits_for=1)
        self.stats.target_forwards += 1
        self.stats.target_rows += len(need)
        for (s, row), logits in zip(need, out.logits):
            self.cache.commit(s.slot, 1)
            updated = s.evolve(
                cache_tokens=s.cache_tokens + row.tokens, retained_logits=logits[-1], generation=s.generation + 1
            )
            self.store.replace_unpublished(updated, s.generation)
        return [self.store.get(s.request_id) for s in active]

    def verify(self, active: Sequence[RequestState], drafts: Sequence[tuple[int, ...]]) -> list[Verified]:
        """One target call for the batch -> per-row Verified (its rows stay temporary in the cache)."""
        layout = self.engine.layout
        inputs = [layout.verification_input(s, d) for s, d in zip(active, drafts)]
        call = [row for row in inputs if row is not None]
        out = self.engine.target.step(self.cache, call) if call else None
        if call:
            self.stats.target_forwards += 1
            self.stats.target_rows += sum(len(r.tokens) for r in call)
        by_slot = {row.slot: i for i, row in enumerate(call)}
        verified = []
        for s, d in zip(active, drafts):
            i = by_slot.get(s.slot)
            logits = out.logits[i] if i is not None else None
            kv = out.kv[i] if i is not None else None
            verified.append(layout.extract(logits, kv, s, len(d)))
        return verified

    def target_rows(self, active, verified: Sequence[Verified], drafts) -> torch.Tensor:
        """The target's processed rows, each at its own logical prefix (the target policy's
        processor state advanced over the drafts before it).

        -> argmax int64[B, K+1] when the target policy is greedy, else p float[B, K+1, V].
        """
        policy = self.engine.target_policy
        k_max = max((len(d) for d in drafts), default=0)
        states, idx_b, idx_i = [], [], []
        for b, (s, d) in enumerate(zip(active, drafts)):
            st = s.target_proc
            for i in range(len(d) + 1):
                states.append(st)
                idx_b.append(b)
                idx_i.append(i)
                if i < len(d):
                    st = st.advance(d[i])
        raw = torch.cat([v.p_raw for v in verified])
        if raw.dtype in (torch.float16, torch.bfloat16):
            raw = raw.float()
        ib = torch.tensor(idx_b, device=raw.device)
        ii = torch.tensor(idx_i, device=raw.device)
        if policy.greedy:
            argmax = torch.zeros(len(active), k_max + 1, dtype=torch.int64, device=raw.device)
            argmax[ib, ii] = policy.logits(raw, states).argmax(dim=-1)
            return argmax
        cfg = self.engine.config
        probs = policy.probabilities(raw, states, cfg.backend, cfg.prob_dtype)
        p = torch.zeros(len(active), k_max + 1, probs.shape[-1], dtype=probs.dtype, device=probs.device)
        p[ib, ii] = probs
        return p

    def uniforms(self, active, ks: Sequence[int], device) -> tuple[torch.Tensor, torch.Tensor]:
        """The round's acceptance uniforms float64[B, K] (1 past k: never read) and terminal uniforms float64[B]."""
        k_max = max(ks, default=0)
        accept = [self.draws(s, "acceptance", k) + [1.0] * (k_max - k) for s, k in zip(active, ks)]
        terminal = [self.draws(s, "terminal", 1)[0] for s in active]
        accept_u = torch.tensor(accept, dtype=torch.float64).reshape(len(active), k_max)
        return accept_u.to(device), torch.tensor(terminal, dtype=torch.float64, device=device)

    # -- what a round writes ------------------------------------------------------------
    def publish(self, txn: RoundTransaction) -> SpeculativeCommit:
        """Publish one staged round; the caches keep exactly the rows of what was published."""
        successor, new = txn.publish(self.store)
        if new:
            self.cache.commit(successor.slot, txn.kv_keep)
            self.engine.proposer.settle(self.draft_cache, successor.slot, successor.output)
            if successor.finished:
                self._close(successor.slot)
                self._retire(successor.request_id)
        return txn.record

    def abort(self, txns: Sequence[RoundTransaction]) -> None:
        """Roll back every unpublished row: S_0 stays authoritative and temporary K/V rows go."""
        self._marks = (self.stats.draft_time, self.stats.verify_time)  # an aborted round's time is no cost sample
        self._draft_calls_seen = self.engine.proposer.forward_calls
        for txn in txns:
            if txn.abort():
                slot = txn.start.slot
                if self.cache.is_open(slot):
                    self.cache.discard(slot)
                    self.engine.proposer.settle(self.draft_cache, slot, None)

    @contextmanager
    def timed(self, what: str):
        """Adds the block's wall time to the run statistics (draft or verify); on CUDA the
        device is synchronized first, so the time is the work's, not its launch's."""
        t = time.perf_counter()
        try:
            yield
        finally:
            if self._sync is not None:
                self._sync()
            setattr(self.stats, f"{what}_time", getattr(self.stats, f"{what}_time") + time.perf_counter() - t)

    def end_round(
        self,
        txns: Sequence[RoundTransaction],
        proposal: Proposal,
        decision: Decision,
        accept_u: torch.Tensor | None,
        started: float,
    ) -> None:
        """Close the books on a round that started at ``started`` (perf_counter): give back
        the cache rows of requests that finished, add its statistics and (when the
        engine records a log) one log row per proposed token and one per round."""
        if not self.waiting:  # rows freed by finished requests are reused by the next ones to join
            self.cache.compact()
            if self.draft_cache is not None:
                self.draft_cache.compact()
        round_seconds = time.perf_counter() - started
        self.stats.round_time += round_seconds
        draft_calls = self.engine.proposer.forward_calls
        steps = draft_calls - self._draft_calls_seen
        self.stats.draft_forwards += steps
        self._draft_calls_seen = draft_calls
        for txn in txns:
            self.stats.add_round(len(txn.drafts), txn.outcome.accepted, len(txn.stop.emitted))
        draft_s, verify_s = self.stats.draft_time - self._marks[0], self.stats.verify_time - self._marks[1]
        self._marks = (self.stats.draft_time, self.stats.verify_time)
        self.engine.k_policy.observe(
            RoundTiming(
                batch=len(txns),
                draft_seconds=draft_s,
                draft_steps=steps,
                draft_first_tokens=proposal.first_call_tokens,
                draft_first_seconds=proposal.first_call_seconds,
                draft_rows=sum(1 for txn in txns if txn.drafts),
                max_k=max((len(txn.drafts) for txn in txns), default=0),
                verify_seconds=verify_s,
                verify_rows=sum(len(txn.drafts) + 1 for txn in txns),
                other_seconds=max(0.0, round_seconds - draft_s - verify_s),
            )
        )
        if not self.engine.config.record_log:
            return
        p_d, q_d, ratio = decision.p_draft.tolist(), decision.q_draft.tolist(), decision.ratios.tolist()
        u = accept_u.tolist() if accept_u is not None else None
        for b, txn in enumerate(txns):
            s, a = txn.start, txn.outcome.accepted
            committed = len(txn.successor.output) - s.prompt_len
            uniforms = u[b] if u is not None else None
            log = self.logs.setdefault(s.request_id, RequestLog())
            for i, token in enumerate(txn.drafts):
                reached = i <= a
                log.acceptance.append(
                    AcceptanceRecord(
                        request_id=s.request_id,
                        round_id=txn.round_id,
                        round_index=s.rounds,
                        draft_index=i + 1,
                        position=len(s.output) + i,
                        draft_token=token,
                        q_prob=q_d[b][i],
                        p_prob=p_d[b][i],
                        accept_ratio=ratio[b][i],
                        uniform=uniforms[i] if (reached and uniforms is not None) else None,
                        reached=reached,
                        accepted=i < a,
                        correction_distribution_id=(
                            f"residual[p{i + 1}-q{i + 1}]@{txn.round_id}" if reached and i == a else None
                        ),
                        committed_token_count=committed,
                    )
                )
            log.rounds.append(
                RoundRecord(
                    request_id=s.request_id,
                    round_id=txn.round_id,
                    round_index=s.rounds,
                    k=len(txn.drafts),
                    accepted=a,
                    terminal_kind=txn.record.terminal_kind,
                    terminal_token=txn.outcome.terminal,
                    emitted=txn.stop.emitted,
                    start_position=len(s.output),
                    committed_token_count=committed,
                    finish_reason=txn.successor.finish_reason,
                )
            )

    def finish(self, request_id: str, reason: str) -> RequestState:
        """End a request from outside the round rules (e.g. a stop string matched in its text)."""
        s = self.store.get(request_id)
        if s.finished:
            return s
        done = s.evolve(finish_reason=reason, generation=s.generation + 1)
        self.store.replace_unpublished(done, s.generation)
        self._close(s.slot)
        self._retire(request_id)
        return done

    def _retire(self, request_id: str) -> None:
        self._live.pop(request_id, None)
        self._finished.append(request_id)

    def _close(self, slot: int) -> None:
        """A finished request stops costing work: its cache slots close."""
        self.cache.close(slot)
        if self.draft_cache is not None:
            self.draft_cache.close(slot)

    # -- whole run ------------------------------------------------------------------------
    def run(self, on_publish=None, batch_size: int | None = None, on_finish=None):
        """Rounds until every submitted request has finished, at most ``batch_size`` decoding at
        once. on_publish(state, emitted) after each published round; on_finish(state) once per
        request, as it finishes (a callback may end a request early with ``finish``)."""
        from specd.core.round import speculative_round

        while True:
            self.fill(batch_size)
            if self.done:
                break
            for commit in speculative_round(self):
                if on_publish is not None:
                    on_publish(self.store.get(commit.request_id), commit.emitted_token_ids)
            for state in self.take_finished():
                if on_finish is not None:
                    on_finish(state)
        for state in self.take_finished():  # requests that finished at admission (zero budget)
            if on_finish is not None:
                on_finish(state)
        return self.result()

    def pop_log(self, request_id: str) -> RequestLog:
        """Hand over (and forget) one request's log, e.g. to stream it out as the request finishes."""
        return self.logs.pop(request_id, RequestLog())

    def result(self):
        from specd.core.engine import RunResult

        counts = self.cache.counts
        logs = [self.logs[i] for i in self.order if i in self.logs]
        return RunResult(
            states=tuple(self.states()),
            stats=self.stats.freeze(counts.staged, counts.committed, counts.discarded, time.perf_counter() - self._t0),
            commits=tuple(self.store.commits),
            acceptance=tuple(r for log in logs for r in log.acceptance),
            rounds=tuple(r for log in logs for r in log.rounds),
        )
