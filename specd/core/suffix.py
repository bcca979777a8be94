"""``suffix``: a lookup draft from a suffix automaton over the prompt and the output so far.

Each round the draft is the continuation of the longest suffix of the output that
occurred earlier (anywhere in the prompt or the output): of the tokens that followed
that suffix's earlier occurrences, the one seen most often (ties: the most recent),
then what followed it there, up to K tokens. The index is a suffix automaton built
incrementally as tokens are published (amortized O(1) per token; a round never
rescans the context); it lives in the source's cache, one per request slot, and
follows the published output only, so a proposal is a function of the published
output (q is the point mass on each proposed token: exact under the rule).

The match length (the longer the match, the more the continuation is a copy) is the
source's evidence for a round (``match_length``): -k auto reads the request's acceptance
at matches of that length (specd.policy.autok).

``suffix:run`` also looks in the texts (prompt and output) of the requests already
finished in the run (``RunTexts``: one automaton over them all, each text ended by a
separator no token equals, and per open request where its suffix stands in it, walked
forward a token at a time). The longer of the two matches proposes (the request's own on a
tie). A proposal is then a function of the request's published output and of texts that
were published before the round: still exact. But a request's drafts now depend on which
requests finished before it: under ``--rule maximal`` a sampled text then depends on the
batch and the order of the prompts (under the default invariant rule, and with greedy
decoding, the text never depends on the draft).
"""

from __future__ import annotations

from specd.core.processors import SamplingPolicy
from specd.core.proposer import Proposer, lookup_trees, point_masses


class SuffixIndex:
    """A suffix automaton over one token sequence, extended token by token.

    State 0 is the root; ``length[v]`` the longest substring of state v, ``link[v]`` its
    suffix link, ``first_end[v]`` the end position of its first occurrence. ``follow[v]``:
    token -> (times it followed v's substring at a moment when v was the longest earlier-seen
    suffix, the latest end position where it did).
    """

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.next: list[dict[int, int]] = [{}]
        self.link = [-1]
        self.length = [0]
        self.first_end = [-1]
        self.follow: dict[int, dict[int, tuple[int, int]]] = {}
        self.last = 0

    def extend(self, token: int) -> None:
        """Append one token (the standard online construction, plus the follow counts)."""
        match = self.match_state()
        if match:  # the longest earlier-seen suffix was followed by ``token`` here
            count, _ = self.follow.setdefault(match, {}).get(token, (0, -1))
            self.follow[match][token] = (count + 1, len(self.tokens) - 1)
        self.tokens.append(token)
        end = len(self.tokens) - 1
        cur = self._new(self.length[self.last] + 1, end)
        p = self.last
        while p != -1 and token not in self.next[p]:
            self.next[p][token] = cur
            p = self.link[p]
        if p == -1:
            self.link[cur] = 0
        else:
            q = self.next[p][token]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = self._new(self.length[p] + 1, self.first_end[q])
                self.next[clone] = dict(self.next[q])
                self.link[clone] = self.link[q]
                if q in self.follow:
                    self.follow[clone] = dict(self.follow[q])
                while p != -1 and self.next[p].get(token) == q:
                    self.next[p][token] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur

    def _new(self, length: int, first_end: int) -> int:
        self.next.append({})
        self.link.append(-1)
        self.length.append(length)
        self.first_end.append(first_end)
        return len(self.length) - 1

    def match_state(self) -> int:
        """The state of the longest suffix that also occurred ending earlier (0: none)."""
        return self.link[self.last] if self.last else 0

    def lookup(self, k: int) -> tuple[tuple[int, ...], int]:
        """-> (up to k proposed tokens, the match length they continue); ((), 0) without a match."""
        state = self.match_state()
        if not state or k <= 0:
            return (), 0
        followers = self.follow.get(state)
        if followers:
            _, end = max(followers.values())  # most often, then most recent
        else:
            end = self.first_end[state]
        proposal = tuple(self.tokens[end + 1 : end + 1 + k])
        return proposal, self.length[state]

    def continuations(self, k: int, n: int) -> tuple[list[tuple[int, ...]], int]:
        """-> (up to n continuations of up to k tokens, each after another follower of the match,
        ``lookup``'s first (most often, then most recent), the match length); ([], 0) without a match."""
        first, length = self.lookup(k)
        if not first:
            return [], 0
        followers = sorted(self.follow.get(self.match_state(), {}).values(), reverse=True)
        ends = [end for _, end in followers[:n]]
        return [first] + [tuple(self.tokens[end + 1 : end + 1 + k]) for end in ends[1:]], length


