"""Run statistics: the raw counters, kept once, and every figure derived from them, defined once.

Raw counters (``RoundCounts``, per request-round): K proposed, drafts accepted A,
tokens emitted; per position j, the rounds that reached draft j (every earlier draft
accepted) and those that accepted it. ``acceptance_figures`` derives every figure
from them, for ``generate``, ``trace summarize`` (which rebuilds the counters from a
log's round rows), ``sweep-k --measure`` and the oracle alike:

specd's own:
- mean accepted length: emitted tokens per request-round, counting the correction
  or bonus token (E[G] = E[A] + 1 without stops), K = 0 rounds included (a K = 0
  round emits one token);
- acceptance_by_position alpha_j, reach-conditioned: rounds that accepted draft j /
  rounds that reached it (None where no round reached it);
- accepted_histogram: rounds that drafted (K >= 1) by A, K = 0 rounds left out;
- k_histogram: request-rounds by the K chosen; share_k0 and rounds_k0: the rounds at K = 0;
  source_histogram: drafting request-rounds by their draft source.
vLLM's (a "draft" is one request-round that proposed at least one token, so K = 0
rounds are left out of all of these):
- num_drafts, num_draft_tokens, num_accepted_tokens;
- num_accepted_tokens_per_pos[j-1]: drafts that accepted position j (not reach-conditioned:
  per-position acceptance rate = num_accepted_tokens_per_pos / num_drafts);
- mean acceptance length = 1 + num_accepted_tokens / num_drafts (counts the bonus token);
- draft acceptance rate = num_accepted_tokens / num_draft_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specd.core.record import record
from specd.core.state import positions_reached


@dataclass
class RoundCounts:
    """The raw per-round counters of a run (or of a log's rounds), summed."""

    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0
    accepted_hist: dict[int, int] = field(default_factory=dict)  # A -> rounds with K >= 1
    reached: dict[int, int] = field(default_factory=dict)  # position j (1-based) -> rounds reaching it
    accepted_at: dict[int, int] = field(default_factory=dict)  # position j -> rounds accepting d_j
    k_hist: dict[int, int] = field(default_factory=dict)  # K proposed -> request-rounds
    source_hist: dict[str, int] = field(default_factory=dict)  # draft source -> request-rounds that drafted

    def add_outcome(self, outcome) -> None:
        """One request's published round (a RoundOutcome)."""
        self.add_round(outcome.k, outcome.accepted, len(outcome.emitted), outcome.source, outcome.levels)

    def add_round(
        self, k: int, accepted: int, emitted: int, source: str | None = None, levels: int | None = None
    ) -> None:
        """One request-round by its counts (a log's round row carries them). ``levels``: how deep its
        tests went (a tree's walk: positions are depths; None: a chain's, min(A + 1, K))."""
        self.rounds += 1
        if k > 0 and source:
            self.source_hist[source] = self.source_hist.get(source, 0) + 1
        self.k_hist[k] = self.k_hist.get(k, 0) + 1
        self.proposed += k
        self.accepted += accepted
        self.emitted += emitted
        if k > 0:
            self.accepted_hist[accepted] = self.accepted_hist.get(accepted, 0) + 1
        for j in range(1, (positions_reached(k, accepted) if levels is None else levels) + 1):
            self.reached[j] = self.reached.get(j, 0) + 1
        for j in range(1, accepted + 1):
            self.accepted_at[j] = self.accepted_at.get(j, 0) + 1


def acceptance_figures(c) -> dict:
    """Every figure derived from the raw counters ``c`` (a RoundCounts or RunStats), each defined
    once (see the module docstring). Position-keyed figures run over j = 1..the largest K."""
    k_top = max(c.k_hist, default=0)
    positions = range(1, k_top + 1)
    drafts = sum(n for k, n in c.k_hist.items() if k > 0)
    rounds_k0 = c.k_hist.get(0, 0)
    return {
        "rounds": c.rounds,
        "rounds_k0": rounds_k0,
        "proposed_tokens": c.proposed,
        "accepted_tokens": c.accepted,
        "emitted_tokens": c.emitted,
        "mean_accepted_length": c.emitted / c.rounds if c.rounds else None,
        "acceptance_by_position": {
            j: (c.accepted_at.get(j, 0) / c.reached[j] if c.reached.get(j) else None) for j in positions
        },
        "reached_per_position": {j: c.reached.get(j, 0) for j in positions},
        "accepted_per_position": {j: c.accepted_at.get(j, 0) for j in positions},
        "accepted_histogram": dict(sorted(c.accepted_hist.items())),
        "k_histogram": dict(sorted(c.k_hist.items())),
        "source_histogram": dict(sorted(c.source_hist.items())),
        "share_k0": rounds_k0 / c.rounds if c.rounds else None,
        "num_drafts": drafts,
        "num_draft_tokens": c.proposed,
        "num_accepted_tokens": c.accepted,
        "num_accepted_tokens_per_pos": [c.accepted_at.get(j, 0) for j in positions],
        "mean_acceptance_length": 1 + c.accepted / drafts if drafts else None,
        "draft_acceptance_rate": c.accepted / c.proposed if c.proposed else None,
    }


@dataclass
class StatsAccumulator(RoundCounts):
    """A run's counters as it goes: the round counts, forward calls and times."""

    target_forwards: int = 0
    target_rows: int = 0
    draft_forwards: int = 0
    draft_time: float = 0.0
    verify_time: float = 0.0
    round_time: float = 0.0  # whole rounds; state time = round - draft - verify
    prefill_time: float = 0.0

    def count_target_call(self, rows: int) -> None:
        self.target_forwards += 1
        self.target_rows += rows

    def add_published(self, outcomes, timing) -> None:
        """A published round: each request's RoundOutcome and the round's RoundTiming."""
        for o in outcomes:
            self.add_outcome(o)
        self.draft_forwards += timing.draft_steps
        self.draft_time += timing.draft_seconds
        self.verify_time += timing.verify_seconds
        self.round_time += timing.draft_seconds + timing.verify_seconds + timing.other_seconds

    def freeze(self, kv_staged: int, kv_committed: int, kv_discarded: int, wall_time: float) -> RunStats:
        return RunStats(
            rounds=self.rounds,
            proposed=self.proposed,
            accepted=self.accepted,
            emitted=self.emitted,
            target_forwards=self.target_forwards,
            target_rows=self.target_rows,
            draft_forwards=self.draft_forwards,
            draft_time=self.draft_time,
            verify_time=self.verify_time,
            state_time=max(0.0, self.round_time - self.draft_time - self.verify_time),
            prefill_time=self.prefill_time,
            wall_time=wall_time,
            accepted_hist=dict(sorted(self.accepted_hist.items())),
            reached=dict(sorted(self.reached.items())),
            accepted_at=dict(sorted(self.accepted_at.items())),
            k_hist=dict(sorted(self.k_hist.items())),
            source_hist=dict(sorted(self.source_hist.items())),
            kv_temporary_rows=kv_staged,
            kv_committed_rows=kv_committed,
            kv_discarded_rows=kv_discarded,
        )


@record
class RunStats:
    rounds: int
    proposed: int
    accepted: int
    emitted: int
    target_forwards: int
    target_rows: int
    draft_forwards: int
    draft_time: float
    verify_time: float
    state_time: float
    prefill_time: float
    wall_time: float
    accepted_hist: dict[int, int]
    reached: dict[int, int]
    accepted_at: dict[int, int]
    k_hist: dict[int, int]
    source_hist: dict[str, int]
    kv_temporary_rows: int
    kv_committed_rows: int
    kv_discarded_rows: int

    @classmethod
    def combine(cls, parts: list[RunStats]) -> RunStats:
        """The statistics of several runs as one (counts and times add up: times are worker time)."""
        if not parts:
            return StatsAccumulator().freeze(0, 0, 0, 0.0)

        def merged(name: str) -> dict[int, int]:
            out: dict[int, int] = {}
            for part in parts:
                for key, n in getattr(part, name).items():
                    out[key] = out.get(key, 0) + n
            return dict(sorted(out.items()))

        fields: dict[str, Any] = {}
        for name, value in vars(parts[0]).items():
            fields[name] = merged(name) if isinstance(value, dict) else sum(getattr(p, name) for p in parts)
        return cls(**fields)

    def figures(self) -> dict:
        return acceptance_figures(self)

    @property
    def decode_time(self) -> float:
        return self.draft_time + self.verify_time + self.state_time

    @property
    def tokens_per_second(self) -> float:
        return self.emitted / self.decode_time if self.decode_time > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            **self.figures(),
            "target_forwards": self.target_forwards,
            "target_rows": self.target_rows,
            "draft_forwards": self.draft_forwards,
            "time_s": {
                "draft": self.draft_time,
                "verify": self.verify_time,
                "state": self.state_time,
                "prefill": self.prefill_time,
                "decode": self.decode_time,
                "wall": self.wall_time,
            },
            "tokens_per_second": self.tokens_per_second,
            "time_per_output_token_s": (self.decode_time / self.emitted) if self.emitted else None,
            "kv_rows": {
                "temporary": self.kv_temporary_rows,
                "committed": self.kv_committed_rows,
                "discarded": self.kv_discarded_rows,
            },
        }
