"""Proposal sources: who drafts d_1..d_k and reports the q rows they were drawn from.

A proposer is stateless; the session owns its cache (``new_cache``) and passes
it in. Three sources:

- ``NullProposer`` proposes nothing: with it the engine is target-only decoding.
- ``ModelProposer`` runs a draft causal LM autoregressively under its own policy,
  drawing d_i from the processed row q_i with the request's ``proposal`` stream
  and recording that same row. Its cache follows the published output by token
  identity: after a round it keeps exactly the rows whose tokens were published,
  so rows of rejected drafts never survive.
- ``NgramProposer`` (prompt lookup) copies what followed an earlier occurrence of
  the output's last n tokens; q is the point mass on each proposed token.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import torch

from specd.core.gumbel import SharedNoise
from specd.core.kv import PENDING, KVCache
from specd.core.model import CausalLM, RowInput, device_sync
from specd.core.probability import EMPTY_ROW, empty_rows
from specd.core.processors import SamplingPolicy
from specd.core.record import record
from specd.core.rng import Draws
from specd.core.sampler import categorical_draw, exact_redraw
from specd.core.state import RequestState
from specd.core.tree import DraftTree, trie
from specd.core.tree_draft import draft_trees
from specd.errors import EmptyDistribution, UsageError


@record
class DraftContext:
    """What a source reads from the round besides its rows and its cache."""

    draws: Draws  # the requests' random streams (a sampled model draft's proposal uniforms)
    backend: str  # how q is computed from the draft's logits (specd.core.probability)
    dtype: torch.dtype  # q's dtype
    # The rule's draft noise (``Rule.draft_noise``): a sampled model draft races under it instead of
    # reading proposal uniforms (the invariant rule); None: it draws from its proposal stream.
    noise: SharedNoise | None = None


@record
class SourceTiming:
    """One source's turn in a round (seconds, wall clock; device-synchronized by the round)."""

    source: str  # the source's identity
    seconds: float
    steps: int  # draft forward calls (0 for a lookup)
    rows: int  # requests that drafted from it
    max_k: int  # its longest draft this round
    first_tokens: int  # the most tokens its first call fed a row (> 2: catching up)
    first_seconds: float
    fed_rows: int = 0  # rows its calls after the first fed, together (wider than ``rows`` a call: a tree's levels)


@record
class Proposal:
    """A batch's drafts: what one source returns for its rows, and what the run's sources together
    (specd.core.sources.SourceSet) return for the round, each row from the source it chose."""

    drafts: tuple[tuple[int, ...], ...]  # per row, len k_b
    q: torch.Tensor  # float[R_q, V] the rows a model drew its drafts from, packed (a lookup has none)
    q_index: tuple[tuple[int, ...], ...]  # per row and draft: its row of q, -1 for a point mass (a lookup's)
    draws: tuple[int, ...]  # per row: the proposal-stream uniforms it consumed (0: none read)
    # A shared-body draft (specd.core.shared_body): per row, the hidden states float[j, D] of the j
    # rows it wrote into the *target's* cache this round (F, d_1, ..); None for every other row.
    staged: tuple | None = None
    # One source's: its model's first call of the round, the most tokens it fed one row (more than 2
    # when the draft cache catches up on output it did not see, e.g. after K = 0 rounds) and its seconds.
    first_call_tokens: int = 0
    first_call_seconds: float = 0.0
    # The round's: the source each row drafted from (None: no drafts), and each source's turn.
    sources: tuple[str | None, ...] = ()
    timings: tuple[SourceTiming, ...] = ()
    # Per row, its drafts' tree (specd.core.tree) when they are not a chain (None, or no entry: a chain).
    trees: tuple[DraftTree | None, ...] = ()
    # One source's: the rows its calls after the first fed, all rows together (a chain's: one a call per row).
    fed_rows: int = 0
    # int64[B, K] on the device: the drafts where they were never read (``drafts`` holds PENDING for
    # them; specd.core.device_chain), -1 past a row's drafts. None: every draft is known.
    draft_ids: torch.Tensor | None = None

    def tree(self, b: int) -> DraftTree:
        """Row b's proposal as a tree (a chain: the tree with one branch; its tokens on the device
        where they were never read)."""
        given = self.trees[b] if b < len(self.trees) else None
        if given is not None:
            return given
        k, ids = len(self.drafts[b]), self.draft_ids
        pending = ids is not None and k > 0 and self.drafts[b][0] == PENDING
        return DraftTree.chain(self.drafts[b], ids=ids[b, :k] if ids is not None and pending else None)

    def read(self, cache, states) -> Proposal:
        """This proposal with its drafts read from the device where they were never read (one read), and
        ``cache``'s rows of them (a model draft's own cache, or None) resolved: for a caller that looks at
        the drafts before the round does (the failure lab's broken proposers)."""
        if self.draft_ids is None:
            return self
        ids = self.draft_ids.tolist()
        drafts = tuple(tuple(ids[b][: len(d)]) if d and d[0] == PENDING else d for b, d in enumerate(self.drafts))
        if cache is not None:
            for s, d in zip(states, drafts):
                cache.resolve(s.slot, d)
        return replace(self, drafts=drafts, draft_ids=None)

    def q_row(self, b: int, i: int) -> torch.Tensor:
        """Row b's i-th q row, float[V]: its model row, or the point mass on its draft."""
        if self.q_index[b][i] >= 0:
            return self.q[self.q_index[b][i]]
        return torch.zeros(self.q.shape[-1], dtype=self.q.dtype, device=self.q.device).index_fill_(
            0, torch.tensor([self.drafts[b][i]], device=self.q.device), 1.0
        )


