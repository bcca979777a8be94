"""The states of the stateful processors (specd.core.processors): immutable values whose
``advance(token)`` returns the successor, so a drafted branch advances its own copy and only
published tokens move the committed state."""

from __future__ import annotations

from specd.core.record import record


@record
class RepetitionState:
    """The set of token ids already in the history (prompt + published output)."""

    seen: frozenset[int] = frozenset()

    def advance(self, token: int) -> RepetitionState:
        if token in self.seen:
            return self
        return RepetitionState(self.seen | {token})


@record
class OutputCounts:
    """How often each token id occurs in the output so far (not the prompt): (token, count) pairs."""

    counts: tuple[tuple[int, int], ...] = ()

    def advance(self, token: int) -> OutputCounts:
        d = dict(self.counts)
        d[token] = d.get(token, 0) + 1
        return OutputCounts(tuple(sorted(d.items())))


@record
class History:
    """The last ``keep`` tokens of prompt + output (all of them when keep is None)."""

    tokens: tuple[int, ...] = ()
    keep: int | None = None

    def advance(self, token: int) -> History:
        if self.keep == 0:
            return self
        tokens = self.tokens + (token,)
        return History(tokens if self.keep is None else tokens[-self.keep :], self.keep)


@record
class NewTokens:
    """How many tokens have been generated, counted up to ``cap`` (past it the processor is idle)."""

    count: int = 0
    cap: int = 0

    def advance(self, token: int) -> NewTokens:
        return self if self.count >= self.cap else NewTokens(self.count + 1, self.cap)
