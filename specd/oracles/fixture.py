"""The oracle's fixture: its configuration (every value checked once), the limits of what can be
enumerated, and the rigs it builds (the checked case, and the small one the failure lab runs on)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from specd.core.controls import check_bias, check_penalty, check_temperature
from specd.core.layouts import make_layout
from specd.core.probability import check_backend
from specd.core.processors import SamplingPolicy
from specd.core.rules import RULES
from specd.core.table_model import TableModel
from specd.core.tree_shape import parse_tree
from specd.errors import UsageError
from specd.oracles.rig import Rig

MAX_SEQUENCES = 100_000


MAX_DRAFT_PATHS = 20_000


MAX_SAMPLES = 200_000  # a batch of this many requests through the engine: about a minute


ORACLE_RULES = (*RULES, "both", "all")  # both: maximal and invariant; all: every rule


@dataclass(frozen=True)
class OracleConfig:
    vocab: int = 2
    k: int = 3
    seed: int = 0
    horizon: int | None = None  # default k + 1
    samples: int = 2000
    target_temperature: float = 1.0
    draft_temperature: float = 0.7
    target_bias: dict[int, float] = field(default_factory=dict)
    draft_bias: dict[int, float] = field(default_factory=dict)
    repetition_penalty: float | None = None
    layout: str = "replay_frontier"
    backend: str = "max_shift"
    prompt: tuple[int, ...] = (0, 1)
    lab: bool = True
    rule: str = "both"  # which rules' checks run: maximal, invariant, block, both (the first two) or all
    # The target's further controls (specd.core.processors), each stateful along the drafted branch:
    controls: dict = field(default_factory=dict)  # SamplingPolicy.build keywords: min_p, presence_penalty, ...
    # --tree: the tree shapes the tree checks run (specd.core.tree_shape), () the small defaults, ("none",) none
    tree: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Every value checked once, here: sizes, policies, and that the case can be enumerated."""
        if self.vocab < 2:
            raise UsageError(f"--vocab must be >= 2, got {self.vocab}")
        if self.rule not in ORACLE_RULES:
            raise UsageError(f"--rule takes {', '.join(ORACLE_RULES)}; got {self.rule!r}")
        if self.k < 1:
            raise UsageError(f"--k must be >= 1, got {self.k}")
        if self.horizon is not None and self.horizon < 1:
            raise UsageError(f"--horizon must be >= 1, got {self.horizon}")
        if not 0 <= self.samples <= MAX_SAMPLES:
            raise UsageError(f"--samples must be in 0..{MAX_SAMPLES}, got {self.samples}")
        check_temperature(self.target_temperature, "--target-temperature")
        check_temperature(self.draft_temperature, "--draft-temperature")
        check_penalty(self.repetition_penalty, "--repetition-penalty")
        SamplingPolicy.build(**self.controls)  # each control's own check, with its name
        check_bias(self.target_bias, "--target-bias", self.vocab)
        check_bias(self.draft_bias, "--draft-bias", self.vocab)
        make_layout(self.layout)
        if self.tree != ("none",):
            for spec in self.tree:  # each shape's own check, naming --tree
                if parse_tree(spec).dynamic:
                    raise UsageError(
                        f"--tree {spec}: the oracle enumerates static trees (branching like 3,2,1 or a choices file); "
                        "a dynamic tree's nodes are chosen by the draft's probabilities"
                    )
        check_backend(self.backend)
        # Compare logarithms: vocab ** k itself would take minutes to compute for k = 10**9.
        log_v = math.log(self.vocab)
        if self.effective_horizon * log_v > math.log(MAX_SEQUENCES) or self.k * log_v > math.log(MAX_DRAFT_PATHS):
            raise UsageError(
                f"case too large to enumerate: vocab^horizon = {self.vocab}^{self.effective_horizon} sequences and "
                f"vocab^k = {self.vocab}^{self.k} draft paths (limits {MAX_SEQUENCES} and {MAX_DRAFT_PATHS})"
            )

    @property
    def effective_horizon(self) -> int:
        return self.horizon if self.horizon is not None else self.k + 1


def build_rig(cfg: OracleConfig, lab: bool = False) -> Rig:
    v = min(cfg.vocab, LAB_MAX_VOCAB) if lab else cfg.vocab
    target = TableModel(v, seed=2 * cfg.seed + 1, name="target")
    draft = TableModel(v, seed=2 * cfg.seed + 2, name="draft")
    if lab:  # fixed policies that exercise every processor kind (documented in the report)
        target_policy = SamplingPolicy.build(temperature=0.9, logit_bias={0: 0.4}, repetition_penalty=1.5)
        draft_policy = SamplingPolicy.build(temperature=0.6, top_k=v - 1 if v >= 3 else None)
    else:
        target_policy = SamplingPolicy.build(
            temperature=cfg.target_temperature,
            logit_bias=cfg.target_bias,
            repetition_penalty=cfg.repetition_penalty,
            **cfg.controls,
        )
        draft_policy = SamplingPolicy.build(temperature=cfg.draft_temperature, logit_bias=cfg.draft_bias)
    # The lab's one-token prompt leaves tokens unseen, so a repetition state that
    # wrongly absorbs a rejected draft changes later rows.
    prompt = (0,) if lab else tuple(t % v for t in cfg.prompt)
    k = lab_k(cfg) if lab else cfg.k
    return Rig(target, draft, target_policy, draft_policy, k, prompt, cfg.layout, cfg.backend, torch.float64)


LAB_MAX_VOCAB = 3


LAB_MAX_K = 3


LAB_MC_SAMPLES = 64  # the lab's Monte Carlo samples (its state audits run on them)


def lab_k(cfg: OracleConfig) -> int:
    """The lab needs a position after a rejection to exist (K >= 2); catching a known-wrong
    variant needs no bigger case than V = 3, K = 3, however large the checked one is."""
    return min(max(cfg.k, 2), LAB_MAX_K)
