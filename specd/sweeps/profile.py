"""Acceptance profiles from files: a ledger fixture (YAML/JSON mapping) or an acceptance log.

The profile itself (``AcceptanceProfile``) lives in ``specd.policy.profile``.
"""

from __future__ import annotations

from specd.errors import InvalidFixture, OmitsTerminalToken
from specd.policy.profile import AcceptanceProfile, constant_profile, per_position_profile, profile_from_rates
from specd.traces.log import read_trace
from specd.traces.summary import summarize


def profile_from_trace(path: str) -> AcceptanceProfile:
    """Reach-conditioned alpha_j from an acceptance log (only reached proposals count)."""
    _, requests, _, rounds = read_trace(path)
    rates = summarize(requests, rounds)["overall"]["acceptance_by_position"]
    return profile_from_rates(rates, max(rates, default=0), f"trace:{path}")


def profile_from_mapping(data: dict) -> AcceptanceProfile:
    """YAML/JSON fixture: {alpha: 0.8} or {alphas: [...], rates: reach_conditioned} or {trace: path}."""
    if data.get("counts_terminal_token") is False or data.get("progress") == "accepted_only":
        raise OmitsTerminalToken(
            "the ledger must count the correction/bonus token: a round's progress is G = A + 1, not A"
        )
    keys = [k for k in ("alpha", "alphas", "trace") if k in data]
    if len(keys) != 1:
        raise InvalidFixture("a profile needs exactly one of: alpha, alphas, trace")
    if "alpha" in data:
        return constant_profile(data["alpha"])
    if "alphas" in data:
        return per_position_profile(data["alphas"], data.get("rates", "reach_conditioned"))
    return profile_from_trace(str(data["trace"]))
