"""The attention mask of a step that scores a token tree's rows (specd.core.tree) on a Hugging Face model.

Each query sees its slot's committed rows and its own ancestors among the slot's temporary rows (staged
by earlier steps of the round or by this one), and itself; never a sibling's branch. Positions are the
rows' own (a node at its depth's), passed as ``position_ids``, so rotary embeddings see each branch as the
sequence it is. transformers passes a ready 4D mask through untouched: SDPA takes it boolean (True:
attend), eager attention additive (0, or the dtype's lowest where masked). Flash attention takes 2D
masks only, so a model that attends with it cannot verify a tree (``tree_refusal``). A model with
sliding-window layers runs with full layers within its window (specd.models.cache_compat), where the
window hides nothing, so its tree mask is the full one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specd.core.model import RowInput
from specd.errors import UsageError

TREE_ATTENTION = ("sdpa", "eager")


def tree_refusal(model, name: str) -> str | None:
    """Why ``model`` cannot verify a token tree, or None."""
    impl = getattr(model.config, "_attn_implementation", None)
    if impl in TREE_ATTENTION:
        return None
    return f"{name}: its attention ({impl}) takes no token tree's mask (SDPA and eager attention do)"


def tree_mask(model, name: str, cache, rows: Sequence[RowInput], n_new: int) -> torch.Tensor:
    """The 4D mask float-or-bool[B, 1, n_new, held + n_new] of a step over ``rows`` (an HFCache
    ``cache`` holding ``held`` physical positions per batch row; rows padded to ``n_new``)."""
    why = tree_refusal(model, name)
    if why:
        raise UsageError(why)
    batch, past = cache.valid.shape
    mask = torch.zeros(batch, n_new, past + n_new, dtype=torch.bool)
    committed = cache.valid.to("cpu", copy=True)
    for slot, cols in cache.temp_cols.items():
        committed[cache.row_of(slot), cols] = False
    mask[:, :, :past] = committed.unsqueeze(1)
    mask[:, torch.arange(n_new), past + torch.arange(n_new)] = True  # every query sees itself (padding too)
    for r in rows:
        b, old = cache.row_of(r.slot), cache.temp_cols.get(r.slot, [])
        first = len(old)
        parents = list(cache.temporary_parents(r.slot))
        parents += r.parents if r.parents is not None else range(first - 1, first + len(r.tokens) - 1)
        for j in range(len(r.tokens)):
            at = first + j
            while at >= 0:
                mask[b, j, old[at] if at < first else past + at - first] = True
                at = parents[at]
    mask = mask.unsqueeze(1).to(cache.device)
    if model.config._attn_implementation == "sdpa":
        return mask
    dtype = next(model.parameters()).dtype
    return torch.zeros(mask.shape, dtype=dtype, device=cache.device).masked_fill_(~mask, torch.finfo(dtype).min)
