"""Exact enumeration (0x04H): the speculative joint over all V^H continuations.

For every draft path (masses from the *declared* draft policy Pi_D, i.e. what
the proposer samples from), the production pipeline runs: the proposer's
recorded q rows, the layout's verification call on the TableModel, the target
policy at each logical prefix, and the sampler's ``decide`` on every cell of
the acceptance uniforms (the outcome depends on U_i only through U_i < ratio_i,
so one representative point per cell integrates exactly). The terminal token
is enumerated from the decided terminal distribution, and the transaction
stages the successor. Short branches are completed either by the ordinary
target chain (``completion="target"``) or by further speculative rounds from
the staged successor (``completion="rounds"``), which also exercises the
published K/V, processor state and frontier.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import torch

from specd.core.engine import DecodeSession
from specd.core.model import RowInput
from specd.core.state import Request, RequestState
from specd.core.transaction import Outcome
from specd.oracles.rig import Rig, fold

Joint = dict[tuple[int, ...], float]


def target_joint(rig: Rig, horizon: int, prefix: tuple[int, ...] | None = None) -> Joint:
    """The direct target chain p_1(x_1) p_2(x_2 | x_1) ... over ``horizon`` tokens."""
    prompt = rig.prompt if prefix is None else prefix
    policy = rig.target_policy
    start = fold(policy.initial_state(rig.prompt), prompt[len(rig.prompt) :])
    out: Joint = {}
    rows: dict[tuple[int, ...], list[float]] = {}

    def row(context: tuple[int, ...], state) -> list[float]:
        if context not in rows:
            raw = rig.target.raw_logits(context).unsqueeze(0)
            rows[context] = policy.probabilities(raw, [state], rig.backend, torch.float64)[0].tolist()
        return rows[context]

    def walk(seq: tuple[int, ...], state, mass: float) -> None:
        if len(seq) == horizon:
            out[seq] = out.get(seq, 0.0) + mass
            return
        for x, px in enumerate(row(prompt + seq, state)):
            if px > 0:
                walk(seq + (x,), state.advance(x), mass * px)

    walk((), start, 1.0)
    return out


class Enumerator:
    def __init__(self, rig: Rig, horizon: int, completion: str = "target"):
        self.rig = rig
        self.horizon = horizon
        self.completion = completion
        self.engine = rig.engine()
        self.session = DecodeSession(self.engine, [Request("enum", rig.prompt, horizon, seed=0)])
        self._memo: dict = {}
        self._target_memo: dict = {}
        self.rounds_enumerated = 0

    # -- state plumbing -------------------------------------------------------------
    def _load(self, state: RequestState) -> RequestState:
        """Make ``state`` authoritative and rebuild its physical cache from its identities."""
        session = self.session
        session.store.add(state)
        session.cache.reset(state.slot)
        if state.cache_tokens:
            n = len(state.cache_tokens)
            self.engine.target.step(session.cache, [RowInput(state.slot, state.cache_tokens, tuple(range(n)))])
            session.cache.commit(state.slot, n)
        return session._materialize_frontiers([state])[0]

    # -- one round -------------------------------------------------------------------
    def round_outcomes(self, state: RequestState):
        """All outcomes of one round from ``state``: list of (mass, emitted, successor)."""
        rig, eng, session = self.rig, self.engine, self.session
        state = self._load(state)
        self.rounds_enumerated += 1
        k = min(state.k, state.remaining - 1)
        if eng.proposer.deterministic:  # the proposal is a function of the state: one path, mass 1
            proposal = eng.proposer.propose([state], [k], rig.backend, torch.float64)
            path = proposal.drafts[0]
            k = len(path)
            paths, masses, recorded = [path], [1.0], [[proposal.q[0, i] for i in range(k)]]
        else:
            paths, masses, recorded = self._draft_paths(state, k)
        n_paths = len(paths)
        p_rows, verified_all = [], []
        for path in paths:
            verified = session.verify([state], [path], [k])
            session.cache.discard(state.slot)
            p_rows.append(session.target_rows([state], verified, [path], k)[0])
            verified_all.append(verified[0])
        p = torch.stack(p_rows).to(torch.float64)  # [P, k+1, V]
        if eng.target_policy.greedy:  # argmax rows -> one-hot distributions
            p = torch.nn.functional.one_hot(p.long(), rig.vocab).to(torch.float64)
        q = (
            torch.stack([torch.stack(r) for r in recorded]).to(torch.float64)
            if k
            else torch.zeros(n_paths, 0, rig.vocab, dtype=torch.float64)
        )
        draft = torch.tensor(paths, dtype=torch.int64).reshape(n_paths, k)
        k_lens = torch.full((n_paths,), k, dtype=torch.int64)
        ratios = eng.sampler.decide(p, q, draft, k_lens, torch.zeros(n_paths, k, dtype=torch.float64)).ratios

        patterns = torch.tensor(list(itertools.product((1, 0), repeat=k)), dtype=torch.bool).reshape(2**k, k)
        n_pat = patterns.shape[0]
        bits = patterns.unsqueeze(0).expand(n_paths, n_pat, k)
        r = ratios.unsqueeze(1).expand(n_paths, n_pat, k)
        u = torch.where(bits, r / 2, (1 + r) / 2)
        cell_mass = torch.where(bits, r, 1 - r).prod(dim=-1)  # [P, n_pat]
        flat = lambda t: t.unsqueeze(1).expand(n_paths, n_pat, *t.shape[1:]).reshape(n_paths * n_pat, *t.shape[1:])  # noqa: E731
        decision = eng.sampler.decide(flat(p), flat(q), flat(draft), flat(k_lens), u.reshape(n_paths * n_pat, k))
        rows = decision.terminal_rows
        rows = (rows / rows.sum(dim=-1, keepdim=True)).tolist()
        accepted = decision.accepted.tolist()
        is_bonus = decision.is_bonus.tolist()
        cell = cell_mass.reshape(-1).tolist()

        grouped: dict[tuple, float] = defaultdict(float)
        for idx in range(n_paths * n_pat):
            if cell[idx] <= 0:
                continue
            path_idx = idx // n_pat
            base = masses[path_idx] * cell[idx]
            for x, px in enumerate(rows[idx]):
                if px > 0:
                    grouped[(path_idx, accepted[idx], x, is_bonus[idx])] += base * px

        outcomes = []
        for (path_idx, a, x, bonus), mass in grouped.items():
            txn = eng.transaction_cls(state, eng.layout, eng.coordinate(state), eng.config.eos_ids, None)
            txn.verified(paths[path_idx], verified_all[path_idx], k)
            txn.decided(Outcome(a, x, bonus, True))
            successor = txn.stage()
            outcomes.append((mass, txn.stop.emitted, successor))
        return outcomes

    def _draft_paths(self, state: RequestState, k: int):
        """Every draft path with its mass under the declared Pi_D, and the proposer's recorded q rows."""
        rig, eng = self.rig, self.engine
        paths: list[tuple[int, ...]] = [()]
        masses = [1.0]
        recorded: list[list[torch.Tensor]] = [[]]
        for _ in range(k):
            raws = torch.stack([rig.draft.raw_logits(state.output + p) for p in paths])
            dstates = [fold(state.draft_proc, p) for p in paths]
            declared = rig.draft_policy.probabilities(raws, dstates, rig.backend, torch.float64).tolist()
            _, rec = eng.proposer.distributions(raws, dstates, rig.backend, torch.float64)
            nxt_paths, nxt_mass, nxt_rec = [], [], []
            for j, path in enumerate(paths):
                for x, qx in enumerate(declared[j]):
                    if qx > 0:
                        nxt_paths.append(path + (x,))
                        nxt_mass.append(masses[j] * qx)
                        nxt_rec.append(recorded[j] + [rec[j]])
            paths, masses, recorded = nxt_paths, nxt_mass, nxt_rec
        return paths, masses, recorded

    # -- joints -----------------------------------------------------------------------
    def joint(self) -> Joint:
        start = self.session.states()[0]
        return self._joint_from(start, self.horizon, first=True)

    def _joint_from(self, state: RequestState, h: int, first: bool = False) -> Joint:
        if h == 0:
            return {(): 1.0}
        if not first and self.completion == "target":
            key = state.output
            if key not in self._target_memo:
                self._target_memo[key] = target_joint(self.rig, h, prefix=state.output)
            return self._target_memo[key]
        key = (state.output, state.cache_tokens, state.target_proc, state.draft_proc, h)
        if key in self._memo:
            return self._memo[key]
        out: Joint = defaultdict(float)
        for mass, emitted, successor in self.round_outcomes(state):
            head = emitted[:h]
            if len(head) == h or successor.finished:
                out[head] += mass
                continue
            for tail, m in self._joint_from(successor, h - len(head)).items():
                out[head + tail] += mass * m
        self._memo[key] = dict(out)
        return self._memo[key]


def speculative_joint(rig: Rig, horizon: int, completion: str = "target") -> Joint:
    return Enumerator(rig, horizon, completion).joint()


def max_abs_diff(a: Joint, b: Joint) -> float:
    return max((abs(a.get(s, 0.0) - b.get(s, 0.0)) for s in set(a) | set(b)), default=0.0)
