"""The engine: a run's components and settings, and the loop over rounds.

One round is ``specd.core.round.speculative_round`` (propose -> verify -> decide
-> commit); everything it touches between rounds lives in a ``DecodeSession``.
With ``NullProposer`` and k = 0 the same loop is target-only decoding.

Extension points. A run's behaviour can be changed only by replacing one of
these components (the failure lab breaks exactly one of them per variant; users
plug in their own proposers and samplers):

- ``proposer``: ``Proposer.propose`` / ``settle`` (specd.core.proposer);
- ``k_policy``: ``KPolicy.choose`` / ``observe``, how many drafts a request asks for (specd.core.kpolicy);
- ``sampler``: the methods of ``RejectionSampler`` (specd.core.sampler);
- ``layout``: the methods of ``FrontierLayout`` (specd.core.layouts);
- ``transaction_cls``: ``RoundTransaction.stage_processor`` (specd.core.transaction).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from specd.core.kpolicy import FixedK, KPolicy
from specd.core.layouts import FrontierLayout, make_layout
from specd.core.probability import check_backend
from specd.core.processors import SamplingPolicy
from specd.core.proposer import NullProposer, Proposer
from specd.core.records import AcceptanceRecord, RoundRecord
from specd.core.rng import Draws, stream_draws
from specd.core.sampler import RejectionSampler
from specd.core.state import Request, RequestState
from specd.core.stats import RunStats
from specd.core.transaction import FaultHook, RoundTransaction, SpeculativeCommit
from specd.errors import UsageError

PublishCallback = Callable[[RequestState, tuple[int, ...]], None]


@dataclass(frozen=True)
class EngineConfig:
    k: int = 4
    layout: str = "replay_frontier"
    backend: str = "max_shift"
    prob_dtype: torch.dtype = torch.float32
    eos_ids: frozenset[int] = frozenset()
    record_log: bool = True


@dataclass(frozen=True)
class RunResult:
    states: tuple[RequestState, ...]  # final state per request, in request order
    stats: RunStats
    commits: tuple[SpeculativeCommit, ...]
    acceptance: tuple[AcceptanceRecord, ...]
    rounds: tuple[RoundRecord, ...]

    def new_tokens(self) -> list[tuple[int, ...]]:
        return [s.new_tokens for s in self.states]


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
        fault_hook: FaultHook | None = None,
        k_policy: KPolicy | None = None,
    ):
        """``k_policy``: how many drafts each request asks for per round (default: ``config.k``)."""
        if config.k < 0:
            raise UsageError(f"k must be >= 0, got {config.k}")
        check_backend(config.backend)
        self.k_policy = k_policy or FixedK(config.k)
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
        self.fault_hook = fault_hook

    @classmethod
    def baseline(cls, target, target_policy: SamplingPolicy, config: EngineConfig = EngineConfig(), **kw):
        """Target-only decoding through the same loop (k = 0, no proposer)."""
        return cls(target, None, target_policy, replace(config, k=0), **{**kw, "k_policy": None})

    def k_for(self, state: RequestState) -> int:
        """Drafts to ask for this round: the request's own K, else the K policy's, within its
        budget (``RequestState.draft_budget``)."""
        k = self.k_policy.choose(state) if state.k is None else state.k
        return max(0, min(k, state.draft_budget))

    def start(self, requests: Sequence[Request] = (), draws: Draws = stream_draws):
        from specd.core.session import DecodeSession

        return DecodeSession(self, requests, draws)

    def run(
        self,
        requests: Sequence[Request],
        on_publish: PublishCallback | None = None,
        batch_size: int | None = None,
        on_finish: Callable[[RequestState], None] | None = None,
    ) -> RunResult:
        """Every request to its end; with ``batch_size``, continuous batching: at most that many
        decode together and the next join as others finish. A request's tokens do not depend on
        the batch size (its random streams are its own)."""
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"batch size must be >= 1, got {batch_size}")
        session = self.start()
        session.submit(requests)
        return session.run(on_publish, batch_size, on_finish)