class RunTexts:
    """The texts of the requests finished so far in a run, in one suffix automaton (each text ended
    by its own negative separator), and per open request the state of the longest suffix of its
    output found there (updated a token at a time; walked again from the start when a text joined)."""

    def __init__(self) -> None:
        self.index = SuffixIndex()
        self.texts = 0
        # slot -> (texts seen, tokens walked, the last of them, state, length)
        self.walks: dict[int, tuple[int, int, int, int, int]] = {}

    def add(self, tokens: list[int]) -> None:
        self.texts += 1
        for token in (*tokens, -self.texts):
            self.index.extend(token)

    def match(self, slot: int, output: tuple[int, ...]) -> tuple[int, int]:
        """(state, length) of the longest suffix of ``output`` that occurs in a finished text."""
        texts, walked, last, state, length = self.walks.get(slot, (-1, 0, 0, 0, 0))
        # an output only grows by publication; its last walked token tells another history in O(1)
        if texts != self.texts or walked > len(output) or (walked and output[walked - 1] != last):
            walked, state, length = 0, 0, 0
        nxt, link, lengths = self.index.next, self.index.link, self.index.length
        for token in output[walked:]:
            while state and token not in nxt[state]:
                state = link[state]
                length = lengths[state]
            if token in nxt[state]:
                state, length = nxt[state][token], length + 1
        self.walks[slot] = (self.texts, len(output), output[-1] if output else 0, state, length)
        return state, length

    def lookup(self, slot: int, output: tuple[int, ...], k: int) -> tuple[tuple[int, ...], int]:
        """-> (up to k tokens that followed the match in its text, the match length); ((), 0) without one."""
        state, length = self.match(slot, output)
        if not length or k <= 0:
            return (), 0
        end = self.index.first_end[state]
        follow = []
        for token in self.index.tokens[end + 1 : end + 1 + k]:
            if token < 0:  # the text's end
                break
            follow.append(token)
        return (tuple(follow), length) if follow else ((), 0)

    def forget(self, slot: int) -> None:
        self.walks.pop(slot, None)


class SuffixCache:
    """The suffix source's per-slot state: one index per open request, following its published output
    (and with ``run``, the finished requests' texts: RunTexts)."""

    def __init__(self, run: bool = False) -> None:
        self.indexes: dict[int, SuffixIndex] = {}
        self.run = RunTexts() if run else None

    def open(self, slot: int) -> None:
        self.indexes[slot] = SuffixIndex()

    def close(self, slot: int) -> None:
        index = self.indexes.pop(slot, None)
        if self.run is not None:
            self.run.forget(slot)
            if index is not None and index.tokens:  # a finished request's text joins the run's
                self.run.add(index.tokens)

    def is_open(self, slot: int) -> bool:
        return slot in self.indexes

    def compact(self) -> None:
        """Nothing physical to give back."""

    def tidy(self) -> None:
        """Nothing physical to give back."""

    def follow(self, slot: int, output: tuple[int, ...]) -> SuffixIndex:
        """The slot's index, extended by the output tokens it does not hold yet."""
        index = self.indexes[slot]
        n = len(index.tokens)
        # A request's output only grows by publication, so its last indexed token is enough to tell
        # another history (never, for one request) in constant time: no rescan per round.
        if n > len(output) or (n and output[n - 1] != index.tokens[-1]):
            index = self.indexes[slot] = SuffixIndex()
        for token in output[len(index.tokens) :]:
            index.extend(token)
        return index

    def lookup(self, slot: int, output: tuple[int, ...], k: int) -> tuple[tuple[int, ...], int]:
        """-> (up to k proposed tokens, the match length): the request's own match, or with ``run`` a
        longer one in a finished text."""
        own = self.follow(slot, output).lookup(k)
        if self.run is None:
            return own
        other = self.run.lookup(slot, output, k)
        return other if other[1] > own[1] else own

    def continuations(self, slot: int, output: tuple[int, ...], k: int, n: int) -> list[tuple[int, ...]]:
        """Up to n continuations of up to k tokens (``SuffixIndex.continuations``), the first ``lookup``'s."""
        first = self.lookup(slot, output, k)[0]
        own = self.follow(slot, output).continuations(k, n)[0]
        return [first] + [c for c in own if c and c != first][: n - 1] if first else []


class SuffixProposer(Proposer):
    """The lookup draft over a suffix automaton (see the module docstring); ``run``: suffix:run."""

    deterministic = True

    def __init__(self, vocab_size: int, run: bool = False):
        self.vocab_size = vocab_size
        self.run = run
        self.identity = "suffix:run" if run else "suffix"
        self.policy = SamplingPolicy(greedy=True)

    def new_cache(self) -> SuffixCache:
        return SuffixCache(self.run)

    def available(self, state, cache: SuffixCache | None) -> bool:
        return bool(self.match_length(state, cache))

    def match_length(self, state, cache: SuffixCache | None) -> int | None:
        if cache is None:
            return 0
        return cache.lookup(state.slot, state.output, 1)[1]

    def propose(self, states, ks, cache, ctx, shapes=None, exclude=None):
        if shapes is not None:  # a tree of the match's continuations (specd.core.tree.trie)
            found = [cache.continuations(s.slot, s.output, k, 1 << 30) if k > 0 else [] for s, k in zip(states, ks)]
            return lookup_trees(found, shapes, self.vocab_size, ctx.dtype, exclude)
        drafts = tuple(cache.lookup(s.slot, s.output, k)[0] if k > 0 else () for s, k in zip(states, ks))
        return point_masses(drafts, self.vocab_size, ctx.dtype)

    def settle(self, cache, slot, output):
        if output is not None and cache.is_open(slot):
            cache.follow(slot, output)  # index the published tokens now, one step each
