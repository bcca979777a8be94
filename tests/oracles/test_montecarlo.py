import math

from specd.oracles.engine.montecarlo import bernstein_bound, run_monte_carlo
from specd.oracles.reference import target_joint
from tests.helpers import rig


def test_bound_shrinks_with_samples_and_is_tightest_at_extremes():
    assert bernstein_bound(0.5, 10_000, 16) < bernstein_bound(0.5, 1_000, 16)
    assert bernstein_bound(0.01, 1_000, 16) < bernstein_bound(0.5, 1_000, 16)
    assert math.isclose(bernstein_bound(0.0, 1_000, 16), 2 * math.log(2 * 16 / 1e-6) / 3 / 1_000)


def test_engine_samples_match_the_exact_joint_with_mixed_k_rows():
    r = rig(3, 3)
    reference = target_joint(r, 3)
    mc = run_monte_carlo(r, 3, 3000, seed=5, mixed_k=True, audit=True)
    assert not mc.accounting_errors and not mc.audit_errors
    for seq, p in reference.items():
        assert abs(mc.empirical.get(seq, 0.0) - p) <= bernstein_bound(p, 3000, len(reference))


def test_layouts_publish_identical_successors_every_round():
    a = run_monte_carlo(rig(3, 2), 5, 100, seed=1, trace=True)
    b = run_monte_carlo(rig(3, 2, layout="retained_frontier"), 5, 100, seed=1, trace=True)
    assert a.published_trace == b.published_trace and len(a.published_trace) > 100
