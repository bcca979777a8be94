"""The oracle's tree checks (``verify-oracle --tree SPEC``; on by default at small shapes).

- ``tree_exact_joint``: the maximal rule over trees, per construction (sampled = without
  replacement, rank, iid): the joint production emits over the horizon, by exact enumeration of
  every cell of every round (``tree_exact``; the cells and their masses from the oracle's own
  rule, ``tree_reference``), equals the target chain; several prompts begin with different
  trees and every request's tree moves with what it committed (different trees in one round),
  both layouts, further speculative rounds to the horizon. Beside the joint, every probe's
  published round is the rule's (emitted tokens, accepted nodes, stream advances, tree size) and
  the published state is audited against the caches after every round.
- ``tree_exact_joint_eos``: the same with a stop token (``specd.oracles.engine.eos``), under the first
  construction: a text ends at the EOS wherever it lands, an accepted node included, and the joint
  is the target chain stopped at its first EOS (n/a where the target never emits it).
- ``tree_exact_greedy``: the same at target temperature 0 (the greedy rule): one text, mass 1.
- ``tree_invariant``: under the invariant rule the seed decides the text whatever the tree: the
  tree texts equal target-only sampling's, seed for seed (children sampled as the Gumbel-top-k
  under the shared noise, or ranked), both layouts; target-only sampling is the oracle's own
  Gumbel-max chain of the exact rows (so the law is exactly the target's), and the texts sit
  within their Bernstein bound of the exact joint.
- ``tree_exact_rational``: the oracle's tree rule itself in Fractions on rational tables: its
  joint is the target chain with difference exactly 0 (the proof of the rule, without rounding).
- ``tree_block_refused``: block verification has no tree form here: a tree is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from specd.core.layouts import LAYOUTS
from specd.core.tree_shape import TreeShape, parse_tree
from specd.errors import UsageError
from specd.oracles.engine.eos import never_emitted, stopped_target
from specd.oracles.engine.invariant import law, reference_texts, texts
from specd.oracles.engine.rational import RationalTable, completer
from specd.oracles.engine.tree_exact import TreeEnumerator, draft_order, prompts_for, ragged_rig
from specd.oracles.engine.tree_reference import TreeWalk, construction
from specd.oracles.fixture import MAX_SEQUENCES, OracleConfig, build_rig
from specd.oracles.record import EXACT_TOLERANCE, Check, max_abs_diff
from specd.oracles.reference import Reference, chain_joint
from specd.oracles.rig import Rig

CONSTRUCTIONS = ("sampled", "rank", "iid")
TREE_SEEDS = 128  # noise draws of the invariant rule's text identity (one request each, per configuration)
MAX_TREE_CELLS = 20_000  # cells of one round from one prompt, summed over the shapes and constructions
# The full run's trees when no --tree is given, cut to min(K, 3) levels: siblings at the root and below
# it, a third child (i.i.d. at V = 2), three levels at V = 2 and two above it (the cells grow about
# V^depth times the children tested); each starts one prompt, and each request's tree moves with its output.
DEFAULT_TREES = {2: ("2,1,1", "1,3"), 3: ("2,1", "1,3"), 4: ("2,1", "1,2")}


@dataclass(frozen=True)
class TreeCase:
    """What the tree checks run on: the fixture's rig, its shapes (``--tree``, or the defaults), the
    constructions each is checked under, the prompts (one per shape) and the horizon."""

    rig: Rig
    shapes: tuple[TreeShape, ...]
    constructions: tuple[str, ...]  # each a run of its own; ("as given",): the shapes' own prefixes
    prompts: tuple[tuple[int, ...], ...]
    horizon: int
    seed: int

    @property
    def specs(self) -> list[str]:
        return [s.spec for s in self.shapes]

    def shapes_for(self, drawn: str) -> tuple[TreeShape, ...]:
        if drawn == "as given":
            return self.shapes
        return tuple(replace(s, drawn=drawn, spec=f"{drawn}:{s.spec.partition(':')[2] or s.spec}") for s in self.shapes)

    def constructions_under(self, rule: str) -> tuple[str, ...]:
        """The constructions a rule can draft: a greedy draft ranks, the invariant rule draws no i.i.d. child."""
        if self.rig.draft_policy.greedy:
            return ("as given",) if self.constructions == ("as given",) else ("rank",)
        if rule == "invariant":
            return tuple(c for c in self.constructions if c != "iid")
        return self.constructions


def tree_case(cfg: OracleConfig) -> TreeCase | None:
    """The tree checks' case for ``cfg`` (None: ``--tree none``), refused in one line when one round
    would have more than MAX_TREE_CELLS cells to enumerate."""
    if cfg.tree == ("none",):
        return None
    rig = build_rig(cfg)
    if cfg.tree:
        shapes = tuple(parse_tree(spec) for spec in cfg.tree)
    else:
        depth = min(cfg.k, 3)
        shapes = tuple(parse_tree(",".join(spec.split(",")[:depth])) for spec in DEFAULT_TREES[min(cfg.vocab, 4)])
    given = [s.drawn for s in shapes if s.drawn is not None]
    constructions = ("as given",) if given else CONSTRUCTIONS
    depth = max(s.depth for s in shapes)
    horizon = max(depth + 1, cfg.horizon or 0)  # at least the deepest tree and its terminal in a first round
    if horizon > 1 and cfg.vocab**horizon > MAX_SEQUENCES:
        raise UsageError(f"--tree: vocab^horizon = {cfg.vocab}^{horizon} sequences (limit {MAX_SEQUENCES})")
    case = TreeCase(rig, shapes, constructions, prompts_for(rig, len(shapes)), horizon, cfg.seed)
    if first_round_cells(case) > MAX_TREE_CELLS:
        raise UsageError(
            f"--tree {' '.join(case.specs)}: more than {MAX_TREE_CELLS} cells in a round at V={cfg.vocab} to "
            "enumerate; check a smaller tree or vocabulary"
        )
    return case


def first_round_cells(case: TreeCase) -> int:
    """Cells of one round from the first prompt, over every shape and construction (the oracle's
    rule alone: cheap, and what the enumeration's cost grows with)."""
    ref = Reference(case.rig)
    walk = TreeWalk(ref.p, ref.q, draft_order(ref))
    greedy = case.rig.draft_policy.greedy
    total = 0
    for drawn in case.constructions_under("maximal"):
        for shape in case.shapes_for(drawn):
            total += len(walk.cells(case.rig.prompt, shape, construction(shape, greedy), MAX_TREE_CELLS - total))
            if total > MAX_TREE_CELLS:
                break
    return total


def tree_joints(rig: Rig, case: TreeCase, drawn: str, completion: str = "rounds", layouts=tuple(LAYOUTS)) -> dict:
    """The enumeration of ``rig`` drafting ``case``'s trees built as ``drawn`` in each layout -> its
    figures: the worst |speculative - target| over the prompts' joints, the worst total mass's
    distance from 1, cells, requests, probes that differ from the rule, audits, the most trees in
    one round and the largest tree."""
    out = {"max_abs_diff": 0.0, "mass_error": 0.0, "cells": 0, "requests": 0, "differ": 0}
    out |= {"first_difference": None, "audit_errors": [], "trees_in_one_round": 0, "largest_tree": 0}
    for layout in layouts:
        run = ragged_rig(rig.but(layout_name=layout), case.shapes_for(drawn), case.prompts)
        enumerator = TreeEnumerator(run, case.horizon, completion, case.prompts)
        for joint, target in zip(enumerator.joints(), enumerator.target_joints()):
            out["max_abs_diff"] = max(out["max_abs_diff"], max_abs_diff(target, joint))
            out["mass_error"] = max(out["mass_error"], abs(sum(joint.values()) - 1.0))
        a = enumerator.agreement
        out["cells"] += a.cells
        out["requests"] += a.requests
        out["differ"] += a.differ
        out["first_difference"] = out["first_difference"] or a.first
        out["audit_errors"] += a.audit_errors
        out["trees_in_one_round"] = max(out["trees_in_one_round"], a.shapes_in_a_round)
        out["largest_tree"] = max(out["largest_tree"], a.nodes_seen)
    return out


def proved(figures: dict) -> bool:
    return (
        figures["max_abs_diff"] <= EXACT_TOLERANCE
        and figures["mass_error"] <= EXACT_TOLERANCE
        and figures["differ"] == 0
        and not figures["audit_errors"]
        and figures["cells"] > 0
        and figures["largest_tree"] > 0  # a proof over rounds that drafted no tree would prove nothing here
    )


def _exact(name: str, rig: Rig, case: TreeCase, rule: str, detail: str) -> Check:
    figures: dict = {"shapes": case.specs, "prompts": len(case.prompts), "horizon": case.horizon}
    figures |= {"layouts": list(LAYOUTS), "tolerance": EXACT_TOLERANCE}
    ok, trees_at_once, first = True, 0, None
    for drawn in case.constructions_under(rule):
        found = tree_joints(rig, case, drawn)
        label = drawn.replace(" ", "_")
        for key in ("max_abs_diff", "mass_error", "cells", "requests", "differ"):
            figures[f"{key}_{label}"] = found[key]
        figures[f"largest_tree_{label}"] = found["largest_tree"]
        trees_at_once = max(trees_at_once, found["trees_in_one_round"])
        ok &= proved(found)
        first = first or found["first_difference"] or next(iter(found["audit_errors"]), None)
    figures["trees_in_one_round"] = trees_at_once
    return Check(name, ok, figures, detail + (f"; first difference: {first}" if first else ""))


def check_tree_exact(case: TreeCase) -> Check:
    return _exact(
        "tree_exact_joint",
        case.rig,
        case,
        "maximal",
        "every cell of every tree round (the maximal rule: each child against what its elder siblings left), rounds "
        "to the horizon from each published successor; each probe's round is the rule's",
    )


def check_tree_eos(case: TreeCase) -> Check:
    """``tree_exact_joint`` with the stop token of ``exact_joint_eos``, under the first construction (the
    stop is the round's commit, whatever built the tree); each probe's emitted tokens are the rule's cut
    at the EOS."""
    stopped, eos, _, stops = stopped_target(case.rig, case.horizon)
    if stops == 0:
        return never_emitted("tree_exact_joint_eos", eos)
    first = replace(case, constructions=case.constructions_under("maximal")[:1])
    check = _exact(
        "tree_exact_joint_eos",
        stopped,
        first,
        "maximal",
        f"token {eos} is the EOS: a text ends at it, an accepted node included; every cell of every tree round, "
        "rounds to the horizon from each published successor",
    )
    check.figures |= {"eos": eos, "target_stop_mass": stops}
    return check


def check_tree_greedy(case: TreeCase, cfg: OracleConfig) -> Check:
    greedy = build_rig(replace(cfg, target_temperature=0.0))
    return _exact(
        "tree_exact_greedy",
        greedy,
        case,
        "maximal",
        "target temperature 0: every tree the draft can draw emits the target's greedy text, rounds to the horizon",
    )


def check_tree_invariant(case: TreeCase, seeds: int = TREE_SEEDS) -> Check:
    """The tree texts against target-only sampling's, seed for seed, and that text's law."""
    rig = case.rig.but(rule="invariant")
    baseline = texts(rig, seeds, case.horizon, baseline=True)
    ours = reference_texts(rig, seeds, case.horizon)
    anchored = sum(a != b for a, b in zip(baseline, ours))
    compared, first, configurations = 0, None, 0
    prompts = (rig.prompt,)
    for drawn in case.constructions_under("invariant"):
        for layout in LAYOUTS:
            run = ragged_rig(rig.but(layout_name=layout), case.shapes_for(drawn), prompts)
            got = texts(run, seeds, case.horizon)
            configurations += 1
            compared += seeds
            wrong = [s for s in range(seeds) if got[s] != baseline[s]]
            if wrong and first is None:
                s, trees = wrong[0], " ".join(shape.spec for shape in case.shapes_for(drawn))
                first = f"trees {trees} ({layout}), seed {s}: tree text {list(got[s])}, target-only {list(baseline[s])}"
    in_law = law(rig, case.horizon, baseline)
    figures = {"shapes": case.specs, "seeds": seeds, "configurations": configurations, "texts_compared": compared}
    figures |= {"differ": 0 if first is None else 1, "target_only_not_the_gumbel_max_chain": anchored}
    figures["worst_gap_over_bound"] = in_law.figures["worst_gap_over_bound"]
    # a greedy target decides by the greedy rule, which reads no noise: i.i.d. children are its to take;
    # a greedy draft ranks its children whatever the construction asked (none is drawn): nothing to refuse
    greedy = rig.target_policy.greedy or rig.draft_policy.greedy
    figures["iid_refused"] = None if greedy else iid_refused(rig, case)
    return Check(
        "tree_invariant",
        first is None and anchored == 0 and bool(in_law.passed) and figures["iid_refused"] is not False,
        figures,
        first
        or "every tree text equals target-only sampling's with the same seed (children sampled under the shared noise "
        "or ranked, both layouts), which is the Gumbel-max chain of the exact rows, within its Bernstein bound",
    )


def iid_refused(rig: Rig, case: TreeCase) -> bool:
    """Children drawn i.i.d. read proposal uniforms, which a draft racing under the shared noise does
    not: the invariant rule refuses them in one line (they would not be its coupling)."""
    shape = replace(case.shapes[0], drawn="iid")
    try:
        texts(rig.but(tree=shape, k_policy_factory=None, k=shape.depth), 1, case.horizon)
    except UsageError:
        return True
    return False


def check_tree_rational(case: TreeCase) -> Check:
    """The oracle's tree rule in Fractions: one round per shape and construction, completed by the
    target chain, against the chain's exact joint."""
    v = case.rig.vocab
    p, q = RationalTable(v, case.seed), RationalTable(v, case.seed + 7919)
    walk = TreeWalk(p, q, one=Fraction(1))
    prompt, figures, worst = case.rig.prompt, {"shapes": case.specs, "horizon": case.horizon}, Fraction(0)
    target = chain_joint(p, prompt, case.horizon, Fraction(1))
    for drawn in case.constructions_under("maximal"):
        cells = 0
        for shape in case.shapes_for(drawn):
            kind = construction(shape, False)
            shape = shape.cut(case.horizon - 1)
            joint: dict = {}
            add = completer(p, prompt, case.horizon, joint)
            for cell in walk.cells(prompt, shape, kind):
                add(cell.emitted, cell.mass)
                cells += 1
            worst = max(worst, max_abs_diff(target, joint))
        figures[f"cells_{drawn.replace(' ', '_')}"] = cells
    figures["difference"] = str(worst)
    return Check("tree_exact_rational", worst == 0, figures, "the tree rule in Fraction arithmetic, no processors")


def check_tree_block(case: TreeCase) -> Check:
    shape = next((s for s in case.shapes if not s.is_chain), case.shapes[0])
    try:
        case.rig.but(rule="block", tree=shape).engine()
        refused, why = False, "an engine was built"
    except UsageError as err:
        refused, why = True, str(err)
    return Check("tree_block_refused", refused, {"shape": shape.spec}, why)
