"""A stop token in the exact check (``exact_joint_eos``): EOS ends a request wherever it lands, an
accepted draft included (the drafts after it dropped, no correction or bonus after it), and the
emitted joint is the target's chain stopped at its first EOS.

Every other check runs without a stop token, so every text runs to the horizon. Here one token of
the vocabulary is the EOS: the one a round's first draft most often proposes and keeps at the prompt
(the largest min(p, q) there), so that an EOS accepted ahead of further drafts is as likely as the
tables make it. Speculative rounds run to the horizon from each published successor, so an EOS in a
later round stops the text too.
"""

from __future__ import annotations

from specd.oracles.engine.exact import speculative_joint
from specd.oracles.record import NOT_APPLICABLE, Check, exact_check
from specd.oracles.reference import Reference, target_joint
from specd.oracles.rig import Rig


def eos_token(ref: Reference, prompt: tuple[int, ...]) -> int:
    """The token drafted first and kept most often at the prompt: argmax of min(p, q) there (the
    lowest such token at a tie)."""
    p, q = ref.p(prompt), ref.q(prompt)
    return max(range(len(p)), key=lambda x: (min(p[x], q[x]), -x))


def with_eos(rig: Rig, ref: Reference | None = None) -> Rig:
    """``rig`` with ``eos_token`` as its stop token."""
    return rig.but(eos_ids=frozenset({eos_token(ref or Reference(rig), rig.prompt)}))


def check_eos(rig: Rig, horizon: int) -> Check:
    """The exact joint with a stop token, against the target's chain stopped at it. Not applicable where
    the target never emits the EOS within the horizon (the check would prove nothing of stopping)."""
    ref = Reference(rig)
    stopped = with_eos(rig, ref)
    (eos,) = stopped.eos_ids
    reference = target_joint(stopped, horizon, ref=ref)
    stops = sum(mass for seq, mass in reference.items() if seq and seq[-1] == eos)
    detail = (
        f"token {eos} is the EOS (the first draft's likeliest kept token): a text ends at it, an accepted draft "
        "included; speculative rounds to the horizon from each published successor"
    )
    if stops == 0:
        figures = {"eos": eos, "target_stop_mass": 0.0}
        return Check("exact_joint_eos", None, figures, f"{NOT_APPLICABLE}the target never emits token {eos} here")
    check = exact_check("exact_joint_eos", reference, speculative_joint(stopped, horizon, "rounds", ref), detail)
    return Check(check.name, check.passed, {"eos": eos, "target_stop_mass": stops, **check.figures}, check.detail)
