"""From user options to a running engine on Hugging Face models: load, admit,
build policies, encode prompts, run (speculative or target-only), decode."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specd.core.engine import EngineConfig, RunResult, SpeculativeEngine
from specd.core.layouts import LAYOUTS
from specd.core.probability import BACKENDS
from specd.core.processors import SamplingPolicy
from specd.core.proposer import Proposer
from specd.core.state import Request, RequestState
from specd.errors import UsageError
from specd.models.admission import EventSpace, admit
from specd.models.drafts import build_proposer, parse_draft
from specd.models.embedded import MODEL_NAME, ensure_default_model
from specd.models.hf import HFCausalLM, logit_width
from specd.models.loading import load, resolve_device, resolve_dtype, weights_digest


@dataclass(frozen=True)
class GenerateOptions:
    target: str | None = None
    draft: str | None = None
    target_gguf: str | None = None
    draft_gguf: str | None = None
    k: int = 4
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    draft_temperature: float | None = None  # default: the target's
    draft_top_k: int | None = None
    draft_top_p: float | None = None
    seed: int = 0
    layout: str = "replay_frontier"
    backend: str = "max_shift"
    device: str = "auto"
    dtype: str = "float32"
    chat: bool | None = None  # None: on for the embedded instruct default, off otherwise
    stop: tuple[str, ...] = ()

    def validate(self, need_draft: bool) -> None:
        if self.k < 1:
            raise UsageError(f"-k must be >= 1, got {self.k}")
        if self.max_new_tokens < 1:
            raise UsageError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        for name, t in (("--temperature", self.temperature), ("--draft-temperature", self.draft_temperature)):
            if t is not None and t < 0:
                raise UsageError(f"{name} must be >= 0 (0 means greedy), got {t}")
        for name, p in (("--top-p", self.top_p), ("--draft-top-p", self.draft_top_p)):
            if p is not None and not 0 < p <= 1:
                raise UsageError(f"{name} must be in (0, 1], got {p}")
        for name, k in (("--top-k", self.top_k), ("--draft-top-k", self.draft_top_k)):
            if k is not None and k < 1:
                raise UsageError(f"{name} must be >= 1, got {k}")
        if self.layout not in LAYOUTS:
            raise UsageError(f"unknown layout {self.layout!r}; choose one of {', '.join(LAYOUTS)}")
        if self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.target and self.target_gguf:
            raise UsageError("give --target or --target-gguf, not both")
        if need_draft and not (self.draft or self.draft_gguf) and (self.target or self.target_gguf):
            raise UsageError(
                "no draft: give --draft PATH_OR_ID, self:bf16, self:fp16, self:layers=N or ngram:N, "
                "or --draft-gguf FILE (or use --baseline)"
            )
        parse_draft(self.draft)

    @property
    def uses_default_model(self) -> bool:
        return not (self.target or self.target_gguf)


DEFAULT_DRAFT = "self:bf16"


@dataclass(frozen=True)
class PromptItem:
    request_id: str
    text: str
    tag: str | None = None


def prompt_items(prompts: Sequence[str], prompts_file: str | None) -> list[PromptItem]:
    """--prompt values then JSONL lines {"prompt": ..., "id"?: ..., "tag"?: ...}.

    Default ids hash the prompt text, so a request's id (and its random streams)
    does not depend on its position in the batch.
    """
    raw: list[tuple[str, str | None, str | None]] = [(p, None, None) for p in prompts]
    if prompts_file:
        path = Path(prompts_file)
        if not path.is_file():
            raise UsageError(f"prompts file not found: {prompts_file}")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise UsageError(f"{prompts_file}:{n}: not JSONL ({err.msg})") from None
            if isinstance(obj, str):
                obj = {"prompt": obj}
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt", obj.get("text")), str):
                raise UsageError(f'{prompts_file}:{n}: each line must be a JSON object with a "prompt" string')
            tag = obj.get("tag", obj.get("domain"))
            raw.append((obj.get("prompt", obj.get("text")), obj.get("id"), None if tag is None else str(tag)))
    if not raw:
        raise UsageError("no prompt: give --prompt TEXT or --prompts-file FILE.jsonl")
    items, seen = [], {}
    for text, rid, tag in raw:
        if not text.strip():
            raise UsageError("empty prompt")
        if rid is None:
            base = "p" + hashlib.sha1(text.encode()).hexdigest()[:8]
            seen[base] = seen.get(base, 0) + 1
            rid = base if seen[base] == 1 else f"{base}-{seen[base]}"
        items.append(PromptItem(str(rid), text, tag))
    if len({i.request_id for i in items}) != len(items):
        raise UsageError("prompt ids must be unique")
    return items


@dataclass
class GenerationRun:
    items: list[PromptItem]
    result: RunResult
    texts: list[str]
    finish_reasons: list[str | None]
    wall_time: float
    baseline: bool


@dataclass
class Pipeline:
    options: GenerateOptions
    target: HFCausalLM
    proposer: Proposer | None
    tokenizer: object
    space: EventSpace
    target_policy: SamplingPolicy
    draft_policy: SamplingPolicy | None
    eos_ids: frozenset[int]
    device: torch.device
    load_time: float
    _digests: dict = field(default_factory=dict)

    @classmethod
    def build(
        cls, opts: GenerateOptions, need_draft: bool = True, report: Callable[[str], None] | None = None
    ) -> Pipeline:
        opts.validate(need_draft)
        device = resolve_device(opts.device)
        dtype = resolve_dtype(opts.dtype)
        t0 = time.perf_counter()
        default_model = opts.uses_default_model
        if default_model:
            folder = ensure_default_model(report)
            opts = dataclasses.replace(
                opts,
                target=str(folder),
                draft=opts.draft or (None if opts.draft_gguf else DEFAULT_DRAFT),
                chat=True if opts.chat is None else opts.chat,
            )
        draft_spec = parse_draft(opts.draft) if need_draft and not opts.draft_gguf else None
        target = load(opts.target, opts.target_gguf, dtype, device)
        if default_model:
            target.name = MODEL_NAME
        loaded_draft = None
        if need_draft and (opts.draft_gguf or (draft_spec is not None and draft_spec.needs_model)):
            loaded_draft = load(draft_spec.value if draft_spec else None, opts.draft_gguf, dtype, device)
        tok = target.tokenizer
        t_width = logit_width(target.model)
        d_width = logit_width(loaded_draft.model) if loaded_draft else t_width
        space = admit(tok, loaded_draft.tokenizer if loaded_draft else None, t_width, d_width)
        pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        target_lm = HFCausalLM(target.model, target.name, width=space.width, pad_id=pad)
        draft_lm = (
            HFCausalLM(loaded_draft.model, loaded_draft.name, width=space.width, pad_id=pad) if loaded_draft else None
        )
        mask = space.real_vocab if space.width > space.real_vocab else None
        target_policy = SamplingPolicy.build(
            temperature=opts.temperature,
            top_k=opts.top_k,
            top_p=opts.top_p,
            repetition_penalty=opts.repetition_penalty,
            real_vocab=mask,
        )
        draft_policy = SamplingPolicy.build(
            temperature=opts.temperature if opts.draft_temperature is None else opts.draft_temperature,
            top_k=opts.top_k if opts.draft_top_k is None else opts.draft_top_k,
            top_p=opts.top_p if opts.draft_top_p is None else opts.draft_top_p,
            real_vocab=mask,
        )
        proposer = None
        if need_draft:
            spec = draft_spec or parse_draft("model")  # a --draft-gguf model
            proposer = build_proposer(spec, target_lm, draft_policy, draft_lm)
        return cls(
            opts,
            target_lm,
            proposer,
            tok,
            space,
            target_policy,
            draft_policy,
            _eos_ids(target.model, tok),
            device,
            time.perf_counter() - t0,
        )

    def encode(self, item: PromptItem) -> tuple[int, ...]:
        if self.options.chat:
            if not getattr(self.tokenizer, "chat_template", None):
                raise UsageError("--chat: the target tokenizer has no chat template")
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": item.text}], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
        else:
            ids = self.tokenizer(item.text, add_special_tokens=True)["input_ids"]
        if not ids:
            raise UsageError(f"prompt {item.request_id!r} encodes to no tokens")
        return tuple(int(t) for t in ids)

    def engine(self, baseline: bool, record_log: bool = True) -> SpeculativeEngine:
        o = self.options
        config = EngineConfig(
            k=0 if baseline else o.k, layout=o.layout, backend=o.backend, eos_ids=self.eos_ids, record_log=record_log
        )
        if baseline:
            return SpeculativeEngine.baseline(self.target, self.target_policy, config)
        return SpeculativeEngine(self.target, self.proposer, self.target_policy, config)

    def run(
        self,
        items: Sequence[PromptItem],
        baseline: bool = False,
        on_publish: Callable[[RequestState, tuple[int, ...]], None] | None = None,
        record_log: bool = True,
    ) -> GenerationRun:
        requests = [
            Request(i.request_id, self.encode(i), self.options.max_new_tokens, seed=self.options.seed) for i in items
        ]
        engine = self.engine(baseline, record_log)
        t0 = time.perf_counter()
        session = engine.start(requests)
        stops = self.options.stop

        def published(state: RequestState, emitted: tuple[int, ...]) -> None:
            if stops and not state.finished and any(s in self.decode(state.new_tokens) for s in stops):
                session.finish(state.request_id, "stop_string")
            if on_publish is not None:
                on_publish(session.store.get(state.request_id), emitted)

        result = session.run(published)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        texts = [self.cut_at_stop(self.decode(s.new_tokens)) for s in result.states]
        return GenerationRun(list(items), result, texts, [s.finish_reason for s in result.states], wall, baseline)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def cut_at_stop(self, text: str) -> str:
        cut = min((text.find(s) for s in self.options.stop if s in text), default=-1)
        return text if cut < 0 else text[:cut]

    def manifest(self, baseline: bool = False) -> dict:
        """The run's coordinate for trace headers and --json (0x01A)."""
        import transformers

        def model_entry(lm) -> dict | None:
            if lm is None:
                return None
            if not isinstance(lm, HFCausalLM):
                return {"name": lm.identity, "identity": lm.identity, "weights_sha256": None, "parameters": 0}
            if lm.name not in self._digests:
                self._digests[lm.name] = weights_digest(lm.model)
            return {
                "name": lm.name,
                "identity": lm.identity,
                "weights_sha256": self._digests[lm.name],
                "parameters": sum(p.numel() for p in lm.model.parameters()),
            }

        o = self.options
        return {
            "target": model_entry(self.target),
            "draft": None if baseline else model_entry(getattr(self.proposer, "model", self.proposer)),
            "dtype": o.dtype,
            "device": str(self.device),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "target_policy": self.target_policy.describe(),
            "draft_policy": None if baseline else self.draft_policy.describe(),
            "layout": o.layout,
            "backend": o.backend,
            "k": 0 if baseline else o.k,
            "seed": o.seed,
            "max_new_tokens": o.max_new_tokens,
            "event_space": {"real_vocab": self.space.real_vocab, "logit_width": self.space.width},
            "eos_ids": sorted(self.eos_ids),
        }


def _eos_ids(model, tokenizer) -> frozenset[int]:
    ids: set[int] = set()
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)
