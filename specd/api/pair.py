"""A target and its drafts loaded once, and generation on them from Python: ``Pair``.

``Pair.load`` takes what ``specd generate``'s model flags take (a folder, a hub id in the local
cache, ``embedded:NAME``, a GGUF file), or Hugging Face model and tokenizer objects already in
memory, used as they are (no second copy of the weights). ``generate``, ``stream`` and
``compare`` run the engine that ``specd generate`` runs, through the same functions, with its
options as keyword arguments named as the flags are (``max_new_tokens=64`` for
``--max-new-tokens 64``): results and statistics are those of ``generate --json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specd.api import arguments as args
from specd.errors import UsageError, shown
from specd.files import check_output, check_paths
from specd.models.hf.loading import Loaded, in_memory, placement
from specd.models.run.divergence import Divergence, divergences
from specd.models.run.generation import (
    SPECULATIVE,
    TARGET_ONLY,
    GenerationRun,
    RequestResult,
    TextDelta,
    identical,
    speedup,
)
from specd.models.run.inputs import model_folders, run_inputs
from specd.models.run.k_flags import check_k_flags
from specd.models.run.manifest import run_manifest
from specd.models.run.option_checks import batch_size_value
from specd.models.run.options import OPTION_FIELDS, GenerateOptions
from specd.models.run.pipeline import Pipeline
from specd.models.run.prompts import PromptItem, prompt_items
from specd.models.run.results import PromptSetFiles

# Options fixed when the models load; every other option of GenerateOptions may change per call.
LOAD_OPTIONS = frozenset(
    {
        "target",
        "draft",
        "draft_vocab",
        "target_gguf",
        "draft_gguf",
        "backend",
        "trust_remote_code",
        "device",
        "device_map",
        "max_memory",
        "dtype",
        "chat",
        "generation_config",
    }
)
MEMORY_DRAFT = "memory:draft"  # the --draft list's name for a draft model handed over as an object


@dataclass(frozen=True)
class Generation:
    """One run's requests, in the order given, and its statistics.

    results: per request (``RequestResult``: request_id, text, tokens, finish_reason, ...);
    stats: the figures ``generate --json`` reports under ``stats`` for this mode (the same names
    and values: rounds, mean accepted length, acceptance by position, times, ...).
    """

    mode: str  # "speculative" | "target-only"
    results: tuple[RequestResult, ...]
    stats: dict
    notes: tuple[str, ...]  # what the run changed about a request, in words (a clamped budget)

    @property
    def texts(self) -> list[str]:
        return [r.text for r in self.results]

    @classmethod
    def _of(cls, run: GenerationRun) -> Generation:
        return cls(run.mode, run.results, run.stats_dict(), run.notes)


@dataclass(frozen=True)
class Comparison:
    """Target-only and speculative decoding of the same prompts, side by side (``--compare``). Under
    greedy decoding, ``divergences`` says where any request's two texts part and whether the
    target's rounding of a near-tie explains it (``Divergence.near_tie``; else it is a bug)."""

    target_only: Generation
    speculative: Generation
    speedup: float  # decode time per token, target-only over speculative
    identical: bool  # the same tokens for every prompt (expected under greedy decoding)
    divergences: tuple[Divergence, ...] = ()  # greedy: where each differing request parts, and why


