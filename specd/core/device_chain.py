"""A model draft's chain drafted with its tokens on the device: no read from it inside the round.

A chain is the tree with one child a level (specd.core.tree_draft); when every row of the batch
drafts a chain whose shape does not depend on what is drawn (no ``--draft-stop``, no other
source's tokens to avoid) under policies without a state of their own (a penalty's state advances
over the drafts' tokens, on the host), the level's tokens
need not come back to the host: d_i is drawn on the device from q_i (greedy: the argmax of the
processed logits, q the point mass on it, recorded as the token alone, as a lookup's; the
invariant rule: the Gumbel-max under the request's noise; else the inverse CDF at the request's
proposal uniform) and fed to the next draft step as it is (``RowInput.ids``). The rows a chain
stages hold PENDING tokens (specd.core.kv) until the round reads the drafts, once, with its
decision (specd.core.readback.Readback) and resolves them.

The exactness checks a level's draw makes (a row of q without mass: refused; a uniform within
float64 rounding of an interval's end: drawn again exactly) keep their flags inside
``checks.deferred()`` like the rule's; where one is set the round is taken again from its
proposal outside ``deferred()``, where each level reads its flags at once and acts on them.
The tokens, q rows and uniforms are those of a chain drafted with a read a level.
"""

from __future__ import annotations

import torch

from specd.core import checks
from specd.core.kv import PENDING
from specd.core.model import RowInput
from specd.core.probability import EMPTY_ROW, argmax_ids, empty_rows
from specd.core.sampler import exact_redraw
from specd.core.transfer import to_device
from specd.errors import EmptyDistribution


def on_device(proposer, states, shapes, exclude) -> bool:
    """Whether the batch's proposal can be drafted with its tokens on the device (module docstring)."""
    return (
        all(shape is None for shape in shapes)
        and not exclude
        and proposer.draft_stop == 0
        and not any(s.draft_proc.stateful or s.target_proc.stateful for s in states)
    )


def draft_chain(proposer, states, ks, live, cache, ctx, first: list[torch.Tensor], uniforms: dict, staged: dict):
    """Each live row's chain of ks[b] drafts -> (tokens int64[B, K] on the device (-1 past a row's k_b and
    for rows not live), the q rows per row in order, the rows the calls after the first fed). ``first``: each
    live row's raw logits after its pending tokens (the round's first draft call, made already);
    ``uniforms``: request index -> its proposal uniforms (sampled drafts, no shared noise)."""
    policy = proposer.policy
    noise = ctx.noise if not policy.greedy else None
    k_max = max(ks[b] for b in live)
    device = first[0].device
    drafts = torch.full((len(states), k_max), PENDING, dtype=torch.int64, device=device)
    q_rows: dict[int, list[torch.Tensor | None]] = {b: [] for b in live}
    raw = torch.stack(first)
    here, fed = list(live), 0
    every = list(range(len(states)))
    for i in range(k_max):
        procs = [states[b].draft_proc for b in here]
        if policy.greedy:  # q is the point mass on the processed argmax: recorded as the token alone
            drawn = argmax_ids(policy.logits(raw, procs))
            level: list[torch.Tensor | None] = [None] * len(here)
        else:
            q = policy.probabilities(raw, procs, ctx.backend, ctx.dtype, check=False)
            if checks.flagged(empty_rows(q)):
                raise EmptyDistribution(EMPTY_ROW)
            drawn = _draw(proposer, q, noise, [states[b] for b in here], i, [uniforms.get(b) for b in here])
            level = list(q.unbind(0))
        if here == every:  # every row, in order: a column, no index to build
            drafts[:, i] = drawn
        else:
            drafts[to_device(here, torch.int64, device), i] = drawn
        for b, row in zip(here, level):
            q_rows[b].append(row)
        nxt = [(j, b) for j, b in enumerate(here) if ks[b] > i + 1]
        if not nxt:
            break
        rows = []
        for j, b in nxt:
            slot = states[b].slot
            rows.append(RowInput(slot, (PENDING,), (cache.length(slot),), ids=drawn[j : j + 1]))
        raw = torch.stack(proposer.forward(cache, rows, staged))
        here, fed = [b for _, b in nxt], fed + len(nxt)
    return drafts, q_rows, fed


def _draw(proposer, q: torch.Tensor, noise, states, depth: int, uniforms: list) -> torch.Tensor:
    """One level's sampled drafts int64[N], drawn on the device (module docstring)."""
    if noise is not None:
        return noise.race(states, depth, q)
    u = to_device([us[depth] for us in uniforms], torch.float64, q.device)
    drawn, near = proposer.draw(q, u)
    if near is not None and checks.flagged(near):  # read at once outside deferred(): drawn again exactly
        drawn = exact_redraw(q, u, drawn, near.nonzero().flatten().tolist())
    return drawn
