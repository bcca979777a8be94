"""The failure lab's tree bugs as engine variants: what other engines shipped or argued about in
tree verification, each rebuilt on specd's engine with one component replaced through an extension
point (the sampler, the proposer, the layout, or the target model's attention mask), each caught by
name by the tree checks (``tree_checks``).

The lab runs on its own small case: V = 3 (``TREE_LAB_VOCAB``: with two tokens a refused child
leaves the next one the only token, so SpecInfer's residual and the exact one agree), the lab's
fixed policies (``fixture.build_rig(lab=True)``) and the trees of ``--tree`` cut to
``TREE_LAB_DEPTH`` levels and ``TREE_LAB_NODES`` nodes, or by default ``TREE_LAB_SHAPES``; each
variant under the rule and construction its engine used. A variant that is provably invisible on
the trees asked for (a sibling bug on trees without siblings) is reported as not applicable,
with the reason, never as caught or missed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from specd.core.gumbel import race_tokens, request_key
from specd.core.layouts import make_layout
from specd.core.model import RowInput
from specd.core.proposer import ModelProposer
from specd.core.rows import packed
from specd.core.sampler import Decision, RejectionSampler, Tested
from specd.core.table_model import TableModel
from specd.core.tree import DraftTree
from specd.core.tree_shape import TreeShape, parse_tree
from specd.errors import SpecdError
from specd.oracles.engine.tree_checks import TreeCase, check_tree_invariant, proved, tree_joints
from specd.oracles.engine.tree_exact import prompts_for
from specd.oracles.fixture import LAB_MAX_VOCAB, OracleConfig, build_rig
from specd.oracles.lab.variant import lab_row, not_applicable_row
from specd.oracles.record import EXACT_TOLERANCE, Check
from specd.oracles.rig import Rig, fold

TREE_LAB_VOCAB = LAB_MAX_VOCAB
TREE_LAB_DEPTH = 2  # every tree bug shows within two levels (a node's children, and a later sibling's own row)
TREE_LAB_NODES = 8
TREE_LAB_SHAPES = ("2,2", "3,1")
# more texts only where the first batch found no difference: a miss costs time, never a verdict
TREE_LAB_SEEDS = (64, 1024)


# -- the broken components -------------------------------------------------------------------
class SpecInferResidualProposer(ModelProposer):
    """Children drawn without replacement, each later sibling recorded with its parent's whole q row:
    SpecInfer's rule (q unchanged, for i.i.d. children) applied to children that were not drawn from q."""

    def propose(self, states, ks, cache, ctx, shapes=None):
        proposal = super().propose(states, ks, cache, ctx, shapes).read(cache, states)
        index = []
        for b, rows in enumerate(proposal.q_index):
            tree = proposal.tree(b)
            index.append(tuple(rows[tree.children[tree.parents[n]][0]] for n in range(len(rows))))
        return replace(proposal, q_index=tuple(index))


class RankedChildrenSoftQ(ModelProposer):
    """Children chosen by rank (the draft's top tokens), each recorded with its parent's whole q row,
    as if it had been sampled from q (llama.cpp speculative.cpp's branches; EAGLE's disputed trees)."""

    def propose(self, states, ks, cache, ctx, shapes=None):
        proposal = super().propose(states, ks, cache, ctx, shapes).read(cache, states)
        rows_of = []
        for b, state in enumerate(states):
            tree = proposal.tree(b)
            rows_of.append([self._parent_row(state, tree.path_tokens(tree.parents[n]), ctx) for n in range(len(tree))])
        q, q_index = packed(rows_of, self.vocab_size, ctx.dtype)
        return replace(proposal, q=q, q_index=q_index)

    def _parent_row(self, state, branch: tuple[int, ...], ctx) -> torch.Tensor:
        raw = self.model.raw_logits(state.output + branch).unsqueeze(0)
        return self.policy.probabilities(raw, [fold(state.draft_proc, branch)], ctx.backend, ctx.dtype)[0]


class FreshUniformUnchangedRow(RejectionSampler):
    """Every child tested at its own uniform against its parent's target row as it was: nothing its
    refused elder siblings took is removed (TensorRT-LLM's dynamic tree rejection kernel)."""

    def tested_rows(self, rows):
        return Tested(rows.p_draft())


class TargetSamplePerPath(RejectionSampler):
    """A target sample per path, not per node (fms-extras #12): a node's first child is matched
    against the node's sample, each later child against a sample of its own from the same row."""

    def decide_invariant(self, rows, states):
        per_node = self.race_targets(rows, states)
        draft, valid, tree = rows.draft, rows.valid(), rows.structure()
        per_child = per_node.gather(1, tree.parent + 1)
        later = [(b, n) for b, t in enumerate(tree.trees) for n in range(len(t)) if t.ranks[n] > 0]
        if later:
            p, start = rows.target()
            parent_rows = torch.stack([p[int(start[b]) + tree.trees[b].parents[n] + 1] for b, n in later])
            keys = [request_key(states[b].rng.seed, f"{states[b].request_id}/path{n}") for b, n in later]
            spots = [self.noise_position(states[b], tree.trees[b].depths[n] - 1) for b, n in later]
            own = race_tokens(parent_rows, keys, spots)
            for j, (b, n) in enumerate(later):
                per_child[b, n] = own[j]
        passed = (draft == per_child) & valid
        accepted, leaf, last = self.walk_tree(passed, rows)
        terminal = per_node.gather(1, (leaf + 1).unsqueeze(1)).squeeze(1)
        ones = passed.to(torch.float64)
        return Decision(
            accepted,
            None,
            last < 0,
            ones,
            ones,
            rows.q_draft(torch.float64),
            terminal=terminal,
            leaf=leaf,
            vocab=rows.vocab,
        )


