"""``specd generate``: speculative (or target-only) generation on Hugging Face models."""

from __future__ import annotations

import sys
import time
from contextlib import nullcontext

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from specd.api.pair import warm_up
from specd.cli.common import print_json, stderr, stdout
from specd.cli.options import RunArgs, command, parameters, read_run
from specd.cli.render import policy_table, stats_table
from specd.core.records import RunResult
from specd.core.stats import RunStats
from specd.errors import printable
from specd.files import is_stdout
from specd.models.run.backends import describe
from specd.models.run.distributed import connect, run_on_ray
from specd.models.run.divergence import divergences, refuse_bugs
from specd.models.run.generation import SPECULATIVE, TARGET_ONLY, GenerationRun, identical, speedup
from specd.models.run.manifest import run_manifest
from specd.models.run.options import GenerateOptions
from specd.models.run.pipeline import Pipeline
from specd.models.run.prompts import prompt_items
from specd.models.run.results import PromptSetFiles

SCHEMA = "specd.generate/v1"


def _generate(ctx: typer.Context) -> None:
    """Speculative generation with a target/draft pair of Hugging Face causal LMs."""
    execute(*read_run(ctx))


generate = command(_generate, parameters(GenerateOptions, RunArgs))


def execute(options, run: RunArgs) -> None:
    """Load, generate in the run's mode, then render (text and a summary table, or one JSON document)."""
    items = prompt_items(run.prompt, run.prompts_file)
    if run.ray is not None:  # a wrong cluster address is found before any model loads
        connect(run.ray)
    if not run.json and stderr.is_terminal and not options.uses_default_model:
        stderr.print(f"[dim]loading {escape(printable(options.target or options.target_gguf))} ...[/]")
    with stderr.status("[dim]preparing models ...[/]") if stderr.is_terminal else nullcontext():
        pipe = Pipeline.build(
            options, with_draft=not run.baseline, report=lambda msg: stderr.print(f"[dim]{escape(msg)}[/]")
        )
    files = None
    if run.out is not None or run.trace is not None:
        files = PromptSetFiles(
            items, run_manifest(pipe, baseline=run.baseline), run.out, run.trace, run.resume, pipe.token_text
        )
        for note in files.notes:
            stderr.print(f"[dim]note: {escape(printable(note))}[/]")
        items = files.todo
    batch_size = run.batch_size or pipe.default_batch_size
    stream = len(items) == 1 and not run.json and not run.compare and files is None
    runs: dict[str, GenerationRun] = {}
    try:
        if run.ray is not None:
            runs[TARGET_ONLY if run.baseline else SPECULATIVE] = _run_on_ray(pipe, options, items, run, files)
        elif run.compare:
            warm_up(pipe, items)
            runs[TARGET_ONLY] = _run(pipe, items, True, False, run.json, batch_size)
            runs[SPECULATIVE] = _run(pipe, items, False, run.trace is not None, run.json, batch_size, files)
        else:
            mode = TARGET_ONLY if run.baseline else SPECULATIVE
            record = run.trace is not None
            runs[mode] = _run(pipe, items, run.baseline, record, run.json, batch_size, files, stream)
    finally:
        if files is not None:
            files.close()  # on Ctrl-C too: every finished request is on disk
    main_run = runs.get(SPECULATIVE) or runs[TARGET_ONLY]
    parted = []  # greedy --compare: where the two runs' tokens part, and whether rounding explains it
    if run.compare and pipe.target_policy.greedy:
        parted = divergences(pipe, items, runs[TARGET_ONLY], runs[SPECULATIVE])
    if not run.json:
        for note in main_run.notes:
            stderr.print(f"[dim]note: {escape(printable(note))}[/]")
        for d in parted:
            stderr.print(escape(printable(d.describe())))
    if run.json:
        print_json(_document(pipe, runs, run, files.already if files else 0, parted))
    else:
        _render(pipe, runs, main_run, run, files, stream)
    refuse_bugs(parted)  # exit 1, after the output: a difference rounding does not explain is a bug


