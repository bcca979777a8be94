"""``specd sweep-k``: the cost/speedup ledger over K and batch size, analytic or measured."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import typer
from rich.table import Table

from specd.cli.common import load_yaml_mapping, print_json, stderr, stdout
from specd.cli.options import command, parameters
from specd.core.tree_shape import tree_file
from specd.errors import UsageError
from specd.files import STDOUT, check_output, check_paths, image_format, is_stdout
from specd.models.run.distributed import connect
from specd.models.run.inputs import model_files, model_folders
from specd.models.run.option_spec import option
from specd.models.run.options import GenerateOptions
from specd.models.run.pipeline import Pipeline
from specd.policy.kpolicy import MAX_K
from specd.policy.ledger import CostModel
from specd.sweeps.analytic import (
    COST_FIELDS,
    DEFAULT_ALPHA,
    MAX_SWEEP_BATCH,
    MAX_SWEEP_K,
    analytic,
    choose_profile,
    cost_model,
    curve_costs,
    kv_shape,
    numbers,
    parse_ints,
    tree_shapes,
)
from specd.sweeps.ledger import Trees, optimum
from specd.sweeps.measure import MAX_MEASURED_BATCH, MeasureInterrupted, check_repeats, measure
from specd.sweeps.output import cell_key, ledger_records, plot, write_csv
from specd.sweeps.profile import tree_profile, tree_profile_from_trace

SCHEMA = "specd.sweep-k/v1"
ANALYTIC_ONLY = (
    "alpha",
    "alphas",
    "rates",
    "trace_log",
    "sibling_alphas",
    "row_costs",
    "tree_budget",
    *COST_FIELDS,
    "context",
    "stop_probability",
    "kv_shape",
    "config",
)
MEASURED_ONLY = (
    "target",
    "draft",
    "device",
    "dtype",
    "max_new_tokens",
    "repeats",
    "trust_remote_code",
    "ray",
    "generation_config",
    "rule",
)


@dataclass(frozen=True)
class SweepResult:
    mode: str  # analytic | measured
    rows: list
    profile: object
    cost_doc: dict
    measured: dict  # (k, batch) -> measured speedup ((tree, batch) for a tree, ("auto", batch) for -k auto)
    seconds_per_target_step: float | None
    progress: dict = field(default_factory=dict)  # the same keys -> measured tokens per round


@dataclass(frozen=True)
class SweepArgs:
    """The options of sweep-k itself; the model options of --measure are generate's (MODEL_OPTIONS)."""

    out: str | None = option(None, "--out", "-o", kind="str?", help="Write one CSV row per (K, B) here.")
    k: str = option(
        "1..8",
        "--k",
        "-k",
        kind="str",
        help=f"K range: 1..8 or a list 1,2,4 (at most {MAX_SWEEP_K}; {MAX_K} measured).",
    )
    batch: str = option(
        "1,4,16",
        "--batch",
        kind="str",
        help=f"Batch sizes: a list 1,4,16 or a range (at most {MAX_SWEEP_BATCH}; {MAX_MEASURED_BATCH} measured).",
    )
    alpha: float | None = option(
        None, "--alpha", kind="float?", help=f"Constant reach-conditioned alpha (default {DEFAULT_ALPHA})."
    )
    alphas: str | None = option(
        None, "--alphas", kind="str?", help="Per-position reach-conditioned alpha_1,alpha_2,..."
    )
    rates: str = option("reach_conditioned", "--rates", kind="str", help="What --alphas are: reach_conditioned.")
    trace_log: str | None = option(None, "--trace-log", kind="str?", help="Estimate alpha_j from an acceptance log.")
    draft_cost: float = option(
        CostModel.draft_cost, "--draft-cost", kind="float", help="c: one draft step / one target step."
    )
    row_cost: float = option(
        CostModel.row_cost, "--row-cost", kind="float", help="Marginal cost of a row in a target call."
    )
    draft_row_cost: float = option(
        CostModel.draft_row_cost, "--draft-row-cost", kind="float", help="The same for the draft."
    )
    state_cost: float = option(CostModel.state_cost, "--state-cost", kind="float", help="T_S per round.")
    queue_cost: float = option(CostModel.queue_cost, "--queue-cost", kind="float", help="T_Q per round.")
    context_cost: float = option(
        CostModel.context_cost, "--context-cost", kind="float", help="Per row per 1000 context tokens."
    )
    context: int = option(0, "--context", kind="int", help="Prefix length L.")
    stop_probability: float = option(
        0.0, "--stop-probability", kind="float", help="Per-token stop probability in [0, 1)."
    )
    kv_shape: str | None = option(
        None, "--kv-shape", kind="str?", help="layers,kv_heads,head_dim[,bytes] for K/V bytes."
    )
    config: str | None = option(None, "--config", kind="str?", help="YAML with profile:, cost:, k:, batch:, context:.")
    plot: str | None = option(None, "--plot", kind="str?", help="Draw speedup against K per batch size (PNG).")
    json: bool = option(False, "--json", kind="bool", help="Print one JSON document.")
    measure: bool = option(False, "--measure", kind="bool", help="Time the real models and measure real speedups.")
    ray: str | None = option(
        None,
        "--ray",
        kind="str?",
        metavar="[ADDRESS]",
        help="Measured mode: one Ray task per (K, B) cell, each timed and normalized on its own worker "
        "(--ray alone: a local Ray; HOST:PORT: a running cluster). Needs specd[ray].",
    )
    repeats: int = option(5, "--repeats", kind="int", help="Measured mode: timing repeats after 2 warm-ups (1..100).")
    tree: tuple[str, ...] = option(
        (),
        "--tree",
        kind="strs",
        metavar="SPEC",
        help="Also price this static tree (repeatable): branching per depth (3,2,1) or EAGLE choices "
        "([[0],[1],[0,0]], or a file of them). Its K is its depth.",
    )
    tree_budget: int | None = option(
        None,
        "--tree-budget",
        kind="int?",
        help="The -k auto row may choose a tree of up to N nodes (2..256), as --tree auto does.",
    )
    sibling_alphas: str | None = option(
        None,
        "--sibling-alphas",
        kind="str?",
        help="beta_1,beta_2,...: a node's r-th child kept given its earlier children refused, at every depth (rank "
        "0 is alpha_j). Default: from the trace log, else -k auto's prior.",
    )
    row_costs: str | None = option(
        None,
        "--row-costs",
        kind="str?",
        metavar="FILE",
        help="A machine's call costs by rows (specd.row-costs/v1, e.g. a GPU's) instead of --row-cost, "
        "--draft-row-cost and --context-cost; --draft-cost scales the target's curve for a draft without one.",
    )


