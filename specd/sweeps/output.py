"""The sweep CSV: a documented, stable column schema, written atomically."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from specd.errors import UsageError
from specd.files import image_format, write_atomic, write_text_atomic
from specd.sweeps.ledger import LedgerRow

CSV_SCHEMA_VERSION = 3  # 2: the policy column and the -k auto rows; 3: tree rows (shape, nodes)
CSV_COLUMNS = (
    "schema_version",  # 3
    "mode",  # analytic | measured
    "k",  # for a policy=auto row: the K auto chooses (0: target-only steps)
    "batch",
    "context",
    "expected_accepted",  # E[A]
    "expected_progress",  # E[G] = 1 + E[A] without stops
    "survival",  # s_1..s_K, ';'-separated
    "pr_accepted",  # Pr(A = 0..K), ';'-separated
    "draft_time",  # T_D, in target decode steps at batch 1
    "verify_time",  # T_V
    "state_time",  # T_S
    "queue_time",  # T_Q
    "round_time",  # E[T_round]
    "time_per_token",  # E[T_round] / E[G]
    "baseline_time_per_token",
    "predicted_speedup",
    "measured_speedup",  # empty unless --measure
    "measured_progress",  # tokens per round measured (E[G]'s measured twin); empty unless --measure
    "discarded_kv_rows",  # K - E[A]
    "temporary_kv_bytes_per_token",  # empty unless model shapes are known
    "optimal",  # 1 on the best fixed row of each batch size (a chain's K or a tree)
    "policy",  # fixed | auto (one auto row per batch size)
    "shape",  # a tree row's shape as --tree writes it; empty for a chain of k
    "nodes",  # drafts verified per request: k for a chain, a tree's nodes (k is its depth)
)


def row_dict(row: LedgerRow, mode: str, measured: float | None = None, progress: float | None = None) -> dict:
    return {
        "schema_version": CSV_SCHEMA_VERSION,
        "mode": mode,
        "k": row.k,
        "batch": row.batch,
        "context": row.context,
        "expected_accepted": row.expected_accepted,
        "expected_progress": row.expected_progress,
        "survival": ";".join(f"{x:.6g}" for x in row.survival),
        "pr_accepted": ";".join(f"{x:.6g}" for x in row.pr_accepted),
        "draft_time": row.draft_time,
        "verify_time": row.verify_time,
        "state_time": row.state_time,
        "queue_time": row.queue_time,
        "round_time": row.round_time,
        "time_per_token": row.time_per_token,
        "baseline_time_per_token": row.baseline_time_per_token,
        "predicted_speedup": row.speedup,
        "measured_speedup": "" if measured is None else measured,
        "measured_progress": "" if progress is None else progress,
        "discarded_kv_rows": row.discarded_kv_rows,
        "temporary_kv_bytes_per_token": ""
        if row.temporary_kv_bytes_per_token is None
        else row.temporary_kv_bytes_per_token,
        "optimal": int(row.optimal),
        "policy": row.policy,
        "shape": row.shape,
        "nodes": row.nodes,
    }


def cell_key(row: LedgerRow) -> tuple:
    """A row's key in the measured cells: (K, B), (its shape, B) for a tree, ("auto", B) for the -k auto row."""
    return (row.shape or row.k if row.policy == "fixed" else "auto", row.batch)


def ledger_records(rows: list[LedgerRow], mode: str, measured: dict, progress: dict | None = None) -> list[dict]:
    """The ledger's rows as CSV records, each with its measured speedup and tokens per round where measured."""
    return [row_dict(r, mode, measured.get(cell_key(r)), (progress or {}).get(cell_key(r))) for r in rows]


def csv_text(records: list[dict]) -> str:
    """The CSV of the ledger's records: a header of CSV_COLUMNS, one line per record."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return buf.getvalue()


def write_csv(path: str | Path, records: list[dict]) -> None:
    """Atomic: a temp file in the same folder, renamed over the target (no half file on interrupt)."""
    write_text_atomic(path, csv_text(records), "CSV file")


def plot(records: list[dict], path: str | Path) -> None:
    """Speedup against K, one line per batch size, the optimum marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'specd[plot]' (make install includes it)") from None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for batch in sorted({r["batch"] for r in records}):
        mine = sorted(
            (r for r in records if r["batch"] == batch and r["policy"] == "fixed" and not r["shape"]),
            key=lambda r: r["k"],
        )
        ks = [r["k"] for r in mine]
        line = ax.plot(ks, [r["predicted_speedup"] for r in mine], marker="o", ms=3, label=f"B={batch} predicted")[0]
        if any(r["measured_speedup"] != "" for r in mine):
            ax.plot(
                ks,
                [r["measured_speedup"] or None for r in mine],
                ls="--",
                marker="x",
                color=line.get_color(),
                label=f"B={batch} measured",
            )
        for best in (r for r in mine if r["optimal"]):  # the best chain (unless a tree is best)
            ax.scatter([best["k"]], [best["predicted_speedup"]], s=90, facecolors="none", edgecolors=line.get_color())
        trees = [r for r in records if r["batch"] == batch and r["policy"] == "fixed" and r["shape"]]
        for tree in trees:  # at its depth
            ax.scatter([tree["k"]], [tree["predicted_speedup"]], marker="^", s=40, color=line.get_color())
        for auto in (r for r in records if r["batch"] == batch and r["policy"] == "auto"):
            ax.scatter([auto["k"]], [auto["predicted_speedup"]], marker="*", s=80, color=line.get_color())
            if auto["measured_speedup"] != "":
                ax.scatter([auto["k"]], [auto["measured_speedup"]], marker="*", s=80, color="black")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("K (drafts per round)")
    ax.set_ylabel("speedup over target-only")
    ax.set_title("specd sweep-k (circles: best K; triangles: trees, at their depth; stars: -k auto)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        write_atomic(path, lambda fh: fig.savefig(fh, format=image_format(path), dpi=120), "plot")
    finally:
        plt.close(fig)
