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
"""

from __future__ import annotations

from specd.core.processors import SamplingPolicy
from specd.core.proposer import Proposer, point_masses


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


class SuffixCache:
    """The suffix source's per-slot state: one index per open request, following its published output."""

    def __init__(self) -> None:
        self.indexes: dict[int, SuffixIndex] = {}

    def open(self, slot: int) -> None:
        self.indexes[slot] = SuffixIndex()

    def close(self, slot: int) -> None:
        self.indexes.pop(slot, None)

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


class SuffixProposer(Proposer):
    """The lookup draft over a suffix automaton (see the module docstring)."""

    deterministic = True
    identity = "suffix"

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.policy = SamplingPolicy(greedy=True)

    def new_cache(self) -> SuffixCache:
        return SuffixCache()

    def available(self, state, cache: SuffixCache | None) -> bool:
        return cache is not None and bool(cache.follow(state.slot, state.output).match_state())

    def match_length(self, state, cache: SuffixCache | None) -> int | None:
        if cache is None:
            return 0
        index = cache.follow(state.slot, state.output)
        return index.length[index.match_state()]

    def propose(self, states, ks, cache, draws, backend, dtype):
        drafts = tuple(cache.follow(s.slot, s.output).lookup(k)[0] if k > 0 else () for s, k in zip(states, ks))
        return point_masses(drafts, self.vocab_size, dtype)

    def settle(self, cache, slot, output):
        if output is not None and cache.is_open(slot):
            cache.follow(slot, output)  # index the published tokens now, one step each
