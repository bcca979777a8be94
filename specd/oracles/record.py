"""What every oracle check reports, and the tolerance of the exact checks: defined once."""

from __future__ import annotations

from dataclasses import dataclass, field

EXACT_TOLERANCE = 1e-12  # float64 enumeration: the joints must agree to this, and each must sum to 1

# A check (passed None) or a failure-lab variant (caught None) that nothing at this size can exercise
# begins its detail with this, then says why.
NOT_APPLICABLE = "not applicable at this size: "


@dataclass
class Check:
    """One check's verdict. ``passed`` None: not applicable to what is checked. ``findings``: named
    defects it found; ``counterexample``: the smallest case that shows one; ``empirical``: Monte
    Carlo frequencies, for the report's sequence table."""

    name: str
    passed: bool | None
    figures: dict
    detail: str = ""
    findings: list[str] = field(default_factory=list)
    counterexample: dict | None = None
    empirical: dict | None = None

    def as_dict(self, with_findings: bool = False) -> dict:
        doc = {"name": self.name, "passed": self.passed, "figures": self.figures, "detail": self.detail}
        return {**doc, "findings": self.findings} if with_findings else doc


def max_abs_diff(a: dict, b: dict):
    """The largest difference between two joints over every sequence either holds (floats or Fractions)."""
    return max((abs(a.get(s, 0) - b.get(s, 0)) for s in set(a) | set(b)), default=0.0)


def exact_check(name: str, reference: dict, joint: dict, detail: str) -> Check:
    """Equal joints, and both whole: a joint that lost its mass (NaN rows, every branch
    refused) must fail even where each remaining cell happens to agree."""
    diff = max_abs_diff(reference, joint)
    mass, reference_mass = sum(joint.values()), sum(reference.values())
    whole = abs(mass - 1.0) <= EXACT_TOLERANCE and abs(reference_mass - 1.0) <= EXACT_TOLERANCE
    return Check(
        name,
        diff <= EXACT_TOLERANCE and whole and len(reference) > 0,
        {
            "max_abs_diff": diff,
            "tolerance": EXACT_TOLERANCE,
            "sequences": len(reference),
            "total_mass": mass,
            "target_total_mass": reference_mass,
        },
        detail if whole else f"total mass {mass!r} (target {reference_mass!r}) is not 1: " + detail,
    )
