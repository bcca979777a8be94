"""``specd generate``: speculative (or target-only) generation on Hugging Face models."""

from __future__ import annotations

import sys
from contextlib import nullcontext

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from specd.cli.common import print_json, printable, stderr, stdout
from specd.cli.options import (
    BackendOpt,
    BaselineOpt,
    ChatOpt,
    CompareOpt,
    ConfigOpt,
    DeviceOpt,
    DraftGgufOpt,
    DraftOpt,
    DraftTemperatureOpt,
    DraftTopKOpt,
    DraftTopPOpt,
    DtypeOpt,
    JsonOpt,
    KOpt,
    LayoutOpt,
    MaxNewTokensOpt,
    PromptOpt,
    PromptsFileOpt,
    RepetitionPenaltyOpt,
    RunArgs,
    SeedOpt,
    StopOpt,
    TargetGgufOpt,
    TargetOpt,
    TemperatureOpt,
    TopKOpt,
    TopPOpt,
    TraceOpt,
    TrustRemoteCodeOpt,
    read_run,
)
from specd.cli.render import stats_table
from specd.models.pipeline import SPECULATIVE, TARGET_ONLY, GenerationRun, Pipeline
from specd.models.prompts import prompt_items
from specd.traces.log import write_trace

SCHEMA = "specd.generate/v1"


def generate(
    ctx: typer.Context,
    prompt: PromptOpt = None,
    prompts_file: PromptsFileOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    target_gguf: TargetGgufOpt = None,
    draft_gguf: DraftGgufOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    k: KOpt = 4,
    max_new_tokens: MaxNewTokensOpt = 128,
    temperature: TemperatureOpt = 0.0,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    repetition_penalty: RepetitionPenaltyOpt = None,
    draft_temperature: DraftTemperatureOpt = None,
    draft_top_k: DraftTopKOpt = None,
    draft_top_p: DraftTopPOpt = None,
    seed: SeedOpt = 0,
    layout: LayoutOpt = "replay_frontier",
    backend: BackendOpt = "max_shift",
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "float32",
    chat: ChatOpt = None,
    stop: StopOpt = None,
    config: ConfigOpt = None,
    trace: TraceOpt = None,
    baseline: BaselineOpt = False,
    compare: CompareOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Speculative generation with a target/draft pair of Hugging Face causal LMs."""
    execute(*read_run(ctx, "trace"))


def execute(options, run: RunArgs) -> None:
    """Load, generate in the run's mode, then render (text and a summary table, or one JSON document)."""
    items = prompt_items(run.prompts, run.prompts_file)
    if not run.as_json and stderr.is_terminal and not options.uses_default_model:
        stderr.print(f"[dim]loading {escape(printable(options.target or options.target_gguf))} ...[/]")
    with stderr.status("[dim]preparing models ...[/]") if stderr.is_terminal else nullcontext():
        pipe = Pipeline.build(
            options, with_draft=not run.baseline, report=lambda msg: stderr.print(f"[dim]{escape(msg)}[/]")
        )
    stream = len(items) == 1 and not run.as_json and not run.compare
    runs: dict[str, GenerationRun] = {}
    if run.compare:
        _warm_up(pipe, items)
        runs[TARGET_ONLY] = _run(pipe, items, True, False, run.as_json)
        runs[SPECULATIVE] = _run(pipe, items, False, run.trace is not None, run.as_json)
    else:
        mode = TARGET_ONLY if run.baseline else SPECULATIVE
        runs[mode] = _run(pipe, items, run.baseline, run.trace is not None, run.as_json, stream=stream)
    main_run = runs.get(SPECULATIVE) or runs[TARGET_ONLY]
    if not run.as_json:
        for note in main_run.notes:
            stderr.print(f"[dim]note: {escape(printable(note))}[/]")
    if run.trace is not None:
        _write_trace(pipe, main_run, run.trace)
    if run.as_json:
        print_json(_document(pipe, runs, run.trace))
        return
    if not stream:
        for r in main_run.results:
            stdout.rule(escape(printable(f"{r.request_id}" + (f" [{r.tag}]" if r.tag else ""), False)), style="dim")
            stdout.print(printable(r.text), markup=False, highlight=False)
            stdout.print(f"[dim]({r.finish_reason})[/]")
    stdout.print(stats_table({name: r.stats for name, r in runs.items()}))
    if run.compare:
        same = _identical(runs)
        stdout.print(
            f"speedup (decode time per token, target-only / speculative): [bold]{_speedup(runs):.2f}x[/]"
            + (f"; outputs identical: {same}" if pipe.target_policy.greedy else "")
        )
    if run.trace is not None:
        stderr.print(f"[dim]acceptance log written to {escape(run.trace)}[/]")


def _run(pipe: Pipeline, items, baseline: bool, record: bool, quiet: bool, stream: bool = False) -> GenerationRun:
    if stream:

        def on_text(request_id: str, delta: str) -> None:
            sys.stdout.write(printable(delta))
            sys.stdout.flush()

        result = pipe.run(items, baseline=baseline, record_log=record, on_text=on_text)
        sys.stdout.write("\n")
        return result
    if quiet or len(items) == 1:
        return pipe.run(items, baseline=baseline, record_log=record)
    total = len(items) * pipe.options.max_new_tokens
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} tokens"),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    ) as progress:
        task = progress.add_task(TARGET_ONLY if baseline else SPECULATIVE, total=total)

        def on_publish(state, emitted):
            progress.advance(task, len(emitted) + (state.remaining if state.finished else 0))

        return pipe.run(items, baseline=baseline, record_log=record, on_publish=on_publish)