def _render(pipe: Pipeline, runs: dict, main_run: GenerationRun, run: RunArgs, files, stream: bool) -> None:
    """The text of each request (unless it streamed or went to files), the policies and the statistics."""
    console = stdout
    if files is not None:
        done = f"{len(main_run.results)} requests" + (
            f" ({files.already} were already complete)" if files.already else ""
        )
        where = " and ".join(
            "standard output" if is_stdout(p) else escape(printable(p)) for p in (run.out, run.trace) if p is not None
        )
        stderr.print(f"[dim]{done} written to {where}[/]")
        console = stderr if files.to_stdout else stdout
    elif not stream:
        for r in main_run.results:
            stdout.rule(escape(printable(f"{r.request_id}" + (f" [{r.tag}]" if r.tag else ""), False)), style="dim")
            stdout.print(printable(r.text), markup=False, highlight=False)
            stdout.print(f"[dim]({r.finish_reason})[/]")
    console.print(policy_table(pipe.sampling_doc(baseline=run.baseline)))
    console.print(stats_table({name: r.stats for name, r in runs.items()}))
    console.print(f"[dim]backend: {escape(describe(pipe.target))}[/]")
    if run.compare:
        same = identical(runs[TARGET_ONLY], runs[SPECULATIVE])
        ratio = speedup(runs[TARGET_ONLY], runs[SPECULATIVE])
        console.print(
            f"speedup (decode time per token, target-only / speculative): [bold]{ratio:.2f}x[/]"
            + (f"; outputs identical: {same}" if pipe.target_policy.greedy else "")
        )


def _run(
    pipe: Pipeline, items, baseline: bool, record: bool, quiet: bool, batch_size: int, files=None, stream=False
) -> GenerationRun:
    on_finish = files.on_finish if files is not None else None
    if stream:

        def on_text(request_id: str, delta: str) -> None:
            sys.stdout.write(printable(delta))
            sys.stdout.flush()

        result = pipe.run(items, baseline=baseline, record_log=record, batch_size=batch_size, on_text=on_text)
        sys.stdout.write("\n")
        return result
    if quiet or len(items) <= 1:
        return pipe.run(items, baseline=baseline, record_log=record, batch_size=batch_size, on_finish=on_finish)
    total = len(items) * pipe.options.max_new_tokens
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} tokens"),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,  # a bar is for a person watching, not for a log file
    ) as progress:
        task = progress.add_task(TARGET_ONLY if baseline else SPECULATIVE, total=total)

        def on_publish(state, emitted):
            progress.advance(task, len(emitted) + (state.remaining if state.finished else 0))

        return pipe.run(
            items,
            baseline=baseline,
            record_log=record,
            batch_size=batch_size,
            on_publish=on_publish,
            on_finish=on_finish,
        )


def _run_on_ray(pipe: Pipeline, options, items, run: RunArgs, files) -> GenerationRun:
    """The prompt set over Ray actors; the files are written here, in the driver."""
    t0 = time.perf_counter()
    ray = connect(run.ray)
    out = run_on_ray(
        ray,
        options,
        items,
        baseline=run.baseline,
        k=None,
        max_new_tokens=None,
        record_log=run.trace is not None,
        batch_size=run.batch_size,
        manifest=run_manifest(pipe, baseline=run.baseline),
        on_finish=files.on_finish if files is not None else None,
    )
    if out.retried_chunks:
        stderr.print(f"[dim]note: {out.retried_chunks} chunk(s) retried on another actor after an actor died[/]")
    engine = RunResult((), RunStats.combine(out.stats), (), (), ())
    mode = TARGET_ONLY if run.baseline else SPECULATIVE
    return GenerationRun(mode, tuple(out.results), engine, time.perf_counter() - t0, tuple(out.notes))


def _document(pipe: Pipeline, runs: dict[str, GenerationRun], run: RunArgs, already: int, parted=()) -> dict:
    main_name = SPECULATIVE if SPECULATIVE in runs else TARGET_ONLY
    doc = {
        "schema": SCHEMA,
        "mode": "compare" if len(runs) == 2 else main_name,
        "manifest": run_manifest(pipe, baseline=main_name == TARGET_ONLY),
        "load_time_s": pipe.load_time,
        "results": [r.as_dict() for r in runs[main_name].results],
        "already_complete": already,
        "notes": list(runs[main_name].notes),
        "stats": {name: r.stats_dict() for name, r in runs.items()},
        "trace": run.trace,
        "results_file": run.out,
    }
    if len(runs) == 2:
        doc["speedup"] = speedup(runs[TARGET_ONLY], runs[SPECULATIVE])
        doc["identical_outputs"] = identical(runs[TARGET_ONLY], runs[SPECULATIVE])
        doc["divergences"] = [d.as_dict() for d in parted]
    return doc
