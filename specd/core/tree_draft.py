"""A model draft's proposal, drafted level by level: every request's tree in one pass over depth.

At each level the nodes being drafted from (the root first: the row after the output's last
token) have their draft rows processed into q together; each gets its children (a chain's one,
a tree's as its shape says; specd.core.tree_shape), the level's tokens are read from the device
at once, and the children that will have children of their own are fed to the draft in one call
whose rows see only their own branch. A chain is the tree with one child per level: its drafts,
q rows, uniforms and calls are the chain's as they always were.

How a node's children are chosen (``specd.core.tree``: the construction, recorded as each
child's q row):

- ``sampled``: child r is drawn by inverse CDF from q with children 0..r-1 removed and the rest
  renormalized (that row is its q), at the request's next proposal uniform; the first child is a
  chain's draft. Under the invariant rule the draft reads no uniform: its children are the
  Gumbel-top-k of q under the shared noise at their position, which is the same law.
- ``iid``: every child drawn from q at its own uniform (q is each one's row).
- ``rank``: the top children by q (a greedy draft: by its processed logits), each recorded as the
  point mass on its token (a greedy draft's first child keeps its one-hot row, as a chain's).

The proposal uniforms are read in node order: node n drawn from a uniform reads the request's
next one. ``--draft-stop P`` gives a node no children where the draft's largest probability is
below P (a function of the draft's own row: K stays a stopping time).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specd.core import device_chain
from specd.core.kv import PENDING
from specd.core.model import RowInput
from specd.core.probability import EMPTY_ROW, empty_rows
from specd.core.processors import PolicyState
from specd.core.record import record
from specd.core.rows import packed
from specd.core.tree import DraftTree
from specd.core.tree_shape import TreeShape
from specd.errors import EmptyDistribution, UsageError


@dataclass
class Growing:
    """One request's tree as it is drafted."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    q_rows: list[torch.Tensor | None] = field(default_factory=list)  # None: a point mass on the token
    logp: list[float] = field(default_factory=list)  # the path's log-probability under the draft
    temp: dict[int, int] = field(default_factory=dict)  # node (-1: root) -> its row among the draft cache's temporary
    draws: int = 0  # proposal uniforms read


@dataclass
class Expansion:
    """A node the level drafts children from: request ``b``'s ``node`` (-1: the root)."""

    b: int
    node: int
    raw: torch.Tensor  # float[V]: the draft's logits after it
    proc: PolicyState
    path: tuple[int, ...]  # its rank path (a static shape's key)
    depth: int  # the root's 0
    children: int = 0
    exclude: tuple[int, ...] = ()  # tokens its children may not be (earlier siblings from another source)


def construction(shape: TreeShape | None, greedy: bool, noise) -> str:
    """How a request's children are chosen (module docstring), from the shape asked for, the draft
    policy and the rule's draft noise."""
    asked = shape.drawn if shape is not None else None
    if greedy or (shape is not None and shape.dynamic):
        return "rank"
    if asked == "iid" and noise is not None:
        raise UsageError(
            "--tree iid: children drawn i.i.d. read proposal uniforms, which a draft under the invariant rule does "
            "not (it races under the shared noise); use --rule maximal, or sampled children"
        )
    return asked or "sampled"


@record
class Drafted:
    """What a model draft drafted for a batch (a Proposal's parts, specd.core.proposer): per row its
    nodes' tokens, the packed q rows and each node's row (-1: a point mass), the proposal uniforms read,
    what it staged (slot -> hidden rows, a shared-body draft's), its first call (most tokens fed one row,
    seconds) and per row its tree where that is not a chain."""

    drafts: tuple[tuple[int, ...], ...]
    q: torch.Tensor
    q_index: tuple[tuple[int, ...], ...]
    draws: tuple[int, ...]
    staged: dict
    first_call: tuple[int, float] = (0, 0.0)
    trees: tuple[DraftTree | None, ...] = ()
    fed_rows: int = 0  # rows the calls after the first fed, together (a tree's levels: several a call)
    # int64[B, K] on the device: a chain's tokens where they were never read (``drafts`` PENDING;
    # specd.core.device_chain), -1 past a row's drafts. None: the drafts are known.
    ids: torch.Tensor | None = None


