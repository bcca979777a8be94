"""The first half of ``Pipeline.build`` (specd.models.run.pipeline): from options to the loaded models.

Everything that can be refused is refused before any weights load: --graphs where it cannot run, a
broken --k-schedule or generation_config.json, a self:vocab=N draft's N and table. An embedded
target's file and its default draft on the chosen backend are filled into the options; the default
draft list is then fitted to the loaded target's dtype."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from specd.errors import GraphsUnavailable
from specd.models.hf.graphs import refusal as graph_refusal
from specd.models.hf.loading import Loaded, resolve_device, resolve_dtype
from specd.models.llamacpp.model import LlamaCppLM
from specd.models.model_facts import context_length, within_window
from specd.models.numbers import parse_max_memory
from specd.models.run import backends
from specd.models.run.backends import LLAMA_CPP
from specd.models.run.draft_vocabulary import precheck_draft_vocabulary
from specd.models.run.drafts import DraftSpec, build_proposer, fit_default, parse_drafts
from specd.models.run.embedded import EMBEDDED, ensure_embedded
from specd.models.run.generation_config import GenerationDefaults, from_model, read_folder
from specd.models.run.options import GenerateOptions
from specd.models.run.results import load_k_schedules
from specd.models.vocab_table import DATA

DEFAULT_OWN_TARGET_DRAFT = "suffix"  # your own target without --draft: the lookup alone


@dataclass(frozen=True)
class LoadedRun:
    """What ``load_run`` loaded, and the options as they now read."""

    options: GenerateOptions  # an embedded target's file and the default draft filled in
    specs: tuple[DraftSpec, ...]  # the draft sources, in the user's order (none without a draft)
    backend: str
    device: torch.device
    target: Loaded
    draft: Loaded | None
    generation: GenerationDefaults  # the target's generation config, as read
    schedules: dict | None  # --k-schedule's file, read once
    table_path: str | None  # the table a self:vocab=N draft reads, where named or shipped
    table: object | None  # that table, checked before the weights loaded (None: none, or read later)
    started: float  # time.perf_counter() when loading began


def load_run(
    opts: GenerateOptions, with_draft: bool, report: Callable[[str], None] | None, given: Mapping[str, Loaded]
) -> LoadedRun:
    """Load the target and the draft model (``given``: those already in memory), refusing first what
    can be refused without their weights."""
    device = resolve_device(opts.device)
    backend = backends.choose(opts, device, given_target="target" in given)
    if backend == LLAMA_CPP:
        device = resolve_device("cpu")  # llama.cpp runs on the CPU here, and so does a Hugging Face draft beside it
    dtype = resolve_dtype(opts.dtype, device)
    refused = graph_refusal(opts.graphs, device, backend)  # --graphs on where it cannot be: before any load
    if refused is not None:
        raise GraphsUnavailable(refused)
    schedules = load_k_schedules(opts.k_schedule) if opts.k_schedule else None  # refused before any load
    t0 = time.perf_counter()
    embedded = EMBEDDED[opts.embedded] if opts.embedded else None
    defaulted = with_draft and not (opts.draft or opts.draft_gguf)
    opts, specs = draft_specs(opts, embedded, with_draft, report, backend)
    # A local folder's generation_config.json is read (and refused if broken) before anything loads.
    generation = read_folder(opts.generation_config, opts.target) if opts.target else None
    shared = [spec for spec in specs if spec.kind == "self-vocab"]
    table_path = opts.draft_vocab or (str(DATA / embedded.vocab_table) if embedded and embedded.vocab_table else None)
    checked, tokenizer = None, None  # N against the vocabulary, the table against the tokenizer: before the weights
    if shared:
        checked, tokenizer = precheck_draft_vocabulary(shared, opts.target, table_path, opts.trust_remote_code)
    key = embedded.cache_key if embedded is not None else None
    target, draft = backends.load_models(opts, specs, dtype, device, given, tokenizer, backend, key, placement(opts))
    if defaulted and backend != LLAMA_CPP:  # never a copy of the target in its own dtype (self:bf16 on bf16)
        opts, specs = default_fitted(opts, specs, target.model, report)
    if generation is None:
        generation = from_model(opts.generation_config, target.model, target.name)
    if embedded is not None:
        target.name = embedded.label
    return LoadedRun(opts, specs, backend, device, target, draft, generation, schedules, table_path, checked, t0)


def placement(opts: GenerateOptions) -> dict:
    """How a Hugging Face model is loaded and placed, from the options."""
    return dict(
        trust_remote_code=opts.trust_remote_code,
        device_map=opts.device_map,
        max_memory=parse_max_memory(opts.max_memory) if opts.max_memory else None,
        read_generation_config=opts.generation_config == "auto",
    )


def draft_specs(
    opts: GenerateOptions, embedded, with_draft: bool, report, backend: str
) -> tuple[GenerateOptions, tuple]:
    """The options with an embedded target's file filled in (for hf its folder, converted on first
    use) and its default draft on that backend, and the draft sources they name (none without
    ``with_draft``)."""
    if embedded is not None:
        chat = embedded.chat if opts.chat is None else opts.chat
        if backend == LLAMA_CPP:
            opts = dataclasses.replace(opts, target=None, target_gguf=str(embedded.gguf()), chat=chat)
        else:
            opts = dataclasses.replace(opts, target=str(ensure_embedded(embedded.name, report)), chat=chat)
    if with_draft and not (opts.draft or opts.draft_gguf):  # a lookup costs nothing: always worth offering
        default = (embedded.llama_draft if backend == LLAMA_CPP else embedded.draft) if embedded else None
        opts = dataclasses.replace(opts, draft=default or DEFAULT_OWN_TARGET_DRAFT)
    specs = parse_drafts(opts.draft) if with_draft else ()
    if with_draft and opts.draft_gguf:
        specs = (*specs, DraftSpec("model", None, opts.draft_gguf))
    return opts, specs


def default_fitted(opts: GenerateOptions, specs: tuple, model, report) -> tuple[GenerateOptions, tuple]:
    """The default draft list fitted to the loaded target's dtype (``fit_default``), said once."""
    draft, specs, note = fit_default(opts.draft, specs, next(model.parameters()).dtype)
    if note and report is not None:
        report(note)
    return dataclasses.replace(opts, draft=draft), specs


def positions(lm) -> int | None:
    """Positions a causal LM can read (its attention window's limit included)."""
    if isinstance(lm, LlamaCppLM):
        return within_window(lm.window, lm.file.facts.n_ctx_train)
    return context_length(lm.model, lm.window)


def build_source(spec: DraftSpec, opts: GenerateOptions, target_lm, draft_lm, draft_policy, table):
    """One draft source of the run (a shared-body draft reads its N columns from ``table``)."""
    columns = table.columns(spec.value, f"--draft {spec.text}") if spec.kind == "self-vocab" else None
    return build_proposer(spec, target_lm, draft_policy, draft_lm, opts.draft_stop, columns)