class Pair:
    """A target and its draft sources, loaded once; every call reuses them.

    >>> pair = Pair.load("embedded:smollm2-135m")                       # doctest: +SKIP
    >>> pair.generate("Write a haiku about the sea", max_new_tokens=32).texts[0]  # doctest: +SKIP
    """

    def __init__(self, pipeline: Pipeline, folders: Mapping[str, str] | None = None):
        """Built by ``Pair.load`` (``pipeline``: specd's private engine wiring)."""
        self._pipe = pipeline
        self._folders = dict(folders or {})  # the folders of models handed over in memory (outputs stay out)

    @classmethod
    def load(
        cls,
        target: object = None,
        draft: object = None,
        *,
        tokenizer: object = None,
        draft_tokenizer: object = None,
        **options: object,
    ) -> Pair:
        """Load a pair. ``target``: a folder, hub id or ``embedded:NAME`` (None: the embedded default),
        or a Hugging Face causal LM already in memory, with its ``tokenizer``. ``draft``: a --draft
        list ("suffix,self:bf16"), a draft model object (its ``draft_tokenizer``, default the
        target's), or a list of both (["suffix", model]); None: the target's default draft.
        ``options``: any of ``specd generate``'s options by name (dtype="bfloat16", device="cuda",
        chat=True, ...); the decoding ones are the defaults of later calls."""
        given: dict[str, Loaded] = {}
        if target is not None and not isinstance(target, str):
            given["target"] = in_memory(target, tokenizer, "target")
            device, dtype = placement(target)  # type: ignore[arg-type]
            _same(options, "device", device, "the target object's")
            _same(options, "dtype", dtype, "the target object's")
            options = {**options, "device": device, "dtype": dtype}
            target = given["target"].name
        elif tokenizer is not None:
            raise UsageError("tokenizer= goes with a target model object; a named target loads its own")
        spec, draft_model = _draft_spec(draft)
        if draft_model is not None:
            draft_tok = draft_tokenizer if draft_tokenizer is not None else _tokenizer(given, tokenizer)
            given["draft"] = in_memory(draft_model, draft_tok, "draft")
        _refuse_unknown(options, OPTION_FIELDS - {"target", "draft"}, "Pair.load")
        opts = GenerateOptions(target=target, draft=spec, **options)  # type: ignore[arg-type]
        check_k_flags(opts, set(options), False)
        folders = {f"the {role} object's folder": folder for role, lm in given.items() if (folder := _folder(lm))}
        return cls(Pipeline.build(opts, given=given), folders)

    @property
    def options(self) -> GenerateOptions:
        """Every option of the pair as loaded (the defaults of its calls)."""
        return self._pipe.options

    def generate(
        self,
        prompts: str | Sequence[str],
        *,
        baseline: bool = False,
        batch_size: int | None = None,
        out: str | None = None,
        trace: str | None = None,
        **options: object,
    ) -> Generation:
        """Generate for one prompt or many (decoded together, at most ``batch_size`` at once).
        ``baseline``: target-only decoding through the same engine. ``out``, ``trace``: write the
        results file and the acceptance log as ``--out`` and ``--trace`` do. ``options``: decoding
        options by name (k="auto" or an int, temperature, top_p, seed, rule, stop, max_new_tokens,
        ...)."""
        pipe, items = self._with(options, baseline), _items(prompts)
        files = self._files(pipe, items, baseline, out, trace)
        try:
            run = pipe.run(
                items,
                baseline=baseline,
                record_log=trace is not None,
                batch_size=_batch(batch_size),
                on_finish=files.on_finish if files is not None else None,
            )
        finally:
            if files is not None:
                files.close()  # on Ctrl-C too: every finished request is on disk
        return Generation._of(run)

    def stream(
        self, prompts: str | Sequence[str], *, baseline: bool = False, batch_size: int | None = None, **options: object
    ) -> Iterator[TextDelta]:
        """``generate`` as it happens: each request's new text (``TextDelta``: request_id, text) as
        its rounds publish it, stop strings applied. Joined per request, the texts are
        ``generate``'s."""
        pipe, items = (
            self._with(options, baseline),
            _items(prompts),
        )  # bad arguments raise here, not at the first next()
        return pipe.stream(items, baseline=baseline, record_log=False, batch_size=_batch(batch_size))

    def compare(self, prompts: str | Sequence[str], *, batch_size: int | None = None, **options: object) -> Comparison:
        """Target-only, then speculative decoding of the same prompts (``generate --compare``), after
        a short warm-up run of each so neither pays one-time costs."""
        pipe = self._with(options)
        items, size = _items(prompts), _batch(batch_size)
        warm_up(pipe, items)
        runs = {
            TARGET_ONLY: pipe.run(items, baseline=True, record_log=False, batch_size=size),
            SPECULATIVE: pipe.run(items, record_log=False, batch_size=size),
        }
        with pipe.exclusive():  # the target scores where the texts part, outside any round
            greedy = pipe.target_policy.greedy
            parted = divergences(pipe, items, runs[TARGET_ONLY], runs[SPECULATIVE]) if greedy else []
        return Comparison(
            Generation._of(runs[TARGET_ONLY]),
            Generation._of(runs[SPECULATIVE]),
            speedup(runs[TARGET_ONLY], runs[SPECULATIVE]),
            identical(runs[TARGET_ONLY], runs[SPECULATIVE]),
            tuple(parted),
        )

    def manifest(self, *, baseline: bool = False, **options: object) -> dict:
        """What determines the output of a run under these options (models and their weights'
        sha256, policies, seed, K, budget, ...), as ``generate --json`` writes it."""
        return run_manifest(self._with(options, baseline), baseline=baseline)

    def _files(
        self, pipe: Pipeline, items: list[PromptItem], baseline: bool, out: str | None, trace: str | None
    ) -> PromptSetFiles | None:
        """The results file and acceptance log of a run, checked before it starts: never an input,
        never inside a model folder (specd's path rule, as for the commands)."""
        out, trace = args.path(out, "out", optional=True), args.path(trace, "trace", optional=True)
        if out is None and trace is None:
            return None
        if trace is not None and baseline:
            raise UsageError("an acceptance log needs speculative decoding (drop baseline=True)")
        for path, what in ((trace, "acceptance log"), (out, "results file")):
            if path is not None:
                check_output(path, what)
        o = pipe.options
        folders = {**model_folders(o.target, o.draft, o.target_gguf), **self._folders}
        check_paths(run_inputs(o, folders), {"out": out, "trace": trace}, folders)
        return PromptSetFiles(items, run_manifest(pipe, baseline=baseline), out, trace, False, pipe.token_text)

    def _with(self, options: Mapping[str, object], baseline: bool = False) -> Pipeline:
        """The pipeline under these decoding options (the loaded models, new policies); a K or tree
        option this call gives that it would ignore (``baseline``: target-only) is refused by name."""
        if not options:
            return self._pipe
        fixed = sorted(set(options) & LOAD_OPTIONS)
        if fixed:
            raise UsageError(f"{fixed[0]} is fixed when the models load: give it to Pair.load")
        _refuse_unknown(options, OPTION_FIELDS, "this call")
        current = {f.name: getattr(self._pipe.options, f.name) for f in dataclasses.fields(GenerateOptions)}
        merged = GenerateOptions(**{**current, **options})  # type: ignore[arg-type]
        check_k_flags(merged, set(options), baseline, "baseline=True")
        return self._pipe.with_options(merged)


