"""One speculative round, top to bottom: propose -> verify -> decide -> commit.

This is the only place a round happens; every command (generate, trace,
sweep-k --measure, the oracle's enumeration and Monte Carlo) runs this function.
"""

from __future__ import annotations

import time

import torch

from specd.core.proposer import Proposal
from specd.core.session import DecodeSession
from specd.core.transaction import Outcome, SpeculativeCommit


def speculative_round(session: DecodeSession) -> list[SpeculativeCommit]:
    """Run one round for every live request of the session.

    Nothing authoritative changes before a request's commit: its successor S_1 is
    staged off to the side and published by compare-and-swap. A failure anywhere
    leaves every unpublished request at its round-start state S_0 (its temporary
    K/V rows are dropped), and a retry re-reads the same draws, because stream
    counters move only at publication.
    """
    eng = session.engine
    started = time.perf_counter()
    active = session.ready()  # live requests; the retained layout materializes their frontiers first
    if not active:
        return []
    ks = [eng.k_for(s) for s in active]
    txns = [eng.transaction_cls(s, eng.layout, eng.config.eos_ids, eng.fault_hook) for s in active]
    try:
        # 1. propose: each row drafts up to k tokens and reports the q rows it drew them from.
        with session.timed("draft"):
            proposal = eng.proposer.propose(
                active, ks, session.draft_cache, session.draws, eng.config.backend, eng.config.prob_dtype
            )
        ks = [len(d) for d in proposal.drafts]  # a proposer may offer fewer drafts than asked

        # 2. verify: one target call scores every row's drafts (and the bonus position).
        with session.timed("verify"):
            verified = session.verify(active, proposal.drafts)
        for txn, drafts, v in zip(txns, proposal.drafts, verified):
            txn.verified(drafts, v, len(drafts) if proposal.sampled else 0)

        # 3. decide: the exact rule (p from the target's processed rows, q as drawn), then the terminal draw.
        p = session.target_rows(active, verified, proposal.drafts)
        draft, k_lens, q = batch_drafts(proposal, ks, p.device)
        if eng.target_policy.greedy:  # p_i is a point mass on the argmax: no uniform is read
            decision = eng.sampler.decide_greedy(p, q, draft, k_lens)
            accept_u, terminal_u = None, torch.zeros(len(active), dtype=torch.float64, device=p.device)
        else:
            accept_u, terminal_u = session.uniforms(active, ks, p.device)
            decision = eng.sampler.decide(p, q.to(p.dtype), draft, k_lens, accept_u)
        terminal = eng.sampler.sample_terminal(decision.terminal_rows, terminal_u)
        for txn, a, t, bonus in zip(txns, decision.accepted.tolist(), terminal.tolist(), decision.is_bonus.tolist()):
            txn.decided(Outcome(a, t, bonus, decision.uses_draws))

        # 4. commit: stage every successor (stops, K/V rows to keep, processors, stream counters),
        #    then publish each by compare-and-swap; the caches follow what was published.
        for txn in txns:
            txn.stage()
        commits = [session.publish(txn) for txn in txns]
    except BaseException:
        session.abort(txns)
        raise
    session.end_round(txns, proposal, decision, accept_u, started)
    return commits


def batch_drafts(proposal: Proposal, ks: list[int], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> draft int64[B, K] padded with -1, k_lens int64[B], q float[B, K, V] (K = max k)."""
    k_max = max(ks, default=0)
    padded = [list(d) + [-1] * (k_max - len(d)) for d in proposal.drafts]
    draft = torch.tensor(padded, dtype=torch.int64).reshape(len(ks), k_max)
    k_lens = torch.tensor(ks, dtype=torch.int64, device=device)
    return draft.to(device), k_lens, proposal.q[:, :k_max].to(device)
