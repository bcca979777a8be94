"""Lossy rules priced exactly: the total variation docs/oracle.md states for each, recomputed by the exact
enumeration and checked against a seeded Monte Carlo estimate (every sequence within its Bernstein bound
of the enumerated joint, and the estimated TV within the interval those bounds give)."""

import random
from collections import Counter
from pathlib import Path

import pytest
import torch

from specd.core.tree_shape import parse_tree
from specd.oracles.engine.montecarlo import bernstein_bound
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.reference import Reference, chain_joint
from specd.oracles.samplers.price import chain_price, tv_figures
from specd.oracles.samplers.protocol import load_sampler
from specd.oracles.samplers.tree_checks import TreeJoint
from specd.oracles.samplers.tree_montecarlo import tree_montecarlo
from specd.oracles.samplers.tree_protocol import load_tree_sampler
from specd.oracles.samplers.tree_rounds import draft_trees

DOCS = (Path(__file__).resolve().parents[2] / "docs" / "oracle.md").read_text()
# (sampler, tree, drawing) on --vocab 3, seed 0 -> the TV over the horizon docs/oracle.md states
TREE_PRICES = {
    ("sglang@0.5,1", "rank:2,2"): 0.002167,
    ("sglang@1,0.5", "rank:2,2"): 0.1898,
    ("sglang@0.3,0.3", "rank:2,2"): 0.3902,
    ("medusa-typical", "rank:2,2"): 0.9615,
}
SAMPLES = 3000


def outside(empirical: Counter, joint: dict, n: int) -> list:
    """The sequences whose frequency is outside its Bernstein bound (failure probability 1e-6 in all) of ``joint``."""
    seqs = set(joint) | set(empirical)
    bounds = {s: bernstein_bound(joint.get(s, 0.0), n, len(seqs)) for s in seqs}
    return [s for s in seqs if abs(empirical[s] / n - joint.get(s, 0.0)) > bounds[s]]


def within(empirical: Counter, exact: dict, target: dict, tv: float, n: int) -> None:
    """Monte Carlo agrees with the enumerated joint, and its TV estimate with the figure; where the figure is
    large, the same samples refuse the target's joint (the test has the power to see the loss)."""
    assert outside(empirical, exact, n) == []
    seqs = set(exact) | set(empirical)
    slack = 0.5 * sum(bernstein_bound(exact.get(s, 0.0), n, len(seqs)) for s in seqs)
    estimate = 0.5 * sum(abs(empirical[s] / n - target.get(s, 0.0)) for s in set(target) | set(empirical))
    assert abs(estimate - tv) <= slack, (estimate, tv, slack)
    if tv > 0.1:
        assert outside(empirical, target, n) != []


@pytest.mark.parametrize("name, spec", list(TREE_PRICES))
def test_a_lossy_tree_rule_costs_what_the_docs_say_and_monte_carlo_agrees(name, spec):
    rig = build_rig(OracleConfig(vocab=3, k=2, seed=0))
    ref, shape = Reference(rig), parse_tree(spec)
    sampler = load_tree_sampler(name)
    rounds = draft_trees(shape, "rank", ref.p, ref.q, rig.prompt)
    exact = dict(TreeJoint(sampler, rounds, ref.p, rig.prompt, 3).joint)
    target = chain_joint(ref.p, rig.prompt, 3)
    tv = tv_figures(exact, target, 3)["tv_horizon"]
    assert f"{tv:.4g}" == f"{TREE_PRICES[(name, spec)]:.4g}" and f"{tv:.4g}" in DOCS
    empirical = tree_montecarlo(sampler, shape, "rank", ref.p, ref.q, rig.prompt, SAMPLES, seed=48)
    within(empirical, exact, target, tv, SAMPLES)


