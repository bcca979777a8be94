"""A foreign sampler's check covers the slips a size can hide (specd.oracles.samplers.coverage and
.tables): each slip of tests/oracles/slips.py fails at the default size, at the sizes where it used to pass too;
correct samplers written in other ways pass; --exact-size reports what the named size cannot show."""

import json
import random
from dataclasses import replace

import pytest

from specd.core.tree_shape import parse_tree
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.report import run_sampler_oracle
from specd.oracles.samplers import checks as sc
from specd.oracles.samplers import tree_checks
from specd.oracles.samplers.checks import Call, call_tensors, mixed_tensors, returns_tokens
from specd.oracles.samplers.counterexample import minimal_counterexample
from specd.oracles.samplers.coverage import (
    FOURTH_SIBLING,
    Case,
    chain_cases,
    coverage,
    slips_covered,
    tree_cases,
)
from specd.oracles.samplers.covered import check_exact_cases, check_mixed, check_padded
from specd.oracles.samplers.degenerate import batch_rows, zero_target_mass
from specd.oracles.samplers.edges import check_dtype_edges
from specd.oracles.samplers.protocol import as_sampler
from specd.oracles.samplers.size_classes import DEEP_ROWS_VOCAB, PAST_BYTE_VOCAB, WIDE_VOCAB
from specd.oracles.samplers.slip_classes import DEEP_SIBLINGS_TREE
from specd.oracles.samplers.tables import ADVERSARIAL, SMALL_VALUES, adversarial, reshape, seeded, tables
from specd.oracles.samplers.tree_checks import check_cases, tree_counterexample
from specd.oracles.samplers.tree_degenerate import check_bonus_total, check_zero_mass
from specd.oracles.samplers.tree_protocol import TreeSamplerUnderTest, load_tree_sampler
from tests.helpers import run_cli
from tests.oracles import slips

DRAWINGS = ("sampled", "rank", "iid", "lookup")  # the cheapest first: a slip fails as soon as one does
ISSUE_SIZES = [("2,2", 3), ("1,2", 2), ("3", 4)]  # where issue 60 found wrong samplers passing


def tree(name: str) -> TreeSamplerUnderTest:
    return TreeSamplerUnderTest(name, getattr(slips, name), name)


def verdicts(sampler, spec: str, vocab: int, exact_size: bool = False, drawings=DRAWINGS, stop: bool = True):
    """Each construction's exact check over the covered cases -> {drawing: passed}, in this process
    (the command runs the same checks in the sampler's own); ``stop``: at the first failure."""
    cases = tree_cases(OracleConfig(vocab=vocab), parse_tree(spec), exact_size)
    out = {}
    for drawing in drawings:
        out[drawing] = check_cases(sampler, cases, drawing, refusable=False).passed
        if stop and out[drawing] is False:
            break
    return out


@pytest.mark.parametrize("spec, vocab", ISSUE_SIZES)
@pytest.mark.parametrize("name", list(slips.TREE_SLIPS))
def test_every_tree_slip_fails_at_the_default_size(name, spec, vocab):
    assert False in verdicts(tree(name), spec, vocab).values()


@pytest.mark.parametrize("name", list(slips.TREE_CUT_SLIPS))
def test_a_correction_cut_to_two_tokens_at_one_kind_of_node_fails_drawn_or_ranked(name):
    """A correction cut to its two likeliest tokens at one kind of node only (below the root, after two
    children or more, under a younger sibling) passed every size the check added, with children drawn
    without replacement or ranked: each left such a node two tokens. Each added size now leaves every
    node's correction three."""
    assert verdicts(tree(name), "2,2", 3, drawings=("sampled", "rank"), stop=False) == {"sampled": False, "rank": False}


@pytest.mark.parametrize(
    "name, hidden", [("correction_top_two", "wide_correction"), ("middle_level_previous_q", "middle_level")]
)
def test_a_tree_slip_the_issues_size_hides_is_exact_there_and_its_class_na_with_exact_size(name, hidden):
    """At --tree 2,2 --vocab 3 a refusal leaves two tokens at most and two levels have none between them:
    each slip is exact on every table of that size, drawn without replacement (it fails at the default
    size: the test above), and with --exact-size its class is reported n/a, never passed."""
    assert verdicts(tree(name), "2,2", 3, exact_size=True, drawings=("sampled",)) == {"sampled": True}
    cases = tree_cases(OracleConfig(vocab=3), parse_tree("2,2"), exact_size=True)
    assert hidden in [s["slip"] for s in slips_covered(cases, 2) if not s["shown"]]


@pytest.mark.parametrize(
    "name, spec, vocab, drawing",
    [
        ("correction_at_last_uniform", "2,2", 3, "sampled"),
        ("correction_at_last_uniform", "1,2", 2, "rank"),
        ("correction_at_last_uniform", "3", 4, "sampled"),
        ("no_renormalization", "1,2", 2, "sampled"),
        ("no_renormalization", "3", 4, "sampled"),
        ("shared_uniform", "1,2", 2, "iid"),
    ],
)
def test_the_issues_samplers_pass_their_size_on_its_seeds_table_and_fail_once_it_is_covered(name, spec, vocab, drawing):
    """Issue 60's PASSes of wrong samplers: each is exact on the named size's seed-0 table (a correction
    forced, a second sibling's test decided) and caught by the sizes and tables the check now adds."""
    cases = tree_cases(OracleConfig(vocab=vocab), parse_tree(spec))
    named_alone = [type(cases[0])(vocab, cases[0].k, cases[0].shape, cases[0].tables[:1], True)]
    assert check_cases(tree(name), named_alone, drawing, refusable=False).passed
    check = check_cases(tree(name), cases, drawing, refusable=False)
    assert check.passed is False and check.findings == [f"not_exact_{drawing}"]
    assert check.figures["not_exact_at"]["case"] != cases[0].label and check.figures["tv_horizon"] > 0


def test_a_slip_below_the_root_is_exact_where_no_node_below_it_has_two_children_and_caught_by_default():
    """A walk that goes on from the eldest sibling once below the root is exact under --tree 2,1 (its nodes
    below the root are only children) on every table, so there its class is n/a with --exact-size; the
    default check fails it at that same size (the tree 1,2 at V = 4 shows it)."""
    sampler = tree("younger_walked_as_eldest")
    assert verdicts(sampler, "2,1", 3, exact_size=True, drawings=("sampled",)) == {"sampled": True}
    cases = tree_cases(OracleConfig(vocab=3), parse_tree("2,1"), exact_size=True)
    assert "siblings_below_the_root" in [s["slip"] for s in slips_covered(cases, 2) if not s["shown"]]
    assert False in verdicts(sampler, "2,1", 3).values()


def test_a_slip_only_a_third_sibling_shows_is_caught_under_a_tree_of_two():
    """Forgetting an elder refused child's removal from q changes nothing while a node has two children
    (one refusal comes before any test): at --tree 2,2 --vocab 3 it is exact on every table. The check
    adds the tree 3 at V = 4, where it fails (with --exact-size: third_sibling n/a, and where it shows)."""
    sampler = tree("elder_removals_forgotten")
    assert verdicts(sampler, "sampled:2,2", 3, exact_size=True, drawings=("sampled",)) == {"sampled": True}
    third = [c for c in tree_cases(OracleConfig(vocab=3), parse_tree("sampled:2,2")) if c.shape.spec == "3"]
    assert [(c.vocab, len(c.tables)) for c in third] == [(4, 10)]
    assert check_cases(sampler, third, "sampled", refusable=False).passed is False
    named = tree_cases(OracleConfig(vocab=3), parse_tree("2,2"), exact_size=True)
    hidden = {s["slip"]: s["detail"] for s in slips_covered(named, 2) if not s["shown"]}
    assert "no node of the tree has three children" in hidden["third_sibling"]
    assert "shown at --tree 3 --vocab 4" in hidden["third_sibling"]


@pytest.mark.parametrize("name", ["exact_floats", "exact_law", "exact_one_coin"])
def test_correct_tree_samplers_written_differently_pass_every_construction(name):
    assert verdicts(tree(name), "2,1", 3, stop=False) == dict.fromkeys(DRAWINGS, True)
    assert check_zero_mass(tree(name), DRAWINGS).passed and check_bonus_total(tree(name), DRAWINGS).passed


@pytest.mark.parametrize("name", list(slips.TREE_LATER_SLIPS))
def test_a_slip_of_a_later_shape_table_or_uniform_fails_at_the_default_size(name):
    """Each passed every size before (the issue's included): a third child below the root, a younger
    sibling's children below the root, siblings at the third level, a fourth level and a correction of
    five tokens or more are shapes the sizes lacked, each added on the seed's table; a guard or fast path
    with a tolerance moves mass only on the tables of small values; a test or a draw at U <= x differs
    from U < x only where a uniform is exactly 0, which the exact enumeration (a point has probability
    0) cannot see, and zero_target_mass runs every uniform at 0."""
    sampler = tree(name)
    failed = check_zero_mass(sampler, DRAWINGS).passed is False or False in verdicts(sampler, "2,2", 3).values()
    assert failed  # the degenerate cases first: they take a hundredth of the exact check's time


