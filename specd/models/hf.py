"""A Hugging Face causal LM behind the core's CausalLM protocol.

Physical layout: one transformers cache for the whole batch, rows = requests.
Every step appends the same number of physical positions to every row (rows
with fewer inputs are padded at the end); the ledger records which physical
positions hold committed rows. Rejected rows and padding become *holes*: masked
out of attention and never read. Positions are logical (explicit
``position_ids``), so rotary embeddings see each row's true positions whatever
its physical layout, and each row attends only to its own valid positions.
Holes at the tail are cropped before each step, and a row-wise gather compacts
the cache when holes pile up.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import torch

from specd.core.kv import KVCache, KVRows
from specd.core.model import RowInput, StepOutput
from specd.errors import CacheIdentityError, UsageError
from specd.models import cache_compat
from specd.models.head import OutputHead
from specd.models.modes import own_call
from specd.models.products import forms_of
from specd.models.tree_mask import tree_mask, tree_refusal

COMPACT_MIN_POSITIONS = 64  # below this, holes cost less than a gather
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


class HFCache(KVCache):
    """The identity ledger plus one transformers cache whose batch rows are requests.

    A request's slot owns one physical batch row. Closing a slot only marks its
    row free, at no cost proportional to the batch: the next request to join
    reuses it, and ``compact`` (once per round, when nobody is waiting to join)
    drops all free rows in one copy.
    """

    def __init__(self, device: torch.device, window: int | None = None):
        """``window``: the model's attention window (sliding-window layers), or None. The physical
        cache (holes included) must then stay within it: ``tidy`` compacts early, and a step that
        would cross it is refused (a window would start to hide positions)."""
        super().__init__()
        self.device = device
        self.window = window
        self.dyn = None
        self.rows: list[int | None] = []  # physical batch row -> slot (None: a free row)
        self._row: dict[int, int] = {}  # slot -> physical batch row
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=device)
        self.temp_cols: dict[int, list[int]] = {}

    def row_of(self, slot: int) -> int:
        return self._row[slot]

    def hole_free(self) -> bool:
        """Whether every physical position of every batch row holds one of its slot's rows (no hole,
        no free row), known from the ledger, without reading ``valid`` from the device: a slot's
        batch row has exactly its committed and temporary rows valid."""
        batch, width = self.valid.shape
        return batch == len(self._row) == len(self.rows) and all(
            len(self._committed[slot]) + len(self._temporary[slot]) == width for slot in self._row
        )

    def open(self, slot: int) -> None:
        super().open(slot)
        free = next((i for i, s in enumerate(self.rows) if s is None), None)
        if free is None:
            free = len(self.rows)
            self.rows.append(None)
            self.valid = torch.cat(
                [self.valid, torch.zeros(1, self.valid.shape[1], dtype=torch.bool, device=self.device)]
            )
            if self.dyn is not None:
                cache_compat.grow_batch(self.dyn, 1)
        self.rows[free] = slot
        self._row[slot] = free

    def close(self, slot: int) -> None:
        super().close(slot)
        row = self._row.pop(slot, None)
        if row is None:
            return
        self.rows[row] = None
        self.valid[row] = False
        self.temp_cols.pop(slot, None)

    def compact(self) -> None:
        """Drop the free batch rows once they are a quarter of the batch: one copy of the cache
        per quarter of the batch that finished, so a finished request costs an amortized
        constant, and at most a quarter of a step's rows are ones nobody reads."""
        free = len(self.rows) - len(self._row)
        if free == 0 or (self._row and 4 * free < len(self.rows)):
            return
        if not self._row:
            self.dyn, self.rows = None, []
            self.valid = torch.zeros(0, 0, dtype=torch.bool, device=self.device)
            return
        keep = [i for i, s in enumerate(self.rows) if s is not None]
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        if self.dyn is not None:
            cache_compat.select_batch(self.dyn, idx)
        self.valid = self.valid.index_select(0, idx)
        self.rows = [self.rows[i] for i in keep]
        self._row = {s: i for i, s in enumerate(self.rows)}

    def splice(self, other: HFCache) -> None:
        """Take over the slots of ``other`` (a cache that only prefilled them): their temporary
        K/V rows move into this cache's rows of the same slots, at physical columns from 0."""
        length = other.valid.shape[1]
        if length > self.valid.shape[1]:  # every row gets hole columns up to the new prompt's length
            extra = length - self.valid.shape[1]
            cache_compat.pad_positions(self.dyn, extra)
            pad = torch.zeros(self.valid.shape[0], extra, dtype=torch.bool, device=self.device)
            self.valid = torch.cat([self.valid, pad], dim=1)
        mine = [self._row[slot] for slot in other.rows]
        cache_compat.write_rows(self.dyn, torch.tensor(mine, device=self.device), other.dyn, length)
        for slot, row in zip(other.rows, mine):
            self.valid[row] = False
            self.valid[row, :length] = other.valid[other.row_of(slot)]
            self.temp_cols[slot] = list(other.temp_cols.get(slot, []))
            temporary = other.temporary(slot)
            self.stage(KVRows(slot, temporary, tuple(range(len(temporary)))))

    def commit(self, slot: int, keep) -> None:
        kept = set(self.kept(slot, keep))
        cols = self.temp_cols.pop(slot, [])
        dropped = [c for i, c in enumerate(cols) if i not in kept]  # a tree's other branches become holes
        if dropped:
            self.valid[self._row[slot], dropped] = False
        super().commit(slot, keep)

    def reset(self, slot: int) -> None:
        self.valid[self._row[slot]] = False
        self.temp_cols.pop(slot, None)
        super().reset(slot)

    def tidy(self) -> None:
        """Between rounds (no temporary rows): crop all-hole tail positions; gather-compact when holes
        exceed a third of the cache."""
        if self.dyn is None or self.valid.shape[1] == 0 or any(self.temp_cols.values()):
            return
        if self.hole_free():  # nothing to crop or compact, known without reading from the device
            return
        counts = self.valid.sum(dim=1)
        length, longest = 0, 0  # no row left: nothing committed anywhere
        if counts.numel():  # one read: the used length and the longest row
            positions = torch.arange(1, self.valid.shape[1] + 1, device=self.valid.device)
            length, longest = torch.stack([(self.valid.any(dim=0) * positions).max(), counts.max()]).tolist()
        if length == 0:  # nothing committed anywhere: start the physical cache afresh
            self.dyn = None
            self.valid = self.valid[:, :0]
            return
        if length < self.valid.shape[1]:
            cache_compat.truncate(self.dyn, length)
            self.valid = self.valid[:, :length]
        near_window = self.window is not None and 2 * length > self.window
        if longest < length and (near_window or (length >= COMPACT_MIN_POSITIONS and 3 * (length - longest) > length)):
            # Left-align each row's valid positions (order kept); the rest is masked padding.
            order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)[:, :longest]
            cache_compat.gather_positions(self.dyn, order)
            self.valid = torch.arange(longest, device=self.device).unsqueeze(0) < counts.unsqueeze(1)