def draft_trees(proposer, states, ks, shapes, cache, ctx, exclude=None) -> Drafted:
    """What ``proposer`` (a ModelProposer) drafts for each of ``states``: up to ks[b] levels, each
    request's tree as shapes[b] says (None: a chain of ks[b]). ``exclude``: per row, tokens the root's
    children may not be (the root's earlier children, another source's: its q rows are then q without
    them, renormalized, the law its children are drawn from)."""
    shapes = list(shapes) if shapes is not None else [None] * len(states)
    noise = ctx.noise if not proposer.policy.greedy else None  # the rule's: race under it, read no uniform
    ways = [construction(s, proposer.policy.greedy, noise) for s in shapes]
    device = getattr(proposer.model, "device", "cpu")
    grown = [Growing() for _ in states]
    live = [b for b in range(len(states)) if ks[b] > 0]
    if not live:
        empty = packed([[] for _ in states], proposer.vocab_size, ctx.dtype, device)
        return Drafted(tuple(() for _ in states), *empty, (0,) * len(states), {})
    size = {b: shapes[b].cut(ks[b]).size if shapes[b] is not None else ks[b] for b in live}
    reads = [b for b in live if ways[b] != "rank" and noise is None]  # children drawn at proposal uniforms
    uniforms = {b: ctx.draws(states[b], "proposal", size[b]) for b in reads}
    staged: dict = {}
    rows = []
    for b in live:
        tokens = proposer.pending(cache, states[b])
        start = cache.length(states[b].slot)
        rows.append(RowInput(states[b].slot, tokens, tuple(range(start, start + len(tokens)))))
        grown[b].temp[-1] = len(cache.temporary(states[b].slot)) + len(tokens) - 1
    started = time.perf_counter()
    raws = proposer.forward(cache, rows, staged)
    first_call = (max(len(r.tokens) for r in rows), time.perf_counter() - started)
    if device_chain.on_device(proposer, [states[b] for b in live], shapes, exclude):
        return _drafted_on_device(proposer, states, ks, live, cache, ctx, raws, uniforms, staged, first_call)
    level = [
        Expansion(b, -1, raw, states[b].draft_proc, (), 0, exclude=tuple(exclude[b]) if exclude else ())
        for b, raw in zip(live, raws)
    ]
    dynamic = any(s is not None and s.dynamic for s in shapes)
    fed = 0
    while level:
        level = [e for e in level if _plan_children(e, shapes[e.b], ks[e.b])]
        if not level:
            break
        born = _children(proposer, level, ways, states, uniforms, grown, noise, ctx, dynamic)
        level = _feed(proposer, cache, states, shapes, ks, grown, born, staged)
        fed += len(level)
    trees = [_finish(g, shapes[b], ways[b]) for b, g in enumerate(grown)]
    q, q_index = _packed_q([rows_of for _, rows_of in trees], proposer.vocab_size, ctx.dtype, device)
    tree_of = tuple(None if t.is_chain else t for t, _ in trees)
    return Drafted(
        tuple(t.tokens for t, _ in trees),
        q,
        q_index,
        tuple(g.draws for g in grown),
        staged,
        first_call,
        tree_of if any(t is not None for t in tree_of) else (),
        fed,
    )


def _drafted_on_device(proposer, states, ks, live, cache, ctx, raws, uniforms, staged, first_call) -> Drafted:
    """Chains drafted on the device (specd.core.device_chain): their tokens stay there, PENDING here."""
    ids, q_rows, fed = device_chain.draft_chain(proposer, states, ks, live, cache, ctx, raws, uniforms, staged)
    rows_of = [q_rows.get(b, []) for b in range(len(states))]
    device = getattr(proposer.model, "device", "cpu")
    q, q_index = _packed_q(rows_of, proposer.vocab_size, ctx.dtype, device)
    drafts = tuple((PENDING,) * len(r) for r in rows_of)
    draws = tuple(ks[b] if b in uniforms else 0 for b in range(len(states)))
    return Drafted(drafts, q, q_index, draws, staged, first_call, (), fed, ids)


