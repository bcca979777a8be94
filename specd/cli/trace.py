"""``specd trace``: write acceptance logs (run), render them (show), summarize them."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specd.cli.common import print_json, stderr, stdout
from specd.cli.generate import execute
from specd.cli.options import RunArgs, command, parameters, read_run
from specd.cli.render import policy_table
from specd.errors import UsageError, printable, shown
from specd.files import STDOUT, check_output, check_paths, image_format, is_stdout, write_text_atomic
from specd.models.run.options import GenerateOptions
from specd.traces.log import read_trace
from specd.traces.plot import plot_summary
from specd.traces.summary import summarize, to_table

app = typer.Typer(help="Per-token acceptance logs and their summaries.", no_args_is_help=True)

STYLES = {
    "accepted": "bold green",
    "rejected": "red strike",
    "correction": "bold blue",
    "bonus": "bold magenta",
}


def _run(ctx: typer.Context) -> None:
    """Generate speculatively and write the acceptance log: `specd generate` with --trace FILE required
    (every option of generate but --baseline and --compare, each meaning the same)."""
    options, run = read_run(ctx, fixed={"baseline": False, "compare": False})
    if run.trace is None:
        raise UsageError("trace run needs --trace FILE (or trace: in the config): where to write the acceptance log")
    execute(options, run)


app.command("run")(command(_run, parameters(GenerateOptions, RunArgs, drop=frozenset({"baseline", "compare"}))))


@app.command("show")
def show(
    path: str = typer.Argument(..., help="An acceptance log written by `trace run` or `generate --trace`."),
    request: str | None = typer.Option(None, "--request", help="Only this request id."),
    max_rounds: int | None = typer.Option(
        None, "--max-rounds", help="Show at most this many rounds per request (>= 1)."
    ),
) -> None:
    """Text coloured by origin, one line per round (Leviathan et al., Figure 1)."""
    if max_rounds is not None and max_rounds < 1:
        raise UsageError(f"--max-rounds must be >= 1, got {max_rounds}")
    header, requests, proposals, rounds = read_trace(path)
    by_round: dict[str, list[dict]] = {}
    for p in proposals:
        by_round.setdefault(p["round_id"], []).append(p)
    legend = Text("legend: ")
    for name, style in STYLES.items():
        legend.append(name, style=style)
        legend.append("  ")
    stdout.print(legend)
    known = {r["request_id"] for r in requests}
    if request is not None and request not in known:
        have = ", ".join(sorted(known)[:20]) + (" ..." if len(known) > 20 else "")
        raise UsageError(f"no request {shown(request)} in {path} (have: {have})")
    for req in requests:
        rid = req["request_id"]
        if request is not None and rid != request:
            continue
        stdout.rule(escape(printable(f"{rid}" + (f" [{req['tag']}]" if req.get("tag") else ""), False)), style="dim")
        stdout.print(Text(printable(req.get("prompt", "")), style="dim"))
        mine = [r for r in rounds if r["request_id"] == rid]
        for rnd in mine[:max_rounds] if max_rounds else mine:
            line = Text(f"{rnd['accepted']}/{rnd['k']} ", style="dim")
            props = sorted(by_round.get(rnd["round_id"], []), key=lambda p: p["draft_index"])
            emitted = rnd["emitted"]
            for p in props:  # token text from the log: escaped, one round per line
                text = printable(p.get("draft_text", str(p.get("draft_token", "?"))), newlines=False)
                if p["accepted"] and p["draft_index"] <= len(emitted):
                    line.append(text, style=STYLES["accepted"])
                elif p["reached"]:
                    line.append(text, style=STYLES["rejected"])
            if rnd["terminal_kind"] in ("correction", "bonus"):
                text = printable(rnd.get("terminal_text", str(rnd.get("terminal_token", "?"))), newlines=False)
                line.append(text, style=STYLES[rnd["terminal_kind"]])
            stdout.print(line)


@app.command("summarize")
def summarize_cmd(
    path: str = typer.Argument(..., help="An acceptance log."),
    by: str | None = typer.Option(None, "--by", help="Group by a column: request_id (default), prompt, tag."),
    out: str | None = typer.Option(None, "--out", help="Write the summary table as CSV."),
    plot_path: str | None = typer.Option(
        None,
        "--plot",
        help="Draw acceptance by position (alpha_j and the per-position rate, 95% intervals) and the "
        "accepted-length histogram to this PNG; with --by, one line per group. Needs matplotlib.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Pr(A = a), survival s_j, reach-conditioned alpha_j and mean accepted length."""
    check_paths({"LOG": path}, {"--out": out, "--plot": plot_path, "--json": STDOUT if as_json else None})
    for target, what in ((out, "summary CSV"), (plot_path, "plot")):
        if target is not None:
            check_output(target, what)
    if plot_path is not None:
        image_format(plot_path)
    header, requests, _, rounds = read_trace(path)
    summary = summarize(requests, rounds, by)
    table = to_table(summary)
    if out is not None:
        write_text_atomic(out, table.to_csv(index=False), "summary CSV")
    if plot_path is not None:
        plot_summary(summary, plot_path, grouped=by is not None)
    if as_json:
        print_json({"schema": "specd.trace-summary/v1", "trace": path, **summary})
        return
    console = stderr if any(p is not None and is_stdout(p) for p in (out, plot_path)) else stdout
    groups = table["group"].tolist()
    rich_table = Table(title=f"Acceptance summary by {summary['by']}", title_justify="left")
    rich_table.add_column("")
    for g in groups:
        rich_table.add_column(printable(str(g), newlines=False), justify="right")
    for col in table.columns[1:]:
        rich_table.add_row(_label(col), *[_fmt(v) for v in table[col].tolist()])
    sampling = header.get("manifest", {}).get("sampling")
    if isinstance(sampling, dict) and "generation_config" in sampling:  # logs written before it lack this
        console.print(policy_table(sampling))
    console.print(rich_table)
    for written in (out, plot_path):
        if written and not is_stdout(written):
            console.print(f"[dim]written to {escape(printable(written))}[/]")


def _label(col: str) -> str:
    for prefix, label in (
        ("pr_a_", "Pr(A = {})"),
        ("survival_", "s_{} = Pr(A >= {})"),
        ("alpha_", "alpha_{} (reached)"),
        ("num_accepted_tokens_pos_", "vLLM num_accepted_tokens_per_pos[{}]"),
        ("rounds_k_", "rounds at K = {}"),
    ):
        if col.startswith(prefix):
            n = col[len(prefix) :]
            return label.format(n, n)
    if col.startswith("num_") or col in ("mean_acceptance_length", "draft_acceptance_rate"):
        return f"vLLM {col}"
    return col.replace("_", " ")


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if value != value else f"{value:.3f}"
    return str(value)
