"""Every stop rule: token stops applied to a round's outcome before publication, and stop
strings applied to the published text.

Token stops (``apply_stops``):
- EOS or the length cap inside the accepted prefix truncates it and suppresses
  the correction/bonus;
- a correction/bonus that is EOS or reaches the cap is emitted once and ends
  the request;
- zero remaining budget runs no round (the engine never schedules it).

Stop strings (``StopStrings``): a request stops at the first round whose output text
contains one. Its text is cut before the stop string, and its tokens end with the
token that completed it (nothing generated after it is reported). The text grows by
incremental decoding (``IncrementalText``): decoding the whole output again after every
round costs time quadratic in its length, so only a short window of tokens is decoded
per push (the method of Hugging Face's TextStreamer and vLLM's detokenizer: decode from
a prefix offset, emit what extends the text already emitted, and hold back a trailing
incomplete character).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specd.core.record import record


@record
class StopDecision:
    emitted: tuple[int, ...]  # tokens appended to the output this round
    accepted_emitted: int  # A_emit: accepted drafts that survive truncation
    terminal_emitted: bool  # the correction/bonus was appended
    finish_reason: str | None  # "eos", "length", or None (request continues)


def apply_stops(accepted: Sequence[int], terminal: int, eos_ids: frozenset[int], remaining: int) -> StopDecision:
    if remaining <= 0:
        raise ValueError("a request with no remaining budget must not run a round")
    for i, token in enumerate(accepted):
        if token in eos_ids:
            return StopDecision(tuple(accepted[: i + 1]), i + 1, False, "eos")
        if i + 1 == remaining:
            return StopDecision(tuple(accepted[: i + 1]), i + 1, False, "length")
    emitted = (*accepted, terminal)
    if terminal in eos_ids:
        reason = "eos"
    elif len(emitted) == remaining:
        reason = "length"
    else:
        reason = None
    return StopDecision(tuple(emitted), len(accepted), True, reason)


Decode = Callable[[Sequence[int]], str]
INCOMPLETE = "\ufffd"  # what a tokenizer yields for the first bytes of a multi-byte character


class IncrementalText:
    def __init__(self, decode: Decode, stops: Sequence[str] = ()):
        self.decode = decode
        self.stops = tuple(stops)
        self.tokens: list[int] = []
        self.text = ""
        self._prefix = 0  # tokens[_prefix:_read] decode to the tail already in self.text
        self._read = 0

    def push(self, tokens: Sequence[int]) -> str:
        """Add tokens; returns the new text they complete (possibly empty)."""
        self.tokens.extend(tokens)
        before = self.decode(self.tokens[self._prefix : self._read])
        after = self.decode(self.tokens[self._prefix :])
        if len(after) <= len(before) or after.endswith(INCOMPLETE):
            return ""
        delta = after[len(before) :]
        self._prefix, self._read = self._read, len(self.tokens)
        self.text += delta
        return delta

    def stop_in(self, delta: str) -> bool:
        """Did the text just pushed complete a stop string? (Only the tail can hold a new match.)"""
        if not self.stops or not delta:
            return False
        window = self.text[-(len(delta) + max(len(s) for s in self.stops)) :]
        return any(s in window for s in self.stops)


def cut_at_stop(tokens: Sequence[int], decode: Decode, stops: Sequence[str]) -> tuple[str, tuple[int, ...]]:
    """(text before the first stop string, the shortest token prefix whose text contains it).

    Without a stop string in the text: (the whole text, all tokens).
    """
    text = decode(tokens)
    found = [i for s in stops if (i := text.find(s)) >= 0]
    if not found:
        return text, tuple(tokens)
    lo, hi = 1, len(tokens)  # the shortest prefix that already contains a stop string
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in decode(tokens[:mid]) for s in stops):
            hi = mid
        else:
            lo = mid + 1
    return text[: min(found)], tuple(tokens[:lo])


def stop_index(text: str, stops: Sequence[str]) -> int:
    """Where the first stop string begins in ``text`` (len(text) if none does)."""
    return min((i for s in stops if (i := text.find(s)) >= 0), default=len(text))


class StopStrings:
    """The stop-string rule for a run's requests: each request's text, pushed round by round."""

    def __init__(self, decode: Decode, stops: Sequence[str]):
        self.decode = decode
        self.stops = tuple(stops)
        self.hold = max((len(s) for s in self.stops), default=1) - 1  # a streamed text never shows a stop's start
        self._texts: dict[str, IncrementalText] = {}

    def push(self, request_id: str, tokens: Sequence[int]) -> bool:
        """Add a published round's tokens to the request's text; True if that completed a stop string."""
        text = self._texts.setdefault(request_id, IncrementalText(self.decode, self.stops))
        return text.stop_in(text.push(tokens))

    def text(self, request_id: str, finished: bool) -> str:
        """What may be shown of the request's text so far: up to its first stop string once it has
        finished, else all but the last characters that could begin one."""
        text = self._texts[request_id].text if request_id in self._texts else ""
        return text[: stop_index(text, self.stops)] if finished else text[: max(len(text) - self.hold, 0)]

    def cut(self, request_id: str, tokens: Sequence[int]) -> tuple[str, tuple[int, ...]]:
        """A finished request's (text, tokens), cut at its first stop string; forgets its text."""
        self._texts.pop(request_id, None)
        return cut_at_stop(tokens, self.decode, self.stops)