def flat_positions(base: type) -> type:
    class FlatPositions(base):
        """Each node at the position of its index in the flattened tree instead of its depth's."""

        def verification_input(self, state, tree):
            row = super().verification_input(state, tree)
            if row is None or tree.is_chain:
                return row
            return RowInput(
                row.slot, row.tokens, tuple(row.positions[0] + i for i in range(len(row.tokens))), row.parents
            )

    return FlatPositions


class SiblingsSeeEachOther(TableModel):
    """The target's attention over a tree's rows is causal over the flattened tree: each row sees
    every row of the call before it (its elder siblings and their subtrees too), not its ancestors
    alone (vLLM #17560). The K/V ledger still files each row under its parent."""

    @classmethod
    def like(cls, table: TableModel) -> SiblingsSeeEachOther:
        out = cls(table.vocab_size, table.seed, table.scale)
        out.identity = table.identity
        return out

    def step(self, cache, rows, logits_for=None):
        rows = [r.on_host() for r in rows]
        out = super().step(cache, rows, logits_for)
        for i, row in enumerate(rows):
            if row.parents is None:
                continue
            temp, n = cache.temporary(row.slot), len(row.tokens)
            seen = cache.committed(row.slot) + temp
            first = len(temp) - n
            out.logits[i] = torch.stack(
                [self.raw_logits(seen[: len(seen) - len(temp) + first + j + 1]) for j in range(n)]
            )
        return out


class MergedDuplicateSiblings(ModelProposer):
    """Children drawn i.i.d. from q with a repeated sibling merged into its twin (the tree deduplicated,
    the repeat's subtree dropped) and the rest verified by SpecInfer's rule: the repeat's test
    against what its twin left, and that residual, never happen."""

    def propose(self, states, ks, cache, ctx, shapes=None):
        proposal = super().propose(states, ks, cache, ctx, shapes).read(cache, states)
        trees, index = [], []
        for b, rows in enumerate(proposal.q_index):
            tree, rows = _deduplicated(proposal.tree(b), rows)
            trees.append(tree)
            index.append(rows)
        return replace(
            proposal,
            drafts=tuple(t.tokens for t in trees),
            q_index=tuple(index),
            trees=tuple(None if t.is_chain else t for t in trees),
        )


def _deduplicated(tree: DraftTree, rows: tuple[int, ...]) -> tuple[DraftTree, tuple[int, ...]]:
    kept: dict[int, int] = {-1: -1}
    seen: set[tuple[int, int]] = set()
    for n, (token, parent) in enumerate(zip(tree.tokens, tree.parents)):
        if parent in kept and (parent, token) not in seen:
            seen.add((parent, token))
            kept[n] = len(kept) - 1
    order = [n for n in kept if n >= 0]
    tokens = tuple(tree.tokens[n] for n in order)
    parents = tuple(kept[tree.parents[n]] for n in order)
    return DraftTree(tokens, parents, tree.drawn), tuple(rows[n] for n in order)


# -- the variants ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TreeVariant:
    name: str
    description: str
    rule: str  # maximal, greedy or invariant: what its engine ran
    drawn: str  # how its trees' children are drawn
    build: Callable[[Rig], Rig]
    needs_third_token: bool = False  # provably invisible at V = 2
    needs_siblings: bool = True  # provably invisible on trees without a node of two children


def _model(cls) -> Callable[[Rig], Rig]:
    return lambda r: r.but(proposer_factory=lambda rig: cls(rig.draft, rig.draft_policy))


