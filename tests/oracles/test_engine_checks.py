"""exact_joint_auto_k (specd.oracles.engine.checks): K must vary, where the rows say it can. The
check's draft-stop is read as --draft-stop reads it and never cuts the first round's first draft;
where the rows prove that K cannot depend on the data, the check is not applicable, with the reason;
where they do not, a K that never varied still fails."""

from itertools import product

import pytest

from specd.core.sources import Plan
from specd.core.table_model import TableModel
from specd.oracles.engine import checks as engine_checks
from specd.oracles.engine.checks import Fixture, check_auto_k
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.reference import target_joint
from specd.policy.kpolicy import KPolicy


def fixture(cfg: OracleConfig, rig=None) -> Fixture:
    rig = rig or build_rig(cfg)
    return Fixture(cfg, rig, cfg.effective_horizon, target_joint(rig, cfg.effective_horizon), {})


def flat_self_draft(cfg: OracleConfig):
    """Target and draft alike with one row after every output: no draft is ever rejected, and every
    confidence is the same, so the draft-stop cuts none."""
    rows = {s: [0.3, -0.2] for n in range(10) for s in product(range(2), repeat=n)}
    table = TableModel(2, table=rows, name="flat")
    rig = build_rig(cfg)
    return rig.but(target=table, draft=table, draft_policy=rig.target_policy)


@pytest.mark.parametrize(
    "cfg,passed,detail",
    [
        # each saw only K = 0 before: the median confidence was above the prompt's and cut every draft
        (OracleConfig(vocab=2, k=1, seed=3), True, "K per round"),
        (OracleConfig(vocab=2, k=2, seed=2), True, "K per round"),
        (OracleConfig(vocab=3, k=1, seed=0), True, "K per round"),
        # a greedy draft: its confidence is the largest probability before the argmax, not 1
        (OracleConfig(vocab=2, k=3, draft_temperature=0), True, "K per round"),
        (OracleConfig(horizon=1), None, "not applicable at this size: horizon 1: every round's draft budget is"),
    ],
)
def test_k_varies_wherever_the_rows_say_it_can(cfg, passed, detail):
    check = check_auto_k(fixture(cfg))
    assert check.passed is passed, check.detail
    assert check.detail.startswith(detail)
    assert check.figures["max_abs_diff_replay_frontier"] <= 1e-12


def test_where_nothing_can_be_rejected_and_nothing_is_cut_k_cannot_vary():
    cfg = OracleConfig(vocab=2, k=2)
    check = check_auto_k(fixture(cfg, flat_self_draft(cfg)))
    assert check.passed is None and check.figures["k_values_seen"] == [2]
    assert check.detail.startswith(
        "not applicable at this size: no draft can be rejected (q = p wherever a draft is made) and the draft-stop "
        "cuts none"
    )


class NeverDrafts(KPolicy):
    def __init__(self, *args):
        pass

    def plan(self, state, sources) -> Plan:
        return Plan(None, 0)


def test_a_k_that_never_varies_where_it_could_still_fails(monkeypatch):
    monkeypatch.setattr(engine_checks, "AutoK", NeverDrafts)
    check = check_auto_k(fixture(OracleConfig(vocab=2, k=2)))
    assert check.passed is False and check.figures["k_values_seen"] == [0]
    assert check.detail.endswith("K never varied (saw [0]): nothing data-dependent was checked")
