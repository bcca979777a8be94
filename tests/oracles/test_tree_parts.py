"""The tree checks' share of a run: which run under which --rule, none turning them off, and the
report's account of the trees."""

from dataclasses import replace

from specd.oracles.fixture import OracleConfig
from specd.oracles.report import tree_config, tree_parts


def test_the_runs_parts_follow_the_rule_and_none_turns_them_off():
    names = lambda parts: {part()[0].name for _, part in parts if part is not None}  # noqa: E731
    cfg = OracleConfig(vocab=2, k=1)
    _, maximal, _ = tree_parts(cfg, ("maximal",))
    assert names(maximal) == {"tree_exact_joint", "tree_exact_joint_eos", "tree_exact_greedy", "tree_exact_rational"}
    _, block, _ = tree_parts(cfg, ("block",))
    assert names(block) == {"tree_block_refused"}
    case, checks, lab = tree_parts(replace(cfg, tree=("none",)), ("maximal", "invariant"))
    assert case is None and checks == [] and lab == []


def test_the_report_says_which_trees_it_checked():
    cfg = OracleConfig(vocab=3, k=2, tree=("2,1", "rank:1,3"))
    case, _, _ = tree_parts(cfg, ("maximal",))
    said = tree_config(cfg, case)
    assert said["shapes"] == ["2,1", "rank:1,3"] and said["constructions"] == ["as given"]
    assert said["horizon"] == 3 and len(said["prompts"]) == 2 and said["lab_vocab"] == 3
    assert tree_config(cfg, None) is None
