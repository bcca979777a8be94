"""The failure lab's tree bugs (issue 47's list) as tree samplers, each caught through the protocol
(``verify-oracle --sampler ... --tree``), not only as an engine variant.

``TREE_LAB``: bug -> (the sampler that has it, the construction it is fed, what it renders);
``run_tree_lab`` looks for each one's smallest counterexample, which is how it is caught.
Four bugs are shipped rules, fed the drafting they do not fit; two are samplers written
here. The protocol hands a sampler rows the oracle computed correctly, so the two bugs in how a
target computes its rows (positions by flattened index, siblings that see each other in the mask)
cannot live in a sampler; what a verifier can get wrong about them is which row it reads for which
node, the row of a flattened layout: ``rows_by_flattened_index`` renders both.
"""

from __future__ import annotations

from specd.core.tree import ROOT
from specd.oracles.samplers.tree_checks import tree_counterexample
from specd.oracles.samplers.tree_protocol import TreeSamplerUnderTest, specd_tree_sampler
from specd.oracles.samplers.tree_published import (
    llamacpp_branches,
    sglang_target_only,
    specinfer,
    trtllm_12588,
)
from specd.oracles.samplers.tree_rounds import children_of, path_to


def target_sample_per_path(tokens, parents, depths, p, q, drawn, u):
    """A target sample per path instead of per node (foundation-model-stack/fms-extras#12): every
    root-to-leaf candidate draws its own target token at each of its positions (its own uniform),
    keeps its drafts while they equal them, and the candidate keeping most wins (the first on
    ties), emitting its kept drafts and its own target token after them. Nodes shared by several
    candidates are sampled once per candidate, so the longest match is a best of several tries."""
    kids = children_of(parents)
    best: tuple[list[int], int] = ([], -1)
    for leaf in [n for n in range(len(tokens)) if n not in kids] or [ROOT]:
        candidate = path_to(parents, leaf) if leaf != ROOT else []
        kept, at, token = [], ROOT, -1
        for node in candidate + [None]:
            token = u.draw(p[at + 1], key=("path", leaf, len(kept)))
            if node is None or token != int(tokens[node]):
                break
            kept.append(node)
            at = node
        if len(kept) > len(best[0]) or best[1] < 0:
            best = (kept, token)
    return best


def rows_by_flattened_index(tokens, parents, depths, p, q, drawn, u):
    """specd's tree rule reading each node's children against the row at the flattened position
    before its first child (node order, as a chain's rows are laid out) instead of its parent's row:
    what positions by flattened node index (mlxcel#1214) and siblings that see each other
    (vllm#17560) do to the rows a verifier reads. On a chain the two rows are the same row."""
    flat = p.clone()
    for at, kids in children_of(parents).items():
        flat[at + 1] = p[kids[0]]
    return specd_tree_sampler(tokens, parents, depths, flat, q, drawn, u)


TREE_LAB = {
    "specinfer_residual_without_replacement": (
        specinfer,
        "sampled",
        "SpecInfer's residual (q unchanged) on children drawn without replacement",
    ),
    "rank_verified_as_sampled": (
        llamacpp_branches,
        "rank",
        "children chosen by rank verified as if sampled from q (llama.cpp speculative.cpp; EAGLE #93, #110, #183, "
        "#221)",
    ),
    "fresh_uniform_per_child": (
        trtllm_12588,
        "iid",
        "a fresh uniform per child against the parent's unchanged target row (TensorRT-LLM #12588, replaced in #15098)",
    ),
    "target_sample_per_path": (
        target_sample_per_path,
        "sampled",
        "a target sample per path instead of per node (fms-extras #12)",
    ),
    "rows_by_flattened_index": (
        rows_by_flattened_index,
        "sampled",
        "positions by flattened index (mlxcel #1214) and siblings that see each other (vllm #17560), as the rows "
        "a verifier reads",
    ),
    "duplicate_sibling": (
        sglang_target_only(),
        "iid",
        "a duplicate sibling: a verifier for distinct siblings (SGLang's, counting each sibling's mass once more) "
        "fed children that repeat",
    ),
}


def run_tree_lab(build_rig) -> list[dict]:
    """Each tree bug through the protocol: caught when the smallest counterexample is found (its
    case and the mass that moved), ``build_rig(vocab, depth, seed)`` giving the tables."""
    out = []
    for name, (fn, drawing, what) in TREE_LAB.items():
        cx = tree_counterexample(TreeSamplerUnderTest(name, fn, what), [drawing], build_rig)
        out.append(
            {"variant": name, "drawing": drawing, "caught": cx is not None, "counterexample": cx, "detail": what}
        )
    return out
