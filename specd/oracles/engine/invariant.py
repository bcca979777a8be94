"""The oracle's proof of the invariant rule (specd.core.gumbel); its failure lab is
specd.oracles.lab.invariant.

The rule's claim is pointwise: for every noise draw, speculative decoding emits exactly the
tokens target-only decoding emits with the same noise, whatever the draft and K. With that,
exactness in law follows from target-only decoding being the Gumbel-max chain of the target's
rows, which draws each token exactly from p (P(argmax_v log p(v) + G(v) = x) = p(x) for i.i.d.
standard Gumbel G). The checks:

- ``invariant_reference``: target-only decoding under the rule emits, for every seed, the chain
  the oracle computes itself from its own target rows and the noise generator (an independent
  argmax, in Python floats): the engine's text is the Gumbel-max chain of the exact p.
- ``invariant_pointwise``: speculative decoding emits that same text, token for token, for every
  seed, with a model draft, a lookup draft, the target as its own draft, K fixed at 1 and at K,
  K varying with the history, in both layouts, all requests in one batch.
- ``invariant_eos``: with a stop token (specd.oracles.engine.eos picks it), target-only decoding
  stops at the first EOS of that same chain, and every set-up above emits that stopped text, seed
  by seed (an EOS accepted among the drafts ends the text as one drawn by the target does).
- ``invariant_shared_noise``: a draft identical to the target has every draft accepted (the draft
  proposes with the target's noise; a draft with noise of its own is still exact in law but is
  not the coupling, and loses acceptance).
- ``invariant_law``: the Monte Carlo joint of those texts against the exact target joint, each
  sequence within a Bernstein bound (failure probability 1e-6 over the table).
"""

from __future__ import annotations

import math

import torch

from specd.core.gumbel import gumbel, request_key
from specd.core.layouts import LAYOUTS
from specd.core.proposer import ModelProposer, NgramProposer
from specd.core.sources import Plan, first_available
from specd.core.state import Request
from specd.oracles.engine.eos import stopped_at, with_eos
from specd.oracles.engine.montecarlo import bernstein_bound
from specd.oracles.record import NOT_APPLICABLE, Check
from specd.oracles.reference import Reference, target_joint
from specd.oracles.rig import Rig
from specd.policy.kpolicy import FixedK, KPolicy

INVARIANT_SEEDS = 128  # noise draws (one request each) of every check


class KFromHistory(KPolicy):
    """K that varies with the committed history (1 + output length mod K): a legal schedule."""

    def __init__(self, k: int):
        self.k = k

    def plan(self, state, sources) -> Plan:
        return first_available(sources, 1 + len(state.output) % max(self.k, 1))


def texts(rig: Rig, seeds: int, horizon: int, baseline: bool = False, stats: bool = False):
    """The output of one request per seed (all in one batch) -> list of token tuples (and the run's
    stats when asked)."""
    engine = rig.engine()
    if baseline:
        engine = type(engine).baseline(rig.target, rig.target_policy, engine.config, sampler=engine.sampler)
    requests = [Request(f"r{s}", rig.prompt, horizon, seed=s) for s in range(seeds)]
    result = engine.run(requests)
    outputs = [tuple(t) for t in result.new_tokens()]
    return (outputs, result.stats) if stats else outputs


def reference_texts(rig: Rig, seeds: int, horizon: int) -> list[tuple[int, ...]]:
    """The Gumbel-max chain of the oracle's own target rows, one per seed, computed here, stopped at
    the rig's EOS (the noise of a position does not depend on where the text stops)."""
    ref, out = Reference(rig), []
    # the noise of every (seed, position) from one call of the formula: row s * horizon + t
    keys = torch.tensor([request_key(s, f"r{s}") for s in range(seeds) for _ in range(horizon)], dtype=torch.int64)
    noise = gumbel(keys, torch.arange(horizon, dtype=torch.int64).repeat(seeds), rig.vocab).tolist()
    for s in range(seeds):
        seq: tuple[int, ...] = ()
        for t in range(horizon):
            p = ref.p(rig.prompt + seq)
            scores = [math.log(x) + g if x > 0 else -math.inf for x, g in zip(p, noise[s * horizon + t])]
            seq += (max(range(len(p)), key=scores.__getitem__),)
        out.append(stopped_at(seq, rig.eos_ids))
    return out


def configurations(rig: Rig) -> list[tuple[str, Rig]]:
    """The speculative set-ups whose text must equal target-only decoding's."""
    out = []
    for layout in LAYOUTS:
        base = rig.but(layout_name=layout)
        out += [
            (f"{layout}/model/k=1", base.but(k=1)),
            (f"{layout}/model/k={rig.k}", base),
            (f"{layout}/model/k-from-history", base.but(k_policy_factory=lambda r: KFromHistory(r.k))),
        ]
    out.append(("replay_frontier/lookup", rig.but(proposer_factory=lambda r: NgramProposer(2, r.vocab))))
    out.append(("replay_frontier/target-as-draft", self_draft(rig)))
    return out


def self_draft(rig: Rig) -> Rig:
    return rig.but(
        proposer_factory=lambda r: ModelProposer(r.target, r.target_policy), k_policy_factory=lambda r: FixedK(r.k)
    )


def invariant_checks(rig: Rig, horizon: int, seeds: int = INVARIANT_SEEDS) -> list[Check]:
    """The four checks above on ``rig`` under the invariant rule."""
    return list(each_invariant_check(rig, horizon, seeds))


