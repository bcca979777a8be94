"""The failure lab's tree bugs: each caught by name at the default tree sizes, each one component
replaced, the correct engine passing the same checks on the same case, and a bug that cannot show
on the trees asked for reported as not applicable."""

from dataclasses import replace

import pytest

from specd.oracles.engine.tree_checks import TreeCase, check_tree_invariant, proved, tree_joints
from specd.oracles.engine.tree_exact import prompts_for
from specd.oracles.fixture import OracleConfig
from specd.oracles.lab.trees import TREE_VARIANTS, lab_rig, lab_shapes, run_tree_lab
from specd.oracles.report import run_oracle

CAUGHT_BY = {
    "specinfer_residual_without_replacement": "tree_exact_joint",
    "ranked_children_verified_as_sampled": "tree_exact_joint",
    "fresh_uniform_per_child_unchanged_row": "tree_exact_joint",
    "target_sample_per_path": "tree_invariant",
    "positions_by_flattened_index": "cache_identity",  # the K/V ledger: a row not at its parent's position + 1
    "siblings_see_each_other": "tree_exact_joint",
    "duplicate_sibling_merged": "tree_exact_joint",
}


def test_every_tree_bug_is_caught_by_name_at_the_default_sizes():
    rows = run_tree_lab(OracleConfig())
    assert [r["variant"] for r in rows] == [f"tree/{v.name}" for v in TREE_VARIANTS]
    for row in rows:
        name = row["variant"].removeprefix("tree/")
        assert row["caught"] is True, row
        assert row["caught_by"] == CAUGHT_BY[name], row
        assert row["detail"]
    positions = next(r for r in rows if r["variant"].endswith("positions_by_flattened_index"))
    assert "expected positions" in positions["detail"]


def _case(cfg, variant):
    base = lab_rig(cfg, variant)
    shapes = tuple(replace(s, drawn=variant.drawn) for s in lab_shapes(cfg))
    return TreeCase(base, shapes, ("as given",), prompts_for(base, len(shapes)), 3, cfg.seed)


@pytest.mark.parametrize("variant", TREE_VARIANTS, ids=lambda v: v.name)
def test_the_correct_engine_passes_the_check_that_catches_each_variant(variant):
    """What catches a variant is its one broken component: on the same case (rule, construction,
    trees, policies) the production engine passes."""
    case = _case(OracleConfig(), variant)
    if variant.rule == "invariant":
        assert check_tree_invariant(case, 32).passed
    else:
        assert proved(tree_joints(case.rig, case, "as given", "target", (case.rig.layout_name,)))
    broken = variant.build(case.rig)
    changed = [
        name
        for name in ("sampler_cls", "layout_factory", "proposer_factory", "transaction_cls", "target")
        if getattr(broken, name) is not getattr(case.rig, name)
    ]
    assert len(changed) == 1, changed


def test_a_tree_bug_that_cannot_show_is_not_applicable():
    rows = {r["variant"].removeprefix("tree/"): r for r in run_tree_lab(OracleConfig(tree=("1,1",)))}
    assert rows["ranked_children_verified_as_sampled"]["caught"] is True  # a ranked chain's child, verified as sampled
    for name, row in rows.items():
        if name != "ranked_children_verified_as_sampled":
            assert row["caught"] is None and row["applicable"] is False and "not applicable" in row["detail"]


def test_a_run_whose_trees_hide_a_bug_still_passes():
    report = run_oracle(OracleConfig(vocab=2, k=2, samples=0, rule="maximal", tree=("1,1",)), jobs=1)
    lab = next(c for c in report["checks"] if c["name"] == "failure_lab")
    assert report["passed"] and lab["passed"]
    assert lab["figures"]["not_applicable"] == 5  # the sibling bugs under the maximal and greedy rules
