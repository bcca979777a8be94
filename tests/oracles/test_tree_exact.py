"""The oracle's tree checks: its own rule over trees is the target's law in exact arithmetic, the
enumeration through production proves a correct engine on a grid of small tree settings (every
rule and construction, ragged trees in one round, both layouts, rounds to the horizon), and a case
too large to enumerate is refused in one line."""

from fractions import Fraction

import pytest

from specd.core.tree_shape import parse_tree
from specd.errors import UsageError
from specd.oracles.engine.rational import RationalTable, completer
from specd.oracles.engine.tree_checks import (
    check_tree_block,
    check_tree_exact,
    check_tree_greedy,
    check_tree_invariant,
    check_tree_rational,
    tree_case,
)
from specd.oracles.engine.tree_exact import TreeEnumerator, prompts_for, ragged_rig
from specd.oracles.engine.tree_reference import TreeWalk
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.reference import Reference, chain_joint


@pytest.mark.parametrize("vocab", [2, 3])
@pytest.mark.parametrize("spec", ["2,1", "3", "1,2", "2,2,1", "3,3"])
def test_the_tree_rule_in_fractions_is_the_target_chain(vocab, spec):
    """Every construction's cells partition the round (masses summing to exactly 1) and, completed by
    the target chain, give the chain's joint with no rounding at all (zero-weight tokens included:
    a row may run out of tokens to draw or rank)."""
    p, q = RationalTable(vocab, 5), RationalTable(vocab, 5 + 7919)
    walk, prompt, shape = TreeWalk(p, q, one=Fraction(1)), (0,), parse_tree(spec)
    horizon = shape.depth + 1
    target = chain_joint(p, prompt, horizon, Fraction(1))
    for drawn in ("sampled", "rank", "iid"):
        cells = walk.cells(prompt, shape, drawn)
        assert sum(c.mass for c in cells) == 1
        joint: dict = {}
        add = completer(p, prompt, horizon, joint)
        for cell in cells:
            add(cell.emitted, cell.mass)
        assert joint == {s: m for s, m in target.items() if m}, drawn


def test_the_walk_reads_only_the_children_it_tests():
    """A passed child's later siblings are never read: in a rank tree whose root's first child always
    passes (p puts all its mass there) no cell tests the root's other children."""
    p = lambda ctx: [1.0, 0.0, 0.0] if len(ctx) == 1 else [0.25, 0.25, 0.5]  # noqa: E731
    q = lambda ctx: [0.5, 0.3, 0.2]  # noqa: E731
    cells = TreeWalk(p, q).cells((1,), parse_tree("3,1"), "rank")
    assert {c.emitted for c in cells} == {(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1), (0, 2)}
    assert all({path for path, _, _ in c.tests} <= {(0,), (0, 0)} for c in cells)
    assert abs(sum(c.mass for c in cells) - 1) <= 1e-15


@pytest.mark.parametrize(
    "cfg",
    [
        OracleConfig(vocab=3, k=2, tree=("2", "1,2"), layout="retained_frontier", target_temperature=0.8),
        OracleConfig(vocab=2, k=2, tree=("rank:3,1", "iid:2", "sampled:1,2"), repetition_penalty=1.4),
        OracleConfig(vocab=3, k=1, tree=("3",), draft_temperature=0.0, seed=3),  # a greedy draft ranks its children
    ],
)
def test_a_correct_engine_passes_the_tree_checks_on_a_grid(cfg):
    case = tree_case(cfg)
    for check in (check_tree_exact(case), check_tree_greedy(case, cfg)):
        assert check.passed, (check.name, check.detail)
        assert check.figures["trees_in_one_round"] >= min(2, len(cfg.tree) or 2)  # different trees in one round
        cells = [v for k, v in check.figures.items() if k.startswith("cells_")]
        assert cells and all(cells)
        assert all(v == 0 for k, v in check.figures.items() if k.startswith("differ_"))
    assert check_tree_rational(case).passed


def test_the_full_runs_trees_are_proved_under_every_construction_and_each_probe_is_the_rules():
    cfg = OracleConfig(vocab=2, k=3)  # the default trees
    case = tree_case(cfg)
    check = check_tree_exact(case)
    assert check.passed, check.detail
    assert case.specs == ["2,1,1", "1,3"] and check.figures["trees_in_one_round"] >= 2
    assert check_tree_greedy(case, cfg).passed and check_tree_rational(case).passed
    figures = check.figures
    for drawn in ("sampled", "rank", "iid"):
        assert figures[f"differ_{drawn}"] == 0
        assert figures[f"max_abs_diff_{drawn}"] <= 1e-12 and figures[f"mass_error_{drawn}"] <= 1e-12
        assert figures[f"requests_{drawn}"] == 3 * figures[f"cells_{drawn}"] > 0
        assert figures[f"largest_tree_{drawn}"] >= 4
    assert figures["layouts"] == ["replay_frontier", "retained_frontier"]


def test_the_enumeration_completes_the_horizon_by_rounds_from_published_successors():
    cfg = OracleConfig(vocab=3, k=2, tree=("2,1",))
    case = tree_case(cfg)
    rig = ragged_rig(case.rig, case.shapes_for("sampled"), case.prompts)
    enumerator = TreeEnumerator(rig, 4, "rounds", case.prompts)
    [joint] = enumerator.joints()
    [target] = enumerator.target_joints()
    assert max(abs(joint.get(s, 0) - target.get(s, 0)) for s in set(joint) | set(target)) <= 1e-12
    assert enumerator.rounds_enumerated >= 3  # later rounds ran on successors, their trees cut to the budget
    assert enumerator.agreement.differ == 0 and not enumerator.agreement.audit_errors


def test_the_invariant_rules_tree_text_is_target_only_sampling_and_block_refuses_trees():
    case = tree_case(OracleConfig(vocab=3, k=2, tree=("2,1", "1,2")))
    invariant = check_tree_invariant(case, seeds=48)
    assert invariant.passed, invariant.detail
    assert invariant.figures["configurations"] == 4  # sampled (the Gumbel-top-k) and rank, both layouts
    block = check_tree_block(case)
    assert block.passed and "no tree form" in block.detail


def test_a_short_horizon_still_drafts_the_whole_tree():
    case = tree_case(OracleConfig(vocab=2, k=3, horizon=1, tree=("2,1",)))
    assert case.horizon == 3  # the deepest tree and its terminal, in a first round
    check = check_tree_exact(case)
    assert check.passed and check.figures["largest_tree_sampled"] == 4  # 2 + 2 nodes


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"tree": ("nodes=4",)}, "static trees"),
        ({"tree": ("2,x",)}, "--tree"),
        ({"vocab": 4, "k": 3, "tree": ("3,3,3,3",)}, "cells in a round"),
    ],
)
def test_a_tree_the_oracle_cannot_enumerate_is_refused_in_one_line(kwargs, message):
    with pytest.raises(UsageError, match=message):
        tree_case(OracleConfig(**kwargs))


def test_the_reference_is_the_oracles_own_rows():
    """The cells come from Reference rows (the declared policies), never from the engine."""
    rig = build_rig(OracleConfig(vocab=3, k=2))
    ref = Reference(rig)
    shape = parse_tree("2,1")
    cells = TreeWalk(ref.p, ref.q).cells(rig.prompt, shape, "sampled")
    assert abs(sum(c.mass for c in cells) - 1) <= 1e-12
    first = {c.tokens[0] for c in cells}
    assert {(path, token) for path, token in first} == {((0,), t) for t in range(3) if ref.q(rig.prompt)[t] > 0}
    assert prompts_for(rig, 3) == ((0, 1), (1, 2), (2, 0))
