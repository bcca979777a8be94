"""Typer option aliases shared by the commands (one definition per flag), and the merge of
flags with a YAML config into typed objects.

``generate`` and ``trace run`` declare the same parameters with these aliases;
``read_run`` turns the parsed parameters (plus the config file) into one typed
``GenerateOptions`` and one ``RunArgs``, once, at the command boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from specd.cli.common import load_yaml_mapping
from specd.errors import UsageError
from specd.files import check_output
from specd.models.options import BATCH_SIZE_CPU, BATCH_SIZE_CUDA, MAX_K, OPTION_FIELDS, GenerateOptions, from_sources

# -- prompts ---------------------------------------------------------------------------
PromptOpt = Annotated[list[str] | None, typer.Option("--prompt", "-p", help="A prompt (repeatable).")]
PromptsFileOpt = Annotated[
    str | None, typer.Option("--prompts-file", help='JSONL: one {"prompt": ..., "id"?, "tag"?} per line.')
]
# -- models -----------------------------------------------------------------------------
TargetOpt = Annotated[
    str | None,
    typer.Option(
        "--target", help="Target: local folder or hub id (offline cache). Default: embedded SmolLM2-135M-Instruct."
    ),
]
DraftOpt = Annotated[
    str | None,
    typer.Option(
        "--draft", help="Draft: folder/hub id, self:bf16, self:fp16, self:layers=N or ngram:N (default self:bf16)."
    ),
]
TargetGgufOpt = Annotated[str | None, typer.Option("--target-gguf", help="Target from a GGUF file (dequantized).")]
DraftGgufOpt = Annotated[str | None, typer.Option("--draft-gguf", help="Draft from a GGUF file (dequantized).")]
TrustRemoteCodeOpt = Annotated[
    bool,
    typer.Option(
        "--trust-remote-code",
        help="Run Python code shipped inside a model folder (its config's auto_map). Off by default: that code runs "
        "with your permissions, so pass this only for models from a source you trust.",
    ),
]
DeviceMapOpt = Annotated[
    str | None,
    typer.Option(
        "--device-map",
        help="auto: spread target and draft over the GPUs, then CPU, then disk (accelerate's big-model "
        "inference), for models bigger than one device.",
    ),
]
MaxMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--max-memory", help="With --device-map auto: the most each device may hold, e.g. 0=70GiB,cpu=100GiB."
    ),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto (cuda when present), cpu, cuda, cuda:N.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="float32, bfloat16 or float16.")]
# -- decoding ----------------------------------------------------------------------------
KOpt = Annotated[
    str,
    typer.Option(
        "-k",
        "--k",
        help=f"Drafts per round: auto (chosen per request and round from its acceptance and the measured "
        f"costs; K = 0 when drafting does not pay) or a fixed K in 1..{MAX_K}.",
    ),
]
KMaxOpt = Annotated[int, typer.Option("--k-max", help=f"The largest K that -k auto may choose, 1..{MAX_K}.")]
DraftStopOpt = Annotated[
    float,
    typer.Option(
        "--draft-stop",
        help="Stop drafting where the draft's largest probability at the next position is below P, in [0, 1) "
        "(0: never).",
    ),
]
KScheduleOpt = Annotated[
    str | None,
    typer.Option(
        "--k-schedule",
        help="Replay the K schedules recorded in FILE (a --json document, a results file or an acceptance log), "
        "reproducing a sampled -k auto run token for token.",
    ),
]
MaxNewTokensOpt = Annotated[int, typer.Option("--max-new-tokens", help="Token budget per prompt (>= 1).")]
TemperatureOpt = Annotated[
    float | None,
    typer.Option(
        "--temperature",
        help="Target temperature (finite, >= 0; 0 = greedy). Default: the model's generation config "
        "(--generation-config auto), else greedy.",
    ),
]
GenerationConfigOpt = Annotated[
    str,
    typer.Option(
        "--generation-config",
        help="auto: sampling values you do not give come from the target's generation_config.json as Hugging "
        "Face's generate() resolves them (top_k 50 when sampling); none: ignore the file (greedy unless asked).",
    ),
]
TopKOpt = Annotated[int | None, typer.Option("--top-k", help="Target top-k (>= 1; 0 = off, as in Hugging Face).")]
TopPOpt = Annotated[float | None, typer.Option("--top-p", help="Target top-p in (0, 1].")]
RepetitionPenaltyOpt = Annotated[
    float | None, typer.Option("--repetition-penalty", help="Target repetition penalty (finite, > 0).")
]
DraftTemperatureOpt = Annotated[
    float | None, typer.Option("--draft-temperature", help="Draft temperature (default: the target's).")
]
DraftTopKOpt = Annotated[int | None, typer.Option("--draft-top-k", help="Draft top-k (default: the target's).")]
DraftTopPOpt = Annotated[float | None, typer.Option("--draft-top-p", help="Draft top-p (default: the target's).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of every request's random streams.")]
LayoutOpt = Annotated[str, typer.Option("--layout", help="replay_frontier or retained_frontier.")]
BackendOpt = Annotated[str, typer.Option("--backend", help="Softmax backend: max_shift or online.")]
ChatOpt = Annotated[
    bool | None,
    typer.Option("--chat/--no-chat", help="Wrap prompts in the chat template (default: on for the embedded model)."),
]
StopOpt = Annotated[list[str] | None, typer.Option("--stop", help="Stop string (repeatable).")]
# -- the run ------------------------------------------------------------------------------
ConfigOpt = Annotated[str | None, typer.Option("--config", help="YAML file with these options; flags override it.")]
TraceOpt = Annotated[str | None, typer.Option("--trace", help="Write the acceptance log (JSONL) here.")]
BaselineOpt = Annotated[bool, typer.Option("--baseline", help="Target-only decoding through the same engine.")]
CompareOpt = Annotated[bool, typer.Option("--compare", help="Run target-only and speculative; report the speedup.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]

MAX_BATCH_SIZE = 4096
BatchSizeOpt = Annotated[
    int | None,
    typer.Option(
        "--batch-size",
        help=f"At most this many requests decode together; the next join as others finish (continuous "
        f"batching; 1..{MAX_BATCH_SIZE}). Default: {BATCH_SIZE_CPU} on CPU, {BATCH_SIZE_CUDA} on CUDA. "
        "Outputs do not depend on it.",
    ),
]
ResumeOpt = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Skip the requests already complete in the results file (and acceptance log); refused if "
        "they were written by another run.",
    ),
]
RayOpt = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="[ADDRESS]",
        help="Shard the prompt set over a Ray cluster (an actor per worker, each holding the models): "
        "--ray alone starts a local one, --ray HOST:PORT joins a running one. Needs specd[ray].",
    ),
]


# YAML keys of a generation run besides the options; the file paths by their library names.
RUN_FIELDS = {
    "prompt": "strs",
    "prompts_file": "str",
    "baseline": "bool",
    "compare": "bool",
    "trace": "str",
    "results": "str",
    "resume": "bool",
    "batch_size": "int",
    "ray": "str",
    "json": "bool",
}


@dataclass(frozen=True)
class RunArgs:
    """What a generation command does with the options: which prompts, which mode, where output goes."""

    prompts: tuple[str, ...]
    prompts_file: str | None
    baseline: bool
    compare: bool
    as_json: bool
    trace: str | None  # acceptance log path
    results: str | None = None  # results file path (JSONL, one line per request)
    resume: bool = False
    batch_size: int | None = None  # None: the device's default
    ray: str | None = None  # "local" or HOST:PORT

    def __post_init__(self) -> None:
        if self.baseline and self.compare:
            raise UsageError("--baseline and --compare are exclusive")
        if self.trace is not None and self.baseline:
            raise UsageError("an acceptance log needs speculative decoding (drop --baseline)")
        if self.batch_size is not None and not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise UsageError(f"--batch-size must be in 1..{MAX_BATCH_SIZE}, got {self.batch_size}")
        if self.resume and self.results is None and self.trace is None:
            raise UsageError("--resume needs a results file or an acceptance log to resume")
        for flag, value in (("--resume", self.resume), ("--ray", self.ray is not None)):
            if value and self.compare:
                raise UsageError(f"{flag} cannot be used with --compare (it times both modes on the same prompts)")
        if self.trace is not None and self.trace == self.results:
            raise UsageError("the acceptance log and the results file must be different files")
        for path, what in ((self.trace, "acceptance log"), (self.results, "results file")):
            if path is not None:  # a bad output path is found before any model loads
                check_output(path, what)

    @property
    def mode(self) -> str:
        return "compare" if self.compare else ("target-only" if self.baseline else "speculative")


def read_run(ctx: typer.Context, trace_param: str, results_param: str) -> tuple[GenerateOptions, RunArgs]:
    """The command's parsed parameters and its --config file -> typed options and run arguments.

    A flag typed on the command line wins over the file; the file wins over defaults.
    ``trace_param`` and ``results_param`` name the parameters holding the acceptance log's
    and the results file's paths (generate: --trace, --out; trace run: --out, --results).
    """
    params = dict(ctx.params)
    renamed = {"as_json": "json", trace_param: "trace", results_param: "results"}
    for old, new in renamed.items():
        params[new] = params.pop(old, None)
    config_path = params.get("config")
    config = load_yaml_mapping(config_path, OPTION_FIELDS | set(RUN_FIELDS), "a config")
    typed = {renamed.get(name, name) for name in ctx.params if _typed_here(ctx, name)}
    options = from_sources(params, config, config_path, typed)
    run = {}
    for name, kind in RUN_FIELDS.items():
        value = params.get(name)
        if name in config and name not in typed:
            value = _typed_config_value(config_path, name, kind, config[name])
        run[name] = value
    given = typed | set(config)
    _check_k_flags(options, given, bool(run["baseline"]))
    return options, RunArgs(
        prompts=tuple(run["prompt"] or ()),
        prompts_file=run["prompts_file"],
        baseline=bool(run["baseline"]),
        compare=bool(run["compare"]),
        as_json=bool(run["json"]),
        trace=run["trace"],
        results=run["results"],
        resume=bool(run["resume"]),
        batch_size=run["batch_size"],
        ray=run["ray"],
    )


def _check_k_flags(options: GenerateOptions, given: set[str], baseline: bool) -> None:
    """The K flags that make no sense together, named (``given``: typed, or in the config)."""
    k_flags = [n for n in ("k", "k_max", "draft_stop", "k_schedule") if n in given]
    if baseline and k_flags:
        raise UsageError(f"{options.where(k_flags[0])} needs a draft: target-only decoding (--baseline) drafts nothing")
    if options.k_schedule is not None and "k" in given:
        raise UsageError("give -k or --k-schedule, not both (the schedule says K for every round)")
    if "k_max" in given and not options.auto_k:
        raise UsageError(f"{options.where('k_max')} bounds -k auto; with a fixed -k {options.k} it has no effect")


def _typed_here(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT")


def _typed_config_value(path: str, name: str, kind: str, value):
    if kind == "strs" and isinstance(value, str):
        return (value,)
    ok = {
        "strs": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
    }[kind]
    if not ok:
        what = {
            "strs": "a string or a list of strings",
            "str": "a string",
            "bool": "true or false",
            "int": "an integer",
        }[kind]
        raise UsageError(f"{path}: {name} must be {what}, got {value!r}")
    return value
