"""Pictures of an acceptance log: acceptance by position and the accepted-length histogram.

Left: per draft position j, the reach-conditioned alpha_j (accepted / tested at j) and
the unconditional per-position rate (vLLM's: drafts that accepted j / all drafts), each
with a 95% Wilson interval. Right: the share of drafting rounds that accepted a drafts,
a = 0..K. One line (or bar group) per group when summarized ``--by`` a column, else the
whole log.
"""

from __future__ import annotations

import math
from pathlib import Path

from specd.errors import UsageError
from specd.files import image_format, write_atomic

Z95 = 1.959963984540054


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (no trials: the whole [0, 1])."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'specd[plot]' (make install includes it)") from None
    return plt


def plot_summary(summary: dict, path: str | Path, grouped: bool) -> None:
    """``summary``: specd.traces.summary.summarize's document; ``grouped``: one line per group."""
    plt = _pyplot()
    groups = list(summary["groups"].items()) if grouped else [("all rounds", summary["overall"])]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(len(groups), 1)
    for i, (name, s) in enumerate(groups):
        label = str(name)
        positions = sorted(int(j) for j in s["reached_per_position"])
        if positions:
            reached = [s["reached_per_position"][j] for j in positions]
            accepted = [s["accepted_per_position"][j] for j in positions]
            colour = f"C{i % 10}"
            alpha_label = f"{label}: alpha_j (reached)"
            _with_interval(left, positions, accepted, reached, alpha_label, "o", "-", i * 0.04, colour)
            per_pos = s["num_accepted_tokens_per_pos"][: len(positions)]
            drafts = [s["num_drafts"]] * len(per_pos)
            _with_interval(
                left, positions, per_pos, drafts, f"{label}: per-position rate", "x", ":", i * 0.04 + 0.02, colour
            )
        hist = {int(a): n for a, n in s["accepted_histogram"].items()}
        total = sum(hist.values())
        if total:
            xs = list(range(max(hist) + 1))
            shares = [hist.get(x, 0) / total for x in xs]
            right.bar([x - 0.4 + width * (i + 0.5) for x in xs], shares, width, label=label, color=f"C{i % 10}")
    left.set_xlabel("draft position j")
    left.set_ylabel("acceptance (95% Wilson interval)")
    left.set_ylim(-0.02, 1.02)
    left.set_title("acceptance by position")
    left.legend(fontsize=7)
    right.set_xlabel("accepted drafts per drafting round (A)")
    right.set_ylabel("share of rounds")
    right.set_title("accepted-length histogram")
    if grouped:
        right.legend(fontsize=7)
    fig.tight_layout()
    try:
        write_atomic(path, lambda fh: fig.savefig(fh, format=image_format(path), dpi=110), "plot")
    finally:
        plt.close(fig)


def _with_interval(ax, xs, successes, trials, label, marker, style, shift, colour):
    points = [(x, k, n) for x, k, n in zip(xs, successes, trials) if n]  # a position never tested: no point
    xs = [x for x, _, _ in points]
    rates = [k / n for _, k, n in points]
    bounds = [wilson(k, n) for _, k, n in points]
    lower = [max(0.0, r - lo) for r, (lo, _) in zip(rates, bounds)]  # max: float rounding at a rate of 0 or 1
    upper = [max(0.0, hi - r) for r, (_, hi) in zip(rates, bounds)]
    ax.errorbar(
        [x + shift for x in xs],
        rates,
        yerr=[lower, upper],
        marker=marker,
        ls=style,
        ms=4,
        capsize=2,
        label=label,
        color=colour,
    )