def test_each_table_of_small_values_has_its_property_on_every_row():
    rng = random.Random(0)
    for p, q in (([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]), ([1.0, 0.0, 0.0], [0.0, 0.0, 1.0])):
        for kind in SMALL_VALUES:
            for _ in range(10):
                position = rng.randrange(2)
                p2, q2 = reshape(kind, p, q, rng, position)
                assert abs(sum(p2) - 1) < 1e-12 and abs(sum(q2) - 1) < 1e-12 and min(p2 + q2) >= 0, kind
                if kind == "nearly_equal_rows":
                    assert p2 == p and all(abs(a - b) <= 2e-7 * a for a, b in zip(p2, q2))
                    assert p2 != q2 or max(p) == 1  # a point mass is its own nearest row
                if kind == "nearly_point_mass":
                    assert max(p2) == 1 - 1e-7 and q2 == q
                if kind == "draft_nearly_misses":  # and one far below both, the target under the draft
                    assert any(a == 1e-6 and b == 1e-8 for a, b in zip(p2, q2))
                    least = 10**-10.3 if position == 0 else 1.01e-6
                    assert any(1e-11 < b < least and 0.09 < a / b < 0.91 for a, b in zip(p2, q2) if b != 1e-8)
                if kind == "ratios_near_one" and max(p) < 1:  # every ratio off 1 by 1e-11 to about 2e-8
                    assert p2 == p and all(1e-11 / 2 < abs(b / a - 1) < 3e-8 for a, b in zip(p2, q2))


def test_exact_size_reports_each_class_the_size_cannot_show_as_not_applicable():
    """At --tree 1,2 --vocab 2 a correction after all of a node's children is forced and a second sibling's
    test is decided: a sampler whose slips live there passes at that size, and the report says which
    classes it could not show and where they show (never a plain pass of them); without --exact-size the
    same sampler fails."""
    cfg = OracleConfig(vocab=2, rule="maximal")
    doc = run_sampler_oracle(cfg, slips.correction_at_last_uniform, tree="1,2", exact_size=True)
    coverage = doc["coverage"]
    assert doc["passed"] and coverage["exact_size"] and [c["vocab"] for c in coverage["cases"]] == [2]
    hidden = {s["slip"]: s["detail"] for s in coverage["slips"] if not s["shown"]}
    assert set(hidden) == {
        "siblings",
        "third_sibling",
        "correction_draw",
        "wide_correction",
        "siblings_below_the_root",
        "middle_level",
        "younger_sibling_subtree",
        "third_sibling_below_the_root",
        "younger_sibling_below_the_root",
        "siblings_at_the_third_level",
        "third_sibling_at_the_third_level",
        "fourth_level",
        "top_k_correction",
        "fourth_sibling",
        "fifth_sibling",
        "wide_vocabulary",
        "tail_of_one",
        "tail_of_two",
        "aligned_vocabulary",
        "far_rows",
        "wide_draft_row",
        "far_siblings",
        "many_nodes",
        "mid_vocabulary",
        "ninth_draft",
        "vocabulary_past_256",
        "deep_correction",
        "deep_siblings",
    }
    assert all(d.startswith("not applicable at this size: ") for d in hidden.values())
    assert "shown at --tree 2 --vocab 4" in hidden["correction_draw"]
    assert "shown at --tree 3 --vocab 4" in hidden["third_sibling"]
    assert "shown at --tree 2 --vocab 5" in hidden["wide_correction"]
    assert "shown at --tree 1,1,1 --vocab 3" in hidden["middle_level"]
    shown_not = (
        "siblings, third_sibling, correction_draw, wide_correction, siblings_below_the_root, middle_level, "
        "younger_sibling_subtree"
    )
    assert f"not shown at this size (n/a): {shown_not}" in coverage["claim"]
    assert coverage["tables"] == len(coverage["cases"][0]["tables"]) > 1  # every table, at the named size
    assert not run_sampler_oracle(cfg, slips.correction_at_last_uniform, tree="1,2")["passed"]


def test_exact_size_still_runs_every_table():
    """The issue's no_renormalization at --tree 3 --vocab 4: exact on seed 0's tables, not on seed 1's."""
    assert verdicts(tree("no_renormalization"), "sampled:3", 4, exact_size=True, drawings=("sampled",)) == {
        "sampled": False
    }


def test_a_covered_failure_still_gives_the_smallest_counterexample():
    doc = run_sampler_oracle(OracleConfig(vocab=4, rule="maximal"), slips.no_renormalization, tree="sampled:3")
    cx = doc["counterexample"]
    assert not doc["passed"] and doc["findings"] == ["not_exact_sampled"] and doc["coverage"]["claim"] is None
    assert (cx["vocab"], cx["tree"], cx["drawing"]) == (3, "2", "sampled") and abs(cx["moved"]) > 1e-6


# -- chains ---------------------------------------------------------------------------------------
def chain_check(fn, vocab: int, k: int, exact_size: bool = False):
    sampler = as_sampler(fn)
    cases = chain_cases(OracleConfig(vocab=vocab, k=k), exact_size)
    return check_exact_cases(sampler, cases, returns_tokens(sampler))[0]


@pytest.mark.parametrize("name", list(slips.CHAIN_SLIPS))
def test_every_chain_slip_fails_the_exact_check_at_the_default_size(name):
    assert chain_check(getattr(slips, f"chain_{name}"), 2, 3).passed is False


def test_a_chain_slip_a_size_hides_is_caught_at_the_covered_size_and_na_with_exact_size():
    """A correction drawn at the refused draft's acceptance uniform: at V = 2 it is forced, so the named
    size's joint is exact; V = 3 shows it. With --exact-size --vocab 2 --k 1, every class is n/a."""
    slip = slips.chain_correction_at_acceptance_uniform
    check = chain_check(slip, 2, 3)
    assert check.passed is False and check.figures["not_exact_at"]["case"] == "V = 3, K = 2"
    assert chain_check(slip, 2, 1, exact_size=True).passed
    doc = run_sampler_oracle(OracleConfig(vocab=2, k=1, rule="maximal"), slips.chain_exact, exact_size=True)
    assert doc["passed"] and [s["shown"] for s in doc["coverage"]["slips"]] == [False] * 16
    hidden = "correction_draw, second_draft, wide_correction, later_wide_correction, middle_draft, top_k_correction, "
    hidden += (
        "wide_vocabulary, tail_of_one, tail_of_two, aligned_vocabulary, far_rows, wide_draft_row, mid_vocabulary, "
    )
    hidden += "ninth_draft, vocabulary_past_256, deep_correction"
    assert doc["coverage"]["claim"].endswith(f"not shown at this size (n/a): {hidden}")


@pytest.mark.parametrize(
    "name, vocab, k, covered, hidden",
    [
        ("correction_top_two", 3, 2, "V = 4, K = 2", "wide_correction"),  # V = 3: two tokens of residual at most
        ("middle_draft_previous_q", 4, 2, "V = 3, K = 3", "middle_draft"),  # K = 2: no draft between two others
        ("correction_top_five", 4, 2, "V = 16, K = 1", "top_k_correction"),  # V <= 6: five tokens of residual
        # a cut at a later position only: V = 3 leaves two tokens, K = 1 has no later position
        ("correction_top_two_after_an_accepted_draft", 4, 1, "V = 4, K = 2", "later_wide_correction"),
    ],
)
def test_a_chain_slip_only_a_larger_size_shows_fails_there_and_is_na_with_exact_size(name, vocab, k, covered, hidden):
    """Each passed the named size on every table (it cannot show there) and the check as it was (V = 3,
    K = 2 besides); the sizes its class adds show it. With --exact-size its class is n/a, never passed."""
    slip = getattr(slips, f"chain_{name}")
    check = chain_check(slip, vocab, k)
    assert check.passed is False and check.figures["not_exact_at"]["case"] == covered
    assert chain_check(slip, vocab, k, exact_size=True).passed
    cases = chain_cases(OracleConfig(vocab=vocab, k=k), exact_size=True)
    assert hidden in [s["slip"] for s in slips_covered(cases, 1) if not s["shown"]]


@pytest.mark.parametrize("vocab, k", [(2, 4), (3, 5), (2, 8)])
def test_a_correction_cut_after_three_accepted_drafts_fails_at_any_named_k_from_4(vocab, k):
    """It passed --vocab 2 and 3 at --k 4 and 5 (the named size alone reaches that deep, and there a
    correction has two tokens at most); the deep case (V = 4, the named K up to 6, on draft_point_mass)
    shows it (and so does deep_rows' round of nine, which the check reaches first), and the rule passes there."""
    slip = slips.chain_correction_top_two_after_three_accepted_drafts
    assert chain_check(slip, vocab, k).passed is False
    deep = next(c for c in chain_cases(OracleConfig(vocab=vocab, k=k)) if (c.vocab, c.k) == (4, min(k, 6)))
    assert check_exact_cases(as_sampler(slip), [deep], True)[0].passed is False
    assert check_exact_cases(as_sampler(slips.chain_exact), [deep], True)[0].passed


@pytest.mark.parametrize("spec, vocab", [("1,1,1,1", 3), ("2,1,1,1", 2)])
def test_a_tree_correction_cut_after_three_accepted_nodes_fails_where_the_named_tree_is_four_deep(spec, vocab):
    """The tree's form of the same slip: the fourth level's trees of the check were at V = 3 (two tokens in
    a correction at most); the deep case, the named depth at V = 4 on draft_point_mass, shows it."""
    cases = tree_cases(OracleConfig(vocab=vocab), parse_tree(spec))
    deep = next(c for c in cases if (c.vocab, c.shape.spec) == (4, "1,1,1,1"))
    assert [t.name for t in deep.tables] == ["draft_point_mass (seed 0)"]
    assert check_cases(tree("correction_top_two_after_three_accepted"), [deep], "sampled", False).passed is False
    assert check_cases(tree("exact_floats"), [deep], "sampled", False).passed
    short = [c for c in cases if c is not deep and c.shape.spec != DEEP_SIBLINGS_TREE]  # deep_rows' shows it too
    assert check_cases(tree("correction_top_two_after_three_accepted"), short, "sampled", False).passed


