"""From options to generated text, on either backend.

``Pipeline.build`` loads (specd.models.run.load) and admits the models and builds both sampling
policies once; the pipeline is immutable after that. ``run`` takes what changes
from run to run (the prompts, speculative or target-only, K, the token budget)
as arguments, drives the engine, and returns the text of every request with its
stop strings applied.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.round import decode_events
from specd.core.session import RequestLog
from specd.core.sources import SourceSet
from specd.core.state import Request, RequestState
from specd.core.stops import StopStrings
from specd.core.tree_shape import parse_tree
from specd.errors import UsageError, shown
from specd.models.admission import EventSpace
from specd.models.exclusive import Holding, exclusive, locks_of
from specd.models.hf.loading import Loaded
from specd.models.hf.model import HFCausalLM
from specd.models.llamacpp.model import LlamaCppLM
from specd.models.model_facts import eos_ids, kv_layout
from specd.models.run import backends
from specd.models.run.draft_vocabulary import draft_vocabulary
from specd.models.run.generation import SPECULATIVE, TARGET_ONLY, GenerationRun, RequestResult, TextDelta
from specd.models.run.generation_config import GenerationDefaults
from specd.models.run.load import build_source, load_run, positions
from specd.models.run.options import BATCH_SIZE_CPU, GenerateOptions, batch_for_memory
from specd.models.run.policies import controls, policies
from specd.models.run.prompts import PromptItem
from specd.models.run.results import load_k_schedules
from specd.policy.autok import auto_k_over
from specd.policy.costs import OnlineCosts
from specd.policy.kpolicy import FixedK, KPolicy, ScheduleK

T = TypeVar("T")
_DONE = object()  # the end of a stream of events


@dataclass(frozen=True)
class Pipeline:
    options: GenerateOptions
    target: HFCausalLM | LlamaCppLM
    proposer: SourceSet | None  # the draft sources, in the user's order
    tokenizer: object
    space: EventSpace
    target_policy: SamplingPolicy
    draft_policy: SamplingPolicy | None
    eos_ids: frozenset[int]
    device: torch.device
    load_time: float
    context: int | None  # positions the models can read (the smaller of target and draft); None: unknown
    generation: GenerationDefaults = GenerationDefaults("none")  # the target's generation config, as read
    sampling: dict = field(default_factory=dict)  # "target"/"draft" -> field -> Setting (value, source)
    k_schedules: dict | None = None  # --k-schedule's file, read once: request id -> K per round
    # This machine's measured costs (target call, draft step), shared by every -k auto run of these models.
    costs: OnlineCosts = field(default_factory=OnlineCosts, compare=False, repr=False)
    digests: dict = field(default_factory=dict, compare=False, repr=False)  # weights sha256 by model name (manifest)
    backend: str = backends.HF  # what ran the GGUF models (specd.models.run.backends)

    @classmethod
    def build(
        cls,
        opts: GenerateOptions,
        with_draft: bool = True,
        report: Callable[[str], None] | None = None,
        given: Mapping[str, Loaded] | None = None,
    ) -> Pipeline:
        """Load target (and draft), admit their tokenizers, build both policies. ``given``: "target"
        and/or "draft" already in memory (``loading.in_memory``), used instead of loading them."""
        run = load_run(opts, with_draft, report, given or {})
        opts = run.options
        target_lm, draft_lm, space = backends.adapters(run.target, run.draft, opts.graphs)
        tok = run.target.tokenizer
        eos = eos_ids(run.target.model, tok)
        target_policy, draft_policy, sampling = policies(opts, space, run.generation, controls(opts, tok, eos))
        proposer = None
        if with_draft:
            shared = any(spec.kind == "self-vocab" for spec in run.specs)
            table = run.table or (
                draft_vocabulary(target_lm, tok, run.table_path, opts.chat, report) if shared else None
            )
            proposer = SourceSet(
                [build_source(spec, opts, target_lm, draft_lm, draft_policy, table) for spec in run.specs]
            )
        contexts = (positions(lm) for lm in (target_lm, draft_lm) if lm is not None)
        pipe = cls(
            opts,
            target_lm,
            proposer,
            tok,
            space,
            target_policy,
            draft_policy if with_draft else None,
            eos,
            run.device,
            time.perf_counter() - run.started,
            min((c for c in contexts if c), default=None),
            run.generation,
            sampling if with_draft else {"target": sampling["target"]},
            run.schedules,
            backend=run.backend,
        )
        graphs = getattr(target_lm, "graphs", None)
        if graphs is not None:  # -k auto prices a call as the bucket it is padded to
            pipe.costs.buckets = graphs.buckets
        return pipe

    def with_options(self, opts: GenerateOptions) -> Pipeline:
        """The same loaded models under other sampling options (a new pipeline; this one is unchanged)."""
        extra = controls(opts, self.tokenizer, self.eos_ids)
        target_policy, draft_policy, sampling = policies(opts, self.space, self.generation, extra)
        proposer = self.proposer
        if proposer is not None:
            proposer = SourceSet(
                [
                    s.with_policy(draft_policy, opts.draft_stop) if isinstance(s, ModelProposer) else s
                    for s in proposer.sources
                ]
            )
        return dataclasses.replace(
            self,
            options=dataclasses.replace(opts, chat=self.options.chat),
            target_policy=target_policy,
            draft_policy=draft_policy if self.draft_policy is not None else None,
            proposer=proposer,
            sampling=sampling if self.draft_policy is not None else {"target": sampling["target"]},
            k_schedules=load_k_schedules(opts.k_schedule) if opts.k_schedule else None,
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
            raise UsageError(f"prompt {shown(item.request_id)} encodes to no tokens")
        return tuple(int(t) for t in ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def token_text(self, token: int) -> str:
        """One token's text as the tokenizer writes it alone (for acceptance logs)."""
        return self.tokenizer.decode([token])

    @property
    def default_batch_size(self) -> int:
        """Requests decoding together when the user does not say: BATCH_SIZE_CPU on a CPU; on CUDA as
        many as half the free device memory holds, each request costing its K/V rows over the
        context it can reach and the rows of its widest round (``request_bytes``)."""
        if self.device.type != "cuda":
            return BATCH_SIZE_CPU
        free, _ = torch.cuda.mem_get_info(self.device)
        return batch_for_memory(free, self.request_bytes())

    def request_bytes(self) -> int:
        """Device memory one request holds: K/V for its prompt (up to 1,024 tokens, a typical long
        prompt) and its budget, every layer's keys and values, in the target's dtype; and its widest
        round's rows: p, q and the processing buffer, float32, K max + 1 rows over the vocabulary."""
        layers, kv_heads, head_dim = kv_layout(self.target.model)
        element = torch.finfo(self.target.dtype).bits // 8
        tokens = min(self.context or 1 << 30, 1024 + self.options.max_new_tokens)
        kv = 2 * layers * kv_heads * head_dim * element * tokens
        rows = 3 * (self.options.k_max + 1) * self.target.vocab_size * 4
        return kv + rows

    def engine(self, baseline: bool, k: int | str, record_log: bool, batch: int = 1) -> SpeculativeEngine:
        """``k``: a fixed K or "auto"; ``batch``: the requests the run decodes together (auto reads
        its costs at that batch size)."""
        o = self.options
        tree = parse_tree(o.tree) if o.tree is not None and not o.auto_tree_budget and not baseline else None
        k = tree.depth if tree is not None else k  # a tree's depth is each drafting round's K
        config = EngineConfig(
            k=0 if k == "auto" else k,
            layout=o.layout,
            backend=o.softmax,
            eos_ids=self.eos_ids,
            record_log=record_log,
            rule=o.rule,
            tree=tree,
        )
        observers = (self.costs.observe,)  # every run's timings are facts about the machine
        if baseline:
            return SpeculativeEngine.baseline(self.target, self.target_policy, config, observers=observers)
        if self.proposer is None:
            raise UsageError("this pipeline was built without a draft: only target-only runs")
        if self.k_schedules is not None:
            policy: KPolicy = ScheduleK(self.k_schedules)
        elif k == "auto":
            policy = auto_k_over(
                self.proposer.sources,
                o.k_max,
                batch,
                self.costs,
                self.target_policy.greedy,
                o.auto_tree_budget,
                self.target,
            )
        else:
            policy = FixedK(k)
        return SpeculativeEngine(
            self.target, self.proposer, self.target_policy, config, k_policy=policy, observers=observers
        )

    def run(
        self,
        items: Sequence[PromptItem],
        *,
        baseline: bool = False,
        k: int | str | None = None,
        max_new_tokens: int | None = None,
        record_log: bool = True,
        batch_size: int | None = None,
        on_text: Callable[[str, str], None] | None = None,
        on_publish: Callable[[RequestState, tuple[int, ...]], None] | None = None,
        on_finish: Callable[[RequestResult, RequestLog], None] | None = None,
    ) -> GenerationRun:
        """Generate for every item; ``k`` and ``max_new_tokens`` default to the options'.

        batch_size: at most this many requests decode together (continuous batching; None:
        all at once). on_text(request_id, new_text) streams text as it completes;
        on_publish(state, emitted) follows every published round (progress); on_finish(result,
        log) is called once per request, as it finishes, with its acceptance log.
        """
        events = self.stream(
            items,
            baseline=baseline,
            k=k,
            max_new_tokens=max_new_tokens,
            record_log=record_log,
            batch_size=batch_size,
            texts=on_text is not None,
            on_publish=on_publish,
            on_finish=on_finish,
        )
        while True:
            try:
                delta = next(events)
            except StopIteration as done:
                return done.value
            if on_text is not None:
                on_text(delta.request_id, delta.text)

    def stream(
        self,
        items: Sequence[PromptItem],
        *,
        baseline: bool = False,
        k: int | str | None = None,
        max_new_tokens: int | None = None,
        record_log: bool = True,
        batch_size: int | None = None,
        texts: bool = True,
        on_publish: Callable[[RequestState, tuple[int, ...]], None] | None = None,
        on_finish: Callable[[RequestResult, RequestLog], None] | None = None,
    ) -> Generator[TextDelta, None, GenerationRun]:
        """``run`` as a generator: yields each request's new text (with ``texts``) as its rounds publish
        it, stop strings applied, and returns the run (the value of its StopIteration)."""
        budget = self.options.max_new_tokens if max_new_tokens is None else max_new_tokens
        requests, notes = self.requests(items, budget)
        together = min(batch_size or len(requests), len(requests)) or 1
        engine = self.engine(baseline, self.options.k if k is None else k, record_log, together)
        by_id = {i.request_id: i for i in items}
        stops = StopStrings(self.decode, self.options.stop)
        results: dict[str, RequestResult] = {}
        t0 = time.perf_counter()
        with self.exclusive():
            session = engine.start()
            session.submit(requests)
        delta = Deltas()
        events = decode_events(session, batch_size, stops if stops.stops or texts else None)
        for finished, state, emitted in self.exclusively(events):
            if finished:
                item = by_id[state.request_id]
                text, tokens = stops.cut(state.request_id, state.new_tokens)
                result = RequestResult(
                    item.request_id,
                    item.tag,
                    item.text,
                    state.prompt_len,
                    text,
                    tokens,
                    state.finish_reason,
                    state.history,
                )
                results[item.request_id] = result
                if on_finish is not None:
                    on_finish(result, session.pop_log(state.request_id))
                if texts and (last := delta(state.request_id, text)):  # a last character held back as incomplete
                    yield last
                continue
            if texts and (new := delta(state.request_id, stops.text(state.request_id, state.finished))):
                yield new
            if on_publish is not None:
                on_publish(state, emitted)
        with self.exclusive():
            run_result = session.result()
            if session.sync is not None:
                session.sync()  # the wall time is the work's, not its launch's
        wall = time.perf_counter() - t0
        ordered = tuple(results[i.request_id] for i in items)
        said = tuple(note for lm in self.lms for note in getattr(lm, "take_notes", list)())  # a model's, once
        return GenerationRun(TARGET_ONLY if baseline else SPECULATIVE, ordered, run_result, wall, notes + said)

    @property
    def lms(self) -> list:
        """Every causal LM this pipeline runs: the target and each draft source's model."""
        sources = self.proposer.sources if self.proposer is not None else ()
        return [self.target, *(lm for s in sources if (lm := getattr(s, "model", None)) is not None)]

    @property
    def models(self) -> list[torch.nn.Module]:
        """Every model this pipeline runs: the target's and each draft source's."""
        sources = self.proposer.sources if self.proposer is not None else ()
        lms = [self.target, *(getattr(s, "model", None) for s in sources)]
        return [lm.model for lm in lms if isinstance(getattr(lm, "model", None), torch.nn.Module)]

    def exclusive(self):
        """Hold every model of the pipeline (specd.models.exclusive): one call at a time on each."""
        return exclusive(self.models)

    def exclusively(self, events: Iterator[T]) -> Iterator[T]:
        """``events`` with each step (a round and its events) taken holding the models: two threads on
        one pair interleave round by round, each decoding as it would alone."""
        held = Holding(locks_of(self.models))
        while True:
            with held:
                event = next(events, _DONE)
            if event is _DONE:
                return
            yield event

    def requests(self, items: Sequence[PromptItem], budget: int) -> tuple[list[Request], tuple[str, ...]]:
        """Encode every prompt; a prompt that fills the models' context is refused, and a budget
        that would cross it is clamped (the request then ends with finish reason "length")."""
        requests, notes = [], []
        for item in items:
            prompt = self.encode(item)
            allowed = budget
            if self.context is not None:
                if len(prompt) >= self.context:
                    raise UsageError(
                        f"prompt {shown(item.request_id)} has {len(prompt)} tokens, but the model reads at most "
                        f"{self.context} positions: nothing can be generated after it; shorten it"
                    )
                allowed = min(budget, self.context - len(prompt))
                if allowed < budget:
                    notes.append(
                        f"{item.request_id}: generating at most {allowed} tokens, not {budget}: the prompt takes "
                        f"{len(prompt)} of the model's {self.context} positions"
                    )
            requests.append(Request(item.request_id, prompt, allowed, seed=self.options.seed))
        return requests, tuple(notes)

    def sampling_doc(self, baseline: bool = False) -> dict:
        """Every effective sampling value and where it came from, and the generation config read."""
        roles = ("target",) if baseline or "draft" not in self.sampling else ("target", "draft")
        doc = {role: {k: s.as_dict() for k, s in self.sampling[role].items()} for role in roles}
        return {**doc, "generation_config": self.generation.describe()}


class Deltas:
    """The new text of each request since its last delta: ``deltas(request_id, text)`` -> a TextDelta,
    or None when ``text`` adds nothing to what was sent (or no longer extends it)."""

    def __init__(self):
        self.sent: dict[str, str] = {}

    def __call__(self, request_id: str, text: str) -> TextDelta | None:
        sent = self.sent.get(request_id, "")
        if len(text) <= len(sent) or not text.startswith(sent):
            return None
        self.sent[request_id] = text
        return TextDelta(request_id, text[len(sent) :])
