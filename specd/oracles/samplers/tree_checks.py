"""The checks a tree sampler is put through (``verify-oracle --sampler ... --tree SPEC``).

- ``exact_joint_<drawing>``, one per construction asked (sampled, iid, rank, lookup;
  ``specd.oracles.samplers.tree_rounds``): every draft tree of one round over the fixture's tables, each
  with its probability, and for each every outcome of the sampler over its uniforms with its exact
  probability (``specd.oracles.samplers.tree_uniforms.explore``); the emitted tokens (the accepted path's,
  then the terminal), completed by the target chain to the tree's depth + 1, must have the
  target's joint (float64, 1e-12). A sampler that raises on every tree of a construction refuses it
  (n/a, the reason shown) where several were asked; where only one was, or all are refused, it fails,
  as it fails where it raises on some trees of a construction and returns on others. A
  sampler that is not exact is priced beside the failure (``specd.oracles.samplers.price``): the exact total
  variation between its joint and the target's over the horizon and per position, its expected
  accepted length, and specd's exact rule's on the same trees.
- ``no_nodes``, ``zero_target_mass`` and ``bonus_row_total``: the degenerate rounds
  (``specd.oracles.samplers.tree_degenerate``).

A failing check comes with the smallest counterexample (``tree_counterexample``).
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from specd.core.tree_shape import parse_tree
from specd.errors import SamplerFailed
from specd.oracles.record import EXACT_TOLERANCE, NOT_APPLICABLE, Check, max_abs_diff
from specd.oracles.reference import chain_joint
from specd.oracles.samplers.covered import UNREPEATED
from specd.oracles.samplers.price import tv_figures
from specd.oracles.samplers.slip_classes import widest
from specd.oracles.samplers.table_store import completion
from specd.oracles.samplers.tables import Table, as_table, search_tables
from specd.oracles.samplers.tree_protocol import SpecdTreeRule, TreeSamplerUnderTest
from specd.oracles.samplers.tree_rounds import TreeRound, depth_first, draft_trees
from specd.oracles.samplers.tree_uniforms import ConcreteUniforms, explore

AHEAD = 4096  # rounds a sampler is told of at once: specd's rule keeps their outcomes (tens of MB at most)


def round_law(sampler: TreeSamplerUnderTest, rnd: TreeRound) -> tuple[dict, float, float, int]:
    """The sampler's law of what one round emits -> ({emitted tokens: probability}, expected accepted
    nodes, expected uniforms read, runs of the sampler); a sampler in a process of its own
    (specd.oracles.samplers.sandbox) computes it there."""
    if hasattr(sampler, "round_law"):
        return sampler.round_law(rnd)
    if rnd.uniforms_at is not None:
        return _law_at(sampler, rnd, rnd.uniforms_at)
    law: dict[tuple[int, ...], float] = defaultdict(float)
    accepted = reads = 0.0
    outcomes = explore(lambda u: sampler(rnd, u), exact=False)
    for outcome, m, stream in outcomes:
        for emitted, px in _emitted(rnd, outcome):
            law[emitted] += m * px
        accepted += m * len(outcome.path)
        reads += m * len(stream.reads)
    return dict(law), accepted, reads, len(outcomes)


def _law_at(sampler, rnd: TreeRound, value: float) -> tuple[dict, float, float, int]:
    """``round_law``'s answer for one run of the sampler with every uniform at ``value``: what it
    emitted, with probability 1 (a terminal law spread over its tokens)."""
    outcome = sampler(rnd, ConcreteUniforms(SimpleNamespace(random=lambda: value)))  # every draw is value
    return dict(_emitted(rnd, outcome)), float(len(outcome.path)), 0.0, 1


def _emitted(rnd: TreeRound, outcome) -> list[tuple[tuple[int, ...], float]]:
    """What one outcome emits: (the accepted path's tokens, then the terminal; its probability given the
    outcome: 1 for a token, the law's weight for a law, which the protocol's reading normalized)."""
    head = tuple(rnd.tree.tokens[n] for n in outcome.path)
    if outcome.terminal is not None:
        return [(head + (outcome.terminal,), 1.0)]
    return [(head + (x,), px) for x, px in enumerate(outcome.law) if px > 0]


def round_laws(sampler, rounds: list[TreeRound]) -> list[tuple[dict, float, float, int]]:
    """``round_law`` of every round, in order (a sampler in processes of its own deals them out), told
    AHEAD rounds at a time what it will be asked (``TreeSamplerUnderTest.ahead``)."""
    if hasattr(sampler, "round_laws"):
        return sampler.round_laws(rounds)
    laws = []
    for at in range(0, len(rounds), AHEAD):
        batch = rounds[at : at + AHEAD]
        sampler.ahead(batch)
        laws += [round_law(sampler, rnd) for rnd in batch]
    return laws


class TreeJoint:
    """A sampler's joint over the horizon for every draft tree of one construction, and its figures
    (``laws``: each round's ``round_law``, where they were computed already). ``p_of``: the target's rows, a
    Table (each emission's completion then kept on it for its later checks) or a function of an output."""

    def __init__(self, sampler, rounds: list[TreeRound], p_of, prompt: tuple[int, ...], horizon: int, laws=None):
        # a function's completions kept for this joint alone, a Table's on the table (``completion``)
        rows = p_of if isinstance(p_of, Table) else SimpleNamespace(p=p_of, completions={})
        self.joint: dict[tuple[int, ...], float] = defaultdict(float)
        self.laws: list[dict] = []
        self.accepted = self.reads = 0.0
        self.runs = 0
        heads: dict[tuple[int, ...], float] = defaultdict(float)  # what the rounds emit, over all trees
        for rnd, (law, accepted, reads, runs) in zip(rounds, laws or round_laws(sampler, rounds)):
            self.laws.append(law)
            self.accepted += rnd.mass * accepted
            self.reads += rnd.mass * reads
            self.runs += runs
            for head, m in law.items():
                heads[head] += rnd.mass * m
        for head, m in heads.items():  # each emission completed once, however many trees emit it
            rest = horizon - len(head)
            for tail, mt in (completion(rows, prompt + head, rest) if rest > 0 else {(): 1.0}).items():
                self.joint[head + tail] += m * mt


def drawable(rounds: list[TreeRound]) -> bool:
    """Whether a construction draws a whole tree every round on a table: its trees' masses sum to 1. A
    sibling group drawn without replacement wider than its draft row's tokens of mass (a greedy
    draft's point mass) cannot be drawn, and those rounds are missing: no sampler's joint can be
    the target's there, so such a table says nothing of the sampler."""
    return abs(sum(r.mass for r in rounds) - 1) <= EXACT_TOLERANCE


def check_drawing(
    sampler, rows, shape, drawing: str, refusable: bool, rounds: list[TreeRound] | None = None
) -> tuple[Check, TreeJoint | None]:
    """``exact_joint_<drawing>`` on one table (``rows``: a rig's, or a specd.oracles.samplers.tables Table; module
    docstring); not applicable where the table cannot draw every tree (``drawable``). ``rounds``: its
    draft trees, where they were enumerated already."""
    table = as_table(rows)
    if rounds is None:
        rounds = draft_trees(shape, drawing, table.p, table.q, table.prompt)
    name = f"exact_joint_{drawing}"
    base = {"vocab": table.vocab, "tree": shape.spec, "nodes": len(shape.choices), "draft_trees": len(rounds)}
    if not drawable(rounds):
        return Check(name, None, base, f"{NOT_APPLICABLE}{UNDRAWABLE.format(drawing=drawing)}"), None
    try:
        tj = TreeJoint(sampler, rounds, table, table.prompt, shape.depth + 1)
    except SamplerFailed as err:
        if err.finding == "raised" and refusable:
            if not answers_some(sampler, rounds):
                refused = f"not applicable: the sampler refuses trees drawn {drawing} ({err})"
                return Check(name, None, base, refused), None
            partial = f"; it returned on other trees drawn {drawing}, so it does not refuse them: {PARTIAL_REFUSAL}"
            return Check(name, False, base, f"{err} (on a tree drawn {drawing}{partial})", [err.finding]), None
        return Check(name, False, base, f"{err} (on a tree drawn {drawing})", [err.finding]), None
    figures = {**base, **_joint_figures(tj, rounds, table, shape.depth + 1)}
    passed = figures.pop("passed")
    detail = f"every {drawing} draft tree of one round, every outcome over the sampler's uniforms, exactly"
    return Check(name, passed, figures, detail, [] if passed else [f"not_exact_{drawing}"]), tj


# Why a sampler that raises on some trees of a construction fails where one that raises on all of them
# refuses it: the trees it raises on are drawn with positive probability, so its joint over the
# construction does not exist, and the trees it returned on cannot show alone whether it is exact.
PARTIAL_REFUSAL = "a sampler refuses a construction by raising on every tree of it, and this one raised on some"


def answers_some(sampler, rounds: list[TreeRound]) -> bool:
    """Whether the sampler returns on some round of ``rounds`` (it raises on every one: it refuses
    their construction). A round it fails otherwise (an answer that is not one) counts as returned:
    that is no refusal either."""
    for rnd in rounds:
        try:
            round_law(sampler, rnd)
        except SamplerFailed as err:
            if err.finding == "raised":
                continue
        return True
    return False


def _joint_figures(tj: TreeJoint, rounds: list[TreeRound], table, horizon: int) -> dict:
    """A construction's joint on one table against the target's: passed, and its figures (with the price
    where it is not exact)."""
    target = completion(table, table.prompt, horizon)
    diff, mass = max_abs_diff(target, tj.joint), sum(tj.joint.values())
    figures = {
        "passed": diff <= EXACT_TOLERANCE and abs(mass - 1) <= EXACT_TOLERANCE,
        "sampler_runs": tj.runs,
        "max_abs_diff": diff,
        "tolerance": EXACT_TOLERANCE,
        "total_mass": mass,
        "expected_accepted": tj.accepted,
        "uniforms_read": tj.reads,
    }
    if not figures["passed"]:
        figures.update(tv_figures(tj.joint, target, horizon))
        figures["exact_rule_expected_accepted"] = TreeJoint(_specd(), rounds, table, table.prompt, horizon).accepted
    return figures


def check_cases(sampler, cases: list, drawing: str, refusable: bool) -> Check:
    """``exact_joint_<drawing>`` over every case and table a check covers (specd.oracles.samplers.coverage): the
    named case on its first table as ``check_drawing`` (a sampler that raises there refuses the
    construction, where ``refusable``), then, where it is exact there, every other case and table, each
    case's rounds in one batch, in order (a failure ends the check; a case made for some constructions
    only, ``Case.drawings``, runs under those). Its figures are the named table's,
    with ``tables`` (how many were checked), the largest difference of all, and where it is not exact
    (``not_exact_at``, priced there)."""
    pairs = [(c, t) for c in cases if c.drawings is None or drawing in c.drawings for t in c.tables]
    every: dict[int, list[TreeRound]] = {}

    def rounds_at(i: int) -> list[TreeRound]:  # a table's draft trees, enumerated once it is reached
        if i not in every:
            case, table = pairs[i]
            every[i] = _laid_out(case, draft_trees(case.shape, drawing, table.p, table.q, table.prompt))
        return every[i]

    # a table that cannot draw every tree says nothing; none can: the named case's own n/a, with its reason
    start = next((i for i in range(len(pairs)) if drawable(rounds_at(i))), None)
    if start is None:
        return check_drawing(sampler, pairs[0][1], pairs[0][0].shape, drawing, refusable, rounds_at(0))[0]
    check, _ = check_drawing(sampler, pairs[start][1], pairs[start][0].shape, drawing, refusable, rounds_at(start))
    check.figures["tables"] = 1
    left_out = start
    for case in cases if check.passed else ():
        mine = [i for i in range(start + 1, len(pairs)) if pairs[i][0] is case]
        left_out += sum(not drawable(rounds_at(i)) for i in mine)
        if not (mine := [i for i in mine if drawable(rounds_at(i))]):
            continue
        work, rounds = [pairs[i] for i in mine], [rounds_at(i) for i in mine]
        try:
            laws = round_laws(sampler, [r for rs in rounds for r in rs])
        except SamplerFailed:
            return _first_refusal(sampler, check, work, rounds, drawing)
        at = 0
        for (case, table), rs in zip(work, rounds):
            tj = TreeJoint(sampler, rs, table, table.prompt, case.shape.depth + 1, laws[at : at + len(rs)])
            at += len(rs)
            figures = _joint_figures(tj, rs, table, case.shape.depth + 1)
            check.figures["tables"] += 1
            check.figures["max_abs_diff"] = max(check.figures["max_abs_diff"], figures["max_abs_diff"])
            if not figures.pop("passed"):
                return _failed_at(check, case, table, figures, drawing)
    if left_out:
        check.figures["undrawable_tables"] = left_out
    if not check.passed:
        return check
    check.detail += f", on {check.figures['tables']} tables"
    if "undrawable_tables" in check.figures:
        check.detail += f" ({check.figures['undrawable_tables']} left out: {UNDRAWABLE.format(drawing=drawing)})"
    return check


def _laid_out(case, rounds: list[TreeRound]) -> list[TreeRound]:
    """The case's rounds in the node order it hands over (``Case.depth_first``)."""
    return [depth_first(r) for r in rounds] if case.depth_first else rounds


def _failed_at(check: Check, case, table, figures: dict, drawing: str) -> Check:
    """The covering check, failed at one case and table (its figures there, the price among them)."""
    check.passed = False
    check.findings = [f"not_exact_{drawing}"]
    check.figures.update({k: figures[k] for k in PRICE_KEYS if k in figures})
    check.figures["not_exact_at"] = {"case": case.label, "table": table.name, "max_abs_diff": figures["max_abs_diff"]}
    check.detail = f"not exact at {case.label} on the table {table.name}: " + check.detail
    return check


def _first_refusal(sampler, check: Check, work: list, rounds: list, drawing: str) -> Check:
    """A sampler that raised on some round past the named table: the first case and table it raises on,
    as a serial run finds it (a construction it took on the named table is not one it may refuse)."""
    for (case, table), rs in zip(work, rounds):
        try:
            round_laws(sampler, rs)
        except SamplerFailed as err:
            check.passed, check.findings = False, [err.finding]
            check.detail = f"{err} (on a tree drawn {drawing} at {case.label}, on the table {table.name})"
            return check
    case = work[0][0]
    check.passed, check.findings = False, ["raised"]
    check.detail = f"the sampler raised (on trees drawn {drawing} at {case.label}, {UNREPEATED})"
    return check


UNDRAWABLE = (
    "the draft cannot draw every {drawing} tree of this shape (a sibling group wider than its row's tokens of mass)"
)
PRICE_KEYS = ("tv_horizon", "tv_per_position", "expected_accepted", "exact_rule_expected_accepted")


def _specd() -> TreeSamplerUnderTest:
    return SpecdTreeRule()


# -- the smallest counterexample -------------------------------------------------------------------
SEARCH = [
    (2, "1"),
    (2, "2"),
    (2, "1,1"),
    (3, "1"),
    (3, "2"),
    (2, "2,1"),
    (2, "1,2"),
    (2, "1,1,1"),
    (3, "3"),
    (3, "2,1"),
    (3, "1,2"),
    (3, "1,1,1"),
    (4, "1"),
    (4, "2"),
    (2, "2,2"),
    (3, "2,2"),
    (4, "1,2"),
    (4, "3"),
    (5, "3"),
    (5, "1,3"),
]


def tree_counterexample(sampler, drawings, build_rig, seeds=range(3), failed_at=None) -> dict | None:
    """The smallest (V, tree) of SEARCH and table (``search_tables``), over ``drawings``, where the sampler's
    joint is not the target's: the sequence whose mass moved most and by how much, and the draft tree (with
    its rows) that moved it most against specd's exact rule on the same tree; past SEARCH, ``failed_at``
    (case, table), where a check found it not exact (the sizes past SEARCH are in no order of size, and the
    check passed the others on their tables); ``search_order``: the size's and the table's place."""
    for order, (vocab, spec) in enumerate(SEARCH):
        shape = parse_tree(spec)
        wide = widest(shape)
        for rank, table in enumerate(search_tables(build_rig, vocab, shape.depth, wide, seeds)):
            for drawing in drawings:
                if drawing == "iid" or wide <= vocab:
                    found = _counterexample(sampler, shape, drawing, table)
                    if found is not None:
                        where = {"vocab": vocab, "tree": spec, "drawing": drawing, "seed": table.seed}
                        return {**where, **found, "search_order": [order, rank]}
    if failed_at is not None:
        case, table = failed_at
        for drawing in drawings:
            if (found := _counterexample(sampler, case.shape, drawing, table, case)) is not None:
                where = {"vocab": case.vocab, "tree": case.shape.spec, "drawing": drawing, "seed": table.seed}
                return {**where, **found, "table": table.name, "search_order": [len(SEARCH), 0]}
    return None


def _counterexample(sampler, shape, drawing: str, table: Table, case=None) -> dict | None:
    """Where the sampler is not exact on one size and table: the sequence that moved most, and the round
    (``case``: its nodes laid out as that case hands them over)."""
    rounds = draft_trees(shape, drawing, table.p, table.q, table.prompt)
    rounds = _laid_out(case, rounds) if case is not None else rounds
    if not drawable(rounds):
        return None
    try:
        tj = TreeJoint(sampler, rounds, table, table.prompt, shape.depth + 1)
    except SamplerFailed:
        return None
    target = completion(table, table.prompt, shape.depth + 1)
    if max_abs_diff(target, tj.joint) <= EXACT_TOLERANCE:
        return None
    worst = max(set(target) | set(tj.joint), key=lambda s: abs(target.get(s, 0.0) - tj.joint.get(s, 0.0)))
    exact, got = target.get(worst, 0.0), tj.joint.get(worst, 0.0)
    return {
        "table": table.name,
        "sequence": list(worst),
        "exact_mass": exact,
        "sampler_mass": got,
        "moved": got - exact,
        "round": _worst_round(rounds, tj, worst, table, table.prompt),
    }


def _worst_round(rounds, tj: TreeJoint, worst: tuple[int, ...], ref, prompt) -> dict:
    """The draft tree whose contribution to ``worst`` differs most from specd's exact rule's."""
    reference = TreeJoint(_specd(), rounds, ref.p, prompt, len(worst))

    def chance(law: dict) -> float:  # P(the round's emission starts ``worst``, completed by the target)
        total = 0.0
        for head, m in law.items():
            if worst[: len(head)] == head:
                tail = chain_joint(ref.p, prompt + head, len(worst) - len(head)) if len(worst) > len(head) else {(): 1}
                total += m * tail.get(worst[len(head) :], 0.0)
        return total

    gaps = [r.mass * (chance(a) - chance(b)) for r, a, b in zip(rounds, tj.laws, reference.laws)]
    i = max(range(len(rounds)), key=lambda j: abs(gaps[j]))
    rnd = rounds[i]
    rows = lambda t: [[round(x, 6) for x in row] for row in t.tolist()]  # noqa: E731
    return {
        "tokens": list(rnd.tree.tokens),
        "parents": list(rnd.tree.parents),
        "draft_tree_mass": rnd.mass,
        "p_rows": rows(rnd.p),
        "q_rows": None if rnd.q is None else rows(rnd.q),
        "sampler_emits": {" ".join(map(str, k)): round(v, 6) for k, v in sorted(tj.laws[i].items())},
        "exact_rule_emits": {" ".join(map(str, k)): round(v, 6) for k, v in sorted(reference.laws[i].items())},
        "mass_moved_here": gaps[i],
    }