def test_a_chain_failure_past_the_search_still_has_its_counterexample():
    """The search walks V <= 4, K <= 3 on its own tables; a correction cut to five tokens shows at V = 16
    alone, so the case and table the check failed on are tried last (before, no counterexample)."""
    sampler = as_sampler(slips.chain_correction_top_five)
    cases = chain_cases(OracleConfig(vocab=2, k=3))
    check, failed_at = check_exact_cases(sampler, cases, returns_tokens(sampler))
    build = lambda v, k, seed: build_rig(OracleConfig(vocab=v, k=k, seed=seed, lab=False))  # noqa: E731
    found = minimal_counterexample(sampler, returns_tokens(sampler), build, failed_at=failed_at)
    assert check.passed is False and (found["vocab"], found["k"], found["table"]) == (16, 1, "seed 0")
    assert found["exact_mass"] != found["sampler_mass"] and found["cell"]["rule"] != found["cell"]["sampler"]


@pytest.mark.parametrize(
    "name", ["correction_top_two_after_an_accepted_draft", "correction_top_two_after_two_accepted_drafts"]
)
@pytest.mark.parametrize("vocab, k", [(2, 3), (3, 2)])
def test_a_correction_cut_at_a_later_position_only_fails(name, vocab, k):
    """A correction cut to its two likeliest tokens after one (or two) accepted drafts only passed the
    default size, --vocab 2 --k 1 and --vocab 3 --k 2: the size of three tokens left was K = 1 (V = 4),
    which has no later position. V = 4 at K = 2 (on the seed's table at K = 3) leaves three there."""
    check = chain_check(getattr(slips, f"chain_{name}"), vocab, k)
    at = "V = 4, K = 2" if name.endswith("an_accepted_draft") else "V = 4, K = 3"
    assert check.passed is False and check.figures["not_exact_at"]["case"] == at


@pytest.mark.parametrize("vocab, k", [(2, 3), (2, 1)])
def test_a_chain_sampler_exact_in_a_batch_and_not_alone_fails(vocab, k):
    """Every cell of a round goes to the sampler in one batch; a request decoding alone meets it with
    one row. A sampler wrong only then passed every check (a batch of one row was never sent); each
    case's first table again, a cell a call, shows it (at K = 1 the covered K = 2 does)."""
    check = chain_check(slips.chain_fast_path_alone, vocab, k)
    assert check.passed is False and check.findings == ["not_exact_alone"]
    assert check.figures["not_exact_at"]["batch"] == 1 and "a batch of one row" in check.detail
    assert chain_check(slips.chain_exact, vocab, k).passed


@pytest.mark.parametrize("vocab, k", [(2, 3), (3, 2)])
@pytest.mark.parametrize(
    "name, table",
    [
        ("greedy_draft_alone_corrects_from_p", "draft_point_mass"),
        ("masked_draft_alone_corrects_from_p", "target_top_half"),
    ],
)
def test_a_path_taken_for_one_row_alone_fails_on_the_rows_it_takes(name, table, vocab, k):
    """At B = 1 only: a refused one-hot draft's correction drawn from p, its token left in; a draft the target
    gives no mass corrected from p. Every table but the one with such rows is decided right, and that one
    came in one batch only; it is met a row at a time too, at every probe (ALONE_TABLES)."""
    check = chain_check(getattr(slips, f"chain_{name}"), vocab, k)
    assert check.passed is False and check.findings == ["not_exact_alone"]
    assert check.figures["not_exact_at"]["table"] == f"{table} (seed 0)"


def test_a_row_decided_on_its_neighbours_rows_fails_in_a_shuffled_batch():
    """A round's cells in order are neighbours with the same rows, so the last row decided on the row before's
    rows passed every batch; the batches now come in a fixed shuffled order."""
    check = chain_check(slips.chain_last_row_decided_on_the_rows_before, 2, 3)
    assert check.passed is False


def test_a_path_kept_for_small_batches_fails():
    """Every batch had 1-3 rows or 35 and more (a case's tables in one): a path for 4 to 32 rows passed. A
    shuffled batch is cut into batches of CHUNKS' sizes (4, 7, 16 and 33 among them) and the rest."""
    assert chain_check(slips.chain_small_batches_correct_at_the_acceptance_uniform, 3, 2).passed is False
    assert chain_check(slips.chain_exact, 3, 2).passed


def test_a_one_draft_rows_bonus_read_wrong_beside_other_k_fails():
    """The mixed-K batch had rows of K = 0 and of the cases' K (2 and 3 at V = 3 and 4), never one of a
    single draft: a bonus drawn from p_1 there passed. A round of K = 1 joins the batch."""
    check = chain_check(slips.chain_one_draft_rows_bonus_from_p1_beside_other_k, 2, 3)
    assert check.passed is False and check.findings == ["not_exact_mixed_k"]


@pytest.mark.parametrize("vocab, k", [(2, 3), (2, 1)])
def test_a_chain_sampler_reading_past_a_rows_k_fails(vocab, k):
    """Every batched check gives each row the batch's K; beside a request with more drafts a row has
    rows past its k. A bonus drawn from the batch's last target row passed every other check (the
    three-row batch_rows case pads with zero rows, which it skipped); each case's first table again,
    its rows one draft longer than the round's, shows it."""
    check = chain_check(slips.chain_bonus_from_the_batchs_last_row, vocab, k)
    assert check.passed is False and check.findings == ["not_exact_padded"]
    assert check.figures["not_exact_at"]["padded_by"] == 1 and "past its k" in check.detail


def test_a_bonus_read_at_the_batchs_longest_k_fails_the_batch_of_rows_with_different_k():
    """Three rows with K = 2, 0, 1 in one call: past a row's p_{k+1} its target rows are a point mass no
    row's outcome is (they were zero rows, which a sampler falling back to its own row skipped)."""
    check = batch_rows(as_sampler(slips.chain_bonus_from_the_longest_rows_k), True)
    assert check.passed is False and check.findings == ["batch_rows_wrong"] and check.figures["wrong_rows"] == [1, 4, 5]
    assert batch_rows(as_sampler(slips.chain_exact), True).passed


def test_a_path_for_one_speculating_row_in_a_plain_batch_fails():
    """One row with drafts beside rows without (a request speculating in a batch decoding plainly): a path for
    that batch that draws the plain rows at their first acceptance uniform passed every batch with two rows of
    drafts or none (a helper's sampler). batch_rows also calls K = 2, 0, 0."""
    check = batch_rows(as_sampler(slips.chain_plain_rows_beside_one_speculating_row_drawn_at_accept_u), True)
    assert check.passed is False and check.figures["wrong_rows"] == [4, 5]
    cases = chain_cases(OracleConfig(vocab=2, k=3))
    assert check_exact_cases(
        as_sampler(slips.chain_plain_rows_beside_one_speculating_row_drawn_at_accept_u), cases, True
    )[0].passed