def _packed_q(q_rows: list[list], vocab: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, tuple]:
    """Per request, its nodes' q rows (None: a point mass, recorded as the token alone) -> (q float[N, V],
    the rows that exist packed; per request, each node's row of q, -1 for a point mass)."""
    q, index = packed([[r for r in rows if r is not None] for rows in q_rows], vocab, dtype, device)
    return q, tuple(_indices(rows, qi) for rows, qi in zip(q_rows, index))


def _indices(q_rows: list, packed_index: tuple[int, ...]) -> tuple[int, ...]:
    """Per node, its row of the packed q (-1: a point mass), from the rows kept in order."""
    it = iter(packed_index)
    return tuple(next(it) if r is not None else -1 for r in q_rows)


def _plan_children(e: Expansion, shape: TreeShape | None, k: int) -> bool:
    """Set how many children ``e`` gets this level (False: none)."""
    if e.depth >= k:
        return False
    if shape is None:
        e.children = 1
    elif shape.dynamic:
        e.children = shape.width
    else:
        e.children = shape.cut(k).children(e.path)
    return e.children > 0


def _children(proposer, level: list[Expansion], ways, states, uniforms, grown, noise, ctx, dynamic: bool):
    """Draft every expansion's children -> the new nodes as (expansion, rank, node index)."""
    policy = proposer.policy
    raw_rows = torch.stack([e.raw for e in level])
    procs = [e.proc for e in level]
    q_rows = policy.probabilities(raw_rows, procs, ctx.backend, ctx.dtype, check=False)
    if any(e.exclude for e in level):
        q_rows, left = _without_tokens(q_rows, [e.exclude for e in level])
        if not policy.greedy and not all(left):  # every token of the row is another source's child already
            keep = [j for j, has in enumerate(left) if has]
            level, procs = [level[j] for j in keep], [procs[j] for j in keep]
            q_rows, raw_rows = q_rows[keep], raw_rows[keep]
            if not level:
                return []
    if proposer.draft_stop > 0:
        if not policy.greedy and bool(empty_rows(q_rows).any()):  # before a row without mass stops
            raise EmptyDistribution(EMPTY_ROW)
        sure = proposer.confidence(raw_rows, q_rows, procs) >= proposer.draft_stop
        keep = sure.nonzero().flatten()
        level = [level[j] for j in keep.tolist()]
        if not level:
            return []
        q_rows, raw_rows = q_rows[keep.to(q_rows.device)], raw_rows[keep.to(raw_rows.device)]
        procs = [e.proc for e in level]
    picks = _pick(proposer, level, q_rows, raw_rows, procs, ways, states, uniforms, grown, noise)
    born = []
    for j, e in enumerate(level):
        g = grown[e.b]
        for r, (token, row) in enumerate(picks[j]):
            g.tokens.append(token)
            g.parents.append(e.node)
            g.q_rows.append(row.to(ctx.dtype) if row is not None else None)
            born.append((e, r, len(g.tokens) - 1))
    if dynamic:  # path probabilities, read once a level: a dynamic tree keeps its likeliest nodes
        probs = torch.softmax(policy.logits(raw_rows, procs).double(), -1) if policy.greedy else q_rows
        at = torch.tensor([[j, tok] for j in range(len(level)) for tok, _ in picks[j]], device=q_rows.device)
        logq = probs[at[:, 0], at[:, 1]].double().clamp_min(1e-300).log().tolist()
        for (e, _, node), lq in zip(born, logq):
            g = grown[e.b]
            g.logp.extend([0.0] * (node + 1 - len(g.logp)))
            g.logp[node] = (g.logp[e.node] if e.node >= 0 else 0.0) + lq
    return born