def warm_up(pipe: Pipeline, items: Sequence[PromptItem]) -> None:
    """One short run of each mode first, so neither timed run pays one-time costs."""
    short = min(4, pipe.options.max_new_tokens)
    pipe.run(items[:1], baseline=True, max_new_tokens=short, record_log=False)
    pipe.run(items[:1], max_new_tokens=short, record_log=False)


def _items(prompts: str | Sequence[str]) -> list[PromptItem]:
    """Prompts (one string, or any iterable of strings) -> items with the ids ``specd generate
    --prompt`` gives them (a hash of the text, so a request's random streams are the same from
    Python and from the command line)."""
    return prompt_items(args.prompts(prompts), None)


def _batch(batch_size: int | None) -> int | None:
    batch_size_value(batch_size, "batch_size")
    return batch_size


def _draft_spec(draft: object) -> tuple[str | None, object]:
    """A draft argument -> (the --draft list, the draft model object in it or None)."""
    parts = draft if isinstance(draft, (list, tuple)) else [draft] if draft is not None else []
    names, models = [], []
    for part in parts:
        if isinstance(part, str):
            names.append(part)
        else:
            names.append(MEMORY_DRAFT)
            models.append(part)
    if len(models) > 1:
        raise UsageError("at most one separate draft model per pair")
    return (",".join(names) if names else None), (models[0] if models else None)


def _folder(lm: Loaded) -> str | None:
    """The folder a model object was loaded from, when it is one here."""
    folder = str(getattr(lm.model.config, "_name_or_path", "") or "")
    return folder if folder and Path(folder).is_dir() else None


def _tokenizer(given: Mapping[str, Loaded], tokenizer: object) -> object:
    if tokenizer is None and "target" not in given:
        raise UsageError("a draft model object needs draft_tokenizer= when the target is loaded by name")
    return tokenizer


def _same(options: Mapping[str, object], name: str, actual: str, whose: str) -> None:
    if name in options and options[name] not in (actual, "auto"):
        raise UsageError(f"{name}={shown(options[name])}, but {whose} weights are in {actual}: move the model instead")


def _refuse_unknown(options: Mapping[str, object], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(
            f"{where}: unknown option {shown(unknown[0])} (the options are generate's flags, with underscores)"
        )
