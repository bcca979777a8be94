"""``specd verify-oracle``: prove the round exact on tiny vocabularies."""

from __future__ import annotations

import math
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from specd.api.oracle import check_sampler, prove
from specd.cli.common import parse_bias, print_json, stdout
from specd.core.tree_shape import parse_tree
from specd.errors import UsageError, printable
from specd.oracles.fixture import MAX_DRAFT_PATHS, MAX_SAMPLES, MAX_SEQUENCES
from specd.oracles.parallel import MAX_JOBS
from specd.oracles.samplers.sandbox import DEFAULT_TIMEOUT

# The flags, declared once each (typer reads them off the annotations).
Vocab = Annotated[
    int, typer.Option("--vocab", help=f"Vocabulary size V of the table models (>= 2; V^K <= {MAX_DRAFT_PATHS}).")
]
K = Annotated[int, typer.Option("--k", "-k", help="Drafts per round K (>= 1).")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the random logit tables and the Monte Carlo streams.")]
Horizon = Annotated[
    int | None, typer.Option("--horizon", help=f"Tokens compared (default K + 1; V^horizon <= {MAX_SEQUENCES}).")
]
Samples = Annotated[
    int, typer.Option("--samples", help=f"Monte Carlo samples through the engine (0 skips; at most {MAX_SAMPLES}).")
]
TargetTemperature = Annotated[float, typer.Option("--target-temperature", help="Target temperature (0 = greedy).")]
DraftTemperature = Annotated[float, typer.Option("--draft-temperature", help="Draft temperature (0 = greedy).")]
TargetBias = Annotated[
    list[str] | None, typer.Option("--target-bias", help="Additive target logit bias TOKEN=VALUE (repeatable).")
]
DraftBias = Annotated[
    list[str] | None, typer.Option("--draft-bias", help="Additive draft logit bias TOKEN=VALUE (repeatable).")
]
RepetitionPenalty = Annotated[
    float | None, typer.Option("--repetition-penalty", help="Target repetition penalty (stateful).")
]
MinP = Annotated[float | None, typer.Option("--min-p", help="Target min-p in [0, 1] (Hugging Face's).")]
PresencePenalty = Annotated[
    float | None,
    typer.Option("--presence-penalty", help="Target presence penalty (vLLM's; stateful: the output so far)."),
]
FrequencyPenalty = Annotated[
    float | None, typer.Option("--frequency-penalty", help="Target frequency penalty (vLLM's; stateful).")
]
NoRepeatNgramSize = Annotated[
    int | None, typer.Option("--no-repeat-ngram-size", help="Target no-repeat n-gram size (Hugging Face's; stateful).")
]
Layout = Annotated[str, typer.Option("--layout", help="replay_frontier or retained_frontier.")]
Backend = Annotated[str, typer.Option("--backend", help="Softmax backend: max_shift or online.")]
Lab = Annotated[bool, typer.Option("--lab/--no-lab", help="Run the failure lab.")]
Rule = Annotated[
    str,
    typer.Option(
        "--rule",
        help="Which rule to prove: maximal (accept with min(1, p/q)), invariant (shared Gumbel noise: "
        "pointwise equal to target-only decoding), block (the drafts verified as a block), both (maximal and "
        "invariant) or all.",
    ),
]
Sampler = Annotated[
    str | None,
    typer.Option(
        "--sampler",
        help="Check this sampler instead of specd's engine: a shipped adapter (specd, hf, hf-ensemble) or "
        "module:attr, a function or class following the protocol in the README. module:attr is imported, "
        "which runs that module's code: name only code you trust.",
    ),
]
SamplerTimeout = Annotated[
    float | None,
    typer.Option(
        "--sampler-timeout",
        help=f"Seconds one call of --sampler's sampler may take in its own process (default {DEFAULT_TIMEOUT:g}); "
        "a call that takes longer fails its check (timed_out).",
    ),
]
Tree = Annotated[
    list[str] | None,
    typer.Option(
        "--tree",
        metavar="SPEC",
        help="A token tree: branching per depth like 2,2,1 or an EAGLE choices file, optionally prefixed "
        "sampled:, rank: or iid:. The engine's tree checks enumerate every --tree given (repeatable: each starts a "
        "request, so one round holds several; without a prefix each construction is checked; default: small trees "
        "for --vocab and --k; none: no tree checks). With --sampler, one --tree: check a tree sampler over every "
        "draft tree of that shape, K its depth. Shipped: specd, specinfer, rrs, sglang, sglang@S,A, eagle, trtllm, "
        "trtllm-12588, llamacpp, medusa-typical[@T,A].",
    ),
]
Jobs = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        help="Processes the engine oracle's independent checks, or a --sampler's tree rounds, run on, "
        f"1..{MAX_JOBS} (default: the usable cores, at most 4, on Linux; 1: one process). The report is the same.",
    ),
]
ExactSize = Annotated[
    bool,
    typer.Option(
        "--exact-size",
        help="Check --sampler's sampler at the named --vocab and --k (or --tree) only, over several tables; "
        "without it the check also runs at the smallest sizes where each class of slip can show. A class this "
        "size cannot show is reported n/a, with the size that would.",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]


def verify_oracle(
    vocab: Vocab = 2,
    k: K = 3,
    seed: Seed = 0,
    horizon: Horizon = None,
    samples: Samples = 2000,
    target_temperature: TargetTemperature = 1.0,
    draft_temperature: DraftTemperature = 0.7,
    target_bias: TargetBias = None,
    draft_bias: DraftBias = None,
    repetition_penalty: RepetitionPenalty = None,
    min_p: MinP = None,
    presence_penalty: PresencePenalty = None,
    frequency_penalty: FrequencyPenalty = None,
    no_repeat_ngram_size: NoRepeatNgramSize = None,
    layout: Layout = "replay_frontier",
    backend: Backend = "max_shift",
    lab: Lab = True,
    rule: Rule = "both",
    sampler: Sampler = None,
    sampler_timeout: SamplerTimeout = None,
    tree: Tree = None,
    jobs: Jobs = None,
    exact_size: ExactSize = False,
    as_json: AsJson = False,
) -> None:
    """Prove that the emitted joint equals the target joint, exactly and by Monte Carlo;
    or, with --sampler, check any speculative sampler the same way."""
    fixture = dict(
        vocab=vocab,
        k=k,
        seed=seed,
        target_temperature=target_temperature,
        draft_temperature=draft_temperature,
        target_bias=parse_bias(target_bias, "--target-bias"),
        draft_bias=parse_bias(draft_bias, "--draft-bias"),
        repetition_penalty=repetition_penalty,
        min_p=min_p,
        presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    for spec in tree or ():
        if spec != "none" or sampler is not None:  # none: no tree checks of the engine's
            parse_tree(spec)  # named --tree here (the API names its keyword, tree)
    if sampler_timeout is not None and sampler is None:
        raise UsageError("--sampler-timeout limits the calls of a --sampler; there is none")
    if exact_size and sampler is None:
        raise UsageError("--exact-size keeps a --sampler's check at the named size; there is none")
    if sampler is not None:
        report = _check_sampler(sampler, rule, tree, sampler_timeout, jobs, exact_size, fixture)
    else:
        engine = dict(horizon=horizon, samples=samples, layout=layout, backend=backend, lab=lab, jobs=jobs)
        report = prove(rule=rule, tree=tree, **engine, **fixture)
    if as_json:
        print_json(report.document)
    else:
        (render_sampler if sampler is not None else render)(report.document)
    raise typer.Exit(0 if report.passed else 1)


def _check_sampler(
    sampler: str,
    rule: str,
    tree: list[str] | None,
    timeout: float | None,
    jobs: int | None,
    exact_size: bool,
    fixture: dict,
):
    """``--sampler``'s report: a chain sampler, or with one --tree a tree sampler over that shape (its
    rounds shared by ``jobs`` processes); ``exact_size``: at the named size only."""
    limit = DEFAULT_TIMEOUT if timeout is None else timeout
    if not math.isfinite(limit) or limit <= 0:
        raise UsageError(f"--sampler-timeout must be a number of seconds > 0, got {limit:g}")
    if tree is not None and len(tree) > 1:
        raise UsageError("--sampler checks a tree sampler over one tree shape: give --tree once")
    one = tree[0] if tree else None
    return check_sampler(sampler, rule=rule, tree=one, timeout=limit, jobs=jobs, exact_size=exact_size, **fixture)


VERDICT = {True: "[green]PASS[/]", False: "[red]FAIL[/]", None: "[dim]n/a[/]"}  # None: not applicable at this size
CAUGHT = {True: "[green]yes[/]", False: "[red]NO[/]", None: "[dim]n/a[/]"}


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value)
    return str(value)


def render(report: dict) -> None:
    c = report["config"]
    stdout.print(
        f"[bold]specd verify-oracle[/]  V={c['vocab']} K={c['k']} horizon={c['horizon']} seed={c['seed']} "
        f"layout={c['layout']} backend={c['backend']} prompt={c['prompt']}"
    )
    if report["sequences"]:
        table = Table(title="Joint over all sequences", title_justify="left")
        for col in ("tokens", "target", "speculative", "|diff|", "monte carlo"):
            table.add_column(col, justify="right")
        for row in report["sequences"]:
            mc = row["monte_carlo"]
            table.add_row(
                " ".join(map(str, row["tokens"])),
                f"{row['target']:.6f}",
                f"{row['speculative']:.6f}",
                f"{abs(row['target'] - row['speculative']):.1e}",
                "-" if mc is None else f"{mc:.4f}",
            )
        stdout.print(table)
    checks = Table(title="Checks", title_justify="left")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("figures")
    for ch in report["checks"]:
        figures = "; ".join(f"{k}={_fmt(v)}" for k, v in ch["figures"].items() if k != "matrix")
        checks.add_row(ch["name"], VERDICT[ch["passed"]], figures if ch["passed"] is not None else ch["detail"])
    stdout.print(checks)
    if report["failure_lab"]:
        lab = Table(
            title="Failure lab (each variant that can be seen at this size must be caught)", title_justify="left"
        )
        for col in ("variant", "caught", "by", "evidence"):
            lab.add_column(col)
        for v in report["failure_lab"]:
            lab.add_row(v["variant"], CAUGHT[v["caught"]], v["caught_by"] or "-", v["detail"])
        stdout.print(lab)
        figures = next(c["figures"] for c in report["checks"] if c["name"] == "failure_lab")
        stdout.print(
            f"Failure lab: {figures['caught']} of {figures['applicable']} applicable variants caught, "
            f"{figures['not_applicable']} not applicable at this size"
        )
    verdict = "[green]PASSED[/]" if report["passed"] else "[red]FAILED[/]"
    stdout.print(f"{verdict} in {report['elapsed_s']:.2f} s of oracle work")


def render_sampler(report: dict) -> None:
    s, c = report["sampler"], report["config"]
    shape = (
        f"tree {printable(report['tree']['spec'])} ({report['tree']['nodes']} nodes)"
        if "tree" in report
        else f"K={c['k']}"
    )
    stdout.print(
        f"[bold]specd verify-oracle --sampler[/] {printable(s['spec'])}: {printable(s['description'])} "
        f"(returns {s['returns'] or 'nothing the protocol allows'}); V={c['vocab']} {shape} seed={c['seed']}"
    )
    checks = Table(title="Checks", title_justify="left")
    for col in ("check", "result", "found", "figures"):
        checks.add_column(col)
    for ch in report["checks"]:
        result = VERDICT[ch["passed"]]
        figures = "; ".join(f"{k}={_fmt(v)}" for k, v in ch["figures"].items()) or printable(ch["detail"])
        checks.add_row(ch["name"], result, ", ".join(ch["findings"]) or "-", printable(figures))
    stdout.print(checks)
    render_price(report.get("price") or {})
    if report["counterexample"]:
        stdout.print("[bold]minimal counterexample[/]")
        for key, value in report["counterexample"].items():
            if key == "search_order":
                continue
            for line in (
                [f"{key}:"] + [f"  {k}: {v}" for k, v in value.items()]
                if isinstance(value, dict)
                else [f"{key}: {value}"]
            ):
                stdout.print(f"  {printable(line)}", markup=False, highlight=False)
    render_coverage(report.get("coverage"))
    claim = (report.get("coverage") or {}).get("claim")
    if report["passed"]:
        stdout.print(f"[green]PASSED[/]: {escape(claim or 'every check passed')} ({report['elapsed_s']:.2f} s)")
    else:
        found = ", ".join(report["findings"]) or "nothing"
        stdout.print(f"[red]FAILED[/]; found: {found} ({report['elapsed_s']:.2f} s)")


def render_coverage(coverage: dict | None) -> None:
    """Each class of slip and where the check could show it (or why this size cannot, n/a)."""
    if not coverage:
        return
    title = "Slips covered" + (" (--exact-size: the named size only)" if coverage["exact_size"] else "")
    table = Table(title=title, title_justify="left")
    for col in ("slip", "shown", "where"):
        table.add_column(col)
    for slip in coverage["slips"]:
        where = "; ".join(slip["at"]) if slip["shown"] else slip["detail"]
        table.add_row(slip["slip"], "[green]yes[/]" if slip["shown"] else "[dim]n/a[/]", printable(where))
    stdout.print(table)


def render_price(price: dict) -> None:
    """What a sampler that is not exact costs: total variation from the target, beside its accepted length."""
    if not price:
        return
    table = Table(title="What it costs (exact, over the cells enumerated)", title_justify="left")
    for col in ("drawn", "TV over the horizon", "TV per position", "accepted per round", "exact rule's"):
        table.add_column(col, justify="right")
    for drawn, figures in price.items():
        if "tv_horizon" not in figures:
            table.add_row(drawn, "-", "-", "-", printable(str(figures.get("not_priced", ""))))
            continue
        table.add_row(
            drawn,
            f"{figures['tv_horizon']:.4g}",
            ", ".join(f"{x:.4g}" for x in figures["tv_per_position"]),
            f"{figures['expected_accepted']:.4g}",
            _fmt(figures.get("exact_rule_expected_accepted", "-")),
        )
    stdout.print(table)