def _pick(proposer, level, q_rows, raw_rows, procs, ways, states, uniforms, grown, noise):
    """Each expansion's children as [(token, its q row or None: a point mass)], in rank order."""
    out: list[list] = [[] for _ in level]
    by_way: dict[str, list[int]] = {}
    for j, e in enumerate(level):
        by_way.setdefault(ways[e.b], []).append(j)
    for way, js in by_way.items():
        q, m = q_rows[js], [level[j].children for j in js]
        if way == "rank":
            excluded = [level[j].exclude for j in js]
            picked = _ranked(proposer, q, raw_rows[js], [procs[j] for j in js], max(m), excluded)
            for j, tops, count, row, ex in zip(js, picked, m, q, excluded):
                first_row = row if proposer.policy.greedy and not ex else None  # a greedy draft's one-hot row
                out[j] = [(t, first_row if r == 0 else None) for r, t in enumerate(tops[:count])]
        elif noise is not None:  # sampled, under the shared noise: the Gumbel-top-k
            e_states, offsets = [states[level[j].b] for j in js], [level[j].depth for j in js]
            first_drawn = noise.race(e_states, offsets, q)
            first = proposer.read_step(q, None, first_drawn, None)
            rest = noise.race_top(e_states, offsets, q, max(m))[:, 1:].tolist() if max(m) > 1 else [[] for _ in js]
            for j, a, others, count, row in zip(js, first, rest, m, q):
                tokens = list(dict.fromkeys([a, *(t for t in others if t >= 0)]))[:count]
                out[j] = list(zip(tokens, _without(row, tokens)))
        else:
            for j, picked in zip(js, _drawn(proposer, [level[j] for j in js], q, m, way, uniforms, grown)):
                out[j] = picked
    return out


def _ranked(proposer, q: torch.Tensor, raw: torch.Tensor, procs, m: int, excluded) -> list[list[int]]:
    """The top m tokens of each row (a greedy draft: by its processed logits) but the ``excluded``,
    ties to the lower id: the first is the draft's argmax, as a chain's (``draw``, one read)."""
    scores = proposer.policy.logits(raw, procs) if proposer.policy.greedy else q.log()
    if any(excluded):  # another source's children come first: never these
        scores = scores.clone()
        for j, ex in enumerate(excluded):
            scores[j, list(ex)] = float("-inf")
        first = proposer.read_step(q, None, scores.argmax(-1), None)
    else:
        first = proposer.read_step(q, None, proposer.draw(q, None)[0] if proposer.policy.greedy else q.argmax(-1), None)
    if m == 1:
        return [[t] for t in first]
    top = torch.sort(scores, dim=-1, descending=True, stable=True)
    order = torch.where(top.values[:, :m] > float("-inf"), top.indices[:, :m], -1).tolist()  # no child without mass
    return [list(dict.fromkeys([a, *(t for t in row if t >= 0)])) for a, row in zip(first, order)]


def _without_tokens(q_rows: torch.Tensor, excluded) -> tuple[torch.Tensor, list[bool]]:
    """q rows float[N, V] with each row's ``excluded`` tokens removed and the rest renormalized ->
    (the rows, whether each kept any mass). A row left without mass stays as it was (a greedy draft's
    one-hot row: its children are ranked by its logits, ``_ranked``)."""
    out = q_rows.clone()
    for j, ex in enumerate(excluded):
        if ex:
            out[j, list(ex)] = 0.0
    mass = out.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, out / mass.clamp_min(1e-300), q_rows), (mass.squeeze(1) > 0).tolist()


def _without(row: torch.Tensor, tokens: list[int]) -> list[torch.Tensor]:
    """The rows children drawn without replacement came from: q, then q without the earlier ones,
    renormalized."""
    rows, left = [], row.to(torch.float64)
    for t in tokens:
        rows.append((left / left.sum()).to(row.dtype))
        left = left.clone()
        left[t] = 0.0
    return rows


def _drawn(proposer, level, q, m, way, uniforms, grown):
    """Children drawn at the requests' proposal uniforms (sampled: without replacement; iid: each
    from q), one read from the device per rank (a chain: one a level); a row stops once no mass is
    left to draw from. Child r of an expansion reads its request's uniform at the node index it
    would have among the level's planned children (node order; a child never drawn leaves its
    uniform unread)."""
    out: list[list] = [[] for _ in level]
    base = []  # per expansion: its request's uniform index for its first child
    for e, count in zip(level, m):
        g = grown[e.b]
        base.append(g.draws)
        g.draws += count
    current, here = q, list(range(len(level)))
    for r in range(max(m)):
        here = [j for j in here if m[j] > r]
        if not here:
            break
        rows = current[here]
        u = torch.tensor([uniforms[level[j].b][base[j] + r] for j in here], dtype=torch.float64)
        chosen, near = proposer.draw(rows, u)
        tokens = proposer.read_step(rows, u, chosen, near)
        for j, token, row in zip(here, tokens, rows):
            out[j].append((token, row))
        if way == "sampled" and r + 1 < max(m):  # the next child's row: the earlier ones removed
            left = current.to(torch.float64).clone()
            left[torch.tensor(here), torch.tensor(tokens)] = 0.0
            mass = left.sum(dim=-1, keepdim=True)
            has = (mass.squeeze(1) > 0).tolist()
            here = [j for j in here if has[j]]
            current = (left / mass.clamp_min(1e-300)).to(q.dtype)
    return out