MODEL_OPTIONS = frozenset(MEASURED_ONLY) - {"repeats", "ray"}  # generate's declarations, shared
CONFIG_KEYS = {"profile", "cost", "k", "batch", "context", "stop_probability"}  # a sweep config's
MEASURED_DRAFT = "self:bf16"  # the draft measured mode times when none is given (one model source)


def _sweep_k(ctx: typer.Context) -> None:
    """The speedup ledger over K and batch: E[G], T_round, time per token, speedup, optimum K."""
    p = ctx.params
    out, plot_path, as_json, measure_mode = p["out"], p["plot"], p["json"], p["measure"]
    t0 = time.perf_counter()
    _refuse_other_mode_flags(ctx, measure_mode)
    cfg = _check_paths(p)
    for path, what in ((out, "CSV file"), (plot_path, "plot")):
        if path is not None:  # before any work
            check_output(path, what)
    if plot_path is not None:
        image_format(plot_path)
    batch_limit = MAX_MEASURED_BATCH if measure_mode else MAX_SWEEP_BATCH
    ks = parse_ints(p["k"], "--k", MAX_K if measure_mode else MAX_SWEEP_K)
    batches = parse_ints(p["batch"], "--batch", batch_limit)
    shapes = tree_shapes(p["tree"], p["tree_budget"], p["sibling_alphas"])
    if measure_mode:
        result = _measured(p, ks, batches, shapes)
    else:
        result = _analytic(p, ks, batches, shapes, _typed(ctx), cfg)
    records = ledger_records(result.rows, result.mode, result.measured, result.progress)
    if out is not None:
        write_csv(out, records)
    if plot_path is not None:
        plot(records, plot_path)
    optima = {}
    for b in sorted({r.batch for r in result.rows}):
        best, interior = optimum(result.rows, b)
        auto = next((r for r in result.rows if r.batch == b and r.policy == "auto"), None)
        optima[str(b)] = {
            "k": best.k,
            "shape": best.shape,
            "speedup": best.speedup,
            "interior": interior,
            "auto_k": auto.k if auto else None,
            "auto_shape": auto.shape if auto else None,
        }
    gap = _gap(result.rows, result.measured) if result.measured else None
    if as_json:
        print_json(
            {
                "schema": SCHEMA,
                "mode": result.mode,
                "profile": result.profile.describe(),
                "cost": result.cost_doc,
                "seconds_per_target_step": result.seconds_per_target_step,
                "rows": records,
                "optima": optima,
                "gap": gap,
                "elapsed_s": time.perf_counter() - t0,
            }
        )
        return
    if any(path is not None and is_stdout(path) for path in (out, plot_path)):
        return  # the CSV (or the plot) is what standard output carries
    _render(result, optima, gap)
    if out:
        stdout.print(f"[dim]{len(records)} rows written to {out}[/]")
    if plot_path:
        stdout.print(f"[dim]plot written to {plot_path}[/]")