TREE_VARIANTS: tuple[TreeVariant, ...] = (
    TreeVariant(
        "specinfer_residual_without_replacement",
        "children drawn without replacement, verified with SpecInfer's residual (q unchanged, as for i.i.d. children)",
        "maximal",
        "sampled",
        _model(SpecInferResidualProposer),
        needs_third_token=True,
    ),
    TreeVariant(
        "ranked_children_verified_as_sampled",
        "children chosen by rank, verified as if sampled from q (llama.cpp speculative.cpp; EAGLE #93 #110 #183 #221)",
        "maximal",
        "rank",
        _model(RankedChildrenSoftQ),
        needs_siblings=False,
    ),
    TreeVariant(
        "fresh_uniform_per_child_unchanged_row",
        "each child tested at a fresh uniform against its parent's unchanged target row (TensorRT-LLM #12588 #15098)",
        "maximal",
        "rank",
        lambda r: r.but(sampler_cls=FreshUniformUnchangedRow),
    ),
    TreeVariant(
        "target_sample_per_path",
        "a target sample per path, not per node: each later sibling matched against its own sample (fms-extras #12)",
        "invariant",
        "sampled",
        lambda r: r.but(sampler_cls=TargetSamplePerPath),
    ),
    TreeVariant(
        "positions_by_flattened_index",
        "each node at the position of its flattened index instead of its depth (mlxcel #1214)",
        "greedy",
        "sampled",
        lambda r: r.but(layout_factory=flat_positions(type(make_layout(r.layout_name)))),
    ),
    TreeVariant(
        "siblings_see_each_other",
        "the target's tree mask lets each row see every earlier row of the call, its siblings too (vLLM #17560)",
        "maximal",
        "sampled",
        lambda r: r.but(target=SiblingsSeeEachOther.like(r.target)),
    ),
    TreeVariant(
        "duplicate_sibling_merged",
        "a repeated i.i.d. sibling merged into its twin, the rest verified by SpecInfer's rule",
        "maximal",
        "iid",
        _model(MergedDuplicateSiblings),
    ),
)


def lab_shapes(cfg: OracleConfig) -> tuple[TreeShape, ...]:
    """The lab's trees: ``--tree``'s cut to TREE_LAB_DEPTH levels and TREE_LAB_NODES nodes (prefixes
    dropped: each variant draws as its engine did), or TREE_LAB_SHAPES."""
    specs = cfg.tree if cfg.tree and cfg.tree != ("none",) else TREE_LAB_SHAPES
    out = []
    for spec in specs:
        whole = parse_tree(spec)
        choices = whole.cut(TREE_LAB_DEPTH).choices[:TREE_LAB_NODES]
        name = (
            spec
            if choices == whole.choices
            else f"{spec} (its first {len(choices)} nodes within {TREE_LAB_DEPTH} levels)"
        )
        out.append(TreeShape(choices, spec=name))
    return tuple(out)


def invisible(variant: TreeVariant, shapes: tuple[TreeShape, ...], vocab: int) -> str | None:
    """Why ``variant`` cannot change anything on ``shapes`` at ``vocab`` tokens, or None."""
    if variant.needs_siblings and not any(s.choices and any(s.children(c[:-1]) > 1 for c in s.choices) for s in shapes):
        return "no node of these trees has two children, and the bug lives in how later siblings are tested"
    if variant.needs_third_token and vocab < 3:
        return "with two tokens a refused child leaves its sibling the only token: both residuals give it alone"
    return None


def lab_rig(cfg: OracleConfig, variant: TreeVariant) -> Rig:
    """The lab's base rig at TREE_LAB_VOCAB under the variant's rule (greedy: the lab's target at
    temperature 0, the same processors)."""
    rig = build_rig(replace(cfg, vocab=TREE_LAB_VOCAB, tree=()), lab=True)
    if variant.rule == "greedy":
        return rig.but(target_policy=replace(rig.target_policy, greedy=True))
    return rig.but(rule=variant.rule)


def run_tree_lab(cfg: OracleConfig, variants: tuple[TreeVariant, ...] = TREE_VARIANTS) -> list[dict]:
    """Each tree variant put to the tree checks: one report row each, named tree/ + its name."""
    shapes = lab_shapes(cfg)
    rows = []
    for variant in variants:
        base = lab_rig(cfg, variant)
        drawn = tuple(replace(s, drawn=variant.drawn) for s in shapes)
        case = TreeCase(
            base, drawn, ("as given",), prompts_for(base, len(drawn)), max(s.depth for s in drawn) + 1, cfg.seed
        )
        name = "tree/" + variant.name
        why = invisible(variant, shapes, base.vocab)
        if why is not None:
            rows.append(not_applicable_row(name, variant.description, f"on {_specs(shapes)}: {why}"))
            continue
        rows.append(lab_row(name, variant.description, *_catch(variant, case)))
    return rows


def _catch(variant: TreeVariant, case: TreeCase) -> tuple[bool, str | None, str]:
    """The first tree check that catches the variant -> (caught, check name, evidence)."""
    rig = variant.build(case.rig)
    try:
        if variant.rule == "invariant":
            for seeds in TREE_LAB_SEEDS:
                found: Check = check_tree_invariant(replace(case, rig=rig), seeds)
                if not found.passed:
                    return True, "tree_invariant", found.detail
            return False, None, found.detail
        for completion, name in (("target", "tree_exact_joint"), ("rounds", "tree_exact_joint_rounds")):
            figures = tree_joints(rig, case, "as given", completion, (rig.layout_name,))
            if figures["max_abs_diff"] > EXACT_TOLERANCE:
                return True, name, f"max |speculative - target| = {figures['max_abs_diff']:.3g} > {EXACT_TOLERANCE:g}"
            if not proved(figures):
                why = figures["first_difference"] or next(iter(figures["audit_errors"]), "no cell")
                return True, name + "_agreement", f"{figures['differ']} of {figures['requests']} probes: {why}"
    except SpecdError as err:
        return True, err.code, str(err)
    return False, None, "not caught"


def _specs(shapes) -> str:
    return " ".join(s.spec for s in shapes)
