"""Acceptance profiles: the reach-conditioned acceptance alpha_j = Pr(draft j accepted | drafts
1..j-1 accepted) per position, a constant or a per-position list. Bad values are refused with
named errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specd.errors import AlphaOutOfRange, InvalidFixture, NotReachConditioned, shown


@dataclass(frozen=True)
class AcceptanceProfile:
    alphas: tuple[float, ...]  # reach-conditioned alpha_1.. ; a constant profile has one entry
    constant: bool
    source: str  # "constant", "per-position", "trace:<path>"

    def alpha(self, j: int) -> float:
        """alpha_j for 1-based position j."""
        if self.constant:
            return self.alphas[0]
        if j > len(self.alphas):
            raise InvalidFixture(
                f"the profile gives alpha for positions 1..{len(self.alphas)} only; K = {j} needs position {j}"
            )
        return self.alphas[j - 1]

    def describe(self) -> dict:
        return {"source": self.source, "alphas": list(self.alphas), "constant": self.constant}


def check_alphas(values) -> tuple[float, ...]:
    """Every alpha_j a number in [0, 1]; at least one."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise InvalidFixture(f"alphas must be a list of numbers, got {shown(values)}")
    out = []
    for i, a in enumerate(values, 1):
        if isinstance(a, bool) or not isinstance(a, (int, float)):
            raise AlphaOutOfRange(f"alpha_{i} = {shown(a)} is not a number")
        a = float(a)
        if math.isnan(a) or not 0.0 <= a <= 1.0:
            raise AlphaOutOfRange(f"alpha_{i} = {a} is outside [0, 1]")
        out.append(a)
    if not out:
        raise InvalidFixture("an acceptance profile needs at least one alpha")
    return tuple(out)


def constant_profile(alpha: float) -> AcceptanceProfile:
    return AcceptanceProfile(check_alphas([alpha]), True, "constant")


def per_position_profile(alphas, rates: str = "reach_conditioned") -> AcceptanceProfile:
    """``rates`` names what the numbers are; only reach-conditioned rates enter the ledger."""
    if rates == "per_proposal":
        raise NotReachConditioned(
            "per-proposal acceptance rates average over rounds that never reached the position; the ledger "
            "needs reach-conditioned alpha_j (rates: reach_conditioned) or a trace log to estimate them"
        )
    if rates != "reach_conditioned":
        raise InvalidFixture(f"unknown rate kind {shown(rates)}; use reach_conditioned")
    return AcceptanceProfile(check_alphas(alphas), False, "per-position")


def profile_from_rates(alpha_by_position: dict[int, float | None], k: int, source: str) -> AcceptanceProfile:
    """alpha_1..alpha_k from measured reach-conditioned rates (None where no round reached j): a
    position never reached (a draft that always failed before it) takes the last estimate."""
    alphas: list[float] = []
    for j in range(1, k + 1):
        alpha = alpha_by_position.get(j)
        alphas.append(alpha if alpha is not None else (alphas[-1] if alphas else 0.0))
    if not any(alpha_by_position.get(j) is not None for j in range(1, k + 1)):
        raise InvalidFixture(f"{source}: no reached proposal at any position; cannot estimate alpha_j")
    return AcceptanceProfile(check_alphas(alphas), False, source)
