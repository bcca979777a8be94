"""Seeded Monte Carlo through the real engine, with state audits.

Each sample is one request with its own named streams (seed, request id), so
the whole sample is one batch. Rows get different K (1 + i mod K) unless told
otherwise: exactness must not depend on the batch's K mix.

Finite-sample bound: for each of the M = V^H sequences with exact target mass
p, Bernstein's inequality gives P(|p_hat - p| >= t) <= 2 exp(-N t^2 / (2 p(1-p) + 2t/3)).
Solving at delta/M per cell and taking the union bound, every cell is within

    t(p) = (L/3 + sqrt(L^2/9 + 2 N p (1-p) L)) / N,   L = ln(2M / delta)

of its exact mass with probability at least 1 - delta. We declare delta = 1e-6.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from specd.core.outcome import RoundOutcome
from specd.core.round import speculative_round
from specd.core.state import Request
from specd.oracles.rig import Rig, fold

FAILURE_PROBABILITY = 1e-6


def bernstein_bound(p: float, n: int, cells: int, delta: float = FAILURE_PROBABILITY) -> float:
    log_term = math.log(2 * cells / delta)
    return (log_term / 3 + math.sqrt(log_term**2 / 9 + 2 * n * p * (1 - p) * log_term)) / n


def rng_accounting_error(c: RoundOutcome, rule: str = "maximal") -> str | None:
    """Recompute the draws a published round may consume from its decision alone: the token-wise
    rule reads the tests up to the first rejection, block verification all k of them."""
    terminal = 0 if c.terminal_kind == "stop" else 1
    accepted_emitted = len(c.emitted) - terminal
    expected_tests = c.k if rule == "block" else accepted_emitted + (1 if c.terminal_kind == "correction" else 0)
    delta = tuple(a - b for a, b in zip(c.rng_after, c.rng_before))
    sampled = delta[1] > 0 or delta[2] > 0 or c.reached_acceptance_tests > 0
    expected = (c.proposal_draws, expected_tests, terminal) if sampled else (c.proposal_draws, 0, 0)
    if delta != expected or c.proposal_draws not in (0, c.k):
        return (
            f"{c.round_id}: stream deltas (proposal, acceptance, terminal) = {delta}, "
            f"expected {expected} for A={c.accepted}, k={c.k}, terminal={c.terminal_kind}"
        )
    return None


@dataclass
class MonteCarloResult:
    samples: int
    empirical: dict[tuple[int, ...], float]
    rounds: int
    accounting_errors: list[str] = field(default_factory=list)
    audit_errors: list[str] = field(default_factory=list)
    published_trace: list[tuple] = field(default_factory=list)  # (request, round, output, cache, frontier)


def run_monte_carlo(
    rig: Rig, horizon: int, samples: int, seed: int, mixed_k: bool = True, audit: bool = False, trace: bool = False
) -> MonteCarloResult:
    engine = rig.engine()
    requests = [
        Request(f"mc{i}", rig.prompt, horizon, seed=seed, k=(1 + i % rig.k) if mixed_k else rig.k)
        for i in range(samples)
    ]
    session = engine.start(requests)
    result = MonteCarloResult(samples, {}, 0)
    while not session.done:
        commits = speculative_round(session)
        result.rounds += len(commits)
        for c in commits:
            err = rng_accounting_error(c, rig.rule)
            if err:
                result.accounting_errors.append(err)
        if audit:
            result.audit_errors.extend(audit_session(rig, session))
        if trace:
            for s in session.states():
                result.published_trace.append((s.request_id, s.rounds, s.output, s.cache_tokens, s.frontier))
    counts = Counter(s.new_tokens for s in session.states())
    result.empirical = {seq: n / samples for seq, n in counts.items()}
    return result


def audit_session(rig: Rig, session) -> list[str]:
    """Independent checks of the published state against the physical caches."""
    errors = []
    draft_caches = session.draft_cache.kv_caches()
    for s in session.live():  # finished requests have left the caches
        physical = session.cache.committed(s.slot)
        if s.cache_tokens != physical:
            errors.append(f"{s.request_id}: published cache {s.cache_tokens} != physical cache {physical}")
        if s.cache_tokens != s.output[:-1]:
            errors.append(f"{s.request_id}: committed K/V {s.cache_tokens} is not output[:-1] {s.output[:-1]}")
        if session.cache.temporary(s.slot):
            errors.append(f"{s.request_id}: temporary K/V rows survived publication")
        expected_proc = fold(rig.target_policy.initial_state(s.output[: s.prompt_len]), s.new_tokens)
        if s.target_proc != expected_proc:
            errors.append(f"{s.request_id}: target processor state is not the fold over the published output")
        for draft_cache in draft_caches:
            draft_rows = draft_cache.committed(s.slot)
            if s.output[: len(draft_rows)] != draft_rows:
                errors.append(f"{s.request_id}: draft cache {draft_rows} holds rows that are not published output")
    return errors