def test_a_row_padded_past_its_k_reads_as_the_protocol_says():
    """Past a row's k: drafts -1, q rows zeros, acceptance uniforms 0, and target rows of another law
    (a point mass on p_{k+1}'s least likely token); k_lens stays k, the rest is the row's own."""
    call = Call([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]], [[0.2, 0.5, 0.3]], (1,), (0.9,), 0.5, 1.0, 0, 2, [0.5, 0, 0.5])
    p, q, drafts, k_lens, accept_u, terminal_u = call_tensors([call], pad=2)
    assert p.tolist()[0] == [[0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert q.tolist()[0] == [[0.2, 0.5, 0.3], [0.0] * 3, [0.0] * 3] and drafts.tolist() == [[1, -1, -1]]
    assert k_lens.tolist() == [1] and accept_u.tolist() == [[0.9, 0.0, 0.0]] and terminal_u.tolist() == [0.5]


def test_a_correct_chain_sampler_passes_and_the_report_says_what_it_proved():
    doc = run_sampler_oracle(OracleConfig(vocab=2, k=3, rule="maximal"), slips.chain_exact)
    claim = "exact on 67 tables at V = 2, 3, 4, 6, 16, 33, 65, 66, 192, 257; K = 1, 2, 3, 4, 5, 6, 7, 8, 9"
    assert doc["passed"] and doc["coverage"]["claim"] == claim
    assert doc["checks"][0]["figures"]["tables"] == 67


# -- the tables -----------------------------------------------------------------------------------
def test_each_adversarial_table_has_its_property_on_every_row():
    rng = random.Random(0)
    p, q = [0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]
    for kind in ADVERSARIAL:
        for _ in range(20):
            p2, q2 = reshape(kind, p, q, rng)
            assert abs(sum(p2) - 1) < 1e-12 and abs(sum(q2) - 1) < 1e-12 and min(p2 + q2) >= 0, kind
            if kind == "draft_misses_target":
                assert any(b == 0 < a for a, b in zip(p2, q2))
            if kind == "near_ties":
                assert max(abs(b / a - 1) for a, b in zip(p2, q2)) < 3e-3
            if kind == "point_mass":
                assert sorted(p2) == [0, 0, 0, 1]
            if kind == "equal_rows":
                assert p2 == q2
            if kind == "draft_far_below":
                assert sum(a > 100 * b for a, b in zip(p2, q2)) >= 2  # a correction with two tokens of mass
                flat = [reshape(kind, p, q, rng, position)[0] for position in (1, 2)]  # flat after the first row
                assert p2 == p and flat == [[0.25] * 4] * 2
            if kind == "draft_point_mass":
                assert sorted(q2) == [0, 0, 0, 1] and p2 == p and q2[3] == 1  # at depth 0: the target's likeliest
            if kind == "coarse_grid":  # multiples of 1/16, every token drafted, the rows apart but not everywhere
                assert all((16 * w).is_integer() for w in p2 + q2) and min(q2) > 0 and p2 != q2
            if kind == "target_top_half":  # the likeliest half kept, in proportion; the draft as it was
                assert p2[:2] == [0.0, 0.0] and p2[2:] == pytest.approx([3 / 7, 4 / 7]) and q2 == q
                assert reshape(kind, p, q, rng, position=1) == (p2, [0.25] * 4)  # at odd positions the draft flat


def test_the_coarse_grid_has_rows_equal_on_some_tokens_and_tied_residuals_and_the_point_mass_alternates():
    rng = random.Random(1)
    rows = [reshape("coarse_grid", [0.25] * 4, [0.25] * 4, rng) for _ in range(40)]
    assert any(0 < sum(a == b for a, b in zip(p, q)) < 4 for p, q in rows)  # equal on some tokens, not all
    residuals = [sorted(a - b for a, b in zip(p, q) if a > b) for p, q in rows]
    assert any(len(r) >= 2 and r[0] == r[1] for r in residuals)  # two tokens of the residual tied
    p, q = [0.1, 0.2, 0.4, 0.3], [0.25] * 4
    deeper = [reshape("draft_point_mass", p, q, random.Random(i), position=1)[1].index(1.0) for i in range(12)]
    assert reshape("draft_point_mass", p, q, rng, position=2)[1] == [0, 0, 1, 0] and len(set(deeper)) > 1


@pytest.mark.parametrize("vocab, k", [(2, 3), (3, 2)])
@pytest.mark.parametrize("name", list(slips.CHAIN_GRID_SLIPS))
def test_a_chain_slip_only_tied_weights_or_a_drafted_argmax_show_fails(name, vocab, k):
    """Collapsing tied residual weights, and keeping a point-mass draft on the target's likeliest token
    untested, passed --vocab 2 --k 3 and --vocab 3 --k 2 (a second helper's samplers): random tables never
    tie, and the point-mass draft's point missed the argmax on the rows the round reached."""
    assert chain_check(getattr(slips, f"chain_{name}"), vocab, k).passed is False


@pytest.mark.parametrize("vocab, k", [(2, 3), (3, 2)])
@pytest.mark.parametrize("name", list(slips.CHAIN_FIRST_ROW_SLIPS))
def test_a_chain_round_decided_on_its_first_row_fails(name, vocab, k):
    """Greedy where p_1 is a point mass, every draft kept where p_1 = q_1: exact on every table whose rows are
    all alike (all point masses, all equal), so each passed before the tables whose first row alone is."""
    assert chain_check(getattr(slips, f"chain_{name}"), vocab, k).passed is False


@pytest.mark.parametrize("spec, vocab", [("2,2", 3), ("1,2", 2)])
@pytest.mark.parametrize("name", list(slips.TREE_FIRST_ROW_SLIPS))
def test_a_tree_decided_on_its_roots_rows_fails(name, spec, vocab):
    assert False in verdicts(tree(name), spec, vocab).values()


@pytest.mark.parametrize("name", list(slips.TREE_WIDE_VOCAB_SLIPS))
def test_a_tree_terminal_drawn_over_one_warps_tokens_fails(name):
    """Exact wherever V <= 32; the tree 1 at V = 65 (on draft_point_mass) shows it."""
    assert False in verdicts(tree(name), "2,2", 3).values()
    assert verdicts(tree(name), "2,2", 3, exact_size=True) == dict.fromkeys(DRAWINGS, True)


@pytest.mark.parametrize("name", [n for n in slips.TREE_SIZE_SLIPS if "tail" in n])
def test_a_tree_terminal_dropping_a_blocks_tail_fails(name):
    """A law cut into blocks of four whose tail of one token (two) is dropped: V = 5 shows the first, no tree
    size had V % 4 = 2 past 4 (a helper's passed); the tree 1 at V = 65 and 66 shows both, and --exact-size
    at V = 3 says so."""
    assert False in verdicts(tree(name), "2,2", 3).values()
    assert verdicts(tree(name), "2,2", 3, exact_size=True) == dict.fromkeys(DRAWINGS, True)
    doc = run_sampler_oracle(OracleConfig(vocab=3, rule="maximal"), slips.exact_floats, tree="1", exact_size=True)
    hidden = {s["slip"]: s["detail"] for s in doc["coverage"]["slips"] if not s["shown"]}
    assert "shown at --tree 1 --vocab 65" in hidden["tail_of_one"] and "--vocab 66" in hidden["tail_of_two"]


def test_a_tree_slip_of_one_depth_fails_where_the_chain_shaped_tree_of_that_depth_runs():
    """No tree size had five levels (1-4 and 8): a branch kept for one depth passed every size."""
    sampler = tree("correction_unchanged_target_in_a_tree_of_five_levels")
    cases = tree_cases(OracleConfig(vocab=3), parse_tree("2,2"))
    check = check_cases(sampler, cases, "sampled", refusable=False)
    assert check.passed is False and check.figures["not_exact_at"]["case"] == "V = 3, tree 1,1,1,1,1"


def test_a_bonus_drawn_at_u_not_times_its_rows_total_fails_and_correct_ones_pass():
    """Every table's rows sum to 1, where a draw at U alone is exact (a helper's passed): bonus_row_total's bonus
    row sums to 255/256, for a chain dtype_edges' last row. The correct samplers pass both."""
    assert check_bonus_total(tree("bonus_drawn_at_u_not_times_the_total"), DRAWINGS).passed is False
    chain = as_sampler(slips.chain_bonus_drawn_at_u_not_times_the_total)
    assert check_dtype_edges(chain, True).passed is False
    exact = as_sampler(slips.chain_exact)
    assert check_dtype_edges(exact, True).passed and check_bonus_total(tree("exact_floats"), ("sampled",)).passed
    # a rule inexact for a construction whatever the row's total (SpecInfer's, ranked) is not blamed on the total
    specinfer = check_bonus_total(load_tree_sampler("specinfer"), ("sampled", "rank"))
    assert specinfer.passed and specinfer.figures["left_out"] == ["rank tree 1", "rank tree 1,1"]


@pytest.mark.parametrize(
    "name, case",
    [
        ("terminal_over_blocks_of_four_a_tail_of_one_dropped", "V = 65, K = 1"),
        ("terminal_over_blocks_of_four_a_tail_of_two_dropped", "V = 66, K = 1"),
        ("correction_from_the_target_at_k_five", "V = 3, K = 5"),
    ],
)
def test_a_chain_slip_of_one_vocabulary_tail_or_one_k_fails_where_it_shows(name, case):
    """No chain size had V % 4 = 1 or 2 past 4, nor K = 5 (shown only where --k 5 was named): a helper's passed."""
    check = chain_check(getattr(slips, f"chain_{name}"), 2, 3)
    assert check.passed is False and check.figures["not_exact_at"]["case"] == case


@pytest.mark.parametrize(
    "name, check",
    [
        ("float32_rows_read_as_vectors_of_four", "exact_rational"),
        ("correction_from_the_target_alone_in_half_precision", "exact_rational"),
        ("bonus_drawn_at_u_not_times_the_total_after_two_drafts", "dtype_edges"),
        ("bonus_from_the_row_before_where_v_is_a_multiple_of_32", "exact_joint"),
        ("terminal_over_blocks_of_128", "exact_joint"),
    ],
)
def test_a_fifth_helpers_chain_slip_fails_at_the_default_size(name, check):
    """Each passed every check (a fifth helper's): rows in a low precision met no V past 5 with mass on its last
    token and no batch of one row; no bonus row summing to 255/256 came after two drafts; no V was a multiple of
    32 nor past 128. Now: exact_rational at V = 9, K = 1 (float16 a row at a time), dtype_edges' bonus after two
    and three kept drafts, and V = 192 on sparse_rows."""
    doc = run_sampler_oracle(OracleConfig(vocab=2, k=3, rule="maximal"), getattr(slips, f"chain_{name}"))
    assert not doc["passed"] and next(c for c in doc["checks"] if c["name"] == check)["passed"] is False


@pytest.mark.parametrize("name", list(slips.CHAIN_LOW_PRECISION_SLIPS))
def test_a_chain_slip_in_a_low_precision_path_fails_where_each_case_meets_low_precision_rows(name):
    """Each passed every check while rows in a low precision came at three sizes only (an eighth helper's): a top-8
    correction needs V >= 10, a bonus after four drafts K >= 4, a bonus at the batch's K rows of mixed K. Each
    case's first table in multiples of 1/256 as float32, bfloat16 and float16 rows fails each; every check
    before it passes."""
    doc = run_sampler_oracle(OracleConfig(vocab=2, k=3, rule="maximal"), getattr(slips, f"chain_{name}"))
    verdicts_ = {c["name"]: c["passed"] for c in doc["checks"]}
    assert not doc["passed"] and doc["findings"] == ["not_exact_low_precision"]
    assert verdicts_["exact_low_precision"] is False and all(verdicts_[n] for n in CHECKS_BEFORE_LOW_PRECISION)
    at = next(c for c in doc["checks"] if c["name"] == "exact_low_precision")["figures"]["not_exact_at"]
    assert at["dtype"] == "float32" and doc["counterexample"]["dtype"] == "float32"


CHECKS_BEFORE_LOW_PRECISION = ("exact_joint", "exact_rational", "dtype_edges")


def test_a_chain_sampler_correct_in_every_dtype_passes_each_cases_low_precision_rows():
    """The low-precision check is not one that fails everything: a correct sampler passes it, and its tables'
    weights are multiples of 1/256 summing to exactly 1 (the same law in every dtype)."""
    import torch

    from specd.oracles.samplers.low_precision import check_low_precision, in_units

    sampler = as_sampler(slips.chain_exact)
    check = check_low_precision(sampler, chain_cases(OracleConfig(vocab=2, k=3), False), True)
    assert check.passed and check.figures["runs"] >= 3 * 20 and check.figures["max_abs_diff"] <= 1e-12
    row = in_units([0.5, 1e-4, 0.3, 0.1999])
    assert sum(row) == 1 and all((w * 256).is_integer() for w in row)
    assert all(torch.tensor(row, dtype=d).tolist() == row for d in (torch.float32, torch.bfloat16, torch.float16))


@pytest.mark.parametrize("name", ["draft_renormalized_only_above_1e_3", "terminal_over_blocks_of_128"])
def test_a_fifth_helpers_tree_slip_fails_at_the_default_size(name):
    """A renormalization skipped where a refused child leaves under 1e-3 of draft mass (draft_nearly_point_mass,
    one of the tables of small values), and a partial last block of 128 tokens dropped (the tree 1 at V = 192)."""
    assert False in verdicts(tree(name), "2,2", 3).values()


def test_a_tree_bonus_drawn_at_u_two_levels_down_fails():
    """bonus_row_total ran the tree 1 only: a bonus path kept for deeper leaves passed; it runs 1,1 now."""
    check = check_bonus_total(tree("bonus_drawn_at_u_not_times_the_total_two_levels_down"), DRAWINGS)
    assert check.passed is False and check.findings == ["terminal_ignores_row_total"]


def test_a_path_kept_for_batches_of_a_power_of_two_from_64_fails_and_says_its_answers_depend_on_the_batch():
    """No batch had 64 rows before (a helper's sampler passed): the shuffled batches now have powers of two from 2
    to 128 among their sizes. Its answer for a row depends on its batch, so it is not priced as a law of its own
    (nor said to read the uniforms otherwise), and its counterexample is the cell its batch changed."""
    slip = slips.chain_batches_of_a_power_of_two_from_64_count_every_passed_test
    doc = run_sampler_oracle(OracleConfig(vocab=2, k=3, rule="maximal"), slip)
    assert not doc["passed"] and doc["checks"][0]["findings"] == ["not_exact", "answers_depend_on_the_batch"]
    cx = doc["counterexample"]
    assert cx["batch_size"] >= 64 and cx["cell"]["sampler"]["accepted"] != cx["answer_in_one_batch"]["accepted"]


def test_a_path_kept_for_batches_over_256_rows_says_its_answers_depend_on_the_batch():
    """It fails where a case's tables go in one shuffled batch (its rest past 256 rows); one table's cells are fewer,
    so compared only in batches of up to 128 rows and all at once it looked like a law of its own, priced as the
    uniforms read otherwise. Batches of 512 and 2048 rows show its answers depend on the batch: not priced."""
    doc = run_sampler_oracle(
        OracleConfig(vocab=2, k=3, rule="maximal"), slips.chain_batches_over_256_rows_correct_from_the_target
    )
    assert not doc["passed"] and doc["checks"][0]["findings"] == ["not_exact", "answers_depend_on_the_batch"]
    assert doc["counterexample"] is not None  # the smallest one the search finds (its batches hold every cell)


def test_the_first_row_tables_reshape_a_rounds_first_row_alone():
    p, q = [0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]
    for position in (0, 1, 2):
        p2, q2 = reshape("equal_first_row", p, q, random.Random(position), position)
        assert (p2, q2) == ((p, p) if position == 0 else (p, q))
        p2, q2 = reshape("point_mass_first_row", p, q, random.Random(position), position)
        assert (p2, q2) == ((p2, p2) if position == 0 else (p, q)) and (sorted(p2) == [0, 0, 0, 1]) == (position == 0)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", list(slips.TREE_GRID_SLIPS))
def test_a_tree_slip_only_equal_weights_or_a_younger_siblings_two_children_show_fails(name, seed):
    """A residual that keeps p' where p' = q' exactly passed --tree 2,2 --vocab 3 (random tables never meet);
    a correction cut to two tokens under a younger sibling of two children passed every size (none had one
    at V = 5)."""
    cases = tree_cases(OracleConfig(vocab=3, seed=seed), parse_tree("2,2"))
    assert any(check_cases(tree(name), cases, d, refusable=False).passed is False for d in ("sampled", "rank"))


LOW_PRECISION_SLIPS = ["chain_low_precision_correction_from_p_after_an_accepted_draft"]
LOW_PRECISION_SLIPS += ["chain_low_precision_bonus_from_the_row_before"]


@pytest.mark.parametrize("vocab, k", [(2, 3), (2, 1), (3, 2)])
@pytest.mark.parametrize("name", LOW_PRECISION_SLIPS)
def test_a_path_kept_for_low_precision_rows_fails_the_rational_check_with_its_counterexample(name, vocab, k):
    """A path taken for float32, bfloat16 or float16 rows only passed: only dtype_edges passed such rows, in
    rounds of one draft. The rational check runs its rounds in every dtype, at the named size and V = 4,
    K = 3, and names the dtype where it differs."""
    check = sc.check_rational(as_sampler(getattr(slips, name)), vocab, k, 0, True)
    assert check.passed is False and check.counterexample["dtype"] != "float64"
    assert check.counterexample["cell"]["rule"] != check.counterexample["cell"]["sampler"]
    assert sc.check_rational(as_sampler(slips.chain_exact), vocab, k, 0, True).passed


@pytest.mark.parametrize("seed", range(8))
def test_the_fourth_sibling_case_fails_q_removals_capped_at_two_whatever_the_seed(seed):
    """The fourth sibling's case alone (V = 5, tree 4, on draft_apart): a q' that still holds the third refused
    child's token fails on every seed's table, and the rule written in floats passes. (On near_ties, its
    table before, the slip passed seeds 1, 3 and 5: there the fourth child's ratio was 1 or more.)"""
    vocab, spec, kind = FOURTH_SIBLING
    shape = parse_tree(spec)
    table = adversarial(seeded(OracleConfig(vocab=vocab, seed=seed), vocab, shape.depth, seed), kind, seed)
    case = Case(vocab, shape.depth, shape, (table,), named=True)
    assert check_cases(tree("draft_removals_capped_at_two"), [case], "sampled", refusable=False).passed is False
    assert check_cases(tree("exact_floats"), [case], "sampled", refusable=False).passed


def test_a_named_node_of_five_children_gets_each_later_siblings_case():
    """A removal from q' capped at three shows at a fifth child alone: a named tree of five children at V = 6
    adds draft_apart to its own case, where the slip fails and the rule passes; the fourth child's case
    (V = 5, tree 4) is kept, and there the slip passes (its test at a fourth child is right)."""
    cases = tree_cases(OracleConfig(vocab=6, seed=3), parse_tree("5"))
    named, fourth = cases[0], next(c for c in cases if (c.vocab, c.shape.spec) == (5, "4"))
    assert (named.vocab, named.shape.spec) == (6, "5")
    assert [t.name for t in named.tables] == ["seed 3", "draft_apart (seed 3)"]
    apart = replace(named, tables=named.tables[1:])
    assert check_cases(tree("draft_removals_capped_at_three"), [apart], "sampled", refusable=False).passed is False
    assert check_cases(tree("draft_removals_capped_at_three"), [fourth], "sampled", refusable=False).passed
    assert check_cases(tree("exact_floats"), [apart], "sampled", refusable=False).passed
    later = [(c.vocab, c.shape.spec) for c in tree_cases(OracleConfig(vocab=9), parse_tree("1,6"))]
    assert {(5, "4"), (6, "5"), (7, "6")} <= set(later)


@pytest.mark.parametrize("name", list(slips.TREE_FIFTH_CHILD_SLIPS))
def test_a_fifth_child_slip_fails_at_the_default_size_and_the_fifth_case_runs_without_iid(name):
    """A q' not renormalized from the fourth refusal on passed every default case before the fifth child's (the
    tree 5 at V = 6 on draft_misses_target): it fails there, drawn without replacement, and the rule written in
    floats passes it. The case runs under the constructions it names (not i.i.d.: 5^5 trees), and says so."""
    cases = tree_cases(OracleConfig(vocab=3), parse_tree("2,2"))
    fifth = [c for c in cases if (c.vocab, c.shape.spec) == (6, "5")]
    assert [(c.drawings, [t.name for t in c.tables]) for c in fifth] == [
        (("sampled", "rank", "lookup"), ["draft_misses_target (seed 0)"])
    ]
    assert fifth[0].label == "V = 6, tree 5 (sampled, rank, lookup only)"
    check = check_cases(tree(name), cases, "sampled", refusable=False)
    assert check.passed is False and check.figures["not_exact_at"]["case"] == fifth[0].label
    assert check_cases(tree(name), [c for c in cases if c not in fifth], "sampled", refusable=False).passed
    assert check_cases(tree("exact_floats"), fifth, "sampled", refusable=False).passed
    iid = check_cases(tree("exact_floats"), [cases[0], *fifth], "iid", refusable=False)
    assert iid.passed and iid.figures["tables"] == 1  # the named case's table: the fifth's is not drawn i.i.d.
    claim = coverage(cases, exact_size=False)["claim"]
    assert '"5" (V = 6; sampled, rank, lookup only)' in claim
    named_five = tree_cases(OracleConfig(vocab=6), parse_tree("5"))  # its own case, under every construction
    assert all(c.drawings is None for c in named_five if c.shape.spec == "5")


@pytest.mark.parametrize("name", list(slips.TREE_EIGHTH_HUNT_SLIPS))
def test_an_eighth_helpers_tree_slip_fails_at_the_default_size(name):
    """A division guard at 1e-6 or 1e-10 (the smallest draft weight of any table was 1e-8, with a ratio past 1:
    draft_nearly_misses now has a token 1e-11 to 1e-6 under both rows, the target's a fraction of the draft's), and
    q' not renormalized from the second refusal at the third level (third children were at the first two levels
    only: 1,1,3 at V = 4, not i.i.d.); the rule written in floats passes both cases."""
    cases = tree_cases(OracleConfig(vocab=3), parse_tree("2,2"))
    third = [c for c in cases if (c.vocab, c.shape.spec) == (4, "1,1,3")]
    assert [c.drawings for c in third] == [("sampled", "rank", "lookup")]
    assert check_cases(tree(name), cases, "sampled", refusable=False).passed is False
    assert check_cases(tree("exact_floats"), cases, "sampled", refusable=False).passed


@pytest.mark.parametrize("name", list(slips.CHAIN_EIGHTH_HUNT_SLIPS))
def test_an_eighth_helpers_chain_guard_fails_at_the_default_size(name):
    assert chain_check(getattr(slips, f"chain_{name}"), 2, 3).passed is False


def test_a_failure_the_search_cannot_reach_still_has_its_counterexample(monkeypatch):
    """The smallest-counterexample search walks its sizes on its own tables; where the check found the
    sampler not exact on a table or tree it does not make, that case and table are tried last (a sampler
    failing only on a choices tree got no counterexample, after 40 s of search)."""
    monkeypatch.setattr(tree_checks, "SEARCH", [(2, "1")])
    vocab, spec, kind = FOURTH_SIBLING
    shape = parse_tree(spec)
    cfg = OracleConfig(vocab=vocab, seed=3)
    table = adversarial(seeded(cfg, vocab, shape.depth, 3), kind, 3)
    case = Case(vocab, shape.depth, shape, (table,))
    build = lambda v, k, seed: build_rig(replace(cfg, vocab=v, k=k, seed=seed))  # noqa: E731
    sampler = tree("draft_removals_capped_at_two")
    assert tree_counterexample(sampler, ["sampled"], build) is None
    found = tree_counterexample(sampler, ["sampled"], build, failed_at=(case, table))
    assert (found["vocab"], found["tree"], found["table"], found["search_order"]) == (5, "4", table.name, [1, 0])
    assert found["moved"] != 0 and abs(found["sampler_mass"] - found["exact_mass"]) == abs(found["moved"])
    assert tree_counterexample(tree("exact_floats"), ["sampled"], build, failed_at=(case, table)) is None


def test_draft_apart_leaves_the_two_tokens_the_target_and_refuses_the_rest():
    """The shaped table's rows: p 0.9 on two tokens split (s, 1 - s), q 0.01 on them split (1 - s, s), so one
    of the two has p' < q' once every other token is refused."""
    rng = random.Random(0)
    for v in (3, 5, 8):
        for _ in range(20):
            p, q = reshape("draft_apart", [1.0] + [0.0] * (v - 1), [0.0] * (v - 1) + [1.0], rng)
            assert abs(sum(p) - 1) < 1e-12 and abs(sum(q) - 1) < 1e-12 and min(p + q) > 0
            pair = sorted(range(v), key=lambda x: -p[x])[:2]
            s = min(p[x] for x in pair) / 0.9
            assert 0.2 <= s <= 0.4 and abs(sum(q[x] for x in pair) - 0.01) < 1e-12
            assert all(p[x] / q[x] == pytest.approx(0.1 / 0.99) for x in range(v) if x not in pair)
            assert sorted(p[x] / 0.9 for x in pair) == pytest.approx(sorted(q[x] / 0.01 for x in pair))


def test_the_tables_a_size_holds():
    """The run's seed, two more and every adversarial table; without a token the draft could not fill a
    node's children drawn without replacement, so that table is left out where it cannot."""
    names = [t.name for t in tables(OracleConfig(vocab=3, seed=5), 3, 2, widest=2)]
    assert names[:3] == ["seed 5", "seed 6", "seed 7"] and len(names) == 3 + len(ADVERSARIAL) - 1
    assert "draft_point_mass (seed 5)" not in names  # one token of draft: no second child drawn without it
    assert "draft_point_mass (seed 5)" in [t.name for t in tables(OracleConfig(vocab=3, seed=5), 3, 2, widest=1)]
    assert "draft_misses_target (seed 5)" not in [t.name for t in tables(OracleConfig(vocab=3), 3, 1, widest=3)]


# -- the command ----------------------------------------------------------------------------------
def test_the_command_fails_the_issues_sampler_and_says_where(capsys):
    code, out, _ = run_cli(
        ["verify-oracle", "--sampler", "tests/oracles/slips.py:correction_at_last_uniform", "--tree", "2,2"]
        + ["--vocab", "3", "--json"],
        capsys,
    )
    doc = json.loads(out)
    assert code == 1 and "not_exact_sampled" in doc["findings"] and doc["counterexample"]["vocab"] >= 3
    cases = [(c["vocab"], c["tree"], len(c["tables"])) for c in doc["coverage"]["cases"]]
    younger = "[[0],[1],[1,0]]"  # a younger sibling with a child, the elder without
    assert cases == [
        (3, "2,2", 1),
        (5, "2", 10),
        (4, "1,2", 12),  # and the two first-row tables
        (4, younger, 11),  # and repeated_target
        (4, "1,1,1", 11),
        (4, "3", 10),
        (5, "1,2", 1),
        (4, "1,3", 1),
        (3, "1,2,1", 1),
        (3, "1,1,2", 1),
        (3, "1,1,1,1", 1),
        (16, "1", 1),
        (5, "[[0],[1],[1,0],[1,1]]", 1),  # a younger sibling's two children
        (5, "4", 1),  # draft_apart
        (16, "1,1", 1),  # draft_point_mass
        (65, "1", 2),  # draft_point_mass: wider than a warp or a wavefront, a last block of one token; wide_draft
        (66, "1", 1),  # and of two
        (192, "1", 1),  # sparse_rows: a multiple of 64 past 128
        (65, "1,1,1,1,1,1,1,1", 1),  # sparse_rows: a row read from another level's place
        (65, "2,1,1,1,1,1,1,1,1", 1),  # far_siblings: siblings past token 32 and 64, 18 nodes
        (33, "1", 1),  # draft_point_mass: a vocabulary of 17 to 64 tokens
        (65, "1,1,1,1,1,1,1,1,1", 1),  # sparse_rows: a ninth level
        (257, "1", 1),  # sparse_rows: ids past a byte
        (6, "1,1,1,1,1,1,1,1,2", 1),  # deep_rows: siblings and a correction of three after eight accepted nodes
        (6, "5", 1),  # draft_misses_target, not drawn i.i.d.: a fifth child
        (4, "1,1,3", 1),  # the seed's, not drawn i.i.d.: a third child at the third level
        (4, "1,2", 5),  # the tables of small values
        (3, "[[0],[0,0],[1]]", 1),
        (3, "1,1,1,1,1", 1),  # draft_point_mass: every depth up to 8
        (3, "1,1,1,1,1,1", 1),
        (3, "1,1,1,1,1,1,1", 1),
    ]
    assert all(s["shown"] for s in doc["coverage"]["slips"])


def test_a_sampler_raising_on_some_trees_of_a_construction_fails_it_and_one_raising_on_all_refuses_it(tmp_path, capsys):
    """Raising on every tree of a construction refuses it (n/a); raising on some and returning on
    others does not: the construction fails. (Its n/a hid the slip's wrong laws on the other trees,
    and the run passed.)"""

    def iid_check(path: str) -> tuple[int, dict, dict]:
        args = ["verify-oracle", "--sampler", path, "--tree", "2,2", "--vocab", "3", "--json"]
        code, out, _ = run_cli(args, capsys)
        doc = json.loads(out)
        return code, doc, next(c for c in doc["checks"] if c["name"] == "exact_joint_iid")

    code, doc, iid = iid_check("tests/oracles/slips.py:iid_as_without_replacement")
    assert code == 1 and iid["passed"] is False and iid["findings"] == ["raised"] and "raised" in doc["findings"]
    assert "ZeroDivisionError" in iid["detail"] and "returned on other trees drawn iid" in iid["detail"]
    (tmp_path / "no_iid.py").write_text(
        "from tests.oracles.slips import exact_floats\n\n\n"
        "def sample(tokens, parents, depths, p, q, drawn, u):\n"
        "    if drawn == 'iid':\n"
        "        raise NotImplementedError('children drawn without replacement only')\n"
        "    return exact_floats(tokens, parents, depths, p, q, drawn, u)\n"
    )
    code, doc, iid = iid_check(f"{tmp_path / 'no_iid.py'}:sample")
    assert code == 0 and doc["passed"] and iid["passed"] is None and "refuses trees drawn iid" in iid["detail"]


def test_the_command_with_exact_size_prints_what_the_size_cannot_show(capsys):
    args = ["verify-oracle", "--sampler", "tests.oracles.slips:exact_floats", "--tree", "1,2", "--vocab", "2"]
    code, out, _ = run_cli([*args, "--exact-size"], capsys)
    assert code == 0 and "n/a" in out and "not applicable at this size" in out and "not shown at this size" in out
    code, out, _ = run_cli(args, capsys)
    out = " ".join(out.split())  # the console wraps the long line
    assert (
        code == 0
        and 'PASSED: exact on 85 tables at V = 2, 3, 4, 5, 6, 16, 33, 65, 66, 192, 257; trees "1,2" (V = 2, 4, 5), '
        '"2" (V = 5), "[[0],[1],[1,0]]" (V = 4), "1,1,1" (V = 4), "3" (V = 4), "1,3" (V = 4), '
        '"1,2,1" (V = 3), "1,1,2" (V = 3), "1,1,1,1" (V = 3), "1" (V = 16, 33, 65, 66, 192, 257), '
        '"[[0],[1],[1,0],[1,1]]" (V = 5), "4" (V = 5), "1,1" (V = 16), "1,1,1,1,1,1,1,1" (V = 65), '
        '"2,1,1,1,1,1,1,1,1" (V = 65), "1,1,1,1,1,1,1,1,1" (V = 65), "1,1,1,1,1,1,1,1,2" (V = 6), '
        '"5" (V = 6; sampled, rank, lookup only), "1,1,3" (V = 4; sampled, rank, lookup only), '
        '"[[0],[0,0],[1]]" (V = 3), '
        '"1,1,1,1,1" (V = 3), "1,1,1,1,1,1" (V = 3), "1,1,1,1,1,1,1" (V = 3); K = 1, 2, 3, 4, 5, 6, 7, 8, 9'
        in out
    )
    code, _, err = run_cli(["verify-oracle", "--exact-size"], capsys)
    assert code == 2 and "--exact-size" in err and len(err.strip().splitlines()) == 1


# -- a greedy draft (--draft-temperature 0): every q row a point mass -------------------------------------
def test_the_adversarial_tables_of_a_greedy_draft_are_laws():
    """A point-mass q has no token to lose and may have all its mass in the low half: the tables keep
    it a law (they divided by zero: the command was a traceback)."""
    for vocab in (2, 3, 4):
        for seed in range(6):
            cfg = OracleConfig(vocab=vocab, k=2, seed=seed, draft_temperature=0.0)
            for table in tables(cfg, vocab, 2, 1):
                for output in [(0, 1), (0, 1, 0), (0, 1, 1), (0, 1, 1, 0)]:
                    q = table.q(output)
                    assert abs(sum(q) - 1) <= 1e-12 and min(q) >= 0, (table.name, q)


@pytest.mark.parametrize("spec", ["2,1", "1,2", "iid:2"])
def test_a_correct_tree_sampler_passes_under_a_greedy_draft_and_a_slip_still_fails(spec, capsys):
    """Sampled children drawn without replacement from a point mass cannot fill a sibling group: those
    tables say nothing (each sampler's joint would miss the missing trees' mass) and are left out, said
    in the check and the claim (specd's own rule FAILED there); every other construction runs on all."""
    args = ["verify-oracle", "--tree", spec, "--vocab", "3", "--draft-temperature", "0", "--json", "--sampler"]
    code, out, err = run_cli([*args, "specd"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["passed"], err
    if spec != "iid:2":  # a tree of i.i.d. children is drawn with replacement: every table draws it
        sampled = next(c for c in doc["checks"] if c["name"] == "exact_joint_sampled")
        assert sampled["figures"]["undrawable_tables"] > 0 and "left out" in sampled["detail"]
        assert f"exact_joint_sampled on {sampled['figures']['tables']}" in doc["coverage"]["claim"]
    assert any(c["passed"] for c in doc["checks"] if c["name"] != "no_nodes")
    assert False in verdicts_greedy(tree("correction_at_last_uniform"), spec).values()


def verdicts_greedy(sampler, spec: str):
    cases = tree_cases(OracleConfig(vocab=3, draft_temperature=0.0), parse_tree(spec), False)
    return {d: check_cases(sampler, cases, d, refusable=False).passed for d in DRAWINGS}


def test_the_engines_tree_checks_pass_under_a_greedy_draft(capsys):
    """A greedy draft ranks its children whatever the construction (specd.core.tree_draft.construction):
    the invariant rule has no i.i.d. children to refuse (tree_invariant FAILED the engine there)."""
    for seed in range(2):
        args = ["verify-oracle", "--tree", "2,1", "--vocab", "3", "--k", "2", "--draft-temperature", "0"]
        code, out, _ = run_cli([*args, "--seed", str(seed), "--json", "--samples", "500"], capsys)
        doc = json.loads(out)
        invariant = next(c for c in doc["checks"] if c["name"] == "tree_invariant")
        assert code == 0 and doc["passed"] and invariant["figures"]["iid_refused"] is None


def test_a_sampler_that_raises_once_and_never_again_fails_in_one_line():
    """It raised on a batch of the covered tables and on none of them alone (its answers change from call
    to call): a failed check that says so (it escaped as StopIteration: an internal error)."""

    def flaky(raise_at):
        calls = {"n": 0}

        def sampler(p, q, drafts, k_lens, accept_u, terminal_u):
            if p.shape[0] > 1:
                raise ValueError("rounds one at a time")
            calls["n"] += 1
            if calls["n"] == raise_at:
                raise ValueError("once")
            return slips.chain_exact(p, q, drafts, k_lens, accept_u, terminal_u)

        return as_sampler(sampler), calls

    cases = chain_cases(OracleConfig(vocab=2, k=3))
    sampler, calls = flaky(None)
    assert check_exact_cases(sampler, cases, True)[0].passed
    after, after_calls = flaky(None)  # the calls after the covered tables'
    assert check_padded(after, cases, True) is None and check_mixed(after, cases, True) is None
    sampler, _ = flaky(calls["n"] - after_calls["n"])  # its last call on a covered table, in a batch
    check = check_exact_cases(sampler, cases, True)[0]
    assert check.passed is False and check.findings == ["raised"] and "on none of them alone" in check.detail


@pytest.mark.parametrize(
    "name",
    [
        "chain_rows_put_back_with_the_sorts_order",
        "chain_bonus_rows_kept_per_shape",
        "chain_terminal_uniforms_of_the_drafted_rows",
        "chain_k_of_the_first_row",
    ],
)
def test_a_chain_sampler_wrong_only_beside_rows_of_other_k_fails(name):
    """Written apart against the protocol, each passed every check (every batch had one K, or K = 2, 0, 1,
    whose sort by K is its own inverse; no shape came twice with other k_lens; no batch had rows with
    and without drafts but batch_rows, whose uniforms hid it): rows of K = 0, 2 and 3 dealt in turn,
    and again reversed, show each."""
    check = chain_check(getattr(slips, name), 2, 3)
    assert check.passed is False and check.findings == ["not_exact_mixed_k"]
    assert check.figures["not_exact_at"]["mixed_k"] is True


def test_rows_of_different_k_are_padded_as_the_protocol_says():
    p2 = [[0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]
    two = Call(p2, [[0.2, 0.5, 0.3], [0.3, 0.3, 0.4]], (1, 2), (0.9, 0.1), 0.25, 1.0, 0, 2, [0.5, 0, 0.5])
    zero = Call(p2[:1], [], (), (), 0.75, 1.0, 0, 0, [0.5, 0.3, 0.2])
    p, q, drafts, k_lens, accept_u, terminal_u = mixed_tensors([zero, two])
    assert k_lens.tolist() == [0, 2] and drafts.tolist() == [[-1, -1], [1, 2]] and terminal_u.tolist() == [0.75, 0.25]
    assert p.tolist()[0] == [[0.5, 0.3, 0.2], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]] and p.tolist()[1] == p2
    assert q.tolist()[0] == [[0.0] * 3] * 2 and accept_u.tolist() == [[0.0, 0.0], [0.9, 0.1]]


@pytest.mark.parametrize("name", list(slips.EDGE_SLIPS))
def test_a_chain_sampler_wrong_at_a_floats_edge_fails_dtype_edges(name):
    """Written apart against the protocol, each passed every check: the edge rows had no ratio a uniform
    can equal, no normalized residual short of 1, no tie closer than float32 tells, no weight of 1e-9.
    The rows added for them show each (and a correct float64 sampler still passes)."""
    assert check_dtype_edges(as_sampler(getattr(slips, f"edge_{name}")), tokens=True).passed is False
    assert check_dtype_edges(as_sampler(slips.chain_exact), tokens=True).passed


def test_a_tree_sampler_at_a_low_temperature_gets_a_verdict_not_an_internal_error(capsys):
    """At --target-temperature 0.05 a draft row on the near-ties table is nearly a point mass: 1 minus a
    refused child's mass rounded to 0 while tokens of mass remained, and drawing the next child divided
    by it (an internal error, exit 1, for specd's own sampler). What is left is summed over the tokens left."""
    args = ["verify-oracle", "--sampler", "specd", "--tree", "sampled:2,2", "--vocab", "3", "--exact-size"]
    code, out, err = run_cli([*args, "--target-temperature", "0.05"], capsys)
    assert code == 0 and "PASSED" in out and not err.strip()


def test_a_round_laid_out_depth_first_is_the_same_tree_and_rows():
    """Each node keeps its tokens from the root and its rows; only the order changes: parents first,
    each node followed by its descendants, siblings in their order."""
    from specd.oracles.samplers.tables import seeded
    from specd.oracles.samplers.tree_rounds import depth_first, draft_trees

    table = seeded(OracleConfig(vocab=3), 3, 2, 0)
    rnd = draft_trees(parse_tree("2,2"), "sampled", table.p, table.q, table.prompt)[0]
    relaid = depth_first(rnd)
    assert relaid.tree.parents == (-1, 0, 0, -1, 3, 3) and rnd.tree.parents == (-1, -1, 0, 0, 1, 1)
    rows = lambda r: {r.tree.path_tokens(n): (r.p[n + 1].tolist(), r.q[n + 1].tolist()) for n in range(6)}  # noqa: E731
    assert rows(relaid) == rows(rnd) and relaid.mass == rnd.mass and relaid.p[0].tolist() == rnd.p[0].tolist()


@pytest.mark.parametrize("vocab, k", [(2, 3), (3, 2)])
@pytest.mark.parametrize("name", list(slips.CHAIN_FLAT_SLIPS))
def test_a_chain_path_for_a_flat_row_fails(name, vocab, k):
    """A draft kept untested where the target's row is exactly uniform, or where the draft's is (taken for no
    draft law): each passed every table (helpers' samplers), none of whose rows was flat. draft_far_below's
    target is flat from a round's second row on (the draft far from it), target_top_half's draft at every other."""
    assert chain_check(getattr(slips, f"chain_{name}"), vocab, k).passed is False


@pytest.mark.parametrize("name", list(slips.CHAIN_EDGE_SLIPS))
def test_a_chain_slip_at_a_uniform_of_zero_past_the_first_draft_fails(name):
    """Wrong only at U = 0 past the first draft (a test U <= p/q; a bonus taking the first running sum >= U):
    zero_target_mass now probes the second and third drafts and a terminal after them. It probed the first
    draft alone, and each passed (a helper's samplers)."""
    sampler = as_sampler(getattr(slips, f"chain_{name}"))
    check = zero_target_mass(sampler, returns_tokens(sampler))
    assert check.passed is False and check.figures["accepted_at"] == [] and check.figures["later"]
    assert set(check.findings) <= {"u_zero_accepts_p_zero", "zero_mass_emitted"} and check.findings


@pytest.mark.parametrize("name", list(slips.CHAIN_FAR_ROW_SLIPS))
def test_a_chain_sampler_reading_a_row_from_another_place_fails(name):
    """Draft rows kept in a ring by position, or read at a stride of 64 where V > 64: each passed every size
    before (a helper's), as a ring of n shows only past n drafts and a stride only past V = 64. The round of
    eight drafts at V = 65 on sparse_rows shows each at the default size; the same sampler at one draft is exact
    there (the slip is the far row's, nothing else)."""
    fn = getattr(slips, f"chain_{name}")
    assert chain_check(fn, 2, 3).passed is False
    table = adversarial(seeded(OracleConfig(vocab=3), WIDE_VOCAB, 1, 0), "sparse_rows", 0)
    sampler = as_sampler(fn)
    one = [Case(WIDE_VOCAB, 1, None, (table,))]
    assert check_exact_cases(sampler, one, returns_tokens(sampler))[0].passed is True


@pytest.mark.parametrize("name", list(slips.TREE_FAR_ROW_SLIPS))
def test_a_tree_sampler_reading_a_row_from_another_place_fails(name):
    """The same for a tree's node rows: a ring of four or seven levels, a stride of 64 (the ring of three shows on
    `1,1,1,1` at V = 3 already)."""
    assert False in verdicts(tree(name), "2,2", 3).values()


@pytest.mark.parametrize("spec, vocab", ISSUE_SIZES)
@pytest.mark.parametrize("name", list(slips.TREE_FLAT_SLIPS))
def test_a_tree_path_for_a_flat_row_fails(name, spec, vocab):
    assert False in verdicts(tree(name), spec, vocab).values()


def test_a_chain_draft_row_kept_as_its_32_likeliest_fails_at_the_default_size():
    """Every draft row past V = 32 was a point mass (a fifth helper's sampler passed every size): V = 65, K = 1 on
    wide_draft, whose draft has mass on every token and whose target has mass past the draft's 32 likeliest."""
    check = chain_check(slips.chain_draft_rows_kept_as_their_32_likeliest, 2, 3)
    assert check.passed is False and check.figures["not_exact_at"]["case"] == "V = 65, K = 1"


@pytest.mark.parametrize("name", list(slips.TREE_WIDE_DRAFT_SLIPS))
def test_a_tree_slip_past_32_draft_tokens_or_past_8_nodes_fails_at_the_default_size(name):
    """Siblings were checked at V <= 5 and trees of at most 8 nodes, every draft row past V = 32 a point mass (a
    fifth helper's samplers passed every size): the tree 1 at V = 65 on wide_draft, and 2,1,1,1,1,1,1,1 (16 nodes)
    at V = 65 on far_siblings, whose root's children are tokens 1, 40 and 64."""
    assert False in verdicts(tree(name), "2,2", 3).values()


@pytest.mark.parametrize("name", list(slips.CHAIN_SIXTH_HUNT_SLIPS))
def test_a_chain_slip_of_the_band_from_17_to_64_tokens_or_of_a_ninth_draft_fails_at_the_default_size(name):
    """No size had 16 < V <= 64 or K = 9 (a sixth helper's samplers passed): V = 33, K = 1 on draft_point_mass and
    V = 65, K = 9 on sparse_rows now."""
    check = chain_check(getattr(slips, f"chain_{name}"), 2, 3)
    assert check.passed is False and check.figures["not_exact_at"]["case"] in ("V = 33, K = 1", "V = 65, K = 9")


@pytest.mark.parametrize("name", list(slips.TREE_SIXTH_HUNT_SLIPS))
def test_a_tree_slip_of_the_band_from_17_to_64_tokens_a_ninth_level_or_past_16_nodes_fails_at_the_default_size(name):
    """The tree 1 at V = 33, the chain-shaped tree of nine levels at V = 65, and 2,1,1,1,1,1,1,1,1 (18 nodes)."""
    assert False in verdicts(tree(name), "2,2", 3).values()


DEEP_AND_WIDE = ((PAST_BYTE_VOCAB, "1"), (DEEP_ROWS_VOCAB, DEEP_SIBLINGS_TREE))


@pytest.mark.parametrize("name", list(slips.TREE_SEVENTH_HUNT_SLIPS))
def test_a_tree_slip_past_256_tokens_or_after_eight_accepted_nodes_fails_on_a_case_the_default_check_runs(name):
    """A terminal in a float32 buffer past 256 tokens, a correction cut after four accepted nodes, and siblings from
    the fifth level on tested on the parent's unchanged row passed every size (deep trees were chains of point
    masses; a sixth helper's samplers): the default check of --tree 2,2 --vocab 3 runs the tree 1 at V = 257 and
    two children under a chain of eight at V = 6 on deep_rows, and each slip fails one of them (a correct sampler
    passes both)."""
    cases = tree_cases(OracleConfig(vocab=3, rule="maximal"), parse_tree("2,2"))
    deep_and_wide = [c for c in cases if (c.vocab, c.shape.spec) in DEEP_AND_WIDE]
    assert len(deep_and_wide) == 2
    assert False in [check_cases(tree(name), [c], "sampled", False).passed for c in deep_and_wide]
    assert check_cases(tree("exact_floats"), deep_and_wide, "sampled", False).passed


def test_a_chain_correction_cut_after_four_accepted_drafts_fails_at_the_default_size():
    """Every deep round's refusal left two tokens (V = 3) or was never reached: V = 6, K = 9 on deep_rows now."""
    check = chain_check(slips.chain_correction_top_two_after_four_accepted_drafts, 2, 3)
    assert check.passed is False and check.figures["not_exact_at"]["case"] == f"V = {DEEP_ROWS_VOCAB}, K = 9"


def test_deep_rows_are_one_point_mass_for_eight_rows_then_of_full_support_with_the_draft_below_on_half():
    rng = random.Random(3)
    for position in range(10):
        p, q = reshape("deep_rows", [0.0] * 6, [0.0] * 6, rng, position)
        if position < 8:
            assert p == q and sorted(p) == [0.0] * 5 + [1.0]
        else:  # a refusal leaves the target's mass on at least the half where the draft is a thousandth of it
            assert min(p) > 0 and min(q) > 0 and sum(a > 100 * b for a, b in zip(p, q)) >= 3
            assert sum(p) == pytest.approx(1) and sum(q) == pytest.approx(1)
