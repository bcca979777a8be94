"""The oracle's verdict on the correct engine is true at every size (issue 50): a failure-lab variant
no check can see at a size is reported not applicable with its reason, and a check that cannot
run at a size says why, instead of failing."""

import json

from tests.helpers import run_cli


def test_a_variant_the_tables_hide_is_shown_not_applicable_and_counted(capsys):
    """At V = 3, K = 2, seed 1 the lookup's token is the target's favourite wherever it drafts: the
    variant that picks the source after reading p picks the lookup, as the correct engine does."""
    code, out, _ = run_cli(["verify-oracle", "--vocab", "3", "--k", "2", "--seed", "1", "--rule", "maximal"], capsys)
    text = " ".join(out.split())
    assert code == 0 and "PASSED" in text
    assert "Failure lab: 35 of 35 applicable variants caught, 1 not applicable at this size" in text
    row = text[text.index("multi/source_after_target_p") :].replace("│", " ").split()
    assert row[1:5] == ["n/a", "-", "not", "applicable"]  # the reason follows, wrapped to the terminal


def test_checks_a_size_cannot_exercise_say_why(capsys):
    """At horizon 1 no round has a draft budget: K cannot vary, and nothing is drafted to accept."""
    code, out, _ = run_cli(["verify-oracle", "--json", "--horizon", "1", "--no-lab"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["passed"] is True
    details = {c["name"]: c["detail"] for c in doc["checks"] if c["passed"] is None}
    assert list(details) == ["exact_joint_auto_k", "invariant_shared_noise"]
    assert details["exact_joint_auto_k"].startswith(
        "not applicable at this size: horizon 1: every round's draft budget is horizon - 1 = 0"
    )
    assert details["invariant_shared_noise"] == (
        "not applicable at this size: horizon 1: a round's draft budget is horizon - 1 = 0, so nothing is drafted"
    )
