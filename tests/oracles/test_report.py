import pytest
import torch

from specd.errors import UsageError
from specd.oracles import report as oracle_report
from specd.oracles.fixture import OracleConfig
from specd.oracles.report import SCHEMA, lab_verdict, run_oracle


@pytest.mark.parametrize(
    "cfg",
    [
        OracleConfig(vocab=2, k=3, samples=800),
        OracleConfig(vocab=3, k=2, samples=800, layout="retained_frontier", backend="online"),
        OracleConfig(vocab=2, k=2, samples=500, target_temperature=0, draft_bias={1: 1.0}, repetition_penalty=1.4),
    ],
)
def test_oracle_passes_on_the_production_engine(cfg):
    report = run_oracle(cfg)
    failed = [c["name"] for c in report["checks"] if not c["passed"]]
    assert report["passed"], failed
    assert report["schema"] == SCHEMA
    names = {c["name"] for c in report["checks"]}
    assert names == {
        "exact_joint",
        "exact_joint_rounds",
        "exact_joint_eos",
        "exact_joint_auto_k",
        "exact_joint_multi_source",
        "exact_joint_shared_body",
        "exact_rational",
        "monte_carlo",
        "coupling",
        "layout_parity",
        "backend_parity",
        "exact_joint_ngram",
        "batch_invariance",
        "dtype_edges",
        "failure_lab",
        "invariant_reference",
        "invariant_pointwise",
        "invariant_eos",
        "invariant_shared_noise",
        "invariant_law",
        "tree_exact_joint",
        "tree_exact_joint_eos",
        "tree_exact_greedy",
        "tree_exact_rational",
        "tree_invariant",
    }
    assert report["config"]["tree"]["shapes"]  # the trees checked, on by default


def test_the_run_in_inference_mode_is_the_run_outside_it(monkeypatch):
    """The oracle runs in inference mode (faster, the same arithmetic): its report is the one a run
    outside it gives, that run made after it, with what the first left in the engine's shared caches."""
    cfg = OracleConfig(vocab=2, k=1, samples=100, lab=False)
    modes = []
    run = oracle_report._run_oracle
    monkeypatch.setattr(
        oracle_report, "_run_oracle", lambda *a: modes.append(torch.is_inference_mode_enabled()) or run(*a)
    )
    inside = run_oracle(cfg, jobs=1)
    assert modes == [True] and not torch.is_inference_mode_enabled()
    outside = run(cfg, 1)
    assert inside.pop("elapsed_s") > 0 and outside.pop("elapsed_s") > 0
    assert inside == outside and inside["passed"]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"vocab": 1}, "--vocab"),
        ({"k": 0}, "--k"),
        ({"vocab": 9, "k": 8}, "too large to enumerate"),
        ({"layout": "x"}, "unknown layout"),
        ({"backend": "x"}, "unknown probability backend"),
        ({"target_temperature": -1}, "temperature"),
        ({"target_temperature": float("nan")}, "temperature"),
        ({"repetition_penalty": float("nan")}, "repetition-penalty"),
        ({"target_bias": {0: float("nan")}}, "finite"),
        ({"draft_bias": {5: 1.0}}, "outside the vocabulary"),
        ({"samples": -1}, "--samples"),
    ],
)
def test_bad_configurations_are_refused_when_built(kwargs, message):
    with pytest.raises(UsageError, match=message):
        OracleConfig(**kwargs)


CAUGHT = {"caught": True, "applicable": True}
MISSED = {"caught": False, "applicable": True}
UNSEEN = {"caught": None, "applicable": False}  # not applicable at this size


@pytest.mark.parametrize(
    "rows,passed,counts",
    [
        ([CAUGHT, CAUGHT], True, (2, 2, 2, 0)),
        ([CAUGHT, MISSED], False, (2, 1, 2, 0)),
        ([CAUGHT, UNSEEN], True, (2, 1, 1, 1)),
        ([MISSED, UNSEEN], False, (2, 0, 1, 1)),
        ([UNSEEN, UNSEEN], None, (2, 0, 0, 2)),  # a lab that can see nothing proves nothing: never passed
    ],
)
def test_the_failure_lab_verdict_counts_what_it_caught_and_what_it_could_not_see(rows, passed, counts):
    check = lab_verdict(rows)
    assert check.name == "failure_lab" and check.passed is passed
    figures = check.figures
    assert (figures["variants"], figures["caught"], figures["applicable"], figures["not_applicable"]) == counts
    assert check.detail.endswith("(each with its reason)") == bool(counts[3])
