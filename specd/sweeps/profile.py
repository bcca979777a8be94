"""Acceptance profiles from files: a ledger fixture (YAML/JSON mapping) or an acceptance log.

The profile itself (``AcceptanceProfile``) lives in ``specd.policy.profile``.
"""

from __future__ import annotations

from dataclasses import replace as dataclass_replace

from specd.core.outcome import walk_of
from specd.core.state import History, tested_ranks
from specd.errors import InvalidFixture, OmitsTerminalToken
from specd.policy.autok import request_tree_profile, sibling_prior
from specd.policy.profile import (
    AcceptanceProfile,
    check_alphas,
    constant_profile,
    per_position_profile,
    profile_from_rates,
)
from specd.policy.trees import TreeProfile
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


def tree_profile(profile: AcceptanceProfile, siblings, depth: int, ranks: int) -> TreeProfile:
    """The acceptance by depth and rank a sweep prices trees with: rank 0 at depth j is the chain's
    alpha_j; rank r >= 1 is ``siblings[r-1]`` at every depth (--sibling-alphas: the r-th child kept
    given the earlier ones refused; past the list, never), or without them -k auto's prior before a
    request's first tree round, ``sibling_prior(r)`` alpha_j."""
    if siblings is not None:
        siblings = check_alphas(siblings)
    rows = []
    for j in range(1, depth + 1):
        first = profile.alpha(j)
        if siblings is None:
            rows.append(tuple(first * sibling_prior(r) for r in range(ranks)))
        else:
            rows.append((first, *siblings[: ranks - 1]))
    return TreeProfile(tuple(rows), "sibling alphas" if siblings is not None else "-k auto's prior by rank")


def tree_profile_from_trace(path: str, depth: int, ranks: int) -> TreeProfile:
    """The acceptance by depth and rank of an acceptance log's rounds (a tree round's walk from its
    parents and accepted path, a chain's draft j as rank 0 at depth j), read as -k auto reads one
    request's (``request_tree_profile``: a cell no round tested takes its prior)."""
    _, _, _, rounds = read_trace(path)
    counts: tuple = ()
    for n, row in enumerate(rounds, 1):
        parents, accepted = row.get("parents"), row["accepted"]
        try:
            walk = walk_of(row["k"], accepted, parents, row.get("path") if parents is not None else None)
        except (TypeError, ValueError, IndexError, KeyError):
            raise InvalidFixture(
                f"{path}: round {n} has a tree ({parents!r}) its accepted path does not walk"
            ) from None
        counts = tested_ranks(counts, walk)
    return dataclass_replace(request_tree_profile(History(ranks=counts), depth, ranks), source=f"trace:{path}")
