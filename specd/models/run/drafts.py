"""Draft sources behind one interface: a spec string -> a core Proposer.

    PATH_OR_ID        a separate model (same tokenizer required)
    self:bf16         the target's weights in bfloat16 (a copy)
    self:fp16         the target's weights in float16 (a copy)
    self:layers=N     early exit: the target's first N layers + its final norm and head (shared weights)
    self:vocab=N      the target's own body and a head over its N most frequent tokens (specd.core.shared_body)
    ngram:N           prompt lookup over the output; q is a point mass on each proposed token
    suffix            lookup by a suffix automaton over the prompt and output (specd.core.suffix)
    suffix:run        the same, also over the texts of the requests already finished in the run

``--draft`` takes one of these or a comma-separated list (``suffix,self:bf16``): each round,
each request drafts from one source of the list (specd.core.sources). Every source is exact
under the core's rule: each reports the processed q it sampled from (a point mass for the
deterministic ones).
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass

import torch

from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer, NgramProposer, Proposer
from specd.core.shared_body import SharedBodyProposer
from specd.core.suffix import SuffixProposer
from specd.errors import UsageError, shown
from specd.files import check_path_name, identity
from specd.models.hf.model import HFCausalLM
from specd.models.numbers import integer


@dataclass(frozen=True)
class DraftSpec:
    kind: str  # "model" | "self-dtype" | "self-layers" | "self-vocab" | "ngram" | "suffix"
    value: str | int | torch.dtype | None = None
    text: str = ""  # as the user wrote it

    @property
    def needs_model(self) -> bool:
        return self.kind == "model"

    @property
    def lookup(self) -> bool:
        return self.kind in ("ngram", "suffix")

    def source_key(self) -> tuple:
        """What the source is, whatever its spelling: self:bf16 is self:bfloat16, ngram:02 is ngram:2,
        and a model folder is itself under any path that names it."""
        if self.kind == "model":
            return ("model", identity(self.value) if os.path.exists(str(self.value)) else self.value)
        return (self.kind, self.value)


def parse_draft(spec: str | None) -> DraftSpec | None:
    """One source of a --draft list."""
    if spec is None:
        return None
    if spec in ("self:bf16", "self:bfloat16"):
        return DraftSpec("self-dtype", torch.bfloat16, spec)
    if spec in ("self:fp16", "self:float16"):
        return DraftSpec("self-dtype", torch.float16, spec)
    if m := re.fullmatch(r"self:layers=(\d+)", spec):
        return DraftSpec("self-layers", integer(m.group(1), f"--draft {shown(spec)}"), spec)
    if m := re.fullmatch(r"self:vocab=(\d+)", spec):
        n = integer(m.group(1), f"--draft {shown(spec)}")
        if n < 2:
            raise UsageError(f"--draft: {shown(spec)}: self:vocab=N needs N >= 2 tokens")
        return DraftSpec("self-vocab", n, spec)
    if m := re.fullmatch(r"ngram:(\d+)", spec):
        n = integer(m.group(1), f"--draft {shown(spec)}")
        if n < 1:
            raise UsageError(f"--draft: {shown(spec)}: ngram:N needs N >= 1")
        return DraftSpec("ngram", n, spec)
    if spec in ("suffix", "suffix:run"):
        return DraftSpec("suffix", spec == "suffix:run", spec)
    if spec.startswith(("self:", "ngram:", "suffix:")):
        raise UsageError(
            f"--draft: unknown draft source {shown(spec)}; use self:bf16, self:fp16, self:layers=N, self:vocab=N, "
            "ngram:N, suffix, suffix:run or a model"
        )
    check_path_name(spec, "--draft")  # a folder or a hub id
    return DraftSpec("model", spec, spec)


def parse_drafts(text: str | None) -> tuple[DraftSpec, ...]:
    """A --draft value: one source or a comma-separated list, each named once."""
    if text is None:
        return ()
    parts = [p.strip() for p in text.split(",")]
    if any(not p for p in parts):
        raise UsageError(f"--draft {shown(text)}: an empty element in the list (two commas, or one at an end)")
    specs = tuple(parse_draft(p) for p in parts)
    seen: dict[tuple, str] = {}
    for spec in specs:
        key = spec.source_key()
        if key in seen:
            same = "named twice" if seen[key] == spec.text else f"named twice ({shown(seen[key])} is the same source)"
            raise UsageError(f"--draft {shown(text)}: the source {shown(spec.text)} is {same}")
        seen[key] = spec.text
    return specs


def fit_default(text: str, specs: tuple[DraftSpec, ...], dtype: torch.dtype) -> tuple[str, tuple, str | None]:
    """A default draft list (the user named none) on a target loaded in ``dtype`` -> (the list, its
    sources, a note saying what was left out, or None): without a copy of the target in its own dtype
    (self:bf16 on a bfloat16 target: a second target, as slow). A list the user names keeps such a
    source, and ``build_proposer`` refuses it."""
    kept = tuple(s for s in specs if not (s.kind == "self-dtype" and s.value == dtype))
    if len(kept) == len(specs):
        return text, specs, None
    names = ",".join(s.text for s in kept)
    left = ", ".join(s.text for s in specs if s not in kept)
    dtype_name = str(dtype).removeprefix("torch.")
    return names, kept, f"draft: {names} (the default {text} without {left}: the target is already in {dtype_name})"


def early_exit_model(model: torch.nn.Module, layers: int) -> torch.nn.Module:
    """A view of the target that stops after ``layers`` decoder layers (weights shared, not copied)."""
    inner = getattr(model, "model", None)
    blocks = getattr(inner, "layers", None)
    if blocks is None:
        raise UsageError(f"self:layers=N needs a decoder with model.layers; {type(model).__name__} has none")
    if not 1 <= layers < len(blocks):
        raise UsageError(f"self:layers=N needs 1 <= N < {len(blocks)} (the target's layer count), got {layers}")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[:layers]
    shallow_inner = copy.copy(inner)
    shallow_inner._modules = dict(inner._modules)  # never mutate the target's module table
    shallow_inner._modules["layers"] = torch.nn.ModuleList(list(blocks)[:layers])
    shallow_inner.config = config
    shallow = copy.copy(model)
    shallow._modules = dict(model._modules)
    shallow._modules["model"] = shallow_inner
    shallow.config = config
    return shallow


def build_proposer(
    spec: DraftSpec,
    target: HFCausalLM,
    policy: SamplingPolicy,
    loaded_draft: HFCausalLM | None = None,
    draft_stop: float = 0.0,
    columns: tuple[int, ...] | None = None,
) -> Proposer:
    """``draft_stop``: see ModelProposer (an n-gram draft's q is a point mass: it never stops early).
    ``columns``: the draft vocabulary of a self:vocab=N draft (specd.models.vocab_table)."""
    if spec.kind == "self-vocab":
        label = target.identity.replace(f"hf:{target.name}:", f"hf:self:vocab={spec.value}({target.name}):", 1)
        return SharedBodyProposer(target, columns, policy, draft_stop, label=label)
    if spec.kind == "model":
        return ModelProposer(loaded_draft, policy, draft_stop)
    if spec.kind == "ngram":
        return NgramProposer(int(spec.value), target.vocab_size)
    if spec.kind == "suffix":
        return SuffixProposer(target.vocab_size, run=bool(spec.value))
    if spec.kind == "self-dtype":
        dtype = spec.value
        if target.dtype == dtype:
            raise UsageError(
                f"--draft {spec.text}: the target is already in {str(dtype).removeprefix('torch.')}, so this draft "
                "would be a second copy of it, as slow as the target; draft from self:layers=N, self:vocab=N, suffix "
                "or a smaller model of its family"
            )
        model = copy.deepcopy(target.model).to(dtype)
        name = f"self:{'bf16' if dtype == torch.bfloat16 else 'fp16'}({target.name})"
        return ModelProposer(
            HFCausalLM(model, name, width=target.vocab_size, pad_id=target.pad_id, graphs=target.graph_mode),
            policy,
            draft_stop,
        )
    if spec.kind == "self-layers":
        model = early_exit_model(target.model, int(spec.value))
        name = f"self:layers={spec.value}({target.name})"
        return ModelProposer(
            HFCausalLM(model, name, width=target.vocab_size, pad_id=target.pad_id, graphs=target.graph_mode),
            policy,
            draft_stop,
        )
    raise UsageError(f"unknown draft kind {spec.kind}")