class Proposer:
    """The interface. ``deterministic``: the proposal is a function of the published
    output alone (no draws), so the oracle enumerates one path with mass 1."""

    identity = "proposer"
    policy = SamplingPolicy()
    deterministic = False
    vocab_size = 0
    shares_target_cache = False  # drafts into the target's own cache (specd.core.shared_body)

    def new_cache(self) -> object | None:
        """This source's own cache (a model's K/V cache, a lookup's index), or None."""
        return None

    @property
    def forward_calls(self) -> int:
        return 0

    def propose(
        self,
        states: Sequence[RequestState],
        ks: Sequence[int],
        cache: KVCache | None,
        ctx: DraftContext,
        shapes=None,
        exclude=None,
    ) -> Proposal:
        """Up to ks[b] drafts for each of ``states``, with the q rows they were drawn from: a chain, or
        with ``shapes`` (specd.core.tree_shape.TreeShape or None, per row) a tree of that shape whose root's
        children are none of the tokens exclude[b] names (another source's, drafted before)."""
        raise NotImplementedError

    def settle(self, cache: KVCache | None, slot: int, output: tuple[int, ...] | None) -> None:
        """Align the cache with the published output (None: the round aborted)."""

    def resolve(self, cache, slot: int, drafts: Sequence[int]) -> None:
        """The cache's rows of drafts never read (PENDING) take the drafts, once the round has read them."""

    def available(self, state: RequestState, cache) -> bool:
        """Could this source propose anything for ``state`` this round? (A lookup needs a match; it
        reads the published output only.)"""
        return True

    def match_length(self, state: RequestState, cache) -> int | None:
        """A lookup's evidence for this round's proposal: the length of the earlier occurrence of the
        output's suffix it continues (the longer, the more the continuation is a copy), a function of
        the published output; 0 exactly when it has nothing to propose (then ``available`` is not
        asked). None for a source without one (a model)."""
        return None

    def behind(self, state: RequestState, cache) -> int:
        """How many tokens of the published output this source's cache lacks: what its first call
        this round must read (1 or 2 after a round it drafted in; the whole prompt at its first).
        0 for a source without a cache of its own."""
        return 0

    def step_seconds(self, batch: int) -> float:
        """Seconds one draft step takes for ``batch`` rows on this machine (a proposer without a
        model: nothing to time)."""
        return 0.0


