"""``specd generate``: speculative (or target-only) generation on Hugging Face models."""

from __future__ import annotations

import inspect
import sys
from contextlib import nullcontext

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from specd.cli.common import print_json, stderr, stdout
from specd.cli.render import stats_table
from specd.cli.runconfig import load_config, merged, options_from
from specd.errors import UsageError
from specd.models.pipeline import GenerationRun, Pipeline, prompt_items
from specd.traces.log import write_trace

SCHEMA = "specd.generate/v1"


def generate(
    ctx: typer.Context,
    prompt: list[str] | None = typer.Option(None, "--prompt", "-p", help="A prompt (repeatable)."),
    prompts_file: str | None = typer.Option(
        None, "--prompts-file", help='JSONL: {"prompt": ..., "id"?, "tag"?} per line.'
    ),
    target: str | None = typer.Option(
        None,
        "--target",
        help="Target: local folder or hub id (offline cache). Default: embedded SmolLM2-135M-Instruct.",
    ),
    draft: str | None = typer.Option(
        None,
        "--draft",
        help="Draft: folder/hub id, self:bf16, self:fp16, self:layers=N or ngram:N (default self:bf16).",
    ),
    target_gguf: str | None = typer.Option(None, "--target-gguf", help="Target from a GGUF file (dequantized)."),
    draft_gguf: str | None = typer.Option(None, "--draft-gguf", help="Draft from a GGUF file (dequantized)."),
    k: int = typer.Option(4, "-k", "--k", help="Drafts per round K (>= 1)."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="Token budget per prompt."),
    temperature: float = typer.Option(0.0, "--temperature", help="Target temperature; 0 = greedy."),
    top_k: int | None = typer.Option(None, "--top-k", help="Target top-k."),
    top_p: float | None = typer.Option(None, "--top-p", help="Target top-p in (0, 1]."),
    repetition_penalty: float | None = typer.Option(None, "--repetition-penalty", help="Target repetition penalty."),
    draft_temperature: float | None = typer.Option(
        None, "--draft-temperature", help="Draft temperature (default: the target's)."
    ),
    draft_top_k: int | None = typer.Option(None, "--draft-top-k", help="Draft top-k (default: the target's)."),
    draft_top_p: float | None = typer.Option(None, "--draft-top-p", help="Draft top-p (default: the target's)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every request's random streams."),
    layout: str = typer.Option("replay_frontier", "--layout", help="replay_frontier or retained_frontier."),
    backend: str = typer.Option("max_shift", "--backend", help="Softmax backend: max_shift or online."),
    device: str = typer.Option("auto", "--device", help="auto (cuda when present), cpu, cuda, cuda:N."),
    dtype: str = typer.Option("float32", "--dtype", help="float32, bfloat16 or float16."),
    chat: bool | None = typer.Option(
        None, "--chat/--no-chat", help="Wrap prompts in the chat template (default: on for the embedded model)."
    ),
    stop: list[str] | None = typer.Option(None, "--stop", help="Stop string (repeatable)."),
    config: str | None = typer.Option(None, "--config", help="YAML file with these options; flags override it."),
    trace: str | None = typer.Option(None, "--trace", help="Write the acceptance log (JSONL) here."),
    baseline: bool = typer.Option(False, "--baseline", help="Target-only decoding through the same engine."),
    compare: bool = typer.Option(False, "--compare", help="Run target-only and speculative; report the speedup."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Speculative generation with a target/draft pair of Hugging Face causal LMs."""
    values = {name: value for name, value in locals().items() if name != "ctx"}
    values["json"] = values.pop("as_json")
    execute(ctx, values)


def execute(ctx: typer.Context, values: dict, trace_required: bool = False) -> None:
    values = merged(ctx, values, load_config(values.get("config")))
    options = options_from(values)
    items = prompt_items(values.get("prompt") or [], values.get("prompts_file"))
    baseline, compare, as_json, trace = values["baseline"], values["compare"], values["json"], values.get("trace")
    if baseline and compare:
        raise UsageError("--baseline and --compare are exclusive")
    if trace_required and not trace:
        raise UsageError("give --out FILE for the acceptance log")
    if trace and baseline:
        raise UsageError("--trace needs speculative decoding (drop --baseline)")
    options.validate(need_draft=not baseline)
    if not as_json and stderr.is_terminal and not options.uses_default_model:
        stderr.print(f"[dim]loading {escape(options.target or options.target_gguf)} ...[/]")
    with stderr.status("[dim]preparing models ...[/]") if stderr.is_terminal else nullcontext():
        pipe = Pipeline.build(
            options, need_draft=not baseline, report=lambda msg: stderr.print(f"[dim]{escape(msg)}[/]")
        )
    stream = len(items) == 1 and not as_json and not compare
    runs: dict[str, GenerationRun] = {}
    if compare:
        _warm_up(pipe, items)
        runs["target-only"] = _run(pipe, items, True, False, as_json)
        runs["speculative"] = _run(pipe, items, False, bool(trace), as_json)
    else:
        mode = "target-only" if baseline else "speculative"
        runs[mode] = _run(pipe, items, baseline, bool(trace), as_json, stream=stream)
    main_run = runs.get("speculative") or runs["target-only"]
    if trace:
        _write_trace(pipe, main_run, trace)
    if as_json:
        print_json(_document(pipe, runs, trace))
        return
    if not stream:
        for item, text, reason in zip(items, main_run.texts, main_run.finish_reasons):
            stdout.rule(escape(f"{item.request_id}" + (f" [{item.tag}]" if item.tag else "")), style="dim")
            stdout.print(text, markup=False, highlight=False)
            stdout.print(f"[dim]({reason})[/]")
    stdout.print(stats_table({name: run.result.stats for name, run in runs.items()}))
    if compare:
        same = _identical(runs)
        stdout.print(
            f"speedup (decode time per token, target-only / speculative): [bold]{_speedup(runs):.2f}x[/]"
            + (f"; outputs identical: {same}" if options.temperature == 0 else "")
        )
    if trace:
        stderr.print(f"[dim]acceptance log written to {escape(trace)}[/]")


def _run(pipe: Pipeline, items, baseline: bool, record: bool, quiet: bool, stream: bool = False) -> GenerationRun:
    if stream:
        shown = {"text": ""}

        def on_publish(state, emitted):
            text = pipe.cut_at_stop(pipe.decode(state.new_tokens))
            if text.startswith(shown["text"]):
                sys.stdout.write(text[len(shown["text"]) :])
                sys.stdout.flush()
                shown["text"] = text

        run = pipe.run(items, baseline=baseline, on_publish=on_publish, record_log=record)
        sys.stdout.write("\n")
        return run
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
        task = progress.add_task("target-only" if baseline else "speculative", total=total)

        def on_publish(state, emitted):
            progress.advance(task, len(emitted) + (state.remaining if state.finished else 0))

        return pipe.run(items, baseline=baseline, on_publish=on_publish, record_log=record)


def _warm_up(pipe: Pipeline, items) -> None:
    """One short run of each mode first, so neither timed run pays one-time costs."""
    import dataclasses

    short = dataclasses.replace(pipe.options, max_new_tokens=min(4, pipe.options.max_new_tokens))
    saved, pipe.options = pipe.options, short
    try:
        pipe.run(items[:1], baseline=True, record_log=False)
        pipe.run(items[:1], baseline=False, record_log=False)
    finally:
        pipe.options = saved


def _speedup(runs: dict[str, GenerationRun]) -> float:
    b, s = runs["target-only"].result.stats, runs["speculative"].result.stats
    if not b.emitted or not s.emitted or s.decode_time <= 0:
        return 0.0
    return (b.decode_time / b.emitted) / (s.decode_time / s.emitted)


def _identical(runs: dict[str, GenerationRun]) -> bool:
    """Did target-only and speculative decoding emit the same tokens for every prompt?"""
    return [a.new_tokens for a in runs["target-only"].result.states] == [
        b.new_tokens for b in runs["speculative"].result.states
    ]


def _results(pipe: Pipeline, run: GenerationRun) -> list[dict]:
    return [
        {
            "id": item.request_id,
            "tag": item.tag,
            "prompt": item.text,
            "text": text,
            "tokens": list(state.new_tokens),
            "finish_reason": state.finish_reason,
        }
        for item, text, state in zip(run.items, run.texts, run.result.states)
    ]


def _document(pipe: Pipeline, runs: dict[str, GenerationRun], trace: str | None) -> dict:
    main_name = "speculative" if "speculative" in runs else "target-only"
    doc = {
        "schema": SCHEMA,
        "mode": "compare" if len(runs) == 2 else main_name,
        "manifest": pipe.manifest(baseline=main_name == "target-only"),
        "load_time_s": pipe.load_time,
        "results": _results(pipe, runs[main_name]),
        "stats": {name: {**run.result.stats.as_dict(), "wall_time_s": run.wall_time} for name, run in runs.items()},
        "trace": trace,
    }
    if len(runs) == 2:
        doc["speedup"] = _speedup(runs)
        doc["identical_outputs"] = _identical(runs)
    return doc


def _write_trace(pipe: Pipeline, run: GenerationRun, path: str) -> None:
    requests = [
        {
            "request_id": item.request_id,
            "prompt": item.text,
            "tag": item.tag,
            "prompt_tokens": state.prompt_len,
            "text": text,
            "finish_reason": state.finish_reason,
        }
        for item, text, state in zip(run.items, run.texts, run.result.states)
    ]
    write_trace(
        path,
        pipe.manifest(),
        requests,
        run.result.acceptance,
        run.result.rounds,
        token_text=lambda t: pipe.tokenizer.decode([t]),
    )


def trace_run_signature() -> inspect.Signature:
    """``trace run`` takes generate's options, with the log path as a required --out."""
    sig = inspect.signature(generate)
    params = []
    for p in sig.parameters.values():
        if p.name == "trace":
            p = p.replace(default=typer.Option(..., "--out", "-o", help="Where to write the acceptance log (JSONL)."))
        params.append(p)
    return sig.replace(parameters=params)
