"""Run statistics, in specd's terms and in the names vLLM's spec-decode metrics use.

specd's own:
- mean accepted length: emitted tokens per request-round, counting the correction
  or bonus token (E[G] = E[A] + 1 without stops), K = 0 rounds included;
- alpha_j, reach-conditioned: rounds that accepted draft j / rounds that reached it
  (every earlier draft accepted).
vLLM's (a "draft" is one request-round that proposed at least one token):
- num_drafts, num_draft_tokens, num_accepted_tokens;
- num_accepted_tokens_per_pos[j-1]: drafts that accepted position j (not reach-conditioned:
  per-position acceptance rate = num_accepted_tokens_per_pos / num_drafts);
- mean acceptance length = 1 + num_accepted_tokens / num_drafts (counts the bonus token,
  K = 0 rounds left out);
- draft acceptance rate = num_accepted_tokens / num_draft_tokens.
Also the K chosen per request-round (histogram) and the share of rounds with K = 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specd.core.state import positions_reached


@dataclass
class StatsAccumulator:
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0
    target_forwards: int = 0
    target_rows: int = 0
    draft_forwards: int = 0
    draft_time: float = 0.0
    verify_time: float = 0.0
    round_time: float = 0.0  # whole rounds; state time = round - draft - verify
    prefill_time: float = 0.0
    accepted_hist: dict[int, int] = field(default_factory=dict)  # A -> rounds
    reached: dict[int, int] = field(default_factory=dict)  # position j (1-based) -> rounds reaching it
    accepted_at: dict[int, int] = field(default_factory=dict)  # position j -> rounds accepting d_j
    k_hist: dict[int, int] = field(default_factory=dict)  # K proposed -> request-rounds

    def add_round(self, k: int, accepted: int, emitted: int) -> None:
        self.rounds += 1
        self.k_hist[k] = self.k_hist.get(k, 0) + 1
        self.proposed += k
        self.accepted += accepted
        self.emitted += emitted
        self.accepted_hist[accepted] = self.accepted_hist.get(accepted, 0) + 1
        for j in range(1, positions_reached(k, accepted) + 1):
            self.reached[j] = self.reached.get(j, 0) + 1
        for j in range(1, accepted + 1):
            self.accepted_at[j] = self.accepted_at.get(j, 0) + 1

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
            kv_temporary_rows=kv_staged,
            kv_committed_rows=kv_committed,
            kv_discarded_rows=kv_discarded,
        )


@dataclass(frozen=True)
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

        fields = {}
        for name, value in vars(parts[0]).items():
            fields[name] = merged(name) if isinstance(value, dict) else sum(getattr(p, name) for p in parts)
        return cls(**fields)

    @property
    def mean_accepted_length(self) -> float:
        return self.emitted / self.rounds if self.rounds else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts / proposed drafts (per proposal, not reach-conditioned)."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def acceptance_by_position(self) -> dict[int, float]:
        """alpha_j, reach-conditioned: accepted at j / rounds that reached j (every earlier draft accepted)."""
        return {j: self.accepted_at.get(j, 0) / n for j, n in self.reached.items() if n}

    @property
    def num_drafts(self) -> int:
        """Request-rounds that proposed at least one token (vLLM's num_drafts)."""
        return sum(n for k, n in self.k_hist.items() if k > 0)

    @property
    def mean_acceptance_length(self) -> float | None:
        """vLLM's: 1 + accepted / num_drafts (K = 0 rounds left out)."""
        return 1 + self.accepted / self.num_drafts if self.num_drafts else None

    @property
    def share_k0(self) -> float:
        return self.k_hist.get(0, 0) / self.rounds if self.rounds else 0.0

    @property
    def decode_time(self) -> float:
        return self.draft_time + self.verify_time + self.state_time

    @property
    def tokens_per_second(self) -> float:
        return self.emitted / self.decode_time if self.decode_time > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "rounds": self.rounds,
            "proposed_tokens": self.proposed,
            "accepted_tokens": self.accepted,
            "emitted_tokens": self.emitted,
            "mean_accepted_length": self.mean_accepted_length,
            "acceptance_rate": self.acceptance_rate,
            "acceptance_by_position": {str(j): a for j, a in self.acceptance_by_position.items()},
            "accepted_histogram": {str(a): n for a, n in self.accepted_hist.items()},
            "k_histogram": {str(k): n for k, n in self.k_hist.items()},
            "share_k0": self.share_k0,
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.proposed,
            "num_accepted_tokens": self.accepted,
            "num_accepted_tokens_per_pos": [
                self.accepted_at.get(j, 0) for j in range(1, max(self.k_hist, default=0) + 1)
            ],
            "mean_acceptance_length": self.mean_acceptance_length,
            "draft_acceptance_rate": self.acceptance_rate if self.proposed else None,
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
