"""A round's rows, packed: the tensors sized by the vocabulary hold only the rows that exist,
never B x K_max of them. Shapes (B requests, request b with k_b drafts, K = the most drafts of any
request, R = the sum of k_b + 1, R_q the rows a draft model drew from, V the vocabulary):

    p          float[R, V]       the target's processed rows, request b's p_1..p_{k_b+1} from p_start[b]
    q          float[R_q, V]     the draft's processed rows that sampled model drafts (a lookup has none)
    q_index    int64[B, K]       each draft's row of q; -1: a point mass on the draft (q(d) = 1: a
                                 lookup's) or padding past k_b
    draft      int64[B, K]       proposed tokens d_1..d_k, -1 past k_b
    k_lens     int64[B]          drafts per request (0 is a plain target step)

A request's drafts are the nodes of its proposal tree (``specd.core.tree``: node n's parent,
depth and siblings; a chain of k drafts is the tree with one branch). Its k_b + 1 target rows are
p at the root (the row after the frontier, scoring the root's children) and then one per node,
the row after node n scoring node n's children; a chain's are p_1..p_{k+1}. ``tree`` holds the
structure (``TreeBatch``: each node's parent, each node's last child).

Every rule (``specd.core.sampler``, ``specd.core.block``) reads them through ``Rows``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from functools import cached_property

import torch

from specd.core.record import record
from specd.core.transfer import to_device
from specd.core.tree import ROOT, TreeBatch


def joined(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """torch.cat(parts) over dim 0; without a copy when the parts lie back to back in one contiguous
    block of memory (a verification call's rows, each request's taken in order: the common case), and
    one part itself (no new view: after a model call, each tensor operation costs tens of us)."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0] if parts else None
    if first is None or not all(p.is_contiguous() and p.dtype == first.dtype for p in parts):
        return torch.cat(list(parts))
    row = first.stride(0) if first.dim() > 1 else 1
    at = first.data_ptr()
    for p in parts:
        if p.data_ptr() != at or p.device != first.device or p.shape[1:] != first.shape[1:]:
            return torch.cat(list(parts))
        at += p.shape[0] * row * p.element_size()
    rows = sum(p.shape[0] for p in parts)
    return first.as_strided((rows, *first.shape[1:]), first.stride(), first.storage_offset())


