"""The engine: a run's components and settings. ``start`` opens a session, ``run`` decodes
every request to its end through ``specd.core.round`` (propose -> verify -> decide ->
commit; the loop over rounds is ``round.decode``). With no proposer and k = 0 the same
loop is target-only decoding.

Extension points. A run's behaviour can be changed only by replacing one of
these components (the failure lab breaks exactly one of them per variant; users
plug in their own proposers and samplers):

- ``proposer``: ``Proposer.propose`` / ``settle`` (specd.core.proposer);
- ``k_policy``: any object with ``choose(state) -> K`` (specd.policy.kpolicy), how many
  drafts a request asks for; without one every request asks for ``config.k``;
- ``sampler``: the methods of ``RejectionSampler`` (specd.core.sampler);
- ``layout``: the methods of ``FrontierLayout`` (specd.core.layouts);
- ``transaction_cls``: ``RoundTransaction.stage_processor`` and ``checkpoint`` (specd.core.transaction).

Observers: every published round's ``RoundTiming`` (specd.core.records) goes to each
callable in ``observers`` (the measured costs of -k auto subscribe there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from specd.core.layouts import FrontierLayout, make_layout
from specd.core.probability import check_backend
from specd.core.processors import SamplingPolicy
from specd.core.proposer import NullProposer, Proposer
from specd.core.records import RoundTiming, RunResult
from specd.core.rng import Draws, stream_draws
from specd.core.round import PublishCallback, decode
from specd.core.sampler import RejectionSampler
from specd.core.session import DecodeSession
from specd.core.state import Request, RequestState
from specd.core.stops import StopStrings
from specd.core.transaction import RoundTransaction
from specd.errors import UsageError


@dataclass(frozen=True)
class EngineConfig:
    k: int = 4
    layout: str = "replay_frontier"
    backend: str = "max_shift"
    prob_dtype: torch.dtype = torch.float32
    eos_ids: frozenset[int] = frozenset()
    record_log: bool = True


class SpeculativeEngine:
    def __init__(
        self,
        target,
        proposer: Proposer | None,
        target_policy: SamplingPolicy,
        config: EngineConfig = EngineConfig(),
        *,
        sampler: RejectionSampler | None = None,
        layout: FrontierLayout | None = None,
        transaction_cls: type[RoundTransaction] = RoundTransaction,
        k_policy=None,
        observers: Sequence[Callable[[RoundTiming], None]] = (),
    ):
        if config.k < 0:
            raise UsageError(f"k must be >= 0, got {config.k}")
        check_backend(config.backend)
        self.k_policy = k_policy
        self.target = target
        self.proposer = proposer if proposer is not None else NullProposer(target.vocab_size)
        if self.proposer.vocab_size != target.vocab_size:
            raise UsageError(
                f"draft and target disagree on the event space: draft rows have width "
                f"{self.proposer.vocab_size}, target rows {target.vocab_size}"
            )
        self.target_policy = target_policy
        self.config = config
        self.sampler = sampler or RejectionSampler()
        self.layout = layout or make_layout(config.layout)
        self.transaction_cls = transaction_cls
        self.observers = tuple(observers)

    @classmethod
    def baseline(cls, target, target_policy: SamplingPolicy, config: EngineConfig = EngineConfig(), **kw):
        """Target-only decoding through the same loop (k = 0, no proposer)."""
        return cls(target, None, target_policy, replace(config, k=0), **{**kw, "k_policy": None})

    def k_for(self, state: RequestState) -> int:
        """Drafts to ask for this round: the request's own K, else the K policy's (else the
        config's), within its budget (``RequestState.draft_budget``)."""
        if state.k is not None:
            k = state.k
        else:
            k = self.k_policy.choose(state) if self.k_policy is not None else self.config.k
        return max(0, min(k, state.draft_budget))

    def publish_timing(self, timing: RoundTiming) -> None:
        for observe in self.observers:
            observe(timing)

    def start(self, requests: Sequence[Request] = (), draws: Draws = stream_draws) -> DecodeSession:
        return DecodeSession(self, requests, draws)

    def run(
        self,
        requests: Sequence[Request],
        on_publish: PublishCallback | None = None,
        batch_size: int | None = None,
        on_finish: Callable[[RequestState], None] | None = None,
        stop_strings: StopStrings | None = None,
    ) -> RunResult:
        """Every request to its end; with ``batch_size``, continuous batching: at most that many
        decode together and the next join as others finish. A request's tokens do not depend on
        the batch size (its random streams are its own)."""
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"batch size must be >= 1, got {batch_size}")
        session = self.start()
        session.submit(requests)
        return decode(session, on_publish, batch_size, on_finish, stop_strings)
