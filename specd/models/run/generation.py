"""What a generation run returns: one result per request, the text deltas a stream yields, and
the run (results, statistics, wall time), with the two comparisons ``--compare`` prints."""

from __future__ import annotations

from dataclasses import dataclass

from specd.core.records import RunResult
from specd.core.state import History

TARGET_ONLY, SPECULATIVE = "target-only", "speculative"


@dataclass(frozen=True)
class RequestResult:
    request_id: str
    tag: str | None
    prompt: str
    prompt_tokens: int
    text: str  # cut before a stop string
    tokens: tuple[int, ...]  # generated tokens, ending with the one that completed a stop string
    finish_reason: str | None
    history: History  # this request's rounds: drafts, acceptances by position, K per round

    def as_dict(self) -> dict:
        """The request's line in the results file and in --json (no timing: it is deterministic)."""
        return {
            "id": self.request_id,
            "tag": self.tag,
            "prompt": self.prompt,
            "text": self.text,
            "tokens": list(self.tokens),
            "finish_reason": self.finish_reason,
            "acceptance": self.history.as_dict(),
        }


@dataclass(frozen=True)
class TextDelta:
    """New text of one request, as a published round completes it (stop strings applied)."""

    request_id: str
    text: str


@dataclass(frozen=True)
class GenerationRun:
    mode: str  # TARGET_ONLY | SPECULATIVE
    results: tuple[RequestResult, ...]
    result: RunResult  # statistics, commits and acceptance log
    wall_time: float
    notes: tuple[str, ...] = ()  # what the run changed about the request, in words (a clamped budget)

    @property
    def stats(self):
        return self.result.stats

    def stats_dict(self) -> dict:
        """The run's statistics as ``generate --json`` reports them (its ``stats`` entry for this mode)."""
        return {**self.stats.as_dict(), "wall_time_s": self.wall_time}


def speedup(target_only: GenerationRun, speculative: GenerationRun) -> float:
    """Decode time per token, target-only over speculative (0.0 when either emitted nothing)."""
    b, s = target_only.stats, speculative.stats
    if not b.emitted or not s.emitted or s.decode_time <= 0:
        return 0.0
    return (b.decode_time / b.emitted) / (s.decode_time / s.emitted)


def identical(target_only: GenerationRun, speculative: GenerationRun) -> bool:
    """Did target-only and speculative decoding emit the same tokens for every prompt?"""
    return [r.tokens for r in target_only.results] == [r.tokens for r in speculative.results]