sweep_k = command(
    _sweep_k,
    parameters(SweepArgs)
    + parameters(
        GenerateOptions, keep=MODEL_OPTIONS, defaults={"max_new_tokens": (32, "Measured mode: tokens per prompt.")}
    ),
)


def _check_paths(p: dict) -> dict:
    """The path rule over every file sweep-k reads and writes (specd.files.check_paths), before any work:
    -> the sweep config's keys (read once, after the rule has kept the outputs off it; the log its
    ``profile: {trace: FILE}`` names is then an input too)."""
    folders = model_folders(p["target"], p["draft"] or MEASURED_DRAFT) if p["measure"] else {}
    inputs = {"--trace-log": p["trace_log"], "--config": p["config"], "--row-costs": p["row_costs"]}
    for i, spec in enumerate(p["tree"] or ()):  # an EAGLE choices file is read like any input
        inputs["--tree" if i == 0 else f"--tree (#{i + 1})"] = tree_file(spec)
    outputs = {"--out": p["out"], "--plot": p["plot"], "--json": STDOUT if p["json"] else None}
    check_paths({**inputs, **model_files(folders)}, outputs, folders)
    cfg = load_yaml_mapping(p["config"], CONFIG_KEYS, "a sweep config") if p["config"] else {}
    if isinstance(cfg.get("profile"), dict) and isinstance(cfg["profile"].get("trace"), str):
        check_paths({f"{p['config']}: profile: trace": cfg["profile"]["trace"]}, outputs)
    return cfg


def _typed(ctx: typer.Context) -> set[str]:
    return {n for n in ctx.params if (src := ctx.get_parameter_source(n)) is not None and src.name == "COMMANDLINE"}


def _refuse_other_mode_flags(ctx: typer.Context, measure: bool) -> None:
    """A flag of the other mode would be silently ignored: refuse it instead."""
    wrong = [n for n in (ANALYTIC_ONLY if measure else MEASURED_ONLY) if n in _typed(ctx)]
    if wrong:
        flags = ", ".join("--" + n.replace("_", "-") for n in wrong)
        if measure:
            raise UsageError(
                f"{flags}: analytic-only, not used with --measure (measured mode measures the profile and costs)"
            )
        raise UsageError(f"{flags}: only used with --measure")


def _analytic(p: dict, ks: list[int], batches: list[int], shapes, given: set[str], cfg: dict) -> SweepResult:
    """The ledger over a profile (constant, per position, a trace log or the config's) and a cost model
    (its fields, or a --row-costs curve); the config file's keys (``cfg``, read once) fill what the flags
    leave at their defaults."""
    cost_fields = {name: p[name] for name in COST_FIELDS}
    context, stop = p["context"], p["stop_probability"]
    profile_spec = None
    if p["config"]:
        profile_spec = cfg.get("profile")
        cost_cfg = cfg.get("cost") or {}
        if not isinstance(cost_cfg, dict):
            raise UsageError(f"{p['config']}: cost must be a mapping of cost fields to numbers")
        cost_fields.update(cost_cfg)
        ks = parse_ints(cfg["k"], f"{p['config']}: k", MAX_SWEEP_K) if "k" in cfg else ks
        batches = parse_ints(cfg["batch"], f"{p['config']}: batch", MAX_SWEEP_BATCH) if "batch" in cfg else batches
        context = cfg.get("context", context)
        stop = cfg.get("stop_probability", stop)
        given = given | {f"config: {name}" for name in cost_cfg}
    profile = choose_profile(p["alpha"], p["alphas"], p["rates"], p["trace_log"], profile_spec, p["config"])
    cost = cost_model(cost_fields)
    if p["row_costs"]:
        cost = curve_costs(p["row_costs"], cost, given)
    k_given = "k" in given or bool(p["config"] and "k" in cfg)
    trees = None
    if shapes or p["tree_budget"]:
        if stop:
            raise UsageError("--stop-probability prices chains only; a tree's rows have no stop model here")
        depth = max([*ks, *(s.depth for s in shapes)])
        ranks = max([p["tree_budget"] or 0, *(s.size for s in shapes)])
        if p["trace_log"] and p["sibling_alphas"] is None:
            tree_prof = tree_profile_from_trace(p["trace_log"], depth, ranks)
        else:
            siblings = None if p["sibling_alphas"] is None else numbers(p["sibling_alphas"], "--sibling-alphas")
            tree_prof = tree_profile(profile, siblings, depth, ranks)
        trees = Trees(tree_prof, shapes, p["tree_budget"] or 0)
    rows = analytic(profile, cost, ks, batches, context, stop, kv_shape(p["kv_shape"]), k_given, trees)
    return SweepResult("analytic", rows, profile, cost.describe(), {}, None)


