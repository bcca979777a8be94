"""A rig: the engine's components for one oracle fixture (table models, policies, K, prompt).

Failure-lab variants are rigs with exactly one component replaced through an
extension point; production code carries no switches for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.layouts import FrontierLayout, make_layout
from specd.core.processors import PolicyState, SamplingPolicy
from specd.core.proposer import ModelProposer, NgramProposer, Proposer
from specd.core.sampler import RejectionSampler
from specd.core.shared_body import SharedBodyProposer
from specd.core.table_model import TableModel
from specd.core.transaction import RoundTransaction
from specd.core.tree_shape import TreeShape
from specd.policy.kpolicy import KPolicy


@dataclass(frozen=True)
class Rig:
    target: TableModel
    draft: TableModel
    target_policy: SamplingPolicy
    draft_policy: SamplingPolicy
    k: int
    prompt: tuple[int, ...]
    layout_name: str = "replay_frontier"
    backend: str = "max_shift"
    prob_dtype: torch.dtype = torch.float64
    sampler_cls: type[RejectionSampler] = RejectionSampler
    layout_factory: Callable[[], FrontierLayout] | None = None
    # default: ModelProposer(draft, draft_policy); a list: several sources (specd.core.sources)
    proposer_factory: Callable[[Rig], Proposer | list[Proposer]] | None = None
    transaction_cls: type[RoundTransaction] = RoundTransaction
    eos_ids: frozenset[int] = field(default_factory=frozenset)
    k_policy_factory: Callable[[Rig], KPolicy] | None = None  # default: the fixed K above
    draft_stop: float = 0.0  # the model proposer's --draft-stop
    rule: str = "maximal"  # or "invariant" (specd.core.gumbel)
    tree: TreeShape | None = None  # the tree a round drafts (specd.core.tree_shape; None: a chain of k)

    @property
    def vocab(self) -> int:
        return self.target.vocab_size

    def layout(self) -> FrontierLayout:
        return self.layout_factory() if self.layout_factory else make_layout(self.layout_name)

    def engine(self, record_log: bool = False) -> SpeculativeEngine:
        config = EngineConfig(
            k=self.k,
            layout=self.layout_name,
            backend=self.backend,
            prob_dtype=self.prob_dtype,
            eos_ids=self.eos_ids,
            record_log=record_log,
            rule=self.rule,
            tree=self.tree,
        )
        return SpeculativeEngine(
            self.target,
            self.proposer(),
            self.target_policy,
            config,
            sampler=self.sampler_cls(),
            layout=self.layout(),
            transaction_cls=self.transaction_cls,
            k_policy=self.k_policy_factory(self) if self.k_policy_factory else None,
        )

    def proposer(self) -> Proposer | list[Proposer]:
        if self.proposer_factory is not None:
            return self.proposer_factory(self)
        return ModelProposer(self.draft, self.draft_policy, self.draft_stop)

    def but(self, **changes) -> Rig:
        return replace(self, **changes)


def fold(state: PolicyState, tokens) -> PolicyState:
    for t in tokens:
        state = state.advance(t)
    return state


NGRAM_N = 2


def ngram_rig(rig: Rig) -> Rig:
    """The same fixture with prompt-lookup drafting and a prompt that repeats itself."""
    v = rig.vocab
    prompt = tuple(i % v for i in range(2 * v)) + (0,)
    return rig.but(proposer_factory=lambda r: NgramProposer(NGRAM_N, r.vocab), prompt=prompt)


class RestrictedTable(TableModel):
    """The table a shared-body draft reads (the reference's q): the target's raw logits at the
    draft vocabulary ``columns``, -inf elsewhere."""

    def __init__(self, target: TableModel, columns: tuple[int, ...]):
        super().__init__(target.vocab_size, name="restricted")
        self.target, self.columns = target, tuple(columns)
        self.identity = f"restricted({target.identity}, {list(columns)})"

    def raw_logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        row = torch.full((self.vocab_size,), float("-inf"), dtype=self.dtype)
        row[list(self.columns)] = self.target.raw_logits(prefix)[list(self.columns)]
        return row


def shared_body_columns(vocab: int) -> tuple[int, ...]:
    """The oracle's draft vocabulary: the lower half of the tokens (at least one), so the upper
    half is reachable only by a correction or bonus token."""
    return tuple(range(max(1, vocab // 2)))


def shared_body_rig(rig: Rig, proposer_cls=None) -> Rig:
    """The fixture with the shared-body draft (specd.core.shared_body): the target's own rows, its
    head restricted to ``shared_body_columns``; the reference's q is the RestrictedTable's."""
    columns = shared_body_columns(rig.vocab)
    cls = proposer_cls or SharedBodyProposer
    return rig.but(
        draft=RestrictedTable(rig.target, columns),
        proposer_factory=lambda r: cls(r.target, columns, r.draft_policy, r.draft_stop),
    )


def multi_source_rig(rig: Rig, k_policy_factory) -> Rig:
    """The fixture with two draft sources, a lookup (ngram:2) first and the model draft, over a
    prompt that repeats itself (so the lookup matches on some paths and not on others)."""
    ngram = ngram_rig(rig)
    return ngram.but(
        proposer_factory=lambda r: [NgramProposer(NGRAM_N, r.vocab), ModelProposer(r.draft, r.draft_policy)],
        k_policy_factory=k_policy_factory,
    )
