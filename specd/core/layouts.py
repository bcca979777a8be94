"""Frontier layouts: which rows a verification call feeds, and which K/V rows it commits.

Both layouts publish the same logical successor: output O', committed cache
C' = O'[:-1] and frontier F' = O'[-1]. They differ in the round-start cache:

- ``replay_frontier``: the cache holds O[:-1]; the call feeds [F, d_1..d_k] at
  positions n-1..n-1+k and returns p_1..p_{k+1} in its k+1 logit rows. The
  replayed K/V(F) is authoritative and is committed even when A = 0.
- ``retained_frontier``: before the round, F is materialized by an ordinary
  target step that also retains p_1; the call feeds [d_1..d_k] at positions
  n..n+k-1 and returns p_2..p_{k+1}.

Logit row j scores the token *after* input j; K/V row j belongs to input j.

A round's drafts are the nodes of a token tree (specd.core.tree): the call feeds them in node
order, each at the position of its depth (F's position + depth) and seeing only its ancestors
(``RowInput.parents``), so its logit row is the one after the node on its own branch. A chain
is fed as it always was. The rows a round commits are those of the accepted path, in order
(``commit_order``: the path's rows first, then the rest, so that a count of rows to commit
names the path's first rows; on a chain, the first rows).
"""

from __future__ import annotations

import torch

from specd.core.kv import KVRows, grown_prefix, same_tokens
from specd.core.model import RowInput
from specd.core.record import record
from specd.core.state import RequestState
from specd.core.tree import DraftTree
from specd.errors import CacheIdentityError, UnknownLayout, shown


@record
class Verified:
    """The logical tuple both layouts extract: ([p_1..p_k], p_{k+1}, [KV(d_1)..KV(d_k)])."""

    p_raw: torch.Tensor  # float[k+1, V] raw target logits scoring d_1..d_k and the bonus
    kv_draft: KVRows  # rows owned by d_1..d_k
    kv_frontier: KVRows | None  # replayed K/V(F), replay layout only


class FrontierLayout:
    name = "layout"

    def frontier_input(self, state: RequestState) -> RowInput | None:
        """Rows to materialize before the round (READY), or None."""
        raise NotImplementedError

    def verification_input(self, state: RequestState, tree: DraftTree) -> RowInput | None:
        raise NotImplementedError

    def commit_order(self, tree: DraftTree, path: tuple[int, ...]) -> tuple[int, ...]:
        """The verification call's K/V rows, those of the accepted ``path`` (node indices from the
        root down) first, in order, then every other one: a count from ``rows_to_commit`` keeps the
        first of them."""
        raise NotImplementedError

    def extract(self, logits: torch.Tensor | None, kv: KVRows | None, state: RequestState, k: int) -> Verified:
        raise NotImplementedError

    def rows_to_commit(self, accepted_emitted: int, terminal_emitted: bool, branch_rows: int) -> int:
        """How many of the verification call's ``branch_rows`` K/V rows become history."""
        raise NotImplementedError


def _check_round_start(state: RequestState, cached_frontier: bool) -> None:
    """The round-start cache holds the output (retained) or the output minus its frontier (replay).
    Both grow by appending what each round publishes: its count and ``grown_prefix`` tell it."""
    cache, output = state.cache_tokens, state.output
    n = len(output) if cached_frontier else len(output) - 1
    if len(cache) != n or not grown_prefix(cache, output):
        raise CacheIdentityError(
            f"{state.request_id}: round-start cache holds {len(state.cache_tokens)} rows that are not "
            f"the {'output' if cached_frontier else 'output minus its frontier'} ({n} tokens)"
        )


class ReplayFrontier(FrontierLayout):
    name = "replay_frontier"

    def frontier_input(self, state):
        return None

    def verification_input(self, state, tree):
        _check_round_start(state, cached_frontier=False)
        start = len(state.cache_tokens)
        positions = (start, *(start + d for d in tree.depths))
        parents = None if tree.is_chain else (-1, *(p + 1 for p in tree.parents))  # node n is row n + 1
        ids = tree.ids
        if state.pending_ids is not None:  # the frontier itself is not read yet (run ahead): its tokens follow
            ids = (
                state.pending_ids
                if not len(tree)
                else torch.cat([state.pending_ids, _known(tree).to(state.pending_ids.device)])
            )
        return RowInput(state.slot, (state.output[-1], *tree.tokens), positions, parents, ids)

    def commit_order(self, tree, path):
        on_path = (0, *(n + 1 for n in path))
        return on_path + tuple(r for r in range(len(tree) + 1) if r not in on_path)

    def extract(self, logits, kv, state, k):
        if logits is None or logits.shape[0] != k + 1:
            raise CacheIdentityError(f"replay_frontier expects k+1 = {k + 1} logit rows")
        if not same_tokens(kv.tokens[:1], state.output[-1:]):  # a provisional frontier is PENDING (run ahead)
            raise CacheIdentityError("replay_frontier: first K/V row is not the frontier token")
        return Verified(p_raw=logits, kv_draft=kv.take(1), kv_frontier=kv.take(0, 1))  # k + 1 rows: all of them

    def rows_to_commit(self, accepted_emitted, terminal_emitted, branch_rows):
        # frontier row + accepted drafts, minus the last emitted token when it ends the output
        return 1 + accepted_emitted if terminal_emitted else accepted_emitted


def _known(tree: DraftTree) -> torch.Tensor:
    """A tree's node tokens as a tensor on the device of its pending ones (or the CPU)."""
    return tree.ids if tree.ids is not None else torch.tensor(tree.tokens, dtype=torch.int64)


class RetainedFrontier(FrontierLayout):
    name = "retained_frontier"

    def frontier_input(self, state):
        if state.frontier is None:
            return None
        _check_round_start(state, cached_frontier=False)
        start = len(state.cache_tokens)
        return RowInput(state.slot, (state.output[-1],), (start,))

    def verification_input(self, state, tree):
        _check_round_start(state, cached_frontier=True)
        if state.retained_logits is None:
            raise CacheIdentityError("retained_frontier: no retained p_1 at round start")
        if not len(tree):
            return None  # p_1 is already known: a k = 0 round needs no target call
        start = len(state.cache_tokens)
        positions = tuple(start + d - 1 for d in tree.depths)
        return RowInput(state.slot, tree.tokens, positions, None if tree.is_chain else tree.parents, tree.ids)

    def commit_order(self, tree, path):
        return path + tuple(n for n in range(len(tree)) if n not in path)

    def extract(self, logits, kv, state, k):
        retained = state.retained_logits.unsqueeze(0)
        if k == 0:
            return Verified(p_raw=retained, kv_draft=KVRows(state.slot, (), ()), kv_frontier=None)
        if logits is None or logits.shape[0] != k:
            raise CacheIdentityError(f"retained_frontier expects k = {k} logit rows")
        return Verified(p_raw=torch.cat([retained.to(logits.dtype), logits[:k]]), kv_draft=kv, kv_frontier=None)

    def rows_to_commit(self, accepted_emitted, terminal_emitted, branch_rows):
        return accepted_emitted if terminal_emitted else accepted_emitted - 1


LAYOUTS = {cls.name: cls for cls in (ReplayFrontier, RetainedFrontier)}


def make_layout(name: str) -> FrontierLayout:
    try:
        return LAYOUTS[name]()
    except KeyError:
        raise UnknownLayout(f"unknown layout {shown(name)}; choose one of {', '.join(LAYOUTS)}") from None