def _feed(proposer, cache, states, shapes, ks, grown, born, staged) -> list[Expansion]:
    """Feed the new nodes that get children of their own to the draft in one call (each row seeing
    its own branch) -> the next level's expansions."""
    nxt = []
    for e, r, node in born:
        shape, depth = shapes[e.b], e.depth + 1
        path = e.path + (r,)
        if depth >= ks[e.b]:
            continue
        if shape is not None and not shape.dynamic and shape.cut(ks[e.b]).children(path) == 0:
            continue
        nxt.append(Expansion(e.b, node, torch.empty(0), e.proc.advance(grown[e.b].tokens[node]), path, depth))
    nxt = _dynamic_selection(nxt, shapes, grown)
    if not nxt:
        return []
    by_b: dict[int, list[Expansion]] = {}
    for e in nxt:
        by_b.setdefault(e.b, []).append(e)
    rows = []
    for b, group in by_b.items():
        slot, g = states[b].slot, grown[b]
        base = len(cache.temporary(slot))
        parents = tuple(g.temp[g.parents[e.node]] for e in group)
        positions = tuple(len(cache.committed(slot)) + _temp_depth(cache, slot, p) for p in parents)
        # one row continuing every temporary row (none of them off its branch): a chain's step
        chain = len(group) == 1 and parents[0] == base - 1 and positions[0] == cache.length(slot)
        for i, e in enumerate(group):
            g.temp[e.node] = base + i
        tokens = tuple(g.tokens[e.node] for e in group)
        rows.append(RowInput(slot, tokens, positions, None if chain else parents))
    raws = proposer.forward_rows(cache, rows, staged)
    for group, out in zip(by_b.values(), raws):
        for e, row in zip(group, out):
            e.raw = row
    return [e for group in by_b.values() for e in group]


def _temp_depth(cache, slot: int, row: int) -> int:
    """How many temporary rows, ``row`` included, lie on the branch to ``row`` (its ancestors)."""
    return len(cache.ancestors(slot, row))


def _dynamic_selection(nxt: list[Expansion], shapes, grown) -> list[Expansion]:
    """A dynamic tree expands, per level and request, only its ``width`` likeliest new nodes."""
    keep = []
    by_b: dict[int, list[Expansion]] = {}
    for e in nxt:
        by_b.setdefault(e.b, []).append(e)
    for b, group in by_b.items():
        shape = shapes[b]
        if shape is None or not shape.dynamic:
            keep.extend(group)
            continue
        best = sorted(group, key=lambda e: (-grown[b].logp[e.node], e.node))[: shape.width]
        keep.extend(sorted(best, key=lambda e: e.node))
    return keep


def _finish(g: Growing, shape: TreeShape | None, way: str) -> tuple[DraftTree, list]:
    """The request's tree and its nodes' q rows (a dynamic tree: its N likeliest nodes, in order)."""
    tokens, parents, rows = g.tokens, g.parents, g.q_rows
    if shape is not None and shape.dynamic and len(tokens) > shape.nodes:
        order = sorted(range(len(tokens)), key=lambda n: (-g.logp[n], n))
        kept = sorted(order[: shape.nodes])  # a node's path probability is at most its parent's: a tree
        new = {old: i for i, old in enumerate(kept)} | {-1: -1}
        tokens, parents, rows = [tokens[n] for n in kept], [new[parents[n]] for n in kept], [rows[n] for n in kept]
    return DraftTree(tuple(tokens), tuple(parents), way), rows
