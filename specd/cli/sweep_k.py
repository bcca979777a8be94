"""``specd sweep-k``: the cost/speedup ledger over K and batch size, analytic or measured."""

from __future__ import annotations

import re
import time

import typer
from rich.table import Table

from specd.cli.common import load_yaml_mapping, print_json, stderr, stdout
from specd.errors import UsageError
from specd.sweeps.ledger import CostModel, ModelShape, optimum, sweep
from specd.sweeps.output import plot, row_dict, write_csv
from specd.sweeps.profile import (
    EmptyRange,
    constant_profile,
    per_position_profile,
    profile_from_mapping,
    profile_from_trace,
)

SCHEMA = "specd.sweep-k/v1"
DEFAULT_ALPHA = 0.8


def parse_ints(text: str, option: str) -> list[int]:
    """'1..8', '1-8' or '1,4,16' -> ints."""
    text = str(text).strip()
    if m := re.fullmatch(r"(\d+)\s*(?:\.\.|-)\s*(\d+)", text):
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise EmptyRange(f"{option} {text}: empty range")
        return list(range(lo, hi + 1))
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{option} takes a range like 1..8 or a list like 1,4,16; got {text!r}") from None
    if not values:
        raise EmptyRange(f"{option}: empty list")
    return values


def sweep_k(
    out: str | None = typer.Option(None, "--out", "-o", help="Write one CSV row per (K, B) here."),
    k: str = typer.Option("1..8", "--k", "-k", help="K range: 1..8 or a list 1,2,4."),
    batch: str = typer.Option("1,4,16", "--batch", help="Batch sizes: a list 1,4,16 or a range."),
    alpha: float | None = typer.Option(
        None, "--alpha", help=f"Constant reach-conditioned alpha (default {DEFAULT_ALPHA})."
    ),
    alphas: str | None = typer.Option(None, "--alphas", help="Per-position reach-conditioned alpha_1,alpha_2,..."),
    rates: str = typer.Option("reach_conditioned", "--rates", help="What --alphas are: reach_conditioned."),
    trace_log: str | None = typer.Option(None, "--trace-log", help="Estimate alpha_j from an acceptance log."),
    draft_cost: float = typer.Option(CostModel.draft_cost, "--draft-cost", help="c: one draft step / one target step."),
    row_cost: float = typer.Option(CostModel.row_cost, "--row-cost", help="Marginal cost of a row in a target call."),
    draft_row_cost: float = typer.Option(CostModel.draft_row_cost, "--draft-row-cost", help="The same for the draft."),
    state_cost: float = typer.Option(CostModel.state_cost, "--state-cost", help="T_S per round."),
    queue_cost: float = typer.Option(CostModel.queue_cost, "--queue-cost", help="T_Q per round."),
    context_cost: float = typer.Option(
        CostModel.context_cost, "--context-cost", help="Per row per 1000 context tokens."
    ),
    context: int = typer.Option(0, "--context", help="Prefix length L."),
    stop_probability: float = typer.Option(0.0, "--stop-probability", help="Per-token stop probability (0: none)."),
    kv_shape: str | None = typer.Option(None, "--kv-shape", help="layers,kv_heads,head_dim,bytes for K/V bytes."),
    config: str | None = typer.Option(None, "--config", help="YAML with profile:, cost:, k:, batch:, context:."),
    plot_path: str | None = typer.Option(None, "--plot", help="Draw speedup against K per batch size (PNG)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    measure: bool = typer.Option(False, "--measure", help="Time the real models and measure real speedups."),
    target: str | None = typer.Option(None, "--target", help="Measured mode target (default: embedded model)."),
    draft: str | None = typer.Option(None, "--draft", help="Measured mode draft (default self:bf16)."),
    device: str = typer.Option("auto", "--device", help="Measured mode device."),
    dtype: str = typer.Option("float32", "--dtype", help="Measured mode dtype."),
    max_new_tokens: int = typer.Option(32, "--max-new-tokens", help="Measured mode tokens per prompt."),
    repeats: int = typer.Option(5, "--repeats", help="Measured mode timing repeats (after 2 warm-ups)."),
) -> None:
    """The speedup ledger over K and batch: E[G], T_round, time per token, speedup, optimum K."""
    t0 = time.perf_counter()
    ks, batches = parse_ints(k, "--k"), parse_ints(batch, "--batch")
    stop = stop_probability
    if not 0.0 <= stop < 1.0:
        raise UsageError(f"--stop-probability must be in [0, 1), got {stop}")
    if context < 0:
        raise UsageError(f"--context must be >= 0, got {context}")
    cost_fields = dict(
        draft_cost=draft_cost,
        row_cost=row_cost,
        draft_row_cost=draft_row_cost,
        state_cost=state_cost,
        queue_cost=queue_cost,
        context_cost=context_cost,
    )
    profile_spec = None
    if config:
        cfg = _load_yaml(config)
        profile_spec = cfg.get("profile")
        cost_fields.update(cfg.get("cost") or {})
        ks = parse_ints(cfg["k"], "k") if "k" in cfg else ks
        batches = parse_ints(cfg["batch"], "batch") if "batch" in cfg else batches
        context = int(cfg.get("context", context))
        stop = float(cfg.get("stop_probability", stop))
    given = [x is not None for x in (alpha, alphas, trace_log)]
    if sum(given) > 1:
        raise UsageError("give one of --alpha, --alphas, --trace-log")
    if alpha is not None:
        profile = constant_profile(alpha)
    elif alphas is not None:
        try:
            values = [float(x) for x in alphas.split(",")]
        except ValueError:
            raise UsageError(f"--alphas takes numbers like 0.9,0.8; got {alphas!r}") from None
        profile = per_position_profile(values, rates)
    elif trace_log is not None:
        profile = profile_from_trace(trace_log)
    elif profile_spec is not None:
        if not isinstance(profile_spec, dict):
            raise UsageError(f"{config}: profile must be a mapping")
        profile = profile_from_mapping(profile_spec)
    else:
        profile = constant_profile(DEFAULT_ALPHA)
    unknown = set(cost_fields) - set(CostModel.__dataclass_fields__)
    if unknown:
        raise UsageError(f"unknown cost field(s): {', '.join(sorted(unknown))}")
    cost = CostModel(**{name: _number(v, name) for name, v in cost_fields.items()})
    shape = _shape(kv_shape)

    measured = {}
    mode = "analytic"
    unit_seconds = None
    if measure:
        from specd.models.pipeline import GenerateOptions, Pipeline
        from specd.sweeps.measure import measure as run_measure

        mode = "measured"
        pipe = Pipeline.build(
            GenerateOptions(
                target=target, draft=draft, device=device, dtype=dtype, k=max(ks), max_new_tokens=max_new_tokens
            ),
            report=lambda m: stderr.print(f"[dim]{m}[/]"),
        )
        result = run_measure(
            pipe,
            ks,
            batches,
            max_new_tokens=max_new_tokens,
            repeats=repeats,
            progress=lambda m: stderr.print(f"[dim]{m}[/]"),
        )
        rows, measured, profile, unit_seconds = (
            result.rows,
            result.measured,
            result.profile,
            result.seconds_per_target_step,
        )
        cost_doc = result.costs.describe()
    else:
        rows = sweep(profile, cost, ks, batches, context, stop, shape)
        cost_doc = cost.describe()
    records = [row_dict(r, mode, measured.get((r.k, r.batch))) for r in rows]
    if out:
        write_csv(out, records)
    if plot_path:
        plot(records, plot_path)
    optima = {}
    for b in batches:
        best, interior = optimum(rows, b)
        optima[str(b)] = {"k": best.k, "speedup": best.speedup, "interior": interior}
    gap = _gap(rows, measured) if measured else None
    elapsed = time.perf_counter() - t0
    if as_json:
        print_json(
            {
                "schema": SCHEMA,
                "mode": mode,
                "profile": profile.describe(),
                "cost": cost_doc,
                "seconds_per_target_step": unit_seconds,
                "rows": records,
                "optima": optima,
                "gap": gap,
                "elapsed_s": elapsed,
            }
        )
        return
    _render(rows, measured, profile, optima, gap, mode)
    if out:
        stdout.print(f"[dim]{len(records)} rows written to {out}[/]")
    if plot_path:
        stdout.print(f"[dim]plot written to {plot_path}[/]")


def _number(value, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        from specd.sweeps.profile import InvalidCost

        raise InvalidCost(f"cost {name} = {value!r} is not a number") from None


def _shape(text: str | None) -> ModelShape | None:
    if not text:
        return None
    try:
        parts = [int(x) for x in text.split(",")]
        return ModelShape(*parts)
    except (ValueError, TypeError):
        raise UsageError(f"--kv-shape takes layers,kv_heads,head_dim[,bytes]; got {text!r}") from None


def _load_yaml(path: str) -> dict:
    return load_yaml_mapping(path, {"profile", "cost", "k", "batch", "context", "stop_probability"}, "a sweep config")


def _gap(rows, measured) -> dict:
    diffs = [(r.speedup - measured[(r.k, r.batch)], r) for r in rows if (r.k, r.batch) in measured]
    worst = max(diffs, key=lambda d: abs(d[0]))
    return {
        "mean_predicted_minus_measured": sum(d for d, _ in diffs) / len(diffs),
        "max_abs_gap": abs(worst[0]),
        "at": {"k": worst[1].k, "batch": worst[1].batch},
    }


def _render(rows, measured, profile, optima, gap, mode) -> None:
    src = profile.source
    alphas = ", ".join(f"{a:.3f}" for a in profile.alphas[:8]) + (" ..." if len(profile.alphas) > 8 else "")
    stdout.print(f"[bold]specd sweep-k[/] ({mode})  profile: {src} alpha = [{alphas}]")
    table = Table(title_justify="left")
    for col in ("K", "B", "E[A]", "E[G]", "T_D", "T_V", "T_round", "time/token", "speedup"):
        table.add_column(col, justify="right")
    if measured:
        table.add_column("measured", justify="right")
    table.add_column("K - E[A]", justify="right")
    table.add_column("")
    for r in rows:
        cells = [
            str(r.k),
            str(r.batch),
            f"{r.expected_accepted:.2f}",
            f"{r.expected_progress:.2f}",
            f"{r.draft_time:.3f}",
            f"{r.verify_time:.3f}",
            f"{r.round_time:.3f}",
            f"{r.time_per_token:.3f}",
            f"{r.speedup:.3f}",
        ]
        if measured:
            m = measured.get((r.k, r.batch))
            cells.append("-" if m is None else f"{m:.3f}")
        cells += [f"{r.discarded_kv_rows:.2f}", "[bold green]best[/]" if r.optimal else ""]
        table.add_row(*cells)
    stdout.print(table)
    for b, o in optima.items():
        where = "interior optimum" if o["interior"] else "at the edge of the K range swept"
        stdout.print(f"B = {b}: best K = {o['k']} (speedup {o['speedup']:.3f}, {where})")
    if gap:
        stdout.print(
            f"[bold]predicted - measured speedup:[/] mean {gap['mean_predicted_minus_measured']:+.3f}, "
            f"largest {gap['max_abs_gap']:.3f} at K = {gap['at']['k']}, B = {gap['at']['batch']}"
        )
