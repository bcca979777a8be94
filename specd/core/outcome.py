"""One request's round, recorded once: ``RoundOutcome``.

Staging (``specd.core.round.stage``) produces one outcome per request and round, and
publication stores it. Everything else a run keeps about a round is a function of it:
the request's ``History`` (what the K policy reads: ``History.add``), the run's counters
(``RoundCounts.add_outcome``), the acceptance log's round row (``round_row``; its per-draft
rows add the rule's probabilities, ``specd.core.records.acceptance_rows``) and the audit
trail (the store's list of published outcomes).

Terms: of k drafts d_1..d_k, the rule accepted the prefix A (``accepted``) and drew a
terminal token (``terminal_token``): the correction at the first rejection (A < k) or the
bonus after k accepts. Stops (EOS, the token budget) may cut what is emitted: the terminal's
kind is then "stop" and ``emitted`` is what was published. When the drafts were a token tree
(specd.core.tree), ``draft_token_ids`` are its nodes in node order, ``draft_parents`` their
parents and ``accepted_path`` the A accepted nodes from the root down; a chain's round leaves
both None (its path is d_1..d_A).
"""

from __future__ import annotations

from typing import Literal

from specd.core.record import record


def chain_walk(k: int, accepted: int) -> tuple[tuple[int, bool], ...]:
    """``RoundOutcome.walk`` of a chain of ``k`` drafts that accepted ``accepted``: one child tested per
    level, passed for the accepted drafts, refused at the draft after them (if there is one)."""
    return ((1, True),) * accepted + (((1, False),) if accepted < k else ())


def walk_of(k: int, accepted: int, parents, path) -> tuple[tuple[int, bool], ...]:
    """``RoundOutcome.walk`` of a round of ``k`` drafts that accepted ``accepted`` along ``path`` (the
    accepted nodes), a tree's node ``parents`` (None: a chain; an acceptance log's round row keeps both)."""
    if parents is None:
        return chain_walk(k, accepted)
    kids: dict[int, list[int]] = {}
    for n, p in enumerate(parents):
        kids.setdefault(p, []).append(n)
    at, out = -1, []
    for level in range(accepted + 1):
        children = kids.get(at)
        if not children:
            break
        if level < accepted:
            at = path[level]
            out.append((children.index(at) + 1, True))
        else:
            out.append((len(children), False))
    return tuple(out)


@record
class RoundOutcome:
    request_id: str
    round_id: str  # "<request id>/round-<round_index>"
    round_index: int  # the request's published rounds before this one
    expected_generation: int  # the generation publication's compare-and-swap expects
    layout: str  # the frontier layout (specd.core.layouts)
    source: str | None  # the draft source (None: no drafts)
    match: int | None  # a lookup's match length its drafts continued (None: a model, or no drafts)
    draft_token_ids: tuple[int, ...]  # d_1..d_k as proposed
    accepted: int  # A, before stops
    terminal_kind: Literal["correction", "bonus", "stop"]
    terminal_token: int  # the drawn correction or bonus, even when a stop suppressed it
    emitted: tuple[int, ...]  # the published tokens
    start_position: int  # the output's length (prompt included) before the round
    committed_token_count: int  # generated tokens once the round is published
    committed_kv_token_ids: tuple[int, ...]  # temporary target K/V rows kept as history
    discarded_kv_token_ids: tuple[int, ...]  # and those dropped
    reached_acceptance_tests: int  # acceptance uniforms consumed (0 where the rule reads none)
    proposal_draws: int  # proposal uniforms the draft consumed
    rng_before: tuple[int, ...]  # stream counters (proposal, acceptance, terminal)
    rng_after: tuple[int, ...]
    processor_before_hash: str  # the target processor state's digest ("" when stateless)
    processor_after_hash: str
    finish_reason: str | None  # set when the round finished the request
    draft_parents: tuple[int, ...] | None = None  # a tree's node parents (None: a chain)
    accepted_path: tuple[int, ...] | None = None  # a tree's accepted nodes, root down (None: a chain)

    @property
    def k(self) -> int:
        """Drafts proposed this round (a tree's nodes)."""
        return len(self.draft_token_ids)

    @property
    def levels(self) -> int:
        """How deep the rule's tests went: the accepted drafts, plus one where a draft after them was
        tested and refused (a chain's min(A + 1, k); a tree's, along its walk)."""
        if self.draft_parents is None:
            return min(self.accepted + 1, self.k)
        leaf = self.accepted_path[-1] if self.accepted_path else -1
        return self.accepted + (1 if leaf in self.draft_parents else 0)

    @property
    def walk(self) -> tuple[tuple[int, bool], ...]:
        """What the rule's tests found, level by level down the walk: per depth 1, 2, .., how many of
        the node's children it tested (ranks 0..n-1, in order) and whether the last of them passed
        (the walk descended into it) or every one was refused (the walk ended there). A chain's:
        (1, True) for each accepted draft, then (1, False) where a draft after them was refused."""
        return walk_of(self.k, self.accepted, self.draft_parents, self.accepted_path)

    def round_row(self) -> dict:
        """The acceptance log's row for this round (schema specd.trace/v1, "type": "round")."""
        return {
            "type": "round",
            "request_id": self.request_id,
            "round_id": self.round_id,
            "round_index": self.round_index,
            "k": self.k,
            "source": self.source,
            "accepted": self.accepted,
            "terminal_kind": self.terminal_kind,
            "terminal_token": self.terminal_token,
            "emitted": list(self.emitted),
            "start_position": self.start_position,
            "committed_token_count": self.committed_token_count,
            "finish_reason": self.finish_reason,
            "match": self.match,
        } | (
            {"parents": list(self.draft_parents), "path": list(self.accepted_path or ())} if self.draft_parents else {}
        )