@functools.lru_cache(maxsize=256)
def constant(value, shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """A tensor of ``shape`` filled with ``value``, made once per (value, shape, dtype, device) and
    shared: never written (a round without drafts reads the same zeros, ones and -1s every round,
    where making them is a few operations each, each slow right after a model call)."""
    return torch.full(shape, value, dtype=dtype, device=device)


def valid_positions(k_lens: torch.Tensor, k_max: int) -> torch.Tensor:
    """k_lens int64[B] -> bool[B, K]: True where a draft exists."""
    return torch.arange(k_max, device=k_lens.device).unsqueeze(0) < k_lens.unsqueeze(1)


def per_request(values: torch.Tensor, ks: Sequence[int], k_max: int) -> torch.Tensor:
    """One value per packed target row (request b's k_b + 1 rows in turn), [R] -> [B, K+1] with
    ``k_max`` = K: request b's in row b, 0 past them; a view, no copy, where every k_b is K."""
    if all(k == k_max for k in ks):
        return values.view(len(ks), k_max + 1)
    out = torch.zeros(len(ks), k_max + 1, dtype=values.dtype, device=values.device)
    out[valid_positions(to_device(ks, torch.int64, values.device) + 1, k_max + 1)] = values
    return out


def row_starts(k_lens: torch.Tensor) -> torch.Tensor:
    """k_lens int64[B] -> where each request's k_b + 1 target rows begin in the packed p, int64[B]."""
    return torch.cumsum(k_lens + 1, 0) - (k_lens + 1)


@record
class Rows:
    """A round's rows, packed (shapes and terms in the module docstring). ``p`` is None where the
    target's tokens are decided without its rows (greedy: the argmax ids ``target_argmax``, int64[B, K+1],
    0 past a request's k_b + 1, stand for them)."""

    p: torch.Tensor | None  # float[R, V]
    p_start: torch.Tensor | None  # int64[B]
    q: torch.Tensor  # float[R_q, V]
    q_index: torch.Tensor  # int64[B, K]
    draft: torch.Tensor  # int64[B, K]
    k_lens: torch.Tensor  # int64[B]
    vocab: int
    target_argmax: torch.Tensor | None = None  # int64[B, K+1]: a greedy target's argmax ids (p None)
    k_host: tuple[int, ...] | None = None  # k_lens as the host knows it (None: read it from k_lens)
    tree: TreeBatch | None = None  # the proposals' structure (None: every proposal is a chain)

    def ks(self) -> list[int]:
        """Drafts per request as Python ints (no read from the device when the round knows them)."""
        return list(self.k_host) if self.k_host is not None else self.k_lens.tolist()

    @classmethod
    def dense(cls, p: torch.Tensor | None, q: torch.Tensor, draft: torch.Tensor, k_lens: torch.Tensor) -> Rows:
        """Pack padded rows (p float[B, K+1, V] or None, q float[B, K, V]; rows past k_b + 1 and k_b
        ignored): the form tests and the sampler protocol use."""
        b, k_max = draft.shape
        valid = valid_positions(k_lens, k_max)
        q_index = torch.full((b, k_max), -1, dtype=torch.int64, device=draft.device)
        q_index[valid] = torch.arange(int(valid.sum()), device=draft.device)
        p_packed = p_start = None
        if p is not None:
            p_packed = p[valid_positions(k_lens + 1, k_max + 1)]
            p_start = row_starts(k_lens)
        return cls(p_packed, p_start, q[valid], q_index, draft, k_lens, q.shape[-1])

    def valid(self) -> torch.Tensor:
        """bool[B, K]: True where a draft exists (built once per Rows; read-only)."""
        return self._valid

    @cached_property
    def _valid(self) -> torch.Tensor:
        return valid_positions(self.k_lens, self.draft.shape[1])

    def structure(self) -> TreeBatch:
        """The proposals' trees (``specd.core.tree.TreeBatch``); chains when the rows hold none."""
        return self.tree if self.tree is not None else self._chains

    @cached_property
    def _chains(self) -> TreeBatch:
        k_max = self.draft.shape[1]
        index = torch.arange(k_max + 1, device=self.draft.device).unsqueeze(0)
        last = torch.where(index < self.k_lens.unsqueeze(1), index, ROOT)  # column c's last child: node c
        parent = (index[:, :k_max] - 1).expand(len(self.k_lens), k_max)
        return TreeBatch(parent, last, k_max, True)

    def parent_rows(self) -> torch.Tensor:
        """int64[B, K]: each node's parent's row of the packed p (the row that scores the node)."""
        _, start = self.target()
        return start.unsqueeze(1) + self.structure().parent + 1

    def target(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(p, p_start): the target's packed rows, which a greedy round's Rows does not hold."""
        if self.p is None or self.p_start is None:
            raise TypeError("these rows hold the target's argmax ids, not its rows p")
        return self.p, self.p_start

    def p_at(self, positions: torch.Tensor) -> torch.Tensor:
        """int64[B] (0-based, at most k_b) -> each request's target row at ``positions``, float[B, V]:
        row 0 is the root's, row n + 1 node n's (a chain's p_{position+1})."""
        p, start = self.target()
        return p[start + positions]

    def p_draft(self) -> torch.Tensor:
        """p(d) per draft under its parent's row, float[B, K] (0 at padding): a chain's p_i(d_i)."""
        k_max = self.draft.shape[1]
        p, _ = self.target()
        index = self.parent_rows().clamp(max=len(p) - 1)
        picked = p[index, self.draft.clamp_min(0)] if k_max else p.new_zeros(len(self.k_lens), 0)
        return torch.where(self.valid(), picked, torch.zeros_like(picked))

    def q_draft(self, dtype: torch.dtype) -> torch.Tensor:
        """q_i(d_i) per draft, float[B, K]: 1 for a point mass, 0 at padding."""
        model = self.q_index >= 0
        picked = torch.ones(self.draft.shape, dtype=dtype, device=self.draft.device)
        if len(self.q):
            rows = self.q[self.q_index.clamp_min(0), self.draft.clamp_min(0)].to(dtype)
            picked = torch.where(model, rows, picked)
        return torch.where(self.valid(), picked, torch.zeros_like(picked))

    def q_at_nodes(self, requests: list[int], nodes: list[int], dtype: torch.dtype) -> torch.Tensor:
        """The q rows of the nodes (requests[j], nodes[j]), float[N, V]: each one's model row or the
        point mass on its token."""
        device = self.draft.device
        b = to_device(requests, torch.int64, device)
        n = to_device(nodes, torch.int64, device)
        index, token = self.q_index[b, n], self.draft[b, n]
        out = torch.zeros(len(nodes), self.vocab, dtype=dtype, device=device)
        if self.q.shape[0]:
            out = self.q[index.clamp_min(0)].to(dtype) * (index >= 0).unsqueeze(1)
        return out.scatter_add_(1, token.clamp_min(0).unsqueeze(1), (index < 0).to(dtype).unsqueeze(1))

    def q_at(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """int64[B] (0-based, below K) -> q_{position+1} of each request, float[B, V]: its model row,
        the point mass on its draft, or zeros where the request has no draft there."""
        b = torch.arange(len(positions), device=positions.device)
        index, token = self.q_index[b, positions], self.draft[b, positions]
        model = index >= 0
        if self.q.shape[0]:  # masked, not selected: which rows are model rows is not read from the device
            out = self.q[index.clamp_min(0)].to(dtype) * model.unsqueeze(1)
        else:
            out = torch.zeros(len(positions), self.vocab, dtype=dtype, device=positions.device)
        point = ~model & (token >= 0)
        return out.scatter_add_(1, token.clamp_min(0).unsqueeze(1), point.to(dtype).unsqueeze(1))


def packed(
    rows: Sequence[Sequence[torch.Tensor]], vocab: int, dtype: torch.dtype, device="cpu"
) -> tuple[torch.Tensor, tuple[tuple[int, ...], ...]]:
    """Per row, its q rows float[V] (one per draft) -> (q float[R_q, V], q_index): packed in row order."""
    flat = [r for row in rows for r in row]
    q = torch.stack(flat).to(dtype) if flat else torch.zeros(0, vocab, dtype=dtype, device=device)
    index, start = [], 0
    for row in rows:
        index.append(tuple(range(start, start + len(row))))
        start += len(row)
    return q, tuple(index)
