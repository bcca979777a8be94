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
from specd.oracles.reference import Joint, Reference, target_joint
from specd.oracles.rig import Rig


def eos_token(ref: Reference, prompt: tuple[int, ...]) -> int:
    """The token drafted first and kept most often at the prompt: argmax of min(p, q) there (the
    lowest such token at a tie)."""
    p, q = ref.p(prompt), ref.q(prompt)
    return max(range(len(p)), key=lambda x: (min(p[x], q[x]), -x))


def with_eos(rig: Rig, ref: Reference | None = None) -> Rig:
    """``rig`` with ``eos_token`` as its stop token."""
    return rig.but(eos_ids=frozenset({eos_token(ref or Reference(rig), rig.prompt)}))


def stopped_at(text: tuple[int, ...], eos: frozenset[int]) -> tuple[int, ...]:
    """``text`` up to and including its first token of ``eos`` (all of it where it has none)."""
    return next((text[: i + 1] for i, token in enumerate(text) if token in eos), text)


def stopped_target(rig: Rig, horizon: int, ref: Reference | None = None) -> tuple[Rig, int, Joint, float]:
    """(``rig`` with ``eos_token`` as its stop token, that token, the target's chain over ``horizon``
    tokens stopped at it, the mass of the texts that stop)."""
    ref = ref or Reference(rig)
    stopped = with_eos(rig, ref)
    (eos,) = stopped.eos_ids
    reference = target_joint(stopped, horizon, ref=ref)
    return stopped, eos, reference, sum(mass for seq, mass in reference.items() if seq and seq[-1] == eos)


def never_emitted(name: str, eos: int) -> Check:
    """A stop-token check not applicable: the target never emits the EOS within the horizon (the check
    would prove nothing of stopping)."""
    figures = {"eos": eos, "target_stop_mass": 0.0}
    return Check(name, None, figures, f"{NOT_APPLICABLE}the target never emits token {eos} here")


def check_eos(rig: Rig, horizon: int) -> Check:
    """The exact joint with a stop token, against the target's chain stopped at it (``never_emitted``
    where the target does not emit it)."""
    ref = Reference(rig)
    stopped, eos, reference, stops = stopped_target(rig, horizon, ref)
    if stops == 0:
        return never_emitted("exact_joint_eos", eos)
    detail = (
        f"token {eos} is the EOS (the first draft's likeliest kept token): a text ends at it, an accepted draft "
        "included; speculative rounds to the horizon from each published successor"
    )
    check = exact_check("exact_joint_eos", reference, speculative_joint(stopped, horizon, "rounds", ref), detail)
    return Check(check.name, check.passed, {"eos": eos, "target_stop_mass": stops, **check.figures}, check.detail)
