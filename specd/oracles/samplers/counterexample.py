"""The smallest failing case of a sampler that fails its exact check: the first (V, K) in SEARCH and
table (each seed's, then the adversarial ones) whose joint is not the target's, the sequence where
they differ most, and the cell (rows, drafts, uniforms) where the sampler's decision differs from
the rule's."""

from __future__ import annotations

from specd.oracles.record import EXACT_TOLERANCE, max_abs_diff
from specd.oracles.samplers.checks import moved_most, sampler_joint
from specd.oracles.samplers.protocol import SamplerUnderTest
from specd.oracles.samplers.table_store import completion
from specd.oracles.samplers.tables import search_tables

SEARCH = [(2, 1), (2, 2), (3, 1), (2, 3), (3, 2), (4, 1), (4, 2), (3, 3)]


def minimal_counterexample(
    sampler: SamplerUnderTest, tokens: bool, build_rig, seeds=range(3), rule: str = "maximal", failed_at=None
) -> dict | None:
    """The smallest (V, K) and table (each seed's, then the adversarial ones, specd.oracles.samplers.tables)
    where the joint is not the target's, with the cell that shows it; past SEARCH, ``failed_at`` (case,
    table), where the check found it not exact (a slip only a larger size shows: V = 16, K = 1)."""
    for vocab, k in SEARCH:
        for table in search_tables(build_rig, vocab, k, 1, seeds):
            found = _counterexample(sampler, tokens, table, k, rule)
            if found is not None:
                return {"vocab": vocab, "k": k, "seed": table.seed, "table": table.name, **found}
    if failed_at is not None:  # in the batches the check met it in (an answer may depend on its batch)
        case, table = failed_at
        if (found := _counterexample(sampler, tokens, table, case.k, rule, shuffled=True)) is not None:
            return {"vocab": case.vocab, "k": case.k, "seed": table.seed, "table": table.name, **found}
    return None


def _counterexample(sampler: SamplerUnderTest, tokens: bool, table, k: int, rule: str, shuffled=False) -> dict | None:
    """Where the sampler is not exact on one table: the sequence that moved most, and the cell."""
    joint, mismatches, _ = sampler_joint(
        sampler, table, table.prompt, table.vocab, k, tokens, rule=rule, shuffled=shuffled
    )
    target = completion(table, table.prompt, k + 1)
    if max_abs_diff(target, joint) <= EXACT_TOLERANCE:
        return None
    return moved_most(target, joint, mismatches)
