"""The published tree verifiers, written here in torch under the tree-sampler protocol
(``specd.oracles.samplers.tree_protocol``: arguments, returns, the stream ``u``).

Each docstring says what was implemented and the file (repository, path, commit) it follows, as
the source store holds it, or that it was written from a description where no source was at hand.
None of them calls the engine's own code; where a rule draws its own randomness
(``random.random()``, a kernel's ``uniform_samples`` or Philox stream) it reads the stream
instead, one uniform where the original reads one, so the oracle integrates over exactly the
uniforms the original consumes. Rows are float64 (the kernels' float32 rounding is not modelled:
a verdict is about the rule, not its precision; a kernel's 1e-10 guards are kept where they
decide a branch, at q = 0 or at a residual of no mass).

Where the original emits tokens the protocol cannot state (a path that leaves the tree: llama.cpp
accepting a token drafted under another branch, Medusa accepting the padding of a short
candidate), the adapter returns the path up to there and that token as the terminal: the
emitted prefix is the original's, what it emits after it is not modelled (the oracle completes it
from the target), so the price measured there is a lower bound.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import torch

from specd.core.tree import ROOT
from specd.oracles.samplers.tree_rounds import children_of, path_to


def _needs_q(q, who: str):
    if q is None:
        raise ValueError(f"{who} reads the draft's rows; this tree came without them")
    return q


def specinfer(tokens, parents, depths, p, q, drawn, u):
    """SpecInfer's multi-step speculative sampling, written from its paper (Miao et al. 2023,
    Algorithm 2; no engine's source followed), for children drawn i.i.d. from the parent's draft
    row q: at each node the children are tried in order, child d kept when U < p'(d) / q(d), p'
    starting as the parent's target row; a refused child leaves p' = normalize([p' - q]_+) with q
    unchanged; when every child is refused the terminal is drawn from p', after a node without
    children from its own row (the bonus)."""
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
    """Recursive rejection sampling, written from its paper (Jeon et al. 2024, "Recursive
    Speculative Decoding"; no engine's source followed), for children drawn from the parent's
    draft row without replacement: child d is kept when U < p'(d) / q'(d), p' and q' starting as
    the parent's target and draft rows; a refused child leaves p' = normalize([p' - q']_+) and q'
    with d removed, renormalized (the law the next child was drawn from); every child refused: the
    terminal from p'; a node without children: its own row."""
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


def _point_mass(token: int, like: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(like)
    out[token] = 1.0
    return out


def sglang_target_only(threshold_single: float = 1.0, threshold_acc: float = 1.0):
    """SGLang's ``tree_speculative_sampling_target_only``, following sgl-project/sglang
    sgl-kernel/csrc/speculative/speculative_sampling.cuh at 120affb9 (the kernel and its launcher):
    one coin per expansion, ``uniform_samples`` at the node being expanded (the root's first); its
    children are tried in order (``retrieve_next_sibling``) accumulating their target
    probabilities in ``prob_acc``, and child d is accepted when
    ``coin <= prob_acc / threshold_acc or p(d) >= threshold_single``, threshold_acc capped below
    at 1e-9 as the launcher does; a refused child's draft probability is set to its target
    probability (``draft_probs`` are zeros: the "FIXME: leverage draft probs"). The terminal is
    drawn from relu(target - draft) at the last accepted row, without the draft probabilities when
    the walk reached the tree's full depth (the bonus; at a shallower leaf the row holds no draft
    probability either); a residual of no positive mass gives the last token (the kernel's
    ``sampled_id = d - 1``). q is never read. At thresholds (1, 1), its defaults, this is target
    sampling through the tree."""
    acc = max(threshold_acc, 1e-9)  # fmaxf(threshold_acc, 1e-9f) in the launcher

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
                if coin <= prob_acc / acc or single >= threshold_single:
                    accepted = c
                    break
                draft_probs[at + 1, d] = p[at + 1, d]
            if accepted is None:
                break
            path.append(accepted)
            at = accepted
            coin = u.node(at)
        draft = draft_probs[at + 1] if len(path) != full_depth else torch.zeros_like(p[0])
        left = (p[at + 1] - draft).clamp_min(0)
        return path, left if float(left.sum()) > 0 else _point_mass(p.shape[1] - 1, left)

    return sample


def eagle_posterior(tokens, parents, depths, p, q, drawn, u):
    """EAGLE's ``evaluate_posterior``, its sampling branch, following SafeAILab/EAGLE
    eagle/model/utils.py at 8009b6d8 (EAGLE-2/3; the EAGLE-1 version at 08dc06cc reads the draft's
    probabilities and is another rule). Its candidates are the root-to-leaf paths in the order of
    their node indices (``retrieve_indices`` sorted), and at level i it takes every candidate whose
    first i tokens equal the accepted ones (``is_eq``, tokens, not nodes: two siblings holding one
    token share their subtrees), tries their next tokens in candidate order, a token already tried
    skipped, each child x with a fresh ``r = random.random()`` (here its node's uniform), kept when
    ``r <= gtp[x] / qx`` with ``qx = 1.0`` (the draft's probability is never read); a refused
    child sets ``gtp[x] = 0`` and renormalizes. ``gtp`` is the row of the first such candidate.
    The terminal law is ``gtp`` when the last level tried refused a child and the walk stopped
    short of the candidates' full length (``adjustflag``), else the last accepted node's row."""
    kids = children_of(parents)
    width = (int(depths.max()) if len(depths) else 0) + 1  # candidates.shape[1]: the root token and the levels

    def order(n: int) -> list[int]:  # a candidate's place in retrieve_indices: its nodes' indices
        return path_to(parents, n)

    frontier, path = [ROOT], []
    adjust, gtp = False, p[0]
    for i in range(1, width):
        if i != len(path) + 1:
            break
        adjust, gtp, seen, kept = False, p[frontier[0] + 1].clone(), [], None
        for c in sorted((c for f in frontier for c in kids.get(f, ())), key=order):
            x = int(tokens[c])
            if x in seen:
                continue
            seen.append(x)
            if u.node(c) <= gtp[x] / 1.0:
                kept = c
                break
            gtp[x] = 0
            gtp = gtp / gtp.sum()
            adjust = True
        if kept is not None:
            path = order(kept)
            said = [int(tokens[n]) for n in path]
            same = [n for n in range(len(tokens)) if [int(tokens[m]) for m in order(n)] == said]
            frontier = sorted(same, key=order)
    if adjust and len(path) + 1 != width:
        return path, gtp
    return path, p[path[-1] + 1] if path else p[0]


def trtllm_dynamic_tree(tokens, parents, depths, p, q, drawn, u):
    """TensorRT-LLM's dynamic-tree rejection rule as of PR #15098 ("fix output distribution
    correctness"), following NVIDIA/TensorRT-LLM
    cpp/tensorrt_llm/kernels/speculativeDecoding/dynamicTreeKernels.cu, the target-only
    ``verifyDynamicTreeRejectionKernel`` that PR's diff introduces (the source store holds that
    text without its commit; PR #15098's review thread shows the change): one coin per expansion
    (``curand_uniform_open_right``), the children tried in order accumulating their target
    probabilities in ``probAcc``, the first with ``coin <= probAcc`` accepted; every child refused:
    the correction is drawn from the target row with the tried tokens zeroed, by inverse CDF at
    ``u * (1 - probAcc)`` (a repeated sibling's mass is counted twice in probAcc, once in the
    zeroing), from the whole target row when ``1 - probAcc <= 1e-10``; a node without children,
    or the tree's full depth: the bonus from its own row. q is never read. The rule it replaced
    (PR #12588) is ``trtllm_12588``."""
    kids = children_of(parents)
    at, path = ROOT, []
    while kids.get(at):
        row, coin, prob_acc, tried = p[at + 1], u.node(at), torch.zeros((), dtype=p.dtype), []
        for c in kids[at]:
            d = int(tokens[c])
            prob_acc = prob_acc + row[d]
            if coin <= prob_acc:
                path.append(c)
                at = c
                break
            tried.append(d)
        else:
            residual = 1.0 - float(prob_acc)
            if residual <= 1e-10:
                return path, row
            weights = row.clone()
            weights[tried] = 0.0
            reach = weights.cumsum(0).clamp(max=residual)  # the scan stops at u * residual
            return path, torch.diff(reach, prepend=reach.new_zeros(1))
    return path, p[at + 1]


def trtllm_12588(tokens, parents, depths, p, q, drawn, u):
    """TensorRT-LLM's dynamic-tree rejection rule from PR #12588 until PR #15098 replaced it,
    following NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/speculativeDecoding/dynamicTreeKernels.cu
    at 84e55f93 (``verifyDynamicTreeRejectionKernel``, its probabilities path; the store's earlier
    text of the same kernel decides alike): at each accepted node its children are tried in
    order, each with a fresh uniform against the parent's unchanged target row p and the parent's
    draft row q (``draftProbIndices``), kept when U < min(1, p(d) / (q(d) + 1e-10)) (the 1e-10
    kept only where q(d) = 0); when every child is refused the terminal is drawn from
    normalize([p - q]_+) of the parent, from p itself when that has mass <= 1e-10; after a node
    without children, from its own row (the bonus)."""
    q = _needs_q(q, "the TensorRT-LLM #12588 dynamic tree rule")
    kids = children_of(parents)
    at, path = ROOT, []
    while kids.get(at):
        target, draft = p[at + 1], q[at + 1]
        for c in kids[at]:
            d = int(tokens[c])
            if u.node(c) < target[d] / (draft[d] if draft[d] > 0 else 1e-10):
                path.append(c)
                at = c
                break
        else:
            left = (target - draft).clamp_min(0)
            return path, left if float(left.sum()) > 1e-10 else target
    return path, p[at + 1]


def llamacpp_branches(tokens, parents, depths, p, q, drawn, u):
    """llama.cpp's multi-branch verification (n_seq_dft > 1, stochastic: temp > 0), following
    ggerganov/llama.cpp examples/speculative/speculative.cpp at e9cbdd63, as the code runs: the
    draft's sequences are the tree's root-to-leaf paths, put in ``active_seqs`` once a round. At
    each depth a sequence is picked uniformly from the set (``u_int_dist``; one that has ended
    leaves it) and its token d tested with a fresh ``r = u_dist(rng)``: kept when
    ``r <= p_tgt / p_dft``, p_tgt from the target's distribution at the kept sequence's node (as
    refusals at this depth left it), p_dft from the picked sequence's own draft row there (the
    draft's row at its parent: its top-ranked tokens, verified as if sampled). Refused: the
    distribution becomes max(0, p - p_dft) renormalized (the code subtracts the two candidate
    lists entry by entry after sorting each by id: right where both hold every token, as rows
    over the whole vocabulary do here) and that sequence leaves the set; the others through the
    same token are marked inactive but stay in it (the loop erases ``s``, not ``i``), so each is
    tested again when picked (p_tgt is 0 there by then) and subtracts its row once more. Kept:
    the loop breaks before its pruning branch, so every untested sequence stays in the set for
    the next depth, those through other branches too, and one of them may be kept there: a token
    drafted under another node, which the protocol cannot state as a path (it is returned as the
    terminal; module docstring), unless that node's tokens are the accepted ones. None kept: the
    token is drawn from the distribution as left; every sequence ended: the bonus from the kept
    node's row."""
    q = _needs_q(q, "llama.cpp's multi-branch rule")
    # lists: this rule runs many times a round
    tokens, parents, p_rows, q_rows = tokens.tolist(), parents.tolist(), p.tolist(), q.tolist()
    kids = children_of(parents)
    sequences = [path_to(parents, leaf) for leaf in range(len(tokens)) if leaf not in kids]
    active, path, tests = list(range(len(sequences))), [], 0
    for depth in range(max(map(len, sequences), default=0) + 1):
        dist = p_rows[(path[-1] if path else ROOT) + 1]
        active = [s for s in active if depth < len(sequences[s])]
        kept = None
        while active:
            s = active[_pick(u, ("pick", tests), len(active))]
            node = sequences[s][depth]
            d, draft = int(tokens[node]), q_rows[int(parents[node]) + 1]
            tests += 1
            if u.uniform(("r", tests)) <= _ratio(dist[d], draft[d]):
                kept = node
                break
            left = [max(0.0, a - b) for a, b in zip(dist, draft)]
            total = sum(left)
            dist = [x / total if total > 0 else math.nan for x in left]  # 0 / 0 in the code
            active.remove(s)
        if kept is None:
            return path, dist
        if [int(tokens[n]) for n in path_to(parents, int(parents[kept]))] != [int(tokens[n]) for n in path]:
            return path, int(tokens[kept])
        path = path_to(parents, kept)
    return path, p_rows[(path[-1] if path else ROOT) + 1]


def _ratio(p_tgt: float, p_dft: float) -> float:
    """p_tgt / p_dft as C++ floats have it: inf where only p_dft is 0, and 0 / 0 (NaN) never passes."""
    return p_tgt / p_dft if p_dft > 0 else math.inf if p_tgt > 0 else -math.inf


def _pick(u, key, n: int) -> int:
    """An index uniform on 0..n-1 (``std::uniform_int_distribution``): the first k with U < (k + 1) / n."""
    unit = u.uniform(key)
    return next((k for k, cut in enumerate(_cuts(n)) if unit < cut), n - 1)


@functools.cache
def _cuts(n: int) -> tuple[Fraction, ...]:
    """1/n, 2/n, ..., (n - 1)/n."""
    return tuple(Fraction(k, n) for k in range(1, n))


def medusa_typical(posterior_threshold: float = 0.09, posterior_alpha: float = 0.3):
    """Medusa's typical acceptance at its published defaults (``medusa_generate``: sampling
    'typical', fast True), following FasterDecoding/Medusa medusa/model/utils.py and
    medusa_model.py at 2b898144: ``evaluate_posterior``'s fast path keeps a candidate's tokens
    while each one's target probability exceeds min(posterior_threshold, exp(-H) *
    posterior_alpha), H = -sum p log(p + 1e-5) of the row that scores it; the candidate accepting
    most is taken, ties to the largest sum of log-probabilities, then to the first in Medusa's
    order (``retrieve_indices``: the leaves in reverse of its sorted choices, here reverse node
    order). A candidate shorter than the longest is padded with token 0, scored by its leaf's row
    and then by the tree's last node's row (index -1), and may accept it (returned as the
    terminal; module docstring). The next token is ``generate_candidates``' with fast True: the
    argmax of the last accepted row (the first on ties), not a sample. No uniform is read. p is
    already processed (its temperature applied)."""

    def threshold(row):
        entropy = -(row * torch.log(row + 1e-5)).sum()
        return torch.minimum(torch.tensor(posterior_threshold, dtype=row.dtype), torch.exp(-entropy) * posterior_alpha)

    def columns(tokens, parents, p, leaf, full):
        """A candidate's (token, the row scoring it) after the root, its padding included."""
        nodes = path_to(parents, leaf)
        out = [(int(tokens[n]), p[int(parents[n]) + 1]) for n in nodes]
        if len(nodes) < full:
            out += [(0, p[leaf + 1])] + [(0, p[len(tokens)])] * (full - len(nodes) - 1)
        return nodes, out

    def sample(tokens, parents, depths, p, q, drawn, u):
        kids = children_of(parents)
        full = int(depths.max()) if len(depths) else 0
        best, best_key = ([], 0), (0, 0.0)
        for leaf in reversed([n for n in range(len(tokens)) if n not in kids]):
            nodes, cols = columns(tokens, parents, p, leaf, full)
            accepted, likelihood = 0, 0.0
            for token, row in cols:
                if not row[token] > threshold(row):
                    break
                accepted += 1
                likelihood += float(torch.log(row[token]))
            if (accepted, likelihood) > best_key and accepted:
                best, best_key = (nodes, accepted), (accepted, likelihood)
        nodes, accepted = best
        if accepted > len(nodes):
            return nodes, 0  # the padding token, accepted
        path = nodes[:accepted]
        return path, int(torch.argmax(p[path[-1] + 1] if path else p[0]))

    return sample
