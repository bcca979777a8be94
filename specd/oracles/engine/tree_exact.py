"""Exact enumeration of the joint production emits over tree rounds (``specd.oracles.engine.exact``'s method
for chains, carried to trees).

Every cell of a round's uniforms comes from the oracle's own rule (``tree_reference.TreeWalk``,
over ``Reference`` rows: float64, never production's numbers) and becomes one request of a
batch, its uniforms injected through the session's ``Draws`` at each of three probes;
``speculative_round`` runs the whole batch and each outcome gets the cell's mass. Beyond the
joint, every outcome is held to what the rule emits in its cell, and the published round to what
a correct one reads (the accepted node path, the stream advances) and keeps (the published state
audited against the caches after every enumerated round: committed K/V, temporary rows, the
processor state, the draft cache). Several requests stand in one round with different trees:
the prompts begin with different shapes and each request's shape moves with what it committed
(``ShapeFromHistory``), so successors completing the horizon by further rounds
(``completion="rounds"``) mix shapes and depths, as a served batch does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from specd.core.round import speculative_round
from specd.core.sources import first_available
from specd.core.state import Request, RequestState
from specd.core.tree_shape import TreeShape
from specd.oracles.engine.eos import stopped_at
from specd.oracles.engine.exact import Enumerator
from specd.oracles.engine.montecarlo import audit_session
from specd.oracles.engine.tree_reference import TreeWalk, construction
from specd.oracles.reference import PROBES, UNUSED, Joint, Reference, target_joint
from specd.oracles.rig import Rig, fold
from specd.policy.kpolicy import KPolicy

MAX_BATCH = 8192  # requests per production round: the enumeration's memory stays bounded


class ShapeFromHistory(KPolicy):
    """A request's tree from what it has committed: shapes[(its prompt's place in ``prompts`` +
    tokens generated) mod n], each asking for its own depth. A function of the committed output
    alone, so a legal plan (``specd.policy.kpolicy``); it puts different trees in one round."""

    def __init__(self, shapes: Sequence[TreeShape], prompts: Sequence[tuple[int, ...]]):
        self.shapes, self.prompts = tuple(shapes), tuple(prompts)

    def plan(self, state: RequestState, sources):
        prompt = state.output[: state.prompt_len]
        at = self.prompts.index(prompt) if prompt in self.prompts else 0
        shape = self.shapes[(at + len(state.output) - state.prompt_len) % len(self.shapes)]
        return replace(first_available(sources, shape.depth), shape=shape)


def ragged_rig(rig: Rig, shapes: Sequence[TreeShape], prompts: Sequence[tuple[int, ...]]) -> Rig:
    """``rig`` drafting trees: each request's shape by ``ShapeFromHistory`` (the engine's own tree is
    the first shape, so whatever refuses a tree refuses this one)."""
    return rig.but(tree=shapes[0], k_policy_factory=lambda r: ShapeFromHistory(shapes, prompts))


def prompts_for(rig: Rig, count: int) -> tuple[tuple[int, ...], ...]:
    """``count`` different prompts of the rig's prompt's length: the rig's, then its tokens shifted."""
    v, base = rig.vocab, rig.prompt
    return tuple(tuple((t + i) % v for t in base) if i < v else base + (i % v,) for i in range(count))


@dataclass
class Agreement:
    """How production's rounds compared with the rule's, over everything enumerated."""

    requests: int = 0  # probes run (three per cell)
    cells: int = 0
    differ: int = 0  # probes whose published round is not the rule's
    first: str | None = None
    audit_errors: list[str] = field(default_factory=list)
    shapes_in_a_round: int = 0  # the most different trees in one production round
    nodes_seen: int = 0  # the largest tree production drafted

    def note(self, what: str) -> None:
        self.differ += 1
        if self.first is None:
            self.first = what


