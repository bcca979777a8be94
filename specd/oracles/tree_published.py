"""The published tree verifiers, written here in torch from their code's descriptions, under the
tree-sampler protocol (``specd.oracles.tree_samplers``: arguments, returns, the stream ``u``).

Each docstring says what was implemented and from which description. None of them calls the
engine's own code; where a rule draws its own randomness (``random.random()``, a kernel's
``uniform_samples``) it reads the stream instead, one uniform where the original reads one, so
the oracle integrates over exactly the uniforms the original consumes. Rows are float64 (the
kernels' float32 rounding is not modelled: a verdict is about the rule, not its precision).
"""

from __future__ import annotations

import torch

from specd.core.tree import ROOT
from specd.oracles.tree_rounds import children_of, path_to


def _needs_q(q, who: str):
    if q is None:
        raise ValueError(f"{who} reads the draft's rows; this tree came without them")
    return q


def specinfer(tokens, parents, depths, p, q, drawn, u):
    """SpecInfer's multi-step speculative sampling (Miao et al. 2023, Algorithm 2), written for
    children drawn i.i.d. from the parent's draft row q: at each node the children are tried in order,
    child d kept when U < p'(d) / q(d), p' starting as the parent's target row; a refused child
    leaves p' = normalize([p' - q]_+) with q unchanged; when every child is refused the terminal is
    drawn from p', after a node without children from its own row (the bonus)."""
    q = _needs_q(q, "SpecInfer")
    kids = children_of(parents)
    at, path = ROOT, []
    while True:
        left, draft = p[at + 1].clone(), q[at + 1]
        for c in kids.get(at, ()):
            d = int(tokens[c])
            if draft[d] <= 0:
                raise ValueError(f"node {c}'s token {d} has q = 0: it cannot have been drawn from q")
            if u.node(c) < left[d] / draft[d]:
                path.append(c)
                at = c
                break
            left = (left - draft).clamp_min(0)
            left = left / left.sum()
        else:
            return path, left


def recursive_rejection(tokens, parents, depths, p, q, drawn, u):
    """Recursive rejection sampling (Jeon et al. 2024, "Recursive Speculative Decoding"), written for
    children drawn from the parent's draft row without replacement: child d is kept when
    U < p'(d) / q'(d), p' and q' starting as the parent's target and draft rows; a refused child leaves
    p' = normalize([p' - q']_+) and q' with d removed, renormalized (the law the next child was drawn
    from); every child refused: the terminal from p'; a node without children: its own row."""
    q = _needs_q(q, "recursive rejection sampling")
    kids = children_of(parents)
    at, path = ROOT, []
    while True:
        left, draft = p[at + 1].clone(), q[at + 1].clone()
        for c in kids.get(at, ()):
            d = int(tokens[c])
            if draft[d] <= 0:
                raise ValueError(f"node {c}'s token {d} has q' = 0: drawn without replacement it cannot repeat")
            if u.node(c) < left[d] / draft[d]:
                path.append(c)
                at = c
                break
            left = (left - draft).clamp_min(0)
            left = left / left.sum()
            draft[d] = 0.0
            draft = draft / draft.sum()
        else:
            return path, left