def _measured(p: dict, ks: list[int], batches: list[int], trees) -> SweepResult:
    """Time the real models, measure the profile, and generate at every (K, B)."""
    check_repeats(p["repeats"])  # before any model loads
    if not p["draft"] and p["dtype"] == "bfloat16":
        raise UsageError(
            f"sweep-k --measure times {MEASURED_DRAFT} when no --draft is given: a copy of the target in bfloat16, "
            "which a bfloat16 target already is; name the draft to time with --draft (self:layers=N, a smaller "
            "model of its family, ...)"
        )
    options = GenerateOptions(
        target=p["target"],
        draft=p["draft"] or MEASURED_DRAFT,
        device=p["device"],
        dtype=p["dtype"],
        max_new_tokens=p["max_new_tokens"],
        trust_remote_code=p["trust_remote_code"],
        generation_config=p["generation_config"],
        rule=p["rule"],
    )
    if p["ray"] is not None:  # an unreachable cluster is refused before any model loads
        connect(p["ray"])
    pipe = Pipeline.build(options, report=lambda m: stderr.print(f"[dim]{m}[/]"))
    try:
        result = measure(
            pipe,
            ks,
            batches,
            max_new_tokens=options.max_new_tokens,
            repeats=p["repeats"],
            progress=lambda m: stderr.print(f"[dim]{m}[/]"),
            ray_address=p["ray"],
            trees=trees,
        )
    except MeasureInterrupted as stop:  # keep the cells measured so far, then stop as asked
        if stop.partial is not None and p["out"] is not None:
            records = ledger_records(stop.partial.rows, "measured", stop.partial.measured, stop.partial.progress)
            write_csv(p["out"], records)
            stderr.print(f"[dim]interrupted: the {len(stop.partial.measured)} cells measured are in {p['out']}[/]")
        raise KeyboardInterrupt from None
    return SweepResult(
        "measured",
        result.rows,
        result.profile,
        result.costs.describe(),
        result.measured,
        result.seconds_per_target_step,
        result.progress,
    )


def _gap(rows, measured) -> dict:
    diffs = [(r.speedup - measured[cell_key(r)], r) for r in rows if cell_key(r) in measured]
    worst = max(diffs, key=lambda d: abs(d[0]))
    return {
        "mean_predicted_minus_measured": sum(d for d, _ in diffs) / len(diffs),
        "max_abs_gap": abs(worst[0]),
        "at": {"k": worst[1].shape or worst[1].k if worst[1].policy == "fixed" else "auto", "batch": worst[1].batch},
    }


def _render(result: SweepResult, optima: dict, gap: dict | None) -> None:
    profile, measured = result.profile, result.measured
    alphas = ", ".join(f"{a:.3f}" for a in profile.alphas[:8]) + (" ..." if len(profile.alphas) > 8 else "")
    stdout.print(f"[bold]specd sweep-k[/] ({result.mode})  profile: {profile.source} alpha = [{alphas}]")
    table = Table(title_justify="left")
    trees = any(r.shape for r in result.rows)
    for col in ("K", *(("tree", "nodes") if trees else ()), "B", "E[A]", "E[G]", "T_D", "T_V", "T_round"):
        table.add_column(col, justify="right")
    extra = ("measured", "measured E[G]") if measured else ()
    for col in ("time/token", "speedup", *extra, "nodes - E[A]" if trees else "K - E[A]"):
        table.add_column(col, justify="right")
    table.add_column("")
    for r in result.rows:
        cells = [
            str(r.k) if r.policy == "fixed" else f"auto ({r.k})",
            *((r.shape or "chain", str(r.nodes)) if trees else ()),
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
            m, g = measured.get(cell_key(r)), result.progress.get(cell_key(r))
            cells += ["-" if m is None else f"{m:.3f}", "-" if g is None else f"{g:.2f}"]
        cells += [f"{r.discarded_kv_rows:.2f}", "[bold green]best[/]" if r.optimal else ""]
        table.add_row(*cells)
    stdout.print(table)
    for b, o in optima.items():
        if o["shape"]:
            best = f"the tree {o['shape']} (K = {o['k']}, speedup {o['speedup']:.3f})"
        else:
            where = "interior optimum" if o["interior"] else "at the edge of the K range swept"
            best = f"K = {o['k']} (speedup {o['speedup']:.3f}, {where})"
        auto = f"the tree {o['auto_shape']}" if o["auto_shape"] else f"K = {o['auto_k']}"
        stdout.print(f"B = {b}: best {best}; -k auto settles on {auto}")
    if gap:
        stdout.print(
            f"[bold]predicted - measured speedup:[/] mean {gap['mean_predicted_minus_measured']:+.3f}, "
            f"largest {gap['max_abs_gap']:.3f} at K = {gap['at']['k']}, B = {gap['at']['batch']}"
        )