def hf_ensemble_monte_carlo(rig, k: int, n: int, seed: int) -> Counter:
    """transformers' ensemble mode on real uniforms: a draft path from q, then one call, then the target."""
    sampler, ref, rng = load_sampler("hf-ensemble"), Reference(rig), random.Random(seed)
    pick = lambda row: rng.choices(range(len(row)), weights=row)[0]  # noqa: E731
    counts: Counter = Counter()
    for _ in range(n):
        path: tuple[int, ...] = ()
        for _ in range(k):
            path += (pick(ref.q(rig.prompt + path)),)
        p = torch.tensor([[ref.p(rig.prompt + path[:i]) for i in range(k + 1)]], dtype=torch.float64)
        q = torch.tensor([[ref.q(rig.prompt + path[:i]) for i in range(k)]], dtype=torch.float64)
        u = torch.tensor([[rng.random() for _ in range(k)]], dtype=torch.float64)
        out = sampler(p, q, torch.tensor([path]), torch.tensor([k]), u, torch.tensor([0.5], dtype=torch.float64))
        a = out.accepted[0]
        emitted = path[:a] + (pick(out.terminal_rows[0].tolist()),)
        while len(emitted) < k + 1:
            emitted += (pick(ref.p(rig.prompt + emitted)),)
        counts[emitted] += 1
    return counts


def hf_ensemble_joint(rig, k: int, w: float) -> dict:
    """The ensemble rule's joint from its formula (transformers' docstring): keep d while U <= 1 - w + w p/q,
    the correction from [p - q]_+, written independently of chain_price's search for the thresholds."""
    ref, joint = Reference(rig), {}

    def walk(path, mass, i):
        if i == k:
            for x, px in enumerate(ref.p(rig.prompt + path)):
                done(path + (x,), mass * px)
            return
        for d, qd in enumerate(ref.q(rig.prompt + path)):
            p_row, q_row = ref.p(rig.prompt + path), ref.q(rig.prompt + path)
            keep = min(1.0, 1 - w + w * p_row[d] / q_row[d])
            walk(path + (d,), mass * qd * keep, i + 1)
            left = [max(0.0, a - b) for a, b in zip(p_row, q_row)]
            for x, lx in enumerate(left):
                done(path + (x,), mass * qd * (1 - keep) * lx / sum(left))

    def done(head, mass):
        for tail, m in chain_joint(ref.p, rig.prompt + head, k + 1 - len(head)).items():
            joint[head + tail] = joint.get(head + tail, 0.0) + mass * m

    walk((), 1.0, 0)
    return joint


def test_a_lossy_chain_sampler_is_priced_the_same_way():
    """hf-ensemble (assistant_ensemble_weight 0.5) on --vocab 2 --k 2: chain_price finds its thresholds on the
    2^-53 grid; its TV equals the formula's, docs/oracle.md states it, and Monte Carlo agrees."""
    rig = build_rig(OracleConfig(vocab=2, k=2, seed=0))
    price = chain_price(load_sampler("hf-ensemble"), rig, 2, tokens=False)
    exact = hf_ensemble_joint(rig, 2, 0.5)
    target = chain_joint(Reference(rig).p, rig.prompt, 3)
    assert price["threshold_shaped"]
    assert abs(price["tv_horizon"] - tv_figures(exact, target, 3)["tv_horizon"]) < 1e-12
    assert f"{price['tv_horizon']:.4g}" == "0.4425" and "0.4425" in DOCS
    within(hf_ensemble_monte_carlo(rig, 2, 1000, seed=48), exact, target, price["tv_horizon"], 1000)


def test_an_exact_chain_sampler_costs_nothing():
    from specd.oracles.samplers.protocol import SamplerUnderTest, rule_sampler

    rig = build_rig(OracleConfig(vocab=3, k=2, seed=0))
    price = chain_price(SamplerUnderTest("specd", rule_sampler(), ""), rig, 2, tokens=True)  # tokens: bisected too
    assert price["tv_horizon"] < 1e-12 and price["threshold_shaped"]
