"""The parameters of the generation commands, derived from the one declaration of each option.

``GenerateOptions`` (specd.models.run.options) declares every option of a generation run and
``RunArgs`` below every argument of the command itself (prompts, outputs, mode), each
with ``option(...)``: name, default, flags, kind, help and check. ``parameters`` turns
those declarations into a Typer signature, so ``generate`` and ``trace run`` (its alias
that requires ``--trace``) share every flag and its meaning, and ``sweep-k --measure``
takes the model flags from the same place. ``read_run`` merges the parsed flags with a
YAML config into one typed ``GenerateOptions`` and one ``RunArgs``, once, at the
command boundary: a flag typed on the command line wins over the file, the file over
the defaults.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated

import typer

from specd.cli.common import load_yaml_mapping
from specd.errors import UsageError
from specd.files import STDOUT, check_output, check_paths
from specd.models.run.inputs import model_folders, run_inputs
from specd.models.run.k_flags import check_k_flags
from specd.models.run.option_checks import MAX_BATCH_SIZE, batch_size_value
from specd.models.run.option_spec import option, specs, typed
from specd.models.run.options import (
    BATCH_SIZE_CPU,
    BATCH_SIZE_CUDA_MAX,
    OPTION_FIELDS,
    GenerateOptions,
    from_sources,
)

PYTHON_TYPES = {"str": str, "int": int, "float": float, "bool": bool, "k": str, "strs": list[str]}


@dataclass(frozen=True)
class RunArgs:
    """What a generation command does with the options: which prompts, which mode, where output goes."""

    prompt: tuple[str, ...] = option((), "--prompt", "-p", kind="strs", help="A prompt (repeatable).")
    prompts_file: str | None = option(
        None, "--prompts-file", kind="str?", help='JSONL: one {"prompt": ..., "id"?, "tag"?} per line.'
    )
    config: str | None = option(None, "--config", kind="str?", help="YAML file with these options; flags override it.")
    trace: str | None = option(None, "--trace", kind="str?", help="Write the acceptance log (JSONL) here.")
    out: str | None = option(
        None,
        "--out",
        "-o",
        kind="str?",
        help="Write one JSON line per request to this results file, as each finishes (- streams them to "
        "standard output).",
    )
    resume: bool = option(
        False,
        "--resume",
        kind="bool",
        help="Skip the requests already complete in the results file (and acceptance log); refused if "
        "they were written by another run.",
    )
    batch_size: int | None = option(
        None,
        "--batch-size",
        kind="int?",
        help=f"At most this many requests decode together; the next join as others finish (continuous "
        f"batching; 1..{MAX_BATCH_SIZE}). Default: {BATCH_SIZE_CPU} on CPU; on CUDA as many as half the free device "
        f"memory holds (K/V and a round's rows per request), at most {BATCH_SIZE_CUDA_MAX}. "
        "Outputs do not depend on it.",
        check=batch_size_value,
    )
    ray: str | None = option(
        None,
        "--ray",
        kind="str?",
        metavar="[ADDRESS]",
        help="Shard the prompt set over a Ray cluster (an actor per worker, each holding the models): "
        "--ray alone starts a local one, --ray HOST:PORT joins a running one. Needs specd[ray].",
    )
    baseline: bool = option(False, "--baseline", kind="bool", help="Target-only decoding through the same engine.")
    compare: bool = option(False, "--compare", kind="bool", help="Run target-only and speculative; report the speedup.")
    json: bool = option(False, "--json", kind="bool", help="Print one JSON document.")

    def __post_init__(self) -> None:
        for name, (spec, _) in specs(RunArgs).items():
            value = getattr(self, name)
            value = typed(spec.kind, () if value is None and spec.kind == "strs" else value, spec.flag)
            object.__setattr__(self, name, value)
            if spec.check is not None:
                spec.check(value, spec.flag)
        if self.baseline and self.compare:
            raise UsageError("--baseline and --compare are exclusive")
        if self.trace is not None and self.baseline:
            raise UsageError("an acceptance log needs speculative decoding (drop --baseline)")
        if self.resume and self.out is None and self.trace is None:
            raise UsageError("--resume needs a results file or an acceptance log to resume")
        for flag, value in (("--resume", self.resume), ("--ray", self.ray is not None)):
            if value and self.compare:
                raise UsageError(f"{flag} cannot be used with --compare (it times both modes on the same prompts)")
        for path, what in ((self.trace, "acceptance log"), (self.out, "results file")):
            if path is not None:  # a bad output path is found before any model loads
                check_output(path, what)

    @property
    def mode(self) -> str:
        return "compare" if self.compare else ("target-only" if self.baseline else "speculative")


# Keys a config file may hold: every option and run argument but the config file itself.
CONFIG_KEYS = OPTION_FIELDS | (set(specs(RunArgs)) - {"config"})


def parameters(
    *declared, drop: frozenset[str] = frozenset(), keep: frozenset[str] | None = None, defaults: dict | None = None
) -> list:
    """Typer parameters (inspect.Parameter) for the options declared in the ``declared`` dataclasses:
    all but ``drop``, or only ``keep``; ``defaults`` overrides a declared default and its help,
    name -> (default, help)."""
    out = []
    for cls in declared:
        for name, (spec, default) in specs(cls).items():
            if name in drop or (keep is not None and name not in keep):
                continue
            help_text = spec.help
            if defaults and name in defaults:
                default, help_text = defaults[name]
            python = PYTHON_TYPES[spec.kind.rstrip("?")]
            if spec.kind == "strs":  # Typer's repeatable options start empty as None
                python, default = list[str] | None, None
            elif spec.kind.endswith("?"):
                python = python | None
            typer_option = typer.Option(*spec.flags, help=help_text, metavar=spec.metavar)
            annotation = Annotated[python, typer_option]
            out.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    return out


def command(body, params: list):
    """A Typer command whose parameters are ``params``; ``body(ctx)`` runs it."""

    def run(ctx: typer.Context, **_: object) -> None:
        body(ctx)

    ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
    run.__signature__ = inspect.Signature([ctx, *params])
    run.__doc__ = body.__doc__
    return run


def read_run(ctx: typer.Context, fixed: dict | None = None) -> tuple[GenerateOptions, RunArgs]:
    """The command's parsed parameters and its --config file -> typed options and run arguments.

    ``fixed``: run arguments the command sets itself (``trace run``: never target-only).
    """
    params = {**dict(ctx.params), **(fixed or {})}
    config_path = params.get("config")
    config = load_yaml_mapping(config_path, CONFIG_KEYS, "a config")
    typed_here = {name for name in ctx.params if _typed_here(ctx, name)}
    options = from_sources(params, config, config_path, typed_here)
    run = {}
    for name, (spec, default) in specs(RunArgs).items():
        value = params.get(name, default)
        if name in config and name not in typed_here and name not in (fixed or {}):
            value = typed(spec.kind, config[name], f"{config_path}: {name}")
        run[name] = value
    check_k_flags(options, typed_here | set(config), bool(run["baseline"]))
    run_args = RunArgs(**run)
    folders = model_folders(options.target, options.draft, options.target_gguf)
    inputs = {**run_inputs(options, folders), "--prompts-file": run_args.prompts_file, "--config": config_path}
    check_paths(inputs, run_outputs(run_args), folders)
    return options, run_args


def run_outputs(run: RunArgs) -> dict[str, str | None]:
    """Every file a generation run writes, by flag; --json counts as one on standard output."""
    return {"--out": run.out, "--trace": run.trace, "--json": STDOUT if run.json else None}


def _typed_here(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT")
