"""What a run reads off a loaded model's configuration: how many positions it can read, the shape
of its K/V rows, and its end-of-sequence ids."""

from __future__ import annotations

import torch

from specd.errors import UnsupportedCache
from specd.policy.kpolicy import MAX_K


def context_length(model, window: int | None = None) -> int | None:
    """Positions a model can read, from its config (None when it does not say). With an attention
    ``window`` (sliding-window layers) a run must stay within it, the widest round included (MAX_K
    drafts and the bonus row): the window minus MAX_K + 1, or the config's limit if smaller."""
    cfg = model.config
    limit = None
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            limit = value
            break
    return within_window(window, limit)


def within_window(window: int | None, limit: int | None) -> int | None:
    """Positions a run may reach under an attention ``window`` (None: none) and a model's own
    ``limit`` (None: unknown): the window minus the widest round (MAX_K drafts and the bonus row),
    or the limit if smaller."""
    if window is None:
        return limit
    if window <= MAX_K + 2:
        raise UnsupportedCache(
            f"the model's attention window ({window} positions) is too narrow for specd's widest round "
            f"({MAX_K + 1} rows): its sliding-window layers would hide positions"
        )
    return min(c for c in (window - (MAX_K + 1), limit) if c is not None)


def eos_ids(model, tokenizer) -> frozenset[int]:
    """End-of-sequence ids: the generation config's (or the model config's), plus the tokenizer's."""
    ids: set[int] = set()
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if eos is None:
        eos = getattr(getattr(model, "config", None), "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


def kv_layout(model) -> tuple[int, int, int]:
    """(layers, K/V heads, head dim) of a causal LM's cache, from its config (a multimodal config's
    text part): each position holds 2 x layers x heads x head dim values."""
    cfg = model.config
    cfg = getattr(cfg, "text_config", None) or cfg
    heads = getattr(cfg, "num_attention_heads", 1)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return cfg.num_hidden_layers, getattr(cfg, "num_key_value_heads", None) or heads, head_dim


def cache_shape(lm) -> tuple[int, int, int, int]:
    """(layers, K/V heads, head dim, bytes per value) of a causal LM's cache: a Hugging Face model's
    from its config and dtype; a llama.cpp model's from its file, at 2 bytes (float16 values; its
    q8_0 keys take about 1.1)."""
    file = getattr(lm, "file", None)
    if file is not None:
        return file.facts.layers, file.facts.kv_heads, file.facts.head_dim, 2
    return (*kv_layout(lm.model), torch.finfo(lm.dtype).bits // 8)
