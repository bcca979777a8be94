"""Seeded Monte Carlo of a tree sampler over one round, completed by the target to the horizon: the
independent estimate the exact enumeration (``specd.oracles.samplers.tree_checks``) and its prices
are checked against. Each sample drafts a tree as its construction says, runs the sampler on real
uniforms (``ConcreteUniforms``), and samples the target chain after what the round emitted."""

from __future__ import annotations

import random
from collections import Counter

import torch

from specd.core.tree import DraftTree
from specd.oracles.samplers.tree_rounds import TreeRound, shape_nodes
from specd.oracles.samplers.tree_uniforms import ConcreteUniforms


def _pick(row: list[float], u: float) -> int:
    below = 0.0
    for token, w in enumerate(row):
        below += w
        if w > 0 and below > u * sum(row):
            return token
    return max(t for t, w in enumerate(row) if w > 0)


def draft_one(shape, drawing: str, p_of, q_of, prompt, rng: random.Random) -> TreeRound:
    """One tree drafted as ``drawing`` says (specd.oracles.samplers.tree_rounds), its rows read after ``prompt``."""
    parents, ranks = shape_nodes(shape)
    tokens: list[int] = []
    for n, parent in enumerate(parents):
        path = DraftTree(tuple(tokens), parents[:n], "iid").path_tokens(parent) if parent >= 0 else ()
        q = list(q_of(prompt + path))
        if drawing in ("rank", "lookup"):
            tokens.append(sorted(range(len(q)), key=lambda t: (-q[t], t))[ranks[n]])
            continue
        if drawing == "sampled":
            for m in range(n):
                if parents[m] == parent:
                    q[tokens[m]] = 0.0
        tokens.append(_pick(q, rng.random()))
    tree = DraftTree(tuple(tokens), parents, "rank" if drawing == "lookup" else drawing)
    outputs = [prompt] + [prompt + tree.path_tokens(n) for n in range(len(tree))]
    p = torch.tensor([p_of(o) for o in outputs], dtype=torch.float64)
    q_rows = None if drawing == "lookup" else torch.tensor([q_of(o) for o in outputs], dtype=torch.float64)
    return TreeRound(tree, p, q_rows, 1.0, drawing)


def tree_montecarlo(sampler, shape, drawing: str, p_of, q_of, prompt, samples: int, seed: int) -> Counter:
    """Counts of the horizon's sequences (depth + 1 tokens) over ``samples`` seeded rounds."""
    rng = random.Random(seed)
    horizon = shape.depth + 1
    counts: Counter = Counter()
    for _ in range(samples):
        rnd = draft_one(shape, drawing, p_of, q_of, prompt, rng)
        outcome = sampler(rnd, ConcreteUniforms(rng))
        emitted = [rnd.tree.tokens[n] for n in outcome.path]
        emitted.append(outcome.terminal if outcome.terminal is not None else _pick(list(outcome.law), rng.random()))
        while len(emitted) < horizon:
            emitted.append(_pick(p_of(prompt + tuple(emitted)), rng.random()))
        counts[tuple(emitted[:horizon])] += 1
    return counts
