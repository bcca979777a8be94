"""``specd.prove`` and ``specd.check_sampler``: the oracle's reports from Python, the very documents
``specd verify-oracle --json`` prints."""

import json

import pytest

import specd
from specd.oracles.samplers.protocol import rule_sampler
from specd.testing import assert_sampler_exact
from tests.helpers import run_cli


def _without_time(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "elapsed_s"}


def test_prove_is_verify_oracle(capsys):
    report = specd.prove(vocab=2, k=2, samples=200, rule="all")
    code, out, _ = run_cli(
        ["verify-oracle", "--vocab", "2", "--k", "2", "--samples", "200", "--rule", "all", "--json"], capsys
    )
    assert code == 0 and report.passed
    assert _without_time(json.loads(out)) == json.loads(json.dumps(_without_time(report.document)))
    names = [c.name for c in report.checks]
    assert "exact_joint" in names and "block_exact_rational" in names and "failure_lab" in names
    assert report.findings == () and report.failed == ()
    assert len(report.failure_lab) > 30 and all(v["caught"] for v in report.failure_lab)


def test_check_sampler_takes_a_callable_a_class_or_a_name(capsys):
    """What it takes, at the named size for the callable and the class (the default coverage of the same rule,
    by name, runs here and in tests/oracles/test_samplers.py)."""
    for sampler, exact_size in ((rule_sampler(), True), ("specd", False)):
        report = specd.check_sampler(sampler, vocab=3, k=2, exact_size=exact_size)
        assert report.passed and report.findings == () and report.counterexample is None
    assert specd.check_sampler(rule_sampler(block=True), rule="block", vocab=3, k=2).passed

    class Correct:
        """specd's rule, as a class built with no arguments."""

        def __call__(self, *args):
            return rule_sampler()(*args)

    report = specd.check_sampler(Correct, exact_size=True)
    assert report.passed and report.document["sampler"]["description"].startswith("specd's rule")
    # the named size only: the command's default coverage of hf runs in tests/oracles/test_samplers.py
    args = ["verify-oracle", "--sampler", "hf", "--vocab", "2", "--k", "1", "--exact-size", "--json"]
    code, out, _ = run_cli(args, capsys)
    cli = json.loads(out)
    api = specd.check_sampler("hf", vocab=2, k=1, exact_size=True)
    assert code == 1 and not api.passed and list(api.findings) == cli["findings"]
    assert _without_time(api.document) == _without_time(cli)


def test_a_wrong_sampler_fails_with_its_counterexample():
    from specd.oracles.lab.broken import CorrectionFromP

    report = specd.check_sampler(rule_sampler(CorrectionFromP()))
    assert not report.passed and "not_exact" in report.findings
    assert report.failed[0].name == "exact_joint" and report.counterexample["sequence"]


def test_check_sampler_covers_the_sizes_a_slip_needs_unless_told_the_exact_size():
    """A sampler that keeps testing after a refusal is exact at K = 1 (no test follows the first): the check
    also runs at K = 2 and fails it there; with exact_size=True it stays at K = 1, and says what K = 1 cannot
    show. The document's coverage is the command's."""
    from tests.oracles.slips import chain_continue_after_rejection as slip

    report = specd.check_sampler(slip, vocab=2, k=1)
    assert not report.passed and report.failed[0].figures["not_exact_at"]["case"] == "V = 3, K = 2"
    assert report.document["coverage"]["claim"] is None
    exact = specd.check_sampler(slip, vocab=2, k=1, exact_size=True)
    assert exact.passed and [s["slip"] for s in exact.document["coverage"]["slips"] if not s["shown"]] == [
        "correction_draw",
        "second_draft",
        "wide_correction",
        "later_wide_correction",
        "middle_draft",
        "top_k_correction",
        "wide_vocabulary",
        "tail_of_one",
        "tail_of_two",
        "aligned_vocabulary",
        "far_rows",
        "wide_draft_row",
        "mid_vocabulary",
        "ninth_draft",
        "vocabulary_past_256",
        "deep_correction",
    ]
    assert exact.document["coverage"]["claim"].startswith("exact on 14 tables at V = 2; K = 1; not shown")
    tree = specd.check_sampler("specd", tree="rank:2", vocab=3)
    assert (
        tree.passed
        and tree.document["coverage"]["claim"]
        == 'exact on 85 tables at V = 3, 4, 5, 6, 16, 33, 65, 66, 192, 257; trees "rank:2" (V = 3), "2" (V = 5), '
        '"1,2" (V = 4, 5), "[[0],[1],[1,0]]" (V = 4), "1,1,1" (V = 4), "3" (V = 4), "1,3" (V = 4), '
        '"1,2,1" (V = 3), "1,1,2" (V = 3), "1,1,1,1" (V = 3), "1" (V = 16, 33, 65, 66, 192, 257), '
        '"[[0],[1],[1,0],[1,1]]" (V = 5), "4" (V = 5), "1,1" (V = 16), "1,1,1,1,1,1,1,1" (V = 65), '
        '"2,1,1,1,1,1,1,1,1" (V = 65), "1,1,1,1,1,1,1,1,1" (V = 65), "1,1,1,1,1,1,1,1,2" (V = 6), '
        '"5" (V = 6; sampled, rank, lookup only), "1,1,3" (V = 4; sampled, rank, lookup only), '
        '"[[0],[0,0],[1]]" (V = 3), '
        '"1,1,1,1,1" (V = 3), "1,1,1,1,1,1" (V = 3), "1,1,1,1,1,1,1" (V = 3); K = 1, 2, 3, 4, 5, 6, 7, 8, 9'
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: specd.prove(vocab=1), "--vocab must be >= 2"),
        (lambda: specd.prove(rule="tree"), "--rule"),
        (lambda: specd.prove(tree="nodes=3"), "static trees"),
        (lambda: specd.prove(vocab=4, tree=["2,2", "3,3,3,3"]), "cells in a round"),
        (lambda: specd.check_sampler(rule_sampler(), rule="invariant"), "no sampler protocol"),
        (lambda: specd.check_sampler(42), "not callable"),
        (lambda: specd.check_sampler("nope"), "module:attr"),
        # issue 61: a tree of the wrong type or size is the keyword's own one line, before any import
        (lambda: specd.check_sampler("no_such_module:f", tree=5), r"^tree must be a tree spec .*got 5 \(int\)"),
        (lambda: specd.check_sampler("specd", tree=b"2,2"), r"^tree must be a tree spec .*\(bytes\)"),
        (lambda: assert_sampler_exact("specd", tree=5), r"^tree must be a tree spec"),
        (lambda: specd.check_sampler("no_such_module:f", tree="²"), r"^tree '²': '²' is not a digit here"),
        (lambda: specd.check_sampler("specd", tree="1000,1000,1000"), r"^tree '1000,1000,1000': 1001001000 nodes"),
        (lambda: specd.prove(tree=["2,1", "²"]), r"^tree '²': '²' is not a digit"),
        (lambda: specd.prove(tree="1000,1000,1000"), r"^tree '1000,1000,1000': 1001001000 nodes"),
        (lambda: specd.prove(tree=b"2"), r"^tree must be a tree spec or a list of them, got b'2' \(bytes\)"),
        (lambda: specd.prove(tree=[2]), r"^tree must be a tree spec \(a string"),
        (lambda: specd.check_sampler("specd", exact_size="yes"), "exact_size must be True or False"),
    ],
)
def test_bad_arguments_raise_one_typed_error(call, message):
    with pytest.raises(specd.UsageError, match=message):
        call()
