"""The round coordinate M_round = (I_T, I_D, Omega, Pi_T, Pi_D, R, S_0, Lambda) of 0x01A.

It is serialized canonically (sorted keys, no whitespace) and hashed for
provenance. Proposals and verifications carry the coordinate they were computed
at; one whose coordinate differs from the round's in any field is refused with
StaleCoordinate naming that field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields

from specd.errors import StaleCoordinate


@dataclass(frozen=True)
class RoundCoordinate:
    target_model: str  # I_T: weights, config, dtype, backend path
    draft_model: str  # I_D
    event_space: str  # Omega: vocabulary width and token mapping
    target_policy: str  # Pi_T: canonical JSON of the ordered target processors
    draft_policy: str  # Pi_D
    rng: tuple  # R: (seed, request id, stream counters)
    start_state: tuple  # S_0: (request id, generation, output tokens, committed cache length)
    layout: str  # Lambda

    def as_dict(self) -> dict:
        return {
            "target_model": self.target_model,
            "draft_model": self.draft_model,
            "event_space": self.event_space,
            "target_policy": json.loads(self.target_policy),
            "draft_policy": json.loads(self.draft_policy),
            "rng": {"seed": self.rng[0], "request_id": self.rng[1], "counters": list(self.rng[2])},
            "start_state": {
                "request_id": self.start_state[0],
                "generation": self.start_state[1],
                "output": list(self.start_state[2]),
                "cache_length": self.start_state[3],
            },
            "layout": self.layout,
        }

    def canonical(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))

    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()


COORDINATE_FIELDS = tuple(f.name for f in fields(RoundCoordinate))


def canonical_policy(description: dict) -> str:
    return json.dumps(description, sort_keys=True, separators=(",", ":"))


def ensure_current(current: RoundCoordinate, recorded: RoundCoordinate, what: str) -> None:
    """Raise StaleCoordinate(field) unless ``recorded`` is the round's coordinate."""
    if current == recorded:
        return
    for name in COORDINATE_FIELDS:
        mine, theirs = getattr(current, name), getattr(recorded, name)
        if mine != theirs:
            raise StaleCoordinate(name, what, mine, theirs)