def sglang_target_only(threshold_single: float = 1.0, threshold_acc: float = 1.0):
    """SGLang's ``tree_speculative_sampling_target_only`` (sgl-kernel, speculative_sampling.cuh),
    from its kernel: one coin per expansion, ``uniform_samples`` at the node being expanded (the
    root's first); its children are tried in order (``retrive_next_sibling``) accumulating their
    target probabilities in ``prob_acc``, and child d is accepted when
    ``coin <= prob_acc / threshold_acc or p(d) >= threshold_single``; a refused child's draft
    probability is set to its target probability (``draft_probs`` are zeros: the "FIXME:
    leverage draft probs"). The terminal is drawn from relu(target - draft) at the last accepted
    row, without the draft probabilities when the walk reached the tree's full depth (the bonus).
    q is never read. At thresholds (1, 1), its defaults, this is target sampling through the tree."""

    def sample(tokens, parents, depths, p, q, drawn, u):
        kids = children_of(parents)
        full_depth = int(depths.max()) if len(depths) else 0
        draft_probs = torch.zeros_like(p)
        at, path = ROOT, []
        coin = u.node(ROOT)
        for _ in range(full_depth):
            prob_acc = torch.zeros((), dtype=p.dtype)
            accepted = None
            for c in kids.get(at, ()):
                d = int(tokens[c])
                single = p[at + 1, d]
                prob_acc = prob_acc + single
                if coin <= prob_acc / threshold_acc or single >= threshold_single:
                    accepted = c
                    break
                draft_probs[at + 1, d] = p[at + 1, d]
            if accepted is None:
                break
            path.append(accepted)
            at = accepted
            coin = u.node(at)
        draft = draft_probs[at + 1] if len(path) != full_depth else torch.zeros_like(p[0])
        return path, (p[at + 1] - draft).clamp_min(0)

    return sample


def eagle_posterior(tokens, parents, depths, p, q, drawn, u):
    """EAGLE's ``evaluate_posterior`` (eagle/model/utils.py), its sampling branch: level by level, the
    children of the accepted prefix in candidate order, a repeated token skipped, each child x tried
    with a fresh ``r = random.random()`` (here its node's uniform) and kept when ``r <= gtp[x] / qx``
    with ``qx = 1.0`` (the draft's probability is never read); a refused child sets ``gtp[x] = 0`` and
    renormalizes. The terminal law is ``gtp`` when the last level tried refused a child and the walk
    stopped short of the candidates' full length (``adjustflag``), else the last accepted row."""
    kids = children_of(parents)
    width = (int(depths.max()) if len(depths) else 0) + 1  # candidates.shape[1]: the root token and the levels
    accept_length, at, path = 1, ROOT, []
    adjust, gtp = False, p[0]
    for i in range(1, width):
        if i != accept_length:
            break
        adjust = False
        gtp = p[at + 1].clone()
        seen: list[int] = []
        for c in kids.get(at, ()):
            x = int(tokens[c])
            if x in seen:
                continue
            seen.append(x)
            if u.node(c) <= gtp[x] / 1.0:
                path.append(c)
                at = c
                accept_length += 1
                break
            gtp[x] = 0
            gtp = gtp / gtp.sum()
            adjust = True
    if adjust and accept_length != width:
        return path, gtp
    return path, p[at + 1]


def trtllm_dynamic_tree(tokens, parents, depths, p, q, drawn, u):
    """TensorRT-LLM's dynamic-tree rejection rule as of PR #15098, from its description in specd's
    issue 48 (the kernel's source was not at hand): at each accepted node its children are tried in
    order, each with a fresh uniform against the parent's unchanged target row p and the draft row
    q, kept when U < p(d) / q(d); when every child is refused the terminal is drawn from
    normalize([p - q]_+) of the parent (p itself if that is empty); after a node without children,
    from its own row (the bonus)."""
    q = _needs_q(q, "the TensorRT-LLM dynamic tree rule")
    kids = children_of(parents)
    at, path = ROOT, []
    while kids.get(at):
        target, draft = p[at + 1], q[at + 1]
        for c in kids[at]:
            d = int(tokens[c])
            if u.node(c) < target[d] / draft[d]:
                path.append(c)
                at = c
                break
        else:
            left = (target - draft).clamp_min(0)
            return path, left if float(left.sum()) > 0 else target
    return path, p[at + 1]