class HFCausalLM:
    """model: a transformers causal LM already on its device and dtype."""

    def __init__(self, model, name: str, width: int | None = None, pad_id: int = 0):
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
        self._one_row_mask_4d = cache_compat.reads_4d_bool_mask(model)
        # On a CPU every linear product runs in the form timed fastest for its row count
        # (specd.models.products); a model spread by a device map keeps accelerate's hooks.
        plain_cpu = self.device.type == "cpu" and not hasattr(model, "hf_device_map")
        self.forms = forms_of(model) if plain_cpu else None
        self.head = self._split_head(model)
        self.modules = tuple(model.modules())

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

    def new_cache(self) -> HFCache:
        return HFCache(self.device, self.window)

    def body_step(self, cache: HFCache, rows: Sequence[RowInput], logits_for: int | None = None) -> StepOutput:
        """``step`` without the head: those rows' final hidden states (``StepOutput.hidden``) instead
        of their logits (``splits_head`` models only; ``head_logits`` turns them into logits)."""
        if self.head is None:
            raise UsageError(
                f"{self.name}: its head cannot be run apart from its body (a shared-body draft needs that)"
            )
        return self._run(cache, rows, logits_for, hidden=True)

    def step(self, cache: HFCache, rows: Sequence[RowInput], logits_for: int | None = None) -> StepOutput:
        """``logits_for``: how many trailing rows of each input need logits (None: all, 0: none).

        Requests that just joined a running batch (an empty slot, a whole prompt to feed) are
        run in a call of their own and their K/V copied into their rows: fed together, every
        other row would be padded by the length of their prompts.
        """
        return self._run(cache, rows, logits_for, hidden=False)

    @torch.no_grad()
    def _run(self, cache: HFCache, rows: Sequence[RowInput], logits_for: int | None, hidden: bool) -> StepOutput:
        with self.engaged():
            return self._step_engaged(cache, rows, logits_for, hidden)

    def _step_engaged(
        self, cache: HFCache, rows: Sequence[RowInput], logits_for: int | None, hidden: bool
    ) -> StepOutput:
        fresh = [r for r in rows if len(r.tokens) > 1 and cache.length(r.slot) == 0]
        if cache.dyn is not None and fresh:
            rest = [r for r in rows if r not in fresh]
            joined = self._prefill_apart(cache, fresh, logits_for, hidden)
            out = self._step(cache, rest, logits_for, hidden) if rest else StepOutput([], [], [] if hidden else None)
            # each input row's output: (the call that ran it, its index there)
            where = {r.slot: (joined, i) for i, r in enumerate(fresh)} | {r.slot: (out, i) for i, r in enumerate(rest)}
            parts = [where[r.slot] for r in rows]
            return StepOutput(
                [o.logits[i] for o, i in parts],
                [o.kv[i] for o, i in parts],
                [o.hidden[i] for o, i in parts] if hidden else None,
            )
        return self._step(cache, rows, logits_for, hidden)

    def _prefill_apart(
        self, cache: HFCache, rows: Sequence[RowInput], logits_for: int | None, hidden: bool
    ) -> StepOutput:
        """Run ``rows`` (empty slots) in a cache of their own, then copy their K/V into ``cache``."""
        apart = HFCache(self.device, cache.window)
        for r in rows:
            apart.open(r.slot)
        out = self._step(apart, rows, logits_for, hidden)
        cache.splice(apart)
        return out

    def _padded(self, cache: HFCache, rows: Sequence[RowInput]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The step's input over every cache row, right-padded to the longest: (token ids, positions,
        real) int64/int64/bool[B, n_new] on the host; a padded position continues its row's positions
        (masked for later steps). Refused past the model's attention window."""
        missing = [r.slot for r in rows if not cache.is_open(r.slot)]
        if missing:
            raise ValueError(f"slots {missing} are not open")
        by_slot = {r.slot: r for r in rows}
        batch, n_new = len(cache.rows), max(len(r.tokens) for r in rows)
        ids = torch.full((batch, n_new), self.pad_id, dtype=torch.long)
        pos = torch.zeros((batch, n_new), dtype=torch.long)
        real = torch.zeros((batch, n_new), dtype=torch.bool)
        for b, slot in enumerate(cache.rows):
            row = by_slot.get(slot)
            n = len(row.tokens) if row else 0
            start = row.positions[0] if row else (cache.length(slot) if slot is not None else 0)
            if n:
                ids[b, :n] = torch.tensor(row.tokens)
                pos[b, :n] = torch.tensor(row.positions)
                real[b, :n] = True
            pos[b, n:] = torch.arange(start + n, start + n_new)
        if cache.window is not None and cache.valid.shape[1] + n_new > cache.window:
            raise CacheIdentityError(
                f"a step of {n_new} rows would take the cache past the model's attention window of "
                f"{cache.window} positions ({cache.valid.shape[1]} held), where the window would hide positions"
            )
        return ids, pos, real

    @property
    def tree_refusal(self) -> str | None:
        """Why this model cannot verify a token tree (None: it can; specd.models.tree_mask)."""
        return tree_refusal(self.model, self.name)

    def _attention_mask(self, cache: HFCache, batch: int, n_new: int) -> torch.Tensor | None:
        """The step's mask over the cache's positions and its ``n_new`` inputs. Padding is visible to
        its own queries in this call only (no fully masked row, no NaN), and is a hole afterwards.
        A one-row step's mask is its padding alone (nothing of a causal mask applies to one query).
        Given the 2D form, transformers reads it back from the device to see whether it may drop it
        (one wait per draft step on CUDA). The ledger knows: no mask where there is no hole, as
        transformers would decide, else the 4D form, which SDPA takes as it is."""
        one_row_4d = n_new == 1 and self._one_row_mask_4d
        if one_row_4d and cache.hole_free():
            return None
        mask = torch.cat([cache.valid, torch.ones(batch, n_new, dtype=torch.bool, device=cache.device)], dim=1)
        return mask[:, None, None, :] if one_row_4d else mask.to(torch.long)

    def _step(
        self, cache: HFCache, rows: Sequence[RowInput], logits_for: int | None, hidden: bool = False
    ) -> StepOutput:
        self.forward_calls += 1
        batch = len(cache.rows)
        ids, pos, real = self._padded(cache, rows)
        n_new = ids.shape[1]
        if cache.dyn is None:
            cache.dyn = cache_compat.new_dynamic_cache(self.model.config)
        # Rows are right-padded: the trailing `keep` physical positions cover every row's needed rows.
        need = logits_for
        shortest = min(len(r.tokens) for r in rows)
        keep = n_new if need is None else (min(n_new, n_new - shortest + need) if need else 0)
        tree = any(r.parents is not None for r in rows)  # a token tree's rows: each sees its own branch
        mask = (
            tree_mask(self.model, self.name, cache, rows, n_new) if tree else self._attention_mask(cache, batch, n_new)
        )
        inputs = {
            "input_ids": ids.to(self.device),
            "attention_mask": mask,
            "position_ids": pos.to(self.device),
            "use_cache": True,
            self._cache_kw: cache.dyn,
        }  # the dynamic cache is updated in place
        needed = [len(r.tokens) if need is None else min(len(r.tokens), need) for r in rows]
        # (batch row, first and end column whose output is needed)
        wanted = [(cache.row_of(r.slot), len(r.tokens) - m, len(r.tokens)) for r, m in zip(rows, needed)]
        packed_out = all_logits = None
        if self.head is not None:
            states = self.model.model(**inputs).last_hidden_state
            if keep:
                # Only the real rows that need an output go through the head, packed: float[R, V], never the
                # padded float[B, n_new, V]. hidden=True: the rows' hidden states stand where logits would.
                b_idx = [b for b, lo, hi in wanted for _ in range(lo, hi)]
                cols = [c for _, lo, hi in wanted for c in range(lo, hi)]
                at = {"dtype": torch.long, "device": states.device}
                picked = states[torch.tensor(b_idx, **at), torch.tensor(cols, **at)]
                packed_out = (picked if hidden else self.head(picked)).split([hi - lo for _, lo, hi in wanted])
        else:
            all_logits = self.model(**inputs, logits_to_keep=max(keep, 1)).logits
        start_col = cache.valid.shape[1]
        cache.valid = torch.cat([cache.valid, real.to(cache.device)], dim=1)
        logits, kv, states_out = [], [], []
        for i, (r, (b, lo, n)) in enumerate(zip(rows, wanted)):
            cache.temp_cols.setdefault(r.slot, []).extend(range(start_col, start_col + n))
            rows_kv = KVRows(r.slot, r.tokens, r.positions, r.parents)
            cache.stage(rows_kv)
            first = n_new - keep  # physical column of all_logits[:, 0]
            if hidden:
                states_out.append(packed_out[i] if packed_out is not None else states[b, :0])
                logits.append(torch.empty(0, self.vocab_size))
            elif packed_out is not None:
                logits.append(packed_out[i][:, : self.vocab_size].float())
            elif keep:
                logits.append(all_logits[b, lo - first : n - first, : self.vocab_size].float())
            else:
                logits.append(torch.empty(0, self.vocab_size))
            kv.append(rows_kv)
        return StepOutput(logits, kv, states_out if hidden else None)
