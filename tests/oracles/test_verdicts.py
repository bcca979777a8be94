"""The oracle's verdict on the correct engine is true at every size (issue 50): a check that cannot
run at a size says why instead of failing."""

import json

from tests.helpers import run_cli


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
