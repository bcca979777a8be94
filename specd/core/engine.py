"""The engine loop: batched speculative rounds over any CausalLM pair.

Each round, for every unfinished request: READY (materialize the frontier if
the layout wants it) -> propose -> verify (one target call for the batch) ->
decide (the exact rule) -> stage -> publish, as one RoundTransaction per
request. With ``NullProposer`` and k = 0 the same loop is target-only decoding.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

from specd.core.layouts import FrontierLayout, make_layout
from specd.core.manifest import RoundCoordinate, canonical_policy, ensure_current
from specd.core.model import CausalLM, RowInput
from specd.core.probability import check_backend
from specd.core.processors import SamplingPolicy
from specd.core.proposer import NullProposer, Proposal, Proposer
from specd.core.records import AcceptanceRecord, RoundRecord
from specd.core.rng import RngState
from specd.core.sampler import RejectionSampler, greedy_verify, token_probabilities
from specd.core.state import Request, RequestState
from specd.core.stats import RunStats, StatsAccumulator
from specd.core.transaction import FaultHook, Outcome, RequestStore, RoundTransaction, SpeculativeCommit
from specd.errors import UsageError

PublishCallback = Callable[[RequestState, tuple[int, ...]], None]


@dataclass(frozen=True)
class EngineConfig:
    k: int = 4
    layout: str = "replay_frontier"
    backend: str = "max_shift"
    prob_dtype: torch.dtype = torch.float32
    eos_ids: frozenset[int] = frozenset()
    record_log: bool = True


@dataclass(frozen=True)
class RunResult:
    states: tuple[RequestState, ...]  # final state per request, in request order
    stats: RunStats
    commits: tuple[SpeculativeCommit, ...]
    acceptance: tuple[AcceptanceRecord, ...]
    rounds: tuple[RoundRecord, ...]

    def new_tokens(self) -> list[tuple[int, ...]]:
        return [s.new_tokens for s in self.states]


class SpeculativeEngine:
    def __init__(
        self,
        target: CausalLM,
        proposer: Proposer | None,
        target_policy: SamplingPolicy,
        config: EngineConfig = EngineConfig(),
        *,
        sampler: RejectionSampler | None = None,
        layout: FrontierLayout | None = None,
        transaction_cls: type[RoundTransaction] = RoundTransaction,
        fault_hook: FaultHook | None = None,
    ):
        if config.k < 0:
            raise UsageError(f"k must be >= 0, got {config.k}")
        check_backend(config.backend)
        self.target = target
        self.proposer = proposer if proposer is not None else NullProposer(target.vocab_size)
        if self.proposer.vocab_size != target.vocab_size:
            raise UsageError(
                f"draft and target disagree on the event space: draft rows have width "
                f"{self.proposer.vocab_size}, target rows {target.vocab_size}"
            )
        self.target_policy = target_policy
        self.config = config
        self.sampler = sampler or RejectionSampler()
        self.layout = layout or make_layout(config.layout)
        self.transaction_cls = transaction_cls
        self.fault_hook = fault_hook
        self._pi_t = canonical_policy(target_policy.describe())
        self._pi_d = canonical_policy(self.proposer.policy.describe())
        self._omega = f"shared-ids:V={target.vocab_size}"

    @classmethod
    def baseline(cls, target: CausalLM, target_policy: SamplingPolicy, config: EngineConfig = EngineConfig(), **kw):
        """Target-only decoding through the same loop (k = 0, no proposer)."""
        return cls(target, None, target_policy, replace(config, k=0), **kw)

    def coordinate(self, s: RequestState) -> RoundCoordinate:
        return RoundCoordinate(
            target_model=self.target.identity,
            draft_model=self.proposer.identity,
            event_space=self._omega,
            target_policy=self._pi_t,
            draft_policy=self._pi_d,
            rng=(s.rng.seed, s.request_id, s.rng.counters),
            start_state=(s.request_id, s.generation, s.output, len(s.cache_tokens)),
            layout=self.layout.name,
        )

    def start(self, requests: Sequence[Request]) -> DecodeSession:
        return DecodeSession(self, requests)

    def run(self, requests: Sequence[Request], on_publish: PublishCallback | None = None) -> RunResult:
        return self.start(requests).run(on_publish)


@dataclass
class _Log:
    acceptance: list[AcceptanceRecord] = field(default_factory=list)
    rounds: list[RoundRecord] = field(default_factory=list)


class DecodeSession:
    """The authoritative store, caches and counters of one batch of requests."""

    def __init__(self, engine: SpeculativeEngine, requests: Sequence[Request]):
        self.engine = engine
        self.order = [r.request_id for r in requests]
        if len(set(self.order)) != len(self.order):
            raise UsageError("request ids must be unique")
        vocab = engine.target.vocab_size
        for r in requests:
            if not r.prompt:
                raise UsageError(f"request {r.request_id!r} has an empty prompt")
            if r.max_new_tokens < 0:
                raise UsageError(f"request {r.request_id!r}: max_new_tokens must be >= 0")
            if any(not 0 <= t < vocab for t in r.prompt):
                raise UsageError(f"request {r.request_id!r}: prompt token outside the vocabulary (size {vocab})")
        self.store = RequestStore()
        self.cache = engine.target.new_cache(len(requests))
        engine.proposer.open(len(requests))
        self.stats = StatsAccumulator()
        self.log = _Log()
        self._t0 = time.perf_counter()
        k_default = engine.config.k
        for slot, r in enumerate(requests):
            self.store.add(
                RequestState(
                    request_id=r.request_id,
                    slot=slot,
                    prompt_len=len(r.prompt),
                    output=tuple(r.prompt),
                    cache_tokens=(),
                    target_proc=engine.target_policy.initial_state(r.prompt),
                    draft_proc=engine.proposer.policy.initial_state(r.prompt),
                    rng=RngState(r.seed, r.request_id),
                    generation=0,
                    max_new_tokens=r.max_new_tokens,
                    k=k_default if r.k is None else r.k,
                )
            )
        self._prefill()

    # -- state ------------------------------------------------------------------
    def states(self) -> list[RequestState]:
        return [self.store.get(i) for i in self.order]

    @property
    def done(self) -> bool:
        return all(s.finished for s in self.store.states())

    def _prefill(self) -> None:
        """Commit K/V for prompt[:-1]; the last prompt token is the first frontier."""
        t = time.perf_counter()
        rows = []
        for s in self.store.states():
            body = s.output[:-1]
            if body:
                rows.append(RowInput(s.slot, body, tuple(range(len(body)))))
        if rows:
            self.engine.target.step(self.cache, rows, logits_for=0)
            self.stats.target_forwards += 1
            for row in rows:
                self.cache.commit(row.slot, len(row.tokens))
        for s in self.store.states():
            self.store.replace_unpublished(replace(s, cache_tokens=s.output[:-1]), s.generation)
            if s.finished:
                self._release(s.slot)
        self.stats.prefill_time += time.perf_counter() - t

    def _materialize_frontiers(self, active: list[RequestState]) -> list[RequestState]:
        """READY for layouts that keep the frontier cached: one ordinary target step."""
        layout = self.engine.layout
        need = [(s, row) for s in active if (row := layout.frontier_input(s)) is not None]
        if not need:
            return active
        t = time.perf_counter()
        out = self.engine.target.step(self.cache, [row for _, row in need], logits_for=1)
        self.stats.target_forwards += 1
        self.stats.target_rows += len(need)
        self.stats.verify_time += time.perf_counter() - t
        for (s, row), logits in zip(need, out.logits):
            self.cache.commit(s.slot, 1)
            updated = replace(
                s,
                cache_tokens=s.cache_tokens + row.tokens,
                retained_logits=logits[-1],
                generation=s.generation + 1,
            )
            self.store.replace_unpublished(updated, s.generation)
        return [self.store.get(s.request_id) for s in active]

    # -- one round --------------------------------------------------------------
    def round(self, on_publish: PublishCallback | None = None) -> list[SpeculativeCommit]:
        eng = self.engine
        cfg = eng.config
        active = [s for s in self.states() if not s.finished]
        if not active:
            return []
        t_round = time.perf_counter()
        draft_before = eng.proposer.forward_calls
        active = self._materialize_frontiers(active)
        ks = [min(s.k, s.remaining - 1) for s in active]
        coords = [eng.coordinate(s) for s in active]
        txns = [eng.transaction_cls(s, eng.layout, c, cfg.eos_ids, eng.fault_hook) for s, c in zip(active, coords)]
        published: set[int] = set()
        commits: list[SpeculativeCommit] = []
        t_draft = t_verify = 0.0
        try:
            t = time.perf_counter()
            proposal = eng.proposer.propose(active, ks, cfg.backend, cfg.prob_dtype)
            t_draft = time.perf_counter() - t
            ks = [len(d) for d in proposal.drafts]  # a proposer may offer fewer drafts than asked

            t = time.perf_counter()
            verified = self.verify(active, proposal.drafts, ks)
            t_verify = time.perf_counter() - t
            for txn, drafts, v in zip(txns, proposal.drafts, verified):
                txn.verified(drafts, v, len(drafts) if proposal.sampled else 0)

            for s, c in zip(active, coords):
                current = eng.coordinate(self.store.get(s.request_id))
                ensure_current(current, c, "proposal")
                ensure_current(current, c, "verification")
            outcomes, detail = self._decide(active, ks, proposal, verified)
            for txn, outcome in zip(txns, outcomes):
                txn.decided(outcome)
            for txn in txns:
                txn.stage()
            for b, txn in enumerate(txns):
                successor, new = txn.publish(self.store)
                if new:
                    self.cache.commit(successor.slot, txn.kv_keep)
                    eng.proposer.settle(successor.slot, successor.output)
                    if successor.finished:
                        self._release(successor.slot)
                published.add(b)
                commits.append(txn.record)
                if on_publish is not None:
                    on_publish(successor, txn.stop.emitted)
        except BaseException:
            for b, txn in enumerate(txns):
                if b not in published:
                    txn.abort()
                    self.cache.discard(active[b].slot)
                    eng.proposer.settle(active[b].slot, None)
            raise
        self.stats.draft_forwards += eng.proposer.forward_calls - draft_before
        self.stats.draft_time += t_draft
        self.stats.verify_time += t_verify
        self.stats.state_time += (time.perf_counter() - t_round) - t_draft - t_verify
        for k, txn in zip(ks, txns):
            self.stats.add_round(k, txn.outcome.accepted, len(txn.stop.emitted))
        if cfg.record_log:
            self._record(txns, ks, proposal, detail)
        return commits

    def verify(self, active: Sequence[RequestState], drafts: Sequence[tuple[int, ...]], ks: Sequence[int]):
        """One target call for the batch -> per-row Verified (rows stay temporary in the cache)."""
        eng = self.engine
        inputs = [eng.layout.verification_input(s, d) for s, d in zip(active, drafts)]
        call = [row for row in inputs if row is not None]
        out = eng.target.step(self.cache, call) if call else None
        if call:
            self.stats.target_forwards += 1
            self.stats.target_rows += sum(len(r.tokens) for r in call)
        by_slot = {row.slot: i for i, row in enumerate(call)}
        verified = []
        for s, k in zip(active, ks):
            i = by_slot.get(s.slot)
            logits = out.logits[i] if i is not None else None
            kv = out.kv[i] if i is not None else None
            verified.append(eng.layout.extract(logits, kv, s, k))
        return verified

    def target_rows(self, active, verified, drafts, k_max: int):
        """Processed target rows, each at its own logical prefix.

        -> argmax int64[B, K+1] when the target policy is greedy, else p float[B, K+1, V].
        """
        eng = self.engine
        raw, states, idx_b, idx_i = [], [], [], []
        for b, (s, v, d) in enumerate(zip(active, verified, drafts)):
            st = s.target_proc
            for i in range(len(d) + 1):
                states.append(st)
                idx_b.append(b)
                idx_i.append(i)
                if i < len(d):
                    st = st.advance(d[i])
            raw.append(v.p_raw)
        raw_rows = torch.cat(raw)
        if raw_rows.dtype in (torch.float16, torch.bfloat16):
            raw_rows = raw_rows.float()
        ib = torch.tensor(idx_b, device=raw_rows.device)
        ii = torch.tensor(idx_i, device=raw_rows.device)
        policy = eng.target_policy
        if policy.greedy:
            argmax = torch.zeros(len(active), k_max + 1, dtype=torch.int64, device=raw_rows.device)
            argmax[ib, ii] = policy.logits(raw_rows, states).argmax(dim=-1)
            return argmax
        probs = policy.probabilities(raw_rows, states, eng.config.backend, eng.config.prob_dtype)
        p = torch.zeros(len(active), k_max + 1, probs.shape[-1], dtype=probs.dtype, device=probs.device)
        p[ib, ii] = probs
        return p

    def _decide(self, active, ks, proposal: Proposal, verified):
        """Run the rule for the batch -> (per-row Outcome, tensors for the log)."""
        eng = self.engine
        cfg = eng.config
        b_total = len(active)
        k_max = max(ks, default=0)
        draft = torch.full((b_total, k_max), -1, dtype=torch.int64)
        for b, d in enumerate(proposal.drafts):
            if d:
                draft[b, : len(d)] = torch.tensor(d)
        rows = self.target_rows(active, verified, proposal.drafts, k_max)
        device = rows.device
        draft = draft.to(device)
        k_lens = torch.tensor(ks, dtype=torch.int64, device=device)
        q = proposal.q[:, :k_max].to(device)
        if eng.target_policy.greedy:
            argmax = rows
            tokens, accepted = greedy_verify(argmax, draft, k_lens)
            terminal = tokens.gather(1, accepted.unsqueeze(1)).squeeze(1)
            p_draft = (draft == argmax[:, :k_max]).to(cfg.prob_dtype)
            q_draft = token_probabilities(q, draft).to(p_draft.dtype)
            is_bonus = accepted >= k_lens
            outcomes = [
                Outcome(int(a), int(t), bool(bn), False)
                for a, t, bn in zip(accepted.tolist(), terminal.tolist(), is_bonus.tolist())
            ]
            ratios = torch.where(q_draft > 0, (p_draft / q_draft.clamp_min(1e-300)).clamp(max=1.0), 0.0)
            return outcomes, {"p_draft": p_draft, "q_draft": q_draft, "ratios": ratios, "accept_u": None}
        p = rows
        accept_u = torch.ones(b_total, k_max, dtype=torch.float64)
        terminal_u = torch.empty(b_total, dtype=torch.float64)
        for b, (s, k) in enumerate(zip(active, ks)):
            if k:
                accept_u[b, :k] = torch.tensor(s.rng.peek("acceptance", k), dtype=torch.float64)
            terminal_u[b] = s.rng.peek("terminal", 1)[0]
        accept_u, terminal_u = accept_u.to(device), terminal_u.to(device)
        decision = eng.sampler.decide(p, q.to(p.dtype), draft, k_lens, accept_u)
        terminal = eng.sampler.sample_terminal(decision.terminal_rows, terminal_u)
        outcomes = [
            Outcome(int(a), int(t), bool(bn), True)
            for a, t, bn in zip(decision.accepted.tolist(), terminal.tolist(), decision.is_bonus.tolist())
        ]
        return outcomes, {
            "p_draft": decision.p_draft,
            "q_draft": decision.q_draft,
            "ratios": decision.ratios,
            "accept_u": accept_u,
        }

    def _record(self, txns, ks, proposal: Proposal, detail) -> None:
        p_d = detail["p_draft"].tolist()
        q_d = detail["q_draft"].tolist()
        ratio = detail["ratios"].tolist()
        accept_u = detail["accept_u"].tolist() if detail["accept_u"] is not None else None
        for b, (txn, k) in enumerate(zip(txns, ks)):
            s, a = txn.start, txn.outcome.accepted
            committed = len(txn.successor.output) - s.prompt_len
            for i in range(k):
                reached = i <= a
                rejected_here = reached and i == a
                self.log.acceptance.append(
                    AcceptanceRecord(
                        request_id=s.request_id,
                        round_id=txn.round_id,
                        round_index=s.rounds,
                        draft_index=i + 1,
                        position=len(s.output) + i,
                        draft_token=proposal.drafts[b][i],
                        q_prob=q_d[b][i],
                        p_prob=p_d[b][i],
                        accept_ratio=ratio[b][i],
                        uniform=accept_u[b][i] if (reached and accept_u is not None) else None,
                        reached=reached,
                        accepted=i < a,
                        correction_distribution_id=(
                            f"residual[p{i + 1}-q{i + 1}]@{txn.round_id}" if rejected_here else None
                        ),
                        committed_token_count=committed,
                    )
                )
            self.log.rounds.append(
                RoundRecord(
                    request_id=s.request_id,
                    round_id=txn.round_id,
                    round_index=s.rounds,
                    k=k,
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
        done = replace(s, finish_reason=reason, generation=s.generation + 1)
        self.store.replace_unpublished(done, s.generation)
        self._release(s.slot)
        return done

    def _release(self, slot: int) -> None:
        """A finished request stops costing work: its cache rows leave the batch."""
        self.cache.release(slot)
        self.engine.proposer.release(slot)

    # -- whole run ----------------------------------------------------------------
    def run(self, on_publish: PublishCallback | None = None) -> RunResult:
        while not self.done:
            self.round(on_publish)
        return self.result()

    def result(self) -> RunResult:
        counts = self.cache.counts
        return RunResult(
            states=tuple(self.states()),
            stats=self.stats.freeze(counts.staged, counts.committed, counts.discarded, time.perf_counter() - self._t0),
            commits=tuple(self.store.commits),
            acceptance=tuple(self.log.acceptance),
            rounds=tuple(self.log.rounds),
        )
