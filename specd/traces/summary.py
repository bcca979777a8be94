"""Summaries of an acceptance log (pandas): the accepted-prefix distribution, not one rate.

Every figure a run also reports (rounds, mean accepted length, reach-conditioned
alpha_j, the K histogram, vLLM's counters, ...) is computed by the same function as
``specd generate --json`` (``specd.core.stats.acceptance_figures``), from the same raw
counters rebuilt from the log's round rows: the same run gives the same numbers in
both, K = 0 rounds included where the figure includes them.

What only a log can give, over the rounds at the largest K that drafted (rounds
clamped by the token budget, or at a smaller K under -k auto, cannot reach A = K;
K = 0 rounds are left out):
- rounds_full_k: how many such rounds;
- pr_a: Pr(A = a), a = 0..K, the share of those rounds with exactly a accepted drafts;
- survival s_j = Pr(A >= j).
"""

from __future__ import annotations

import pandas as pd

from specd.core.stats import RoundCounts, acceptance_figures
from specd.errors import UsageError, shown


def frames(requests: list[dict], rounds: list[dict]) -> pd.DataFrame:
    """The log's round rows, with each request's prompt and tag beside them."""
    req = pd.DataFrame(requests) if requests else pd.DataFrame(columns=["request_id", "prompt", "tag"])
    rnds = pd.DataFrame(rounds)
    extra = [c for c in ("prompt", "tag") if c in req.columns]
    if not rnds.empty and extra:
        rnds = rnds.merge(req[["request_id", *extra]], on="request_id", how="left")
    return rnds


def tree_levels(parents, path, accepted: int) -> int | None:
    """A tree round's tested depth from its round row ("parents", "path"; RoundOutcome.levels), None
    for a chain's row."""
    if not isinstance(parents, list) or not parents:
        return None
    leaf = path[-1] if isinstance(path, list) and path else -1
    return accepted + (1 if leaf in parents else 0)


def summarize_group(rnds: pd.DataFrame) -> dict:
    """The figures of one group of round rows."""
    counts = RoundCounts()
    if not rnds.empty:
        sources = rnds["source"].tolist() if "source" in rnds.columns else [None] * len(rnds)
        parents = rnds["parents"].tolist() if "parents" in rnds.columns else [None] * len(rnds)
        paths = rnds["path"].tolist() if "path" in rnds.columns else [None] * len(rnds)
        columns = zip(rnds["k"].tolist(), rnds["accepted"].tolist(), rnds["emitted"].map(len), sources, parents, paths)
        for k, accepted, emitted, source, tree_parents, path in columns:
            levels = tree_levels(tree_parents, path, int(accepted))
            counts.add_round(int(k), int(accepted), int(emitted), source if isinstance(source, str) else None, levels)
    figures = acceptance_figures(counts)
    spec = rnds[rnds["k"] > 0] if not rnds.empty else rnds
    k_max = int(spec["k"].max()) if not spec.empty else 0
    full = spec[spec["k"] == k_max]["accepted"] if not spec.empty else spec
    n = len(full)
    return {
        **figures,
        "k_max": k_max,
        "rounds_full_k": n,
        "pr_a": {a: float((full == a).sum() / n) for a in range(k_max + 1)} if n else {},
        "survival": {j: float((full >= j).sum() / n) for j in range(1, k_max + 1)} if n else {},
    }


def summarize(requests: list[dict], rounds: list[dict], by: str | None = None) -> dict:
    """-> {"overall": {...}, "groups": {value: {...}}} grouped by ``by`` (default request_id)."""
    rnds = frames(requests, rounds)
    key = by or "request_id"
    if not rnds.empty and key not in rnds.columns:
        raise UsageError(f"--by {shown(key)}: no such column (have: {', '.join(sorted(rnds.columns))})")
    groups = {}
    if not rnds.empty:
        for value, g in rnds.groupby(key, dropna=False, sort=True):
            groups[str(value)] = summarize_group(g)
    return {"by": key, "overall": summarize_group(rnds), "groups": groups}


def to_table(summary: dict) -> pd.DataFrame:
    """One row per group (plus 'overall'): the CSV layout of ``trace summarize --out``."""
    rows = []
    for name, s in [("overall", summary["overall"]), *summary["groups"].items()]:
        row = {"group": name}
        for key in SCALARS:
            row[key] = s[key]
        for j, v in enumerate(s["num_accepted_tokens_per_pos"], 1):
            row[f"num_accepted_tokens_pos_{j}"] = v
        for k, v in s["k_histogram"].items():
            row[f"rounds_k_{k}"] = v
        for a, v in s["pr_a"].items():
            row[f"pr_a_{a}"] = v
        for j, v in s["survival"].items():
            row[f"survival_{j}"] = v
        for j, v in s["acceptance_by_position"].items():
            row[f"alpha_{j}"] = v
        rows.append(row)
    frame = pd.DataFrame(rows)
    counts = [c for c in frame.columns if c.startswith("rounds_k_")]
    frame[counts] = frame[counts].fillna(0).astype(int)  # a group that never chose that K: 0 rounds
    return frame


# The one-number figures, in the CSV's column order.
SCALARS = (
    "rounds",
    "rounds_k0",
    "rounds_full_k",
    "k_max",
    "mean_accepted_length",
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "share_k0",
)
