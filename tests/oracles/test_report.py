import pytest

from specd.errors import UsageError
from specd.oracles.report import SCHEMA, OracleConfig, run_oracle


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
        "exact_rational",
        "monte_carlo",
        "coupling",
        "layout_parity",
        "backend_parity",
        "exact_joint_ngram",
        "failure_lab",
    }


@pytest.mark.parametrize(
    "cfg,message",
    [
        (OracleConfig(vocab=1), "--vocab"),
        (OracleConfig(k=0), "--k"),
        (OracleConfig(vocab=9, k=8), "too large to enumerate"),
        (OracleConfig(layout="x"), "unknown layout"),
        (OracleConfig(backend="x"), "unknown backend"),
        (OracleConfig(target_temperature=-1), "temperature"),
    ],
)
def test_bad_configurations_are_refused(cfg, message):
    with pytest.raises(UsageError, match=message):
        run_oracle(cfg)
