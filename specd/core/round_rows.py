"""A round's packed rows for its rule (step 3 of ``speculative_round``, specd.core.round): read from
the round's verification and proposal, written nowhere but the session's scratch buffer."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specd.core.layouts import Verified
from specd.core.probability import argmax_ids
from specd.core.proposer import Proposal
from specd.core.rows import Rows, constant, joined, per_request, row_starts
from specd.core.scratch import Scratch
from specd.core.state import RequestState
from specd.core.transfer import to_device
from specd.core.tree import DraftTree, TreeBatch

HALF = (torch.float16, torch.bfloat16)


def round_rows(
    engine,
    active: Sequence[RequestState],
    verified: Sequence[Verified],
    proposal: Proposal,
    trees: Sequence[DraftTree],
    scratch: Scratch,
) -> Rows:
    """The round's rows for the rule (specd.core.rows.Rows), packed: the target's processed rows
    (request b's k_b + 1 rows: the root's, then each node's, each at its own logical prefix: the
    target policy's processor state advanced over the node's branch), or when the target policy is
    greedy only their argmax ids; q as the draft models drew it (a lookup's drafts are ids); the
    drafts and their q rows by request, and the trees' structure where one is not a chain. The
    target's rows are processed in ``scratch`` (p lives there until the next round)."""
    policy, cfg, drafts = engine.target_policy, engine.config, proposal.drafts
    states = []
    for s, tree in zip(active, trees):
        at = [s.target_proc]  # the root's, then each node's: its parent's advanced over its token
        for token, parent in zip(tree.tokens, tree.parents):
            at.append(at[parent + 1].advance(token))
        states.extend(at)
    raw = joined([v.p_raw for v in verified])
    work = None  # where the rows are processed: greedy without processors reads raw's argmax as it is
    if policy.processors or not policy.greedy:  # half-precision logits are processed in float32
        work = scratch.rows(tuple(raw.shape), torch.float32 if raw.dtype in HALF else raw.dtype, raw.device)
    device = raw.device
    ks = [len(d) for d in drafts]
    k_max = max(ks, default=0)
    k_lens = to_device(ks, torch.int64, device) if k_max else constant(0, (len(ks),), torch.int64, device)
    p = argmax = None
    if policy.greedy:  # p_i is the point mass on the argmax: its id stands for the row
        argmax = per_request(argmax_ids(policy.logits(raw, states, work)), ks, k_max)
    else:
        p = policy.probabilities(raw, states, cfg.backend, cfg.prob_dtype, work)
    if not k_max:  # no request drafted: no draft, no q row
        index = draft = constant(0, (len(ks), 0), torch.int64, device)
    else:
        index = to_device([list(i) + [-1] * (k_max - len(i)) for i in proposal.q_index], torch.int64, device)
        if proposal.draft_ids is not None:  # drafts never read (specd.core.device_chain), -1 past a row's
            draft = proposal.draft_ids[:, :k_max].to(device)
        else:
            draft = to_device([list(d) + [-1] * (k_max - len(d)) for d in drafts], torch.int64, device)
    return Rows(
        p,
        None if p is None else row_starts(k_lens),
        proposal.q.to(device, non_blocking=True),  # a lookup's empty rows are made on the host
        index,  # each draft's row of q, int64[B, K]
        draft,
        k_lens,
        proposal.q.shape[-1],
        argmax,
        tuple(ks),
        None if all(t.is_chain for t in trees) else TreeBatch.of(trees, k_max, device),
    )
