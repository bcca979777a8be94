"""Exact enumeration: the speculative joint over all V^H continuations, through the real round.

Under the rule, the round's outcome depends on its uniforms only through which
*cell* each one falls in: the proposal uniform u_i through which token's
interval of the inverse CDF of q_i it hits, the acceptance uniform U_i through
U_i < r_i or not (r_i = min(1, p_i(d_i)/q_i(d_i))), and the terminal uniform
through which token's interval of the correction or bonus distribution it hits.
So a representative uniform per cell, weighted by the cell's width, integrates
the round exactly. Each cell is run at three points, its centre and just inside
both ends (every uniform at once), each weighted a third: an engine whose
outcome is not constant over a cell of the rule (a boundary moved by a wrong
ratio, a wrong residual, a draw read where the rule reads none) gives another
outcome at one of them and moves the joint.

The cells come from the oracle's own rule (specd.oracles.reference, ``Reference``: the target's
processed rows and the *declared* draft policy's rows, computed here from the
tables, float64); the outcomes come from the production code: every cell
becomes one request of a batch, its uniforms are injected through the session's
``Draws``, and ``speculative_round`` runs the whole batch. If production drafts,
tests, corrects or commits differently from the rule, some cell's outcome is
not the one its width belongs to, and the joint moves away from the target's.

Two passes per state: the first learns how many drafts production proposes on
each draft path (K may depend on the draft's own rows), the second runs one
request per (path, first rejection or all accepted, terminal token). Short
branches are completed by the target chain (``completion="target"``) or by
further speculative rounds from production's published successor
(``completion="rounds"``, which also exercises the published K/V, processor
state, stream counters and frontier).
"""

from __future__ import annotations

from collections import defaultdict

from specd.core.record import record
from specd.core.round import speculative_round
from specd.core.state import Request, RequestState
from specd.oracles.reference import (
    PROBES,
    UNUSED,
    Joint,
    Reference,
    block_branch,
    branch,
    cells_of,
    probe,
    target_joint,
)
from specd.oracles.rig import Rig


@record
class Cell:
    """One cell of the round's uniforms: an interval [lo, hi) per uniform, and its mass."""

    proposal: tuple[tuple[float, float], ...]
    acceptance: tuple[tuple[float, float], ...]
    terminal: tuple[float, float]
    mass: float

    def at(self, where: str) -> dict[str, tuple[float, ...]]:
        return {
            "proposal": tuple(probe(lo, hi, where) for lo, hi in self.proposal),
            "acceptance": tuple(probe(lo, hi, where) for lo, hi in self.acceptance),
            "terminal": (probe(*self.terminal, where),),
        }


