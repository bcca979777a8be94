"""How many drafts a request asks for in a round: the K policy.

The rule that keeps any K policy exact. A request's K for a round may depend on
what was committed before the round (its output and its own acceptance history)
and on facts about the machine (measured costs), never on the round's target rows
or on its acceptance and terminal uniforms. Within the round, the proposer may
stop drafting early on draft-side information only (``--draft-stop``: the draft's
largest probability at the next position). Both make the number of drafts a
stopping time of the draft process, decided before the target looks at any of
it, and the accept/reject/correction rule is exact for every such K: the emitted
tokens follow the target's law whatever K was.

Per request: a policy never reads another request's history, so given the same
cost table a request's K schedule, the draws it consumes and its tokens do not
depend on its batch-mates. Greedy output never depends on K at all.

K = 0 is a plain target step for that request: no drafts, the terminal token is
drawn from p.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specd.core.state import RequestState
from specd.errors import KScheduleMismatch, UsageError


@dataclass(frozen=True)
class RoundTiming:
    """What one round cost on this machine (seconds, wall clock, device-synchronized)."""

    batch: int  # requests in the round
    draft_seconds: float  # the proposer's whole turn
    draft_steps: int  # draft forward calls (0 for a proposer without a model)
    draft_first_tokens: int  # the most tokens the first draft call fed a row (> 2: catching up)
    draft_first_seconds: float  # that call's seconds (without a device sync: an estimate on CUDA)
    draft_rows: int  # requests that drafted (k > 0)
    max_k: int  # the longest draft in the round
    verify_seconds: float  # the target call(s)
    verify_rows: int  # tokens the verification call fed, all requests together
    other_seconds: float  # the rest of the round: sampling, staging, publication, cache commit


class KPolicy:
    """The interface: ``choose`` the drafts a request asks for (before the engine clamps it to
    the request's budget); ``observe`` each finished round's timing (machine facts only)."""

    name = "fixed"

    def choose(self, state: RequestState) -> int:
        raise NotImplementedError

    def observe(self, timing: RoundTiming) -> None:
        """Costs are shared by the run; the default policy has no use for them."""

    def describe(self) -> dict:
        return {"name": self.name}


class FixedK(KPolicy):
    """The same K every round (the request's own ``Request.k`` wins when set). ``costs``: where
    to report the rounds' timings (a run's shared cost estimates), if anywhere."""

    def __init__(self, k: int, costs=None):
        if k < 0:
            raise UsageError(f"k must be >= 0, got {k}")
        self.k = k
        self.costs = costs

    def choose(self, state: RequestState) -> int:
        return self.k

    def observe(self, timing: RoundTiming) -> None:
        if self.costs is not None:
            self.costs.observe(timing)

    def describe(self) -> dict:
        return {"name": "fixed", "k": self.k}


class ScheduleK(KPolicy):
    """Replay recorded K schedules (request id -> K per round), so a sampled run that chose K
    from measured time is reproduced token for token anywhere."""

    name = "schedule"

    def __init__(self, schedules: Mapping[str, tuple[int, ...]]):
        self.schedules = dict(schedules)

    def choose(self, state: RequestState) -> int:
        schedule = self.schedules.get(state.request_id)
        if schedule is None:
            raise KScheduleMismatch(f"--k-schedule has no schedule for request {state.request_id!r}")
        if state.rounds >= len(schedule):
            raise KScheduleMismatch(
                f"--k-schedule: request {state.request_id!r} needs a round {state.rounds + 1} its recorded "
                f"schedule ({len(schedule)} rounds) does not have: another prompt, model or budget than the "
                "recorded run's"
            )
        return schedule[state.rounds]

    def describe(self) -> dict:
        return {"name": "schedule", "requests": len(self.schedules)}