def _warm_up(pipe: Pipeline, items) -> None:
    """One short run of each mode first, so neither timed run pays one-time costs."""
    short = min(4, pipe.options.max_new_tokens)
    pipe.run(items[:1], baseline=True, max_new_tokens=short, record_log=False)
    pipe.run(items[:1], max_new_tokens=short, record_log=False)


def _speedup(runs: dict[str, GenerationRun]) -> float:
    b, s = runs[TARGET_ONLY].stats, runs[SPECULATIVE].stats
    if not b.emitted or not s.emitted or s.decode_time <= 0:
        return 0.0
    return (b.decode_time / b.emitted) / (s.decode_time / s.emitted)


def _identical(runs: dict[str, GenerationRun]) -> bool:
    """Did target-only and speculative decoding emit the same tokens for every prompt?"""
    return [r.tokens for r in runs[TARGET_ONLY].results] == [r.tokens for r in runs[SPECULATIVE].results]


def _results(run: GenerationRun) -> list[dict]:
    return [
        {
            "id": r.request_id,
            "tag": r.tag,
            "prompt": r.prompt,
            "text": r.text,
            "tokens": list(r.tokens),
            "finish_reason": r.finish_reason,
        }
        for r in run.results
    ]


def _document(pipe: Pipeline, runs: dict[str, GenerationRun], trace: str | None) -> dict:
    main_name = SPECULATIVE if SPECULATIVE in runs else TARGET_ONLY
    doc = {
        "schema": SCHEMA,
        "mode": "compare" if len(runs) == 2 else main_name,
        "manifest": pipe.manifest(baseline=main_name == TARGET_ONLY),
        "load_time_s": pipe.load_time,
        "results": _results(runs[main_name]),
        "notes": list(runs[main_name].notes),
        "stats": {name: {**run.stats.as_dict(), "wall_time_s": run.wall_time} for name, run in runs.items()},
        "trace": trace,
    }
    if len(runs) == 2:
        doc["speedup"] = _speedup(runs)
        doc["identical_outputs"] = _identical(runs)
    return doc


def _write_trace(pipe: Pipeline, run: GenerationRun, path: str) -> None:
    requests = [
        {
            "request_id": r.request_id,
            "prompt": r.prompt,
            "tag": r.tag,
            "prompt_tokens": r.prompt_tokens,
            "text": r.text,
            "finish_reason": r.finish_reason,
        }
        for r in run.results
    ]
    write_trace(
        path,
        pipe.manifest(),
        requests,
        run.engine.acceptance,
        run.engine.rounds,
        token_text=lambda t: pipe.tokenizer.decode([t]),
    )
