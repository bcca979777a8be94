"""Text of a generation as it grows: incremental decoding and stop strings.

Decoding the whole output again after every round costs time quadratic in its
length. ``IncrementalText`` decodes only a short window of tokens per push (the
method of Hugging Face's TextStreamer and vLLM's detokenizer: decode from a
prefix offset, emit what extends the text already emitted, and hold back a
trailing incomplete character).

Stop strings: a request stops at the first round whose output text contains one.
Its ``text`` is cut before the stop string, and its ``tokens`` end with the token
that completed it (nothing generated after it is reported).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
