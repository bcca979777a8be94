"""The engine: a run's components and settings. ``start`` opens a session, ``run`` decodes
every request to its end through ``specd.core.round`` (propose -> verify -> decide ->
commit; the loop over rounds is ``round.decode``). With no proposer and k = 0 the same
loop is target-only decoding.

Extension points. A run's behaviour can be changed only by replacing one of
these components (the failure lab breaks exactly one of them per variant; users
plug in their own proposers and samplers):

- ``proposer``: one ``Proposer`` or a list of them, the draft sources (``Proposer.propose`` /
  ``settle`` / ``available``, specd.core.proposer; several are held by a SourceSet,
  specd.core.sources);
- ``k_policy``: any object with ``plan(state, sources) -> Plan`` (specd.policy.kpolicy): the
  source a request drafts from and how many drafts it asks for; without one every request
  asks for ``config.k`` from the first source that can propose;
- ``sampler``: the methods of ``RejectionSampler`` (specd.core.sampler), the math of every rule
  (the rule object, specd.core.rules, is chosen by ``config.rule`` and the target's temperature);
- ``layout``: the methods of ``FrontierLayout`` (specd.core.layouts);
- ``transaction_cls``: ``RoundTransaction.stage_processor`` and ``checkpoint`` (specd.core.transaction).

Observers: every published round's ``RoundTiming`` (specd.core.records) goes to each
callable in ``observers`` (the measured costs of -k auto subscribe there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from specd.core.layouts import FrontierLayout, make_layout
from specd.core.probability import check_backend
from specd.core.processors import SamplingPolicy
from specd.core.proposer import Proposer
from specd.core.record import record
from specd.core.records import RoundTiming, RunResult
from specd.core.rng import Draws, stream_draws
from specd.core.round import PublishCallback, decode
from specd.core.rules import rule_for
from specd.core.sampler import RejectionSampler
from specd.core.session import DecodeSession
from specd.core.sources import Plan, SourceSet, first_available
from specd.core.state import Request, RequestState
from specd.core.stops import StopStrings
from specd.core.transaction import RoundTransaction
from specd.core.tree_shape import TreeShape
from specd.errors import UsageError


def refuse_tree(config: EngineConfig, sources: SourceSet, target) -> None:
    """A token tree needs a rule with a tree form (not ``block``), sources that draft trees (not the
    shared-body draft, which drafts into the target's own cache a chain at a time), and a target and
    model drafts whose attention takes a tree's mask: each refused in one line."""
    if config.rule == "block":
        raise UsageError(
            "--tree: block verification judges a chain as a block and has no tree form here; use --rule maximal "
            "or invariant with a tree"
        )
    shared = [s.identity for s in sources.sources if s.shares_target_cache]
    if shared:
        raise UsageError(f"--tree: {shared[0].split('(')[0]} drafts chains only (it drafts into the target's cache)")
    for model in (target, *sources.models):
        why = getattr(model, "tree_refusal", None)
        if why:
            raise UsageError(f"--tree: {why}")


@record
class EngineConfig:
    k: int = 4
    layout: str = "replay_frontier"
    backend: str = "max_shift"
    prob_dtype: torch.dtype = torch.float32
    eos_ids: frozenset[int] = frozenset()
    record_log: bool = True
    rule: str = "maximal"  # or "invariant" (specd.core.rules); a greedy target decides by the greedy rule
    tree: TreeShape | None = None  # the tree each drafting request drafts (specd.core.tree_shape); None: chains
    # Launch a round before the one in flight is read where that can be (specd.core.round.launch_ahead):
    # None (auto) where the target runs on CUDA, where it hides the host's work behind the device's.
    ahead: bool | None = None


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
        self.proposer = SourceSet.of(proposer, target.vocab_size)  # one or several draft sources
        for source in self.proposer.sources:
            if source.vocab_size != target.vocab_size:
                raise UsageError(
                    f"draft and target disagree on the event space: draft rows have width "
                    f"{source.vocab_size}, target rows {target.vocab_size}"
                )
        self.target_policy = target_policy
        self.config = config
        self.sampler = sampler or RejectionSampler()
        self.rule = rule_for(config.rule, target_policy.greedy, self.sampler)  # how every round decides
        self.layout = layout or make_layout(config.layout)
        shared = [s.identity for s in self.proposer.sources if s.shares_target_cache]
        if shared and config.layout != "replay_frontier":
            raise UsageError(
                f"{shared[0].split('(')[0]} drafts the frontier into the target's cache, which the "
                f"{config.layout} layout already holds: use --layout replay_frontier"
            )
        if config.tree is not None and not (config.tree.is_chain and config.tree.drawn is None):
            refuse_tree(config, self.proposer, target)
        if getattr(k_policy, "tree_budget", 0):  # -k auto may choose trees (--tree auto)
            refuse_tree(config, self.proposer, target)
        self.transaction_cls = transaction_cls
        self.observers = tuple(observers)

    @classmethod
    def baseline(cls, target, target_policy: SamplingPolicy, config: EngineConfig = EngineConfig(), **kw):
        """Target-only decoding through the same loop (k = 0, no proposer)."""
        return cls(target, None, target_policy, replace(config, k=0), **{**kw, "k_policy": None})

    def plan_for(self, state: RequestState, caches) -> Plan:
        """This round's source and K for a request: the request's own K from the first source that
        can propose, else the K policy's plan (else the config's K), K within the request's budget
        (``RequestState.draft_budget``). A source with nothing to propose is not offered."""
        offers = self.proposer.offers(state, caches)
        if state.k is not None or self.k_policy is None:
            plan = first_available(offers, self.config.k if state.k is None else state.k)
        else:
            plan = self.k_policy.plan(state, offers)
        k = max(0, min(plan.k, state.draft_budget))
        shape = plan.shape if plan.shape is not None else self.config.tree
        also = plan.also
        if shape is not None and k:
            shape = shape.cut(k)
            k = shape.depth
            if shape.is_chain and shape.drawn is None:
                shape = None  # a chain shape is the plain chain of k
            elif plan.shape is None and not shape.dynamic and shape.children(()) > 1:
                also = tuple(o.index for o in offers if o.index != plan.source)  # the root's other children
        return Plan(plan.source, k, plan.match, shape, also) if k else Plan(None, 0)

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