def each_invariant_check(rig: Rig, horizon: int, seeds: int, reference=None, first_failure: bool = False):
    """The checks one at a time (the lab stops at the first that fails, and with ``first_failure``
    the pointwise check at its first configuration that differs). ``reference``: the oracle's own
    chain (``reference_texts``) when already computed: it reads the rig's rows, never its sampler."""
    rig = rig.but(rule="invariant")
    baseline = texts(rig, seeds, horizon, baseline=True)
    ours = (
        reference_texts(rig, seeds, horizon) if reference is None else [stopped_at(t, rig.eos_ids) for t in reference]
    )
    differs = [s for s in range(seeds) if baseline[s] != ours[s]]
    yield Check(
        "invariant_reference",
        not differs,
        {"seeds": seeds, "differ": len(differs)},
        "target-only decoding is the Gumbel-max chain of the exact target rows"
        + (f"; seed {differs[0]}: engine {baseline[differs[0]]}, oracle {ours[differs[0]]}" if differs else ""),
    )
    yield pointwise(rig, horizon, seeds, baseline, first_failure)
    yield stop_token(rig, horizon, seeds, ours, first_failure)
    yield shared_noise(rig, horizon, seeds)
    yield law(rig, horizon, baseline)


def pointwise(rig: Rig, horizon: int, seeds: int, baseline, first_failure: bool = False) -> Check:
    """Every configuration's text against target-only decoding's, seed by seed (with
    ``first_failure``: up to the first configuration that differs)."""
    compared, first, setups = 0, None, configurations(rig)
    for name, spec in setups:
        got = texts(spec, seeds, horizon)
        compared += seeds
        wrong = [s for s in range(seeds) if got[s] != baseline[s]]
        if wrong and first is None:
            first = f"{name}, seed {wrong[0]}: speculative {got[wrong[0]]}, target-only {baseline[wrong[0]]}"
            if first_failure:
                break
    return Check(
        "invariant_pointwise",
        first is None,
        {"texts_compared": compared, "configurations": len(setups)},
        first or "every speculative text equals target-only decoding's with the same noise, token for token",
    )


def stop_token(rig: Rig, horizon: int, seeds: int, chain, first_failure: bool = False) -> Check:
    """``chain`` (the oracle's Gumbel-max texts, ``reference_texts``) stopped at the EOS that
    specd.oracles.engine.eos picks: target-only decoding's text and every set-up's, seed by seed. Not
    applicable where no seed's text reaches that token."""
    stopped = with_eos(rig)
    (eos,) = stopped.eos_ids
    chain = [stopped_at(t, stopped.eos_ids) for t in chain]
    stops = sum(1 for t in chain if t and t[-1] == eos)
    figures = {"eos": eos, "seeds_stopped": stops, "seeds": seeds}
    if not stops:
        return Check("invariant_eos", None, figures, f"{NOT_APPLICABLE}no seed's text reaches token {eos} here")
    # the stop rule is the round's, whatever the draft: each layout with the model at K, the lookup and
    # the target as its own draft (K = 1 and K from the history change only where rounds end)
    ends = (f"/model/k={rig.k}", "/lookup", "/target-as-draft")
    kept = [(name, spec) for name, spec in configurations(stopped) if name.endswith(ends)]
    first, setups = None, [("target-only", None), *kept]
    for name, spec in setups:
        got = texts(stopped, seeds, horizon, baseline=True) if spec is None else texts(spec, seeds, horizon)
        wrong = [s for s in range(seeds) if got[s] != chain[s]]
        if wrong and first is None:
            first = f"{name}, seed {wrong[0]}: {got[wrong[0]]}, the stopped chain {chain[wrong[0]]}"
            if first_failure:
                break
    detail = f"token {eos} is the EOS: every set-up's text is the Gumbel-max chain stopped at it"
    return Check("invariant_eos", first is None, {**figures, "configurations": len(setups)}, first or detail)


def shared_noise(rig: Rig, horizon: int, seeds: int) -> Check:
    """The target as its own draft has every draft accepted; some must be drafted (at horizon 1 none
    can be: a round's draft budget is horizon - 1, so the check is not applicable there)."""
    _, stats = texts(self_draft(rig), seeds, horizon, stats=True)
    drafted, accepted = stats.proposed, stats.accepted
    detail = (
        f"a draft identical to the target (same rows, same noise) must have every draft accepted: {accepted} "
        f"of {drafted}"
    )
    if horizon < 2 and drafted == 0:
        reason = "horizon 1: a round's draft budget is horizon - 1 = 0, so nothing is drafted"
        return Check("invariant_shared_noise", None, {"drafted": 0, "accepted": 0}, f"{NOT_APPLICABLE}{reason}")
    return Check(
        "invariant_shared_noise",
        drafted > 0 and accepted == drafted,
        {"drafted": drafted, "accepted": accepted},
        detail,
    )


def law(rig: Rig, horizon: int, outputs) -> Check:
    exact = target_joint(rig, horizon)
    n = len(outputs)
    counts: dict[tuple[int, ...], int] = {}
    for seq in outputs:
        counts[seq] = counts.get(seq, 0) + 1
    worst, where = 0.0, None
    for seq in set(exact) | set(counts):
        p = exact.get(seq, 0.0)
        gap = abs(counts.get(seq, 0) / n - p)
        ratio = gap / bernstein_bound(p, n, len(exact)) if p > 0 else (math.inf if gap else 0.0)
        if ratio > worst:
            worst, where = ratio, seq
    return Check(
        "invariant_law",
        worst <= 1.0,
        {"samples": n, "sequences": len(exact), "worst_gap_over_bound": worst},
        f"Monte Carlo joint within its Bernstein bound of the exact target joint (worst at {where})",
    )