class NullProposer(Proposer):
    identity = "none"

    def available(self, state, cache) -> bool:
        return False

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def propose(self, states, ks, cache, ctx, shapes=None, exclude=None):
        return point_masses(tuple(() for _ in states), self.vocab_size, ctx.dtype)


def check_draft_stop(value: float, where: str = "--draft-stop") -> None:
    """The draft-stop probability P: in [0, 1) (0: never stop early; 1 would never draft)."""
    if not 0.0 <= value < 1.0:
        raise UsageError(f"{where} must be in [0, 1), got {value}")


class ModelProposer(Proposer):
    """``draft_stop`` P: a row stops drafting at the first position where the draft's largest
    probability is below P (its confidence: the largest entry of q, or of the softmax of the
    processed logits when the draft is greedy and q is a point mass). That decision reads the
    draft's own row only, before the draft is drawn, so K stays a stopping time (exact)."""

    def __init__(self, model: CausalLM, policy: SamplingPolicy, draft_stop: float = 0.0):
        check_draft_stop(draft_stop)
        self.model = model
        self.policy = policy
        self.draft_stop = draft_stop
        self.identity = model.identity
        self.vocab_size = model.vocab_size

    def new_cache(self) -> KVCache | None:
        return self.model.new_cache()

    def with_policy(self, policy: SamplingPolicy, draft_stop: float) -> ModelProposer:
        """The same draft under another policy and draft-stop."""
        return ModelProposer(self.model, policy, draft_stop)

    @property
    def forward_calls(self) -> int:
        return getattr(self.model, "forward_calls", 0)

    def held(self, cache: KVCache, state: RequestState) -> int:
        """How many of the output's tokens the draft cache holds: its committed rows when they are a
        prefix of the output, else 0 (it diverged and must start again)."""
        return cache.prefix_held(state.slot, state.output)

    def pending(self, cache: KVCache, state: RequestState) -> tuple[int, ...]:
        """Output tokens the draft cache does not hold yet (all of them if it diverged)."""
        held = self.held(cache, state)
        if held < cache.committed_length(state.slot):
            cache.reset(state.slot)
        return state.output[held:]

    def behind(self, state: RequestState, cache: KVCache) -> int:
        return len(state.output) - self.held(cache, state)

    def draw(self, q_rows: torch.Tensor, u: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """d_i from q_i: inverse CDF at the proposal uniform u float64[N] (argmax when the draft is
        greedy, u None). q_rows float[N, V] -> (d int64[N], near bool[N] or None: the rows whose
        choice is made again exactly once read, ``categorical_draw``). Reads nothing from the
        device. The row drawn from is the row recorded as q."""
        return (q_rows.argmax(dim=-1), None) if u is None else categorical_draw(q_rows, u)

    def read_step(
        self, q_rows: torch.Tensor, u: torch.Tensor | None, drawn: torch.Tensor, near: torch.Tensor | None
    ) -> list[int]:
        """A draft step's one read from the device: its tokens, which rows need an exact redraw, and
        which rows had no mass (refused: EmptyDistribution) -> the tokens, as Python ints."""
        n = len(drawn)
        parts = [drawn.to(torch.int64)]
        parts.append(near.to(torch.int64) if near is not None else torch.zeros_like(parts[0]))
        parts.append(empty_rows(q_rows).to(torch.int64) if not self.policy.greedy else torch.zeros_like(parts[0]))
        values = torch.cat(parts).tolist()
        if any(values[2 * n :]):
            raise EmptyDistribution(EMPTY_ROW)
        redo = [j for j, flag in enumerate(values[n : 2 * n]) if flag]
        if redo and u is not None:  # rare: a uniform within float64 rounding of a boundary
            return exact_redraw(q_rows, u, drawn, redo).tolist()
        return values[:n]

    def confidence(self, raw_rows: torch.Tensor, q_rows: torch.Tensor, states) -> torch.Tensor:
        """The draft's largest probability per row, float[N]: max q, or for a greedy draft (q a
        point mass) the max of the softmax of its processed logits."""
        if not self.policy.greedy:
            return q_rows.max(dim=-1).values
        return torch.softmax(self.policy.logits(raw_rows, states).float(), dim=-1).max(dim=-1).values

    def propose(self, states, ks, cache, ctx, shapes=None, exclude=None):
        """Up to ks[b] levels of drafts for each row: a chain, or the tree shapes[b] asks for
        (``specd.core.tree_draft``: level by level, one draft call a level), its root's children never
        the tokens exclude[b] names."""
        d = draft_trees(self, states, ks, shapes, cache, ctx, exclude)
        return Proposal(
            d.drafts,
            d.q,
            d.q_index,
            d.draws,
            self.staged_rows(states, d.staged),
            *d.first_call,
            trees=d.trees,
            fed_rows=d.fed_rows,
            draft_ids=d.ids,
        )

    def forward(self, cache, rows: Sequence[RowInput], staged: dict) -> list[torch.Tensor]:
        """One draft step -> the raw logit row after each row's last input, float[V] each. ``staged``
        (slot -> hidden rows) collects what a shared-body draft wrote into the target's cache."""
        return [logits[-1] for logits in self.model.step(cache, rows, logits_for=1).logits]

    def forward_rows(self, cache, rows: Sequence[RowInput], staged: dict) -> list[torch.Tensor]:
        """One draft step over rows of one token each (a chain's next draft) or a tree level's nodes
        (``RowInput.parents``) -> per input, the raw logit row after each of its tokens, float[n, V]."""
        if all(r.parents is None and len(r.tokens) == 1 for r in rows):
            return [row.unsqueeze(0) for row in self.forward(cache, rows, staged)]
        if self.shares_target_cache:
            raise UsageError(f"{self.identity} drafts chains only")
        return list(self.model.step(cache, rows).logits)

    def staged_rows(self, states, staged: dict) -> tuple | None:
        """Proposal.staged (a draft with a cache of its own stages nothing in the target's)."""
        return None

    def step_seconds(self, batch: int) -> float:
        """One draft step (``forward``) for ``batch`` rows, timed on a scratch cache (nothing of the
        run's caches is touched; the round counts only its own draft calls). On an accelerator a
        model's first call pays for its kernels' selection, so a first call there holds a two-token
        context untimed; on a CPU it does not (a first call costs about a step, measured: 65 vs 55
        ms), and the one timed call is the step, at a one-token context."""
        cache = self.model.new_cache()
        for slot in range(batch):
            cache.open(slot)
        context = 0 if torch.device(getattr(self.model, "device", "cpu")).type == "cpu" else 2
        if context:
            self.model.step(cache, [RowInput(slot, (1, 2), (0, 1)) for slot in range(batch)], logits_for=0)
            for slot in range(batch):
                cache.commit(slot, context)
        sync = device_sync(torch.device(getattr(self.model, "device", "cpu")))
        if sync is not None:
            sync()  # the clock starts once the untimed call's kernels have run
        started = time.perf_counter()
        rows = self.forward(cache, [RowInput(slot, (3,), (context,)) for slot in range(batch)], {})
        float(rows[0][0])  # waits for the device
        return time.perf_counter() - started

    def resolve(self, cache, slot, drafts):
        if cache is not None:
            cache.resolve(slot, drafts)

    def settle(self, cache, slot, output):
        if output is None:
            cache.discard(slot)
            return
        committed = len(cache.committed(slot))
        # Keep the temporary rows along the published output (a chain's: its common prefix with it).
        # Never cache the frontier: the next proposal must start with a real input row.
        cache.commit(slot, cache.path_along(slot, output[committed : len(output) - 1]))


class NgramProposer(Proposer):
    """Prompt lookup: the draft is what followed the most recent earlier occurrence
    of the output's last n tokens (n = N down to 1), up to k tokens.

    The proposal is a function of the published prefix, so q_i is the point mass
    on d_i: acceptance is p_i(d_i), and the correction normalize([p_i - q_i]_+) is
    p_i with d_i removed, renormalized. A row with no match proposes nothing and
    the round is an ordinary target step.
    """

    deterministic = True

    def __init__(self, n: int, vocab_size: int):
        if n < 1:
            raise UsageError(f"ngram:N needs N >= 1, got {n}")
        self.n = n
        self.vocab_size = vocab_size
        self.identity = f"ngram:{n}"
        self.policy = SamplingPolicy(greedy=True)

    def available(self, state, cache) -> bool:
        return bool(self.find(state.output, 1)[0])

    def match_length(self, state, cache) -> int | None:
        return self.find(state.output, 1)[1]

    def lookup(self, seq: tuple[int, ...], k: int) -> tuple[int, ...]:
        return self.find(seq, k)[0]

    def find(self, seq: tuple[int, ...], k: int) -> tuple[tuple[int, ...], int]:
        """-> (up to k tokens that followed the most recent earlier occurrence of the longest tail of
        ``seq`` of at most N tokens, that tail's length); ((), 0) without one."""
        for size in range(min(self.n, len(seq) - 1), 0, -1):
            tail = seq[-size:]
            for start in range(len(seq) - size - 1, -1, -1):  # most recent earlier occurrence first
                if seq[start : start + size] == tail:
                    follow = seq[start + size : start + size + k]
                    if follow:
                        return follow, size
        return (), 0

    def continuations(self, seq: tuple[int, ...], k: int, n: int) -> list[tuple[int, ...]]:
        """Up to n distinct continuations of up to k tokens, each what followed another earlier
        occurrence of the longest matching tail (most recent first: the first is ``lookup``'s)."""
        first, size = self.find(seq, k)
        if not first:
            return []
        found, tail = [first], seq[-size:]
        for start in range(len(seq) - size - 1, -1, -1):
            follow = seq[start + size : start + size + k]
            if len(found) >= n:
                break
            if seq[start : start + size] == tail and follow and follow not in found:
                found.append(follow)
        return found

    def propose(self, states, ks, cache, ctx, shapes=None, exclude=None):
        if shapes is not None:  # a tree of the tail's continuations (specd.core.tree.trie)
            found = [self.continuations(s.output, k, 1 << 30) if k > 0 else [] for s, k in zip(states, ks)]
            return lookup_trees(found, shapes, self.vocab_size, ctx.dtype, exclude)
        drafts = tuple(self.lookup(s.output, k) if k > 0 else () for s, k in zip(states, ks))
        return point_masses(drafts, self.vocab_size, ctx.dtype)


def branches(shape) -> int:
    """How many continuations a lookup's tree of ``shape`` takes: its root's children (1: a chain)."""
    if shape is None:
        return 1
    return shape.width if shape.dynamic else shape.children(())


def lookup_trees(found, shapes, vocab: int, dtype: torch.dtype, exclude=None) -> Proposal:
    """A lookup's proposal from each row's continuations: their trie within the shape's root children
    and nodes (specd.core.tree.trie; each child chosen, so q is the point mass on it), none starting
    with a token exclude[b] names."""
    if exclude is not None:
        found = [[c for c in conts if c[0] not in ex] for conts, ex in zip(found, exclude)]
    found = [conts[: branches(shape)] for conts, shape in zip(found, shapes)]
    trees = [trie(c, shape.size if shape is not None else len(c[0]) if c else 0) for c, shape in zip(found, shapes)]
    proposal = point_masses(tuple(t.tokens for t in trees), vocab, dtype)
    kept = tuple(None if t.is_chain else t for t in trees)
    return replace(proposal, trees=kept if any(t is not None for t in kept) else ())


def point_masses(drafts: tuple[tuple[int, ...], ...], vocab: int, dtype: torch.dtype) -> Proposal:
    """A lookup's proposal: its drafts, each the point mass q = e_d, kept as the token id alone
    (no row of q: ``q_index`` -1)."""
    return Proposal(
        drafts, torch.zeros(0, vocab, dtype=dtype), tuple((-1,) * len(d) for d in drafts), (0,) * len(drafts)
    )