class Enumerator:
    def __init__(self, rig: Rig, horizon: int, completion: str = "target", ref: Reference | None = None):
        self.rig = rig
        self.horizon = horizon
        self.completion = completion
        self.engine = rig.engine()
        self.ref = ref if ref is not None and ref.serves(rig) else Reference(rig)  # its rows, computed once
        self._memo: dict = {}
        self._target_memo: dict = {}
        self.rounds_enumerated = 0
        self.k_seen: set[int] = set()  # drafts production proposed, over every round enumerated
        self.sources_seen: set[str] = set()  # the draft sources production drafted from

    # -- running production on injected uniforms ----------------------------------------
    def run_cells(self, branches: list[tuple[RequestState, list[dict[str, tuple[float, ...]]]]]):
        """One production round for every branch's points at once: one request per point, a copy of
        its branch's state with the point's uniforms (by stream name) injected
        -> per branch, [(commit, successor)] in the order of its points."""
        injected: dict[str, dict[str, tuple[float, ...]]] = {}
        names = []
        for _, points in branches:
            names.append([f"cell{len(injected) + i}" for i in range(len(points))])
            injected.update(zip(names[-1], points))

        def draws(s, stream: str, n: int) -> list[float]:
            values = injected[s.request_id][stream]
            return list(values[:n]) + [UNUSED] * (n - len(values))

        session = self.engine.start(draws=draws)
        session.admit_at([(state, ids) for (state, _), ids in zip(branches, names)])
        commits = {c.request_id: c for c in speculative_round(session)}
        self.rounds_enumerated += 1
        self.k_seen.update(len(c.draft_token_ids) for c in commits.values())
        self.sources_seen.update(c.source for c in commits.values() if c.source)
        return [[(commits[i], session.store.get(i)) for i in ids] for ids in names]

    # -- one round ---------------------------------------------------------------------
    def round_outcomes(self, states: list[RequestState]) -> list[list[tuple[float, tuple[int, ...], RequestState]]]:
        """All outcomes of one round from each of ``states`` -> per state, [(mass, emitted tokens,
        successor)]. Two production rounds serve every state: the draft paths', then the cells'."""
        points = [self._points(state, paths) for state, paths in zip(states, self._discover_paths(states))]
        outcomes = self.run_cells([(state, [p for _, p in pts]) for state, pts in zip(states, points)])
        return [
            [(mass, commit.emitted, successor) for (mass, _), (commit, successor) in zip(pts, outs)]
            for pts, outs in zip(points, outcomes)
        ]

    def _points(self, state: RequestState, paths: dict, probes=PROBES) -> list[tuple[float, dict[str, tuple]]]:
        """Every cell of the round from ``state`` at each of ``probes`` -> [(its mass, its uniforms)]."""
        cells = []
        if self.rig.rule == "block":  # every A of every full path: all k tests decide it
            for path, full, mass in paths["maximal"]:
                cells += self._block_cells(state, path, full, mass, paths["lookup"])
        else:
            for path, full, mass in paths["nodes"]:  # first rejection at the path's last draft
                cells += self._cells(state, path, full, mass, True, paths["lookup"])
            for path, full, mass in paths["maximal"]:  # every draft accepted: a bonus
                cells += self._cells(state, path, full, mass, False, paths["lookup"])
        return [(cell.mass / len(probes), cell.at(where)) for cell in cells for where in probes]

    def _discover_paths(self, states: list[RequestState]) -> list[dict]:
        """Pass 1: every draft path of the declared draft policy, run through production to learn
        how many of its tokens production drafts -> per state {"nodes": [...], "maximal": [...],
        "lookup": bool}, each path (drafted path, the proposal cells of a full path through it,
        declared q mass of the path); "lookup": the request drafts from a deterministic source
        this round (q a point mass)."""
        planned = [self._full_paths(state) for state in states]
        probes = [[Cell(cells, (), (0.0, 1.0), mass).at("centre") for _, cells, mass in full] for _, full in planned]
        ran = self.run_cells(list(zip(states, probes)))
        return [
            self._paths(state, lookup, full, [commit.draft_token_ids for commit, _ in outcomes])
            for state, (lookup, full), outcomes in zip(states, planned, ran)
        ]

    def _full_paths(self, state: RequestState) -> tuple[bool, list[tuple[tuple[int, ...], tuple, float]]]:
        """(whether the round drafts from a lookup, every full draft path [(tokens, proposal cells, mass)])."""
        caches = self.engine.proposer.new_cache()  # which source production plans (a lookup needs a match)
        caches.open(state.slot)
        plan = self.engine.plan_for(state, caches)
        source = self.engine.proposer.sources[plan.source] if plan.source is not None else None
        lookup = source is None or source.deterministic
        # The proposal uniforms are integrated whenever a sampling source could read them, even in a
        # round planned for a lookup: a choice of source that reads them would show in the joint.
        sampling = [s for s in self.engine.proposer.sources if not s.deterministic]
        full_paths: list[tuple[tuple[int, ...], tuple, float]] = [((), (), 1.0)]
        if sampling and plan.k:
            for _ in range(plan.k):
                grown = []
                for tokens, intervals, mass in full_paths:
                    for x, lo, hi in cells_of(self.ref.q(state.output + tokens)):
                        grown.append((tokens + (x,), intervals + ((lo, hi),), mass * (hi - lo)))
                full_paths = grown
        return lookup, full_paths

    def _paths(self, state: RequestState, lookup: bool, full_paths: list, drafted: list) -> dict:
        """What production drafted on each full path -> the round's nodes and maximal paths, each once
        per full path through it (weighed by the full path's width): the drafts after a rejection
        are integrated too, whose values the rule never reads but a wrong engine may."""
        nodes: dict[tuple, tuple] = {}
        maximal: dict[tuple, tuple] = {}
        for (tokens, intervals, cell_mass), drafts in zip(full_paths, drafted):
            if lookup:  # the lookup drafts what it drafts, q a point mass; each proposal cell weighs its width
                path, mass = drafts, cell_mass
            else:  # a sampling source should draft a prefix of the path its uniforms point at
                path, mass = tokens[: len(drafts)], self._q_mass(state, tokens)
            for j in range(1, len(path) + 1):
                nodes.setdefault((path[:j], intervals), (path[:j], intervals, mass))
            maximal.setdefault((path, intervals), (path, intervals, mass))
        return {"nodes": list(nodes.values()), "maximal": list(maximal.values()), "lookup": lookup}

    def _q_mass(self, state: RequestState, path: tuple[int, ...]) -> float:
        mass = 1.0
        for i, token in enumerate(path):
            mass *= self.ref.q(state.output + path[:i])[token]
        return mass

    def _draft_q(self, state: RequestState, path: tuple[int, ...], i: int, lookup: bool) -> list[float]:
        if lookup:
            return [1.0 if x == path[i] else 0.0 for x in range(self.rig.vocab)]
        return self.ref.q(state.output + path[:i])

    def _cells(self, state, path, proposal_cells, mass, rejected: bool, lookup: bool) -> list[Cell]:
        """Pass 2 cells for one path: accept every draft but (when ``rejected``) the last,
        then every terminal token of the correction (or bonus) distribution."""
        p_rows = [self.ref.p(state.output + path[:i]) for i in range(len(path) + 1)]
        q_rows = [self._draft_q(state, path, i, lookup) for i in range(len(path))]
        found = branch(p_rows, q_rows, path, rejected)
        if found is None:
            return []
        acceptance, factor, law = found
        mass *= factor
        return [
            Cell(proposal_cells, tuple(acceptance), (lo, hi), mass * (hi - lo))
            for _, lo, hi in cells_of(law)
            if mass * (hi - lo) > 0
        ]

    def _block_cells(self, state, path, proposal_cells, mass, lookup: bool) -> list[Cell]:
        """Pass 2 cells for one full path under block verification: each A in 0..k, then every
        terminal token of its law."""
        p_rows = [self.ref.p(state.output + path[:i]) for i in range(len(path) + 1)]
        q_rows = [self._draft_q(state, path, i, lookup) for i in range(len(path))]
        cells = []
        for accepted in range(len(path) + 1):
            found = block_branch(p_rows, q_rows, path, accepted)
            if found is None:
                continue
            acceptance, factor, law = found
            cells += [
                Cell(proposal_cells, tuple(acceptance), (lo, hi), mass * factor * (hi - lo))
                for _, lo, hi in cells_of(law)
                if mass * factor * (hi - lo) > 0
            ]
        return cells

    def round_points(self, state: RequestState, probes=PROBES) -> list[dict[str, tuple[float, ...]]]:
        """The uniforms of every cell of one round from ``state``, at each of ``probes``: the requests
        ``round_outcomes`` runs (the batch check runs them alone and among other states' cells)."""
        return [u for _, u in self._points(state, self._discover_paths([state])[0], probes)]

    # -- joints ----------------------------------------------------------------------------
    def root(self) -> RequestState:
        """The rig's prompt admitted, the horizon its budget: where the enumeration starts."""
        return self.engine.start([Request("enum", self.rig.prompt, self.horizon)]).states()[0]

    def joint(self) -> Joint:
        return self._joints([(self.root(), self.horizon)], first=True)[0]

    def _joints(self, asked: list[tuple[RequestState, int]], first: bool = False) -> list[Joint]:
        """The joint over the next h tokens from each (state, h) of ``asked``, level by level: every
        state of a level that needs a round gets it in the same two production rounds, and their
        successors form the next level (a batch of unrelated requests, as a served batch is)."""
        pending: dict[tuple, tuple[RequestState, int]] = {}
        for state, h in asked:
            if h > 0 and (first or self.completion != "target"):
                key = self._key(state, h)
                if key not in self._memo:
                    pending.setdefault(key, (state, h))
        if pending:
            todo = list(pending.values())
            branches, later = [], []  # per state: (head, mass, index of its tail in ``later`` or None)
            for (_, h), outcomes in zip(todo, self.round_outcomes([state for state, _ in todo])):
                branches.append([])
                for mass, emitted, successor in outcomes:
                    head = emitted[:h]
                    done = len(head) == h or successor.finished
                    branches[-1].append((head, mass, None if done else len(later)))
                    if not done:
                        later.append((successor, h - len(head)))
            tails = self._joints(later)
            for key, parts in zip(pending, branches):
                out: Joint = defaultdict(float)
                for head, mass, tail in parts:
                    if tail is None:
                        out[head] += mass
                        continue
                    for rest, m in tails[tail].items():
                        out[head + rest] += mass * m
                self._memo[key] = dict(out)
        return [self._joint_of(state, h, first) for state, h in asked]

    def _joint_of(self, state: RequestState, h: int, first: bool) -> Joint:
        if h == 0:
            return {(): 1.0}
        if not first and self.completion == "target":
            if state.output not in self._target_memo:
                self._target_memo[state.output] = target_joint(self.rig, h, prefix=state.output, ref=self.ref)
            return self._target_memo[state.output]
        return self._memo[self._key(state, h)]

    @staticmethod
    def _key(state: RequestState, h: int) -> tuple:
        # The history is part of the state a round reads: a K policy may choose from it.
        return (state.output, state.cache_tokens, state.target_proc, state.draft_proc, state.history, h)


def speculative_joint(rig: Rig, horizon: int, completion: str = "target", ref: Reference | None = None) -> Joint:
    """The joint production emits over ``horizon`` tokens (``ref``: the oracle's rows, when already
    computed for a rig with the same models and policies)."""
    return Enumerator(rig, horizon, completion, ref).joint()
