"""A Hugging Face causal LM behind the core's CausalLM protocol.

Its K/V live in a slot cache (specd.models.hf.slot_cache): preallocated, one batch row per request,
each slot's committed rows first and the round's temporary rows after them; a commit moves a
length (a tree's path: copies its columns down first) and a rejected row costs nothing. A step's
inputs are tensors (specd.models.hf.step_call): token ids, logical positions (``position_ids``, so
rotary embeddings see each row's true positions), the column each row is written at, and a 4D
attention mask. The model's body runs apart from its head where its logits are exactly the head of
its hidden states, so only the rows whose logits are needed go through the head.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import cast

import torch

from specd.core.model import RowInput, StepOutput
from specd.core.transfer import to_device
from specd.errors import GraphsUnavailable, UsageError
from specd.models.hf import cache_compat
from specd.models.hf.graphs import StepGraphs, graphs_for, refusal
from specd.models.hf.head import OutputHead
from specd.models.hf.modes import Modules, own_call
from specd.models.hf.products import forms_of
from specd.models.hf.slot_cache import SlotCache
from specd.models.hf.step_call import attention_as, attention_of, mask_dtype, plain_fields, plan_call, subset

SPLIT_HEAD_MODEL_TYPES = {
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "olmo2",
    "granite",
    "gemma",
    "gemma2",
    "gemma3_text",
}


def input_device(model) -> torch.device:
    """Where a model's inputs go: its parameters' device, or for a model spread by a device map,
    the first accelerator it uses (accelerate's hooks bring offloaded weights to it)."""
    placed = getattr(model, "hf_device_map", None)
    if not placed:
        return next(model.parameters()).device
    gpus = [d for d in placed.values() if isinstance(d, int) or str(d).startswith("cuda")]
    if not gpus:
        return torch.device("cpu")
    return torch.device(f"cuda:{gpus[0]}" if isinstance(gpus[0], int) else gpus[0])


def logit_width(model) -> int:
    """Columns of the model's logit rows (the output embedding may be padded past the vocabulary)."""
    head = model.get_output_embeddings()
    return head.weight.shape[0] if head is not None else model.config.vocab_size


def _picked(states: torch.Tensor, wanted: Sequence[tuple[int, int, int]], n_new: int) -> torch.Tensor:
    """The hidden states float[R, D] of the rows ``wanted`` lists ((batch row, first and end input
    column) per input) from states float[B, n_new, D], packed in order. Where every batch row is an
    input, in order, wanting its last m columns (a step of rows of one length: a chain's draft step,
    a verification of equal drafts), a view; else one gather."""
    b, m = len(wanted), wanted[0][2] - wanted[0][1]
    if b == states.shape[0] and all(w == (i, n_new - m, n_new) for i, w in enumerate(wanted)):
        # (each operation right after a model call costs microseconds: none where the rows are all of it)
        whole = states if m == n_new else states[:, n_new - m :]
        return whole.reshape(b * m, states.shape[-1])
    index = [(row, c) for row, lo, hi in wanted for c in range(lo, hi)]
    at = to_device(index, torch.long, states.device)
    return states[at[:, 0], at[:, 1]]


class HFCausalLM:
    """model: a transformers causal LM already on its device and dtype."""

    def __init__(self, model, name: str, width: int | None = None, pad_id: int = 0, graphs: str = "off"):
        """``graphs``: --graphs (auto, on, off): capture the model's steps as CUDA graphs
        (specd.models.hf.graphs) where it runs on CUDA."""
        self.model = model
        self.name = name
        self.device = input_device(model)
        self.dtype = next(model.parameters()).dtype
        self.vocab_size = width if width is not None else logit_width(model)
        self.window = cache_compat.sliding_window(model.config)  # runs stay within it (Pipeline.context)
        self.pad_id = pad_id
        # the config without where it was read from: two spellings of one folder are one model
        config = {k: v for k, v in model.config.to_dict().items() if k != "_name_or_path"}
        cfg = json.dumps(config, sort_keys=True, default=str)
        self.config_digest = hashlib.sha256(cfg.encode()).hexdigest()[:12]
        self.identity = (
            f"hf:{name}:{str(self.dtype).removeprefix('torch.')}:{self.device.type}:cfg={self.config_digest}"
        )
        self.forward_calls = 0
        self._cache_kw = cache_compat.cache_argument(model)
        self.attention = attention_of(model)
        self._config_fields: tuple = (None, None)  # (the model's config, plain_fields of it)
        self.mask_dtype = mask_dtype(model, self.attention)
        # On a CPU every linear product runs in the form timed fastest for its row count
        # (specd.models.hf.products); a model spread by a device map keeps accelerate's hooks.
        plain_cpu = self.device.type == "cpu" and not hasattr(model, "hf_device_map")
        self.forms = forms_of(model) if plain_cpu else None
        self.head = self._split_head(model)
        self.modules = Modules(model)
        self.graph_mode = graphs
        refused = refusal(graphs, self.device, "hf")
        if refused is not None:
            raise GraphsUnavailable(refused)
        self.graphs, why = graphs_for(graphs, self.device, self.head is not None)
        self.notes: list[str] = []  # said once each by the run that takes them (``take_notes``)
        if why is not None:
            self._cannot_capture(why)

    def _split_head(self, model) -> OutputHead | None:
        """Run the trunk and our own head when the model's logits are exactly lm_head(hidden)."""
        cfg = model.config
        plain = (
            not hasattr(model, "hf_device_map")  # accelerate's hooks move the weights: keep its forward
            and getattr(cfg, "model_type", None) in SPLIT_HEAD_MODEL_TYPES
            and getattr(cfg, "logit_scale", None) in (None, 1.0)
            and isinstance(getattr(model, "lm_head", None), torch.nn.Linear)
            and hasattr(model, "model")
        )
        if not plain:
            return None
        head = model.lm_head
        softcap = getattr(cfg, "final_logit_softcapping", None)
        return OutputHead(head.weight, head.bias, self.forms, softcap=softcap)

    @property
    def splits_head(self) -> bool:
        """The body's hidden states and the head are separate verbs (``body_step``, ``head_logits``):
        what a shared-body draft needs (specd.core.model.SplitHeadLM)."""
        return self.head is not None

    def engaged(self):
        """The context of this adapter's own calls: eval mode, products in their chosen forms (CPU)."""
        return own_call(self.modules, self.forms)

    @torch.no_grad()
    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The full head: hidden float[N, D] (``body_step``'s rows) -> logits float32[N, V]."""
        with self.engaged():
            return self.head(hidden)[:, : self.vocab_size].float()

    def subset_head(self, columns: torch.Tensor):
        """-> a function hidden float[N, D] -> float32[N, len(columns)]: the full head's logits at
        ``columns`` int64[N_sub], from a head holding those rows only."""
        small = self.head.restricted(columns.to(self.head.weight.device))

        @torch.no_grad()
        def logits(hidden: torch.Tensor) -> torch.Tensor:
            with self.engaged():
                return small(hidden).float()

        return logits

    def new_cache(self) -> SlotCache:
        return SlotCache(self.device, self.window)

    def body_step(self, cache: SlotCache, rows: Sequence[RowInput], logits_for: int | None = None) -> StepOutput:
        """``step`` without the head: those rows' final hidden states (``StepOutput.hidden``) instead
        of their logits (``splits_head`` models only; ``head_logits`` turns them into logits)."""
        if self.head is None:
            raise UsageError(
                f"{self.name}: its head cannot be run apart from its body (a shared-body draft needs that)"
            )
        return self._run(cache, rows, logits_for, hidden=True)

    def step(self, cache: SlotCache, rows: Sequence[RowInput], logits_for: int | None = None) -> StepOutput:
        """``logits_for``: how many trailing rows of each input need logits (None: all, 0: none).

        Requests that just joined a running batch (an empty slot, a whole prompt to feed) are
        run in a call of their own: fed together, every other row would be padded by the length
        of their prompts.
        """
        return self._run(cache, rows, logits_for, hidden=False)

    @torch.no_grad()
    def _run(self, cache: SlotCache, rows: Sequence[RowInput], logits_for: int | None, hidden: bool) -> StepOutput:
        missing = [r.slot for r in rows if not cache.is_open(r.slot)]
        if missing:
            raise ValueError(f"slots {missing} are not open")
        with self.engaged():
            fresh = [r for r in rows if len(r.tokens) > 1 and cache.length(r.slot) == 0]
            if not fresh or len(fresh) == len(rows):
                return self._step(cache, rows, logits_for, hidden)
            rest = [r for r in rows if r not in fresh]
            parts = self._step(cache, fresh, logits_for, hidden), self._step(cache, rest, logits_for, hidden)
            # each input row's output: (the call that ran it, its index there)
            where = {r.slot: (parts[0], i) for i, r in enumerate(fresh)} | {
                r.slot: (parts[1], i) for i, r in enumerate(rest)
            }
            picked = [where[r.slot] for r in rows]
            return StepOutput(
                [o.logits[i] for o, i in picked],
                [o.kv[i] for o, i in picked],
                [o.hidden[i] for o, i in picked] if hidden else None,
            )

    @property
    def tree_refusal(self) -> str | None:
        """Why this model cannot verify a token tree: never (every step runs with a 4D mask)."""
        return None

    def _step(
        self, cache: SlotCache, rows: Sequence[RowInput], logits_for: int | None, hidden: bool = False
    ) -> StepOutput:
        self.forward_calls += 1
        bucket = self._bucket(cache, rows)
        call = plan_call(cache, rows, self.pad_id, self.attention, self.mask_dtype, bucket)
        for r in rows:  # refused here (CacheIdentityError) before the model runs
            cache.stage(r)
        store = cache.store
        store.write, store.batch, store.span = call.write, call.batch, call.span
        n_new = call.ids.shape[1]
        # Rows are right-padded: the trailing `keep` columns of input cover every row's needed rows.
        need = logits_for
        shortest = min(len(r.tokens) for r in rows)
        keep = n_new if need is None else (min(n_new, n_new - shortest + need) if need else 0)
        inputs = {
            "input_ids": call.ids,
            "attention_mask": call.mask,
            "position_ids": call.positions,
            "use_cache": True,
            self._cache_kw: store,
        }
        needed = [len(r.tokens) if need is None else min(len(r.tokens), need) for r in rows]
        # (batch row of the call, first and end column whose output is needed)
        wanted = [(b, len(r.tokens) - m, len(r.tokens)) for b, r, m in zip(call.at, rows, needed)]
        packed_out = all_logits = states = None
        with self.attending():
            if bucket is not None:
                states = self._replayed(store, call, inputs)
            elif self.head is not None:
                states = self.model.model(**inputs).last_hidden_state
            else:
                all_logits = self.model(**inputs, logits_to_keep=max(keep, 1)).logits
        if states is not None and keep:
            # Only the real rows that need an output go through the head, packed: float[R, V], never the
            # padded float[B, n_new, V]. hidden=True: the rows' hidden states stand where logits would.
            picked = _picked(states, wanted, n_new)
            out = picked if hidden else self.head(picked)
            packed_out = (out,) if len(wanted) == 1 else out.split([hi - lo for _, lo, hi in wanted])
        logits, kv, states_out = [], [], []
        first = n_new - keep  # input column of all_logits[:, 0]
        for i, (r, (b, lo, n)) in enumerate(zip(rows, wanted)):
            if hidden:
                states_out.append(packed_out[i] if packed_out is not None else states[b, :0])
                logits.append(torch.empty(0, self.vocab_size))
            elif packed_out is not None:
                row = packed_out[i]  # the head's rows may be padded past the vocabulary
                row = row if row.shape[-1] == self.vocab_size else row[:, : self.vocab_size]
                logits.append(row if row.dtype == torch.float32 else row.float())
            elif keep:
                logits.append(all_logits[b, lo - first : n - first, : self.vocab_size].float())
            else:
                logits.append(torch.empty(0, self.vocab_size))
            kv.append(r)
        return StepOutput(logits, kv, states_out if hidden else None)

    def _bucket(self, cache: SlotCache, rows: Sequence[RowInput]) -> tuple[int, int] | None:
        """The bucket a call is padded to and replayed in (specd.models.hf.graphs), or None: eager."""
        if self.graphs is None or subset(cache, rows):
            return None
        return self.graphs.usable(len(cache.rows), max(len(r.tokens) for r in rows))

    def _replayed(self, store, call, inputs: dict) -> torch.Tensor:
        """The body's hidden states for a call padded to its bucket, from that bucket's graph; a model
        whose steps cannot be captured runs this and every later call eagerly (``--graphs auto``; ``on``
        refuses it: GraphsUnavailable)."""
        graphs = cast(StepGraphs, self.graphs)  # a bucket was chosen: there are graphs

        def body(ids, positions, mask):
            return self.model.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{self._cache_kw: store}
            ).last_hidden_state

        try:
            return graphs.run(store, call, body)
        except Exception as failed:  # a step that reads from the device or changes shape: not capturable
            self._cannot_capture(f"capturing its step failed ({type(failed).__name__}: {failed})")
            store.write, store.batch, store.span = call.write, call.batch, call.span
            return self.model.model(**inputs).last_hidden_state

    def _cannot_capture(self, why: str) -> None:
        """This model runs eagerly: said once (``take_notes``), refused under ``--graphs on``."""
        if self.graph_mode == "on":
            raise GraphsUnavailable(f"--graphs on: {self.name} cannot be captured as CUDA graphs: {why}")
        if self.graphs is not None:
            self.graphs.fail(why)
        self.graphs = None
        if self.graph_mode == "auto":
            self.notes.append(f"{self.name} runs eagerly, not as CUDA graphs: {why}")

    def take_notes(self) -> list[str]:
        """What this model has to say to the run (once each)."""
        notes, self.notes = self.notes, []
        return notes

    def attending(self):
        """The model's attention set to the one a step runs with (``step_call.attention_of``) for the
        length of a call, and back after."""
        config = self.model.config
        if self._config_fields[0] is not config:
            self._config_fields = (config, plain_fields(config))
        return attention_as(config, self.attention, self._config_fields[1])