class TreeEnumerator(Enumerator):
    """The joint over tree rounds from each of ``prompts`` (every one in the same production rounds)."""

    def __init__(self, rig: Rig, horizon: int, completion: str, prompts: Sequence[tuple[int, ...]]):
        super().__init__(rig, horizon, completion)
        self.refs = {prompt: Reference(rig.but(prompt=prompt)) for prompt in prompts}
        self.eos = rig.eos_ids
        self.agreement = Agreement()
        self._walks: dict[tuple[int, ...], TreeWalk] = {}

    def joints(self) -> list[Joint]:
        """The emitted joint over the horizon from each prompt."""
        session = self.engine.start([Request(f"p{i}", prompt, self.horizon) for i, prompt in enumerate(self.refs)])
        return self._joints([(state, self.horizon) for state in session.states()], first=True)

    def target_joints(self) -> list[Joint]:
        return [target_joint(ref.rig, self.horizon, ref=ref) for ref in self.refs.values()]

    def _joint_of(self, state: RequestState, h: int, first: bool) -> Joint:
        """As ``Enumerator._joint_of``, a completion by the target chain read from the state's own
        prompt's rows (a stateful processor starts from the prompt)."""
        if h == 0 or first or self.completion != "target":
            return super()._joint_of(state, h, first)
        ref = self.refs[state.output[: state.prompt_len]]
        if state.output not in self._target_memo:
            self._target_memo[state.output] = target_joint(ref.rig, h, prefix=state.output, ref=ref)
        return self._target_memo[state.output]

    def walk(self, state: RequestState) -> TreeWalk:
        prompt = state.output[: state.prompt_len]
        if prompt not in self._walks:
            ref, greedy = self.refs[prompt], self.rig.target_policy.greedy
            self._walks[prompt] = TreeWalk(ref.p, ref.q, draft_order(ref), greedy=greedy)
        return self._walks[prompt]

    def plan(self, state: RequestState) -> tuple[TreeShape, str]:
        """The round's tree shape (cut to its depth) and construction, as production plans it (the K
        policy is the rig's; what a legal plan may read is not what is checked here)."""
        caches = self.engine.proposer.new_cache()
        caches.open(state.slot)
        plan = self.engine.plan_for(state, caches)
        shape = plan.shape if plan.shape is not None else TreeShape.chain(plan.k)
        return shape, construction(shape, self.rig.draft_policy.greedy)

    def round_outcomes(self, states: list[RequestState]):
        """Every cell of one round from each state, run through production -> per state [(mass, emitted,
        successor)]; each outcome compared with the rule's."""
        planned, branches, shapes = [], [], set()
        for state in states:
            shape, drawn = self.plan(state)
            shapes.add(shape.choices)
            walk = self.walk(state)
            laid = [
                (cell, walk.drafted(state.output, shape, drawn, cell, where))
                for cell in walk.cells(state.output, shape, drawn)
                for where in PROBES
            ]
            self.agreement.cells += len(laid) // len(PROBES)
            planned.append(laid)
            points = [{"proposal": d.proposal, "acceptance": d.acceptance, "terminal": (d.terminal,)} for _, d in laid]
            branches.append((state, points))
        self.agreement.shapes_in_a_round = max(self.agreement.shapes_in_a_round, len(shapes))
        outcomes = self.run_cells(branches)
        out = []
        for state, laid, results in zip(states, planned, outcomes):
            for (cell, drafted), (commit, _) in zip(laid, results):
                self._compare(state, cell, drafted, commit)
            out.append([(cell.mass / len(PROBES), commit.emitted, s) for (cell, _), (commit, s) in zip(laid, results)])
        return out

    def _compare(self, state, cell, drafted, commit) -> None:
        self.agreement.requests += 1
        self.agreement.nodes_seen = max(self.agreement.nodes_seen, len(commit.draft_token_ids))
        path = commit.accepted_path if commit.accepted_path is not None else tuple(range(commit.accepted))
        advances = tuple(a - b for a, b in zip(commit.rng_after, commit.rng_before))
        got = (tuple(commit.emitted), tuple(path), advances, len(commit.draft_token_ids))
        want = (cell.emitted, drafted.path, drafted.advances, drafted.nodes)
        emitted = stopped_at(cell.emitted, self.eos)
        if emitted != cell.emitted:  # an accepted draft is the stop token: what follows it is dropped, and
            # the streams advance over the tests its emission read (the joint and the audit hold those)
            got, want = got[:2] + got[3:], (emitted, drafted.path, drafted.nodes)
        if got != want:
            self.agreement.note(
                f"after {list(state.output)}: production published (emitted, path, stream advances, nodes) = "
                f"{_listed(got)}, the rule {_listed(want)} (drafts {list(commit.draft_token_ids)}, parents "
                f"{list(commit.draft_parents or ())})"
            )

    def run_cells(self, branches):
        """As ``Enumerator.run_cells`` (in production rounds of at most MAX_BATCH requests), and the
        published state audited against the caches after each."""
        injected: dict[str, dict[str, tuple[float, ...]]] = {}
        names = []
        for _, points in branches:
            names.append([f"cell{len(injected) + i}" for i in range(len(points))])
            injected.update(zip(names[-1], points))

        def draws(s, stream: str, n: int) -> list[float]:
            values = injected[s.request_id][stream]
            return list(values[:n]) + [UNUSED] * (n - len(values))

        pairs = [(state, i) for (state, _), ids in zip(branches, names) for i in ids]
        published = {}
        for start in range(0, len(pairs), MAX_BATCH):
            session = self.engine.start(draws=draws)
            session.admit_at([(state, (i,)) for state, i in pairs[start : start + MAX_BATCH]])
            for c in speculative_round(session):
                published[c.request_id] = (c, session.store.get(c.request_id))
            self.agreement.audit_errors += audit_session(self.rig, session)[:3]
            self.rounds_enumerated += 1
        self.k_seen.update(len(c.draft_token_ids) for c, _ in published.values())
        return [[published[i] for i in ids] for ids in names]


def draft_order(ref: Reference):
    """A ranked tree's children after a context, as the oracle ranks them: by q, or for a greedy draft
    (q a point mass) by its processed logits (ties to the lower id)."""
    rig = ref.rig
    if not rig.draft_policy.greedy:
        return None

    def order(ctx: tuple[int, ...]) -> list[int]:
        state = fold(rig.draft_policy.initial_state(rig.prompt), ctx[len(rig.prompt) :])
        logits = rig.draft_policy.logits(rig.draft.raw_logits(ctx).unsqueeze(0), [state])[0].tolist()
        return sorted((t for t, x in enumerate(logits) if x > float("-inf")), key=lambda t: (-logits[t], t))

    return order


def _listed(values: tuple) -> str:
    return str(tuple(list(v) if isinstance(v, tuple) else v for v in values))
