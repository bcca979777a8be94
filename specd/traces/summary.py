"""Summaries of an acceptance log (pandas): the accepted-prefix distribution, not one rate.

- Pr(A = a), a = 0..K: share of full-K rounds (not clamped by the token budget)
  with exactly a accepted drafts;
- survival s_j = Pr(A >= j);
- alpha_j, reach-conditioned: accepted at j / proposals at j that were *reached*
  (every earlier draft accepted) - never averaged over unreachable suffixes;
- mean accepted length: emitted tokens per round, counting the correction/bonus.

Rounds with k = 0 (target-only, or -k auto switching speculation off) carry no
proposal and are left out of the acceptance figures; with K varying (-k auto),
Pr(A = a) and survival are over the rounds at the largest K. Beside these, vLLM's
counters (defined in specd.core.stats): num_drafts, num_draft_tokens,
num_accepted_tokens, num_accepted_tokens_per_pos, mean acceptance length (1 +
accepted / drafts), draft acceptance rate; and the K chosen per round (histogram)
with the share of rounds at K = 0.
"""

from __future__ import annotations

import pandas as pd


def frames(requests: list[dict], proposals: list[dict], rounds: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    req = pd.DataFrame(requests) if requests else pd.DataFrame(columns=["request_id", "prompt", "tag"])
    props = pd.DataFrame(proposals)
    rnds = pd.DataFrame(rounds)
    extra = [c for c in ("prompt", "tag") if c in req.columns]
    if not rnds.empty and extra:
        rnds = rnds.merge(req[["request_id", *extra]], on="request_id", how="left")
    if not props.empty and extra:
        props = props.merge(req[["request_id", *extra]], on="request_id", how="left")
    return props, rnds


def vllm_counters(rnds: pd.DataFrame) -> dict:
    """vLLM's spec-decode counters and the K histogram, over every round of the group."""
    if rnds.empty:
        return {
            "num_drafts": 0,
            "num_draft_tokens": 0,
            "num_accepted_tokens": 0,
            "num_accepted_tokens_per_pos": [],
            "mean_acceptance_length": None,
            "draft_acceptance_rate": None,
            "k_histogram": {},
            "share_k0": None,
        }
    spec = rnds[rnds["k"] > 0]
    drafts, tokens, accepted = len(spec), int(spec["k"].sum()), int(spec["accepted"].sum())
    k_max = int(rnds["k"].max())
    return {
        "num_drafts": drafts,
        "num_draft_tokens": tokens,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": [int((spec["accepted"] >= j).sum()) for j in range(1, k_max + 1)],
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "draft_acceptance_rate": accepted / tokens if tokens else None,
        "k_histogram": {int(k): int(n) for k, n in rnds["k"].value_counts().sort_index().items()},
        "share_k0": float((rnds["k"] == 0).mean()),
    }


def summarize_group(props: pd.DataFrame, rnds: pd.DataFrame) -> dict:
    counters = vllm_counters(rnds)
    spec = rnds[rnds["k"] > 0] if not rnds.empty else rnds
    if spec.empty:
        return {
            **counters,
            "rounds": 0,
            "rounds_full_k": 0,
            "k_max": 0,
            "mean_accepted_length": None,
            "mean_accepted_drafts": None,
            "pr_a": {},
            "survival": {},
            "alpha": {},
            "reached": {},
            "accepted_at": {},
            "accepted_histogram": {},
        }
    k_max = int(spec["k"].max())
    full = spec[spec["k"] == k_max]  # rounds clamped by the budget cannot reach A = k_max
    n = len(full)
    accepted = full["accepted"]
    pr_a = {a: float((accepted == a).sum() / n) for a in range(k_max + 1)}
    survival = {j: float((accepted >= j).sum() / n) for j in range(1, k_max + 1)}
    alpha, reached_at, accepted_at = {}, {}, {}
    if not props.empty:
        reached = props[props["reached"]]
        for j in range(1, k_max + 1):
            at = reached[reached["draft_index"] == j]
            alpha[j] = float(at["accepted"].mean()) if len(at) else None
            reached_at[j], accepted_at[j] = len(at), int(at["accepted"].sum())
    emitted = spec["emitted"].map(len)
    return {
        **counters,
        "rounds": len(spec),
        "rounds_full_k": n,
        "k_max": k_max,
        "mean_accepted_length": float(emitted.mean()),
        "mean_accepted_drafts": float(spec["accepted"].mean()),
        "pr_a": pr_a,
        "survival": survival,
        "alpha": alpha,
        "reached": reached_at,  # proposals tested at position j: alpha_j's denominator
        "accepted_at": accepted_at,  # and accepted there: its numerator
        "accepted_histogram": {int(a): int(n) for a, n in spec["accepted"].value_counts().sort_index().items()},
    }


def summarize(requests: list[dict], proposals: list[dict], rounds: list[dict], by: str | None = None) -> dict:
    """-> {"overall": {...}, "groups": {value: {...}}} grouped by ``by`` (default request_id)."""
    props, rnds = frames(requests, proposals, rounds)
    key = by or "request_id"
    if not rnds.empty and key not in rnds.columns:
        from specd.errors import UsageError

        raise UsageError(f"--by {key!r}: no such column (have: {', '.join(sorted(rnds.columns))})")
    groups = {}
    if not rnds.empty:
        for value, g in rnds.groupby(key, dropna=False, sort=True):
            p = props[props[key] == value] if not props.empty else props
            groups[str(value)] = summarize_group(p, g)
    return {"by": key, "overall": summarize_group(props, rnds), "groups": groups}


def to_table(summary: dict) -> pd.DataFrame:
    """One row per group (plus 'overall'): the CSV layout of ``trace summarize --out``."""
    rows = []
    for name, s in [("overall", summary["overall"]), *summary["groups"].items()]:
        row = {
            "group": name,
            "rounds": s["rounds"],
            "rounds_full_k": s["rounds_full_k"],
            "k_max": s["k_max"],
            "mean_accepted_length": s["mean_accepted_length"],
            "mean_accepted_drafts": s.get("mean_accepted_drafts"),
            "num_drafts": s["num_drafts"],
            "num_draft_tokens": s["num_draft_tokens"],
            "num_accepted_tokens": s["num_accepted_tokens"],
            "mean_acceptance_length": s["mean_acceptance_length"],
            "draft_acceptance_rate": s["draft_acceptance_rate"],
            "share_k0": s["share_k0"],
        }
        for j, v in enumerate(s["num_accepted_tokens_per_pos"], 1):
            row[f"num_accepted_tokens_pos_{j}"] = v
        for k, v in s["k_histogram"].items():
            row[f"rounds_k_{k}"] = v
        for a, v in s["pr_a"].items():
            row[f"pr_a_{a}"] = v
        for j, v in s["survival"].items():
            row[f"survival_{j}"] = v
        for j, v in s["alpha"].items():
            row[f"alpha_{j}"] = v
        rows.append(row)
    frame = pd.DataFrame(rows)
    counts = [c for c in frame.columns if c.startswith("rounds_k_")]
    frame[counts] = frame[counts].fillna(0).astype(int)  # a group that never chose that K: 0 rounds
    return frame