def llamacpp_branches(tokens, parents, depths, p, q, drawn, u):
    """llama.cpp's multi-branch verification (examples/speculative/speculative.cpp, n_seq_dft > 1,
    stochastic: temp > 0), from its code: the draft's sequences are the tree's root-to-leaf paths;
    at each depth one active sequence at a time is picked uniformly at random (``u_int_dist``) and its
    token d tested with a fresh ``r = u_dist(rng)``: kept when ``r <= p_tgt / p_dft``, p_tgt from the
    target's current distribution and p_dft from that sequence's draft distribution there (the
    draft's row at the parent: the branches are its top-ranked tokens, verified as if sampled, with
    SpecInfer's residual); refused: the target distribution becomes max(0, p - p_dft) renormalized
    and every sequence through that token is dropped. When none is kept the token is drawn from the
    target's distribution as left; a sequence that ended gives the bonus from its last row."""
    q = _needs_q(q, "llama.cpp's multi-branch rule")
    kids = children_of(parents)
    leaves = [n for n in range(len(tokens)) if n not in kids] if len(tokens) else []
    sequences = [path_to(parents, leaf) for leaf in leaves]
    active = list(range(len(sequences)))
    at, path = ROOT, []
    for depth in range(len(max(sequences, key=len, default=[])) + 1):
        dist_tgt, picks = p[at + 1].clone(), 0
        active = [s for s in active if depth < len(sequences[s])]
        kept = None
        while active:
            # a sequence uniformly at random among the active ones: its node, by how many pass through it
            nodes = sorted({sequences[s][depth] for s in active})
            weights = [sum(1 for s in active if sequences[s][depth] == n) for n in nodes]
            node = nodes[u.draw(weights, key=("pick", depth, picks))]
            picks += 1
            d, dist_dft = int(tokens[node]), q[at + 1]
            if u.node(node) <= dist_tgt[d] / dist_dft[d]:
                kept = node
                break
            dist_tgt = (dist_tgt - dist_dft).clamp_min(0)
            dist_tgt = dist_tgt / dist_tgt.sum()
            active = [t for t in active if sequences[t][depth] != node]
        if kept is None:
            return path, dist_tgt
        path.append(kept)
        at = kept
        active = [t for t in range(len(sequences)) if len(sequences[t]) > depth and sequences[t][depth] == kept]
    return path, p[at + 1]


def medusa_typical(posterior_threshold: float = 0.09, posterior_alpha: float = 0.3):
    """Medusa's typical acceptance (medusa/model/utils.py ``evaluate_posterior`` with
    sampling='typical', and ``get_typical_one_token`` for the next token), from its code: a candidate
    (a root-to-leaf path) keeps its tokens while each one's target probability exceeds
    min(posterior_threshold, exp(-H) * posterior_alpha), H = -sum p log(p + 1e-5) of the row that
    scores it; the candidate accepting most is taken (ties: the largest sum of log-probabilities,
    then the first); the next token is drawn from the last accepted row with every token below its
    threshold removed. No uniform decides the acceptance. p is already processed (its temperature
    applied). Defaults: Medusa's published posterior_threshold 0.09, posterior_alpha 0.3."""

    def threshold(row):
        entropy = -(row * torch.log(row + 1e-5)).sum()
        return torch.minimum(torch.tensor(posterior_threshold, dtype=row.dtype), torch.exp(-entropy) * posterior_alpha)

    def sample(tokens, parents, depths, p, q, drawn, u):
        kids = children_of(parents)
        best, best_key = [], (0, 0.0)
        for leaf in (n for n in range(len(tokens)) if n not in kids):
            candidate, kept, likelihood = path_to(parents, leaf), [], 0.0
            for node in candidate:
                row = p[int(parents[node]) + 1]
                prob = row[int(tokens[node])]
                if not prob > threshold(row):
                    break
                kept.append(node)
                likelihood += float(torch.log(prob))
            if (len(kept), likelihood) > best_key and kept:
                best, best_key = kept, (len(kept), likelihood)
        row = p[best[-1] + 1] if best else p[0]
        return best, torch.where(row < threshold(row), torch.zeros_like(row), row)

    return sample
