"""The one place that knows how a transformers K/V cache stores its tensors.

transformers 5.x keeps per-layer ``DynamicLayer`` objects with ``keys`` /
``values`` tensors of shape [batch, kv_heads, seq, head_dim]; 4.x kept parallel
``key_cache`` / ``value_cache`` lists; ``crop`` changed its argument meaning
between releases (a final length, then a negative count), and the forward
keyword was renamed from ``past_key_values`` to ``cache``. specd never calls
``crop``: it reads and writes the tensors through these functions, so the cache
surgery (truncate, batch select, gather-compact) is the same on every version.
Caches with sliding-window or otherwise bounded layers are refused: dropping and
gathering rows there would change which positions a layer can see. A model with
sliding-window layers gets full layers instead (``new_dynamic_cache``), and its runs
are kept within the window (``sliding_window``), where a window hides nothing.
"""

from __future__ import annotations

import torch

from specd.errors import UnsupportedCache


def sliding_window(config) -> int | None:
    """The attention window of a model with sliding-window layers (Gemma 3's local layers, Mistral),
    or None. While a sequence's cache stays within it, every layer sees every position, exactly as
    a full-attention layer does."""
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None
    types = getattr(config, "layer_types", None)
    if types is not None:
        return window if any("sliding" in str(t) for t in types) else None
    return window if getattr(config, "use_sliding_window", True) else None


def new_dynamic_cache(config=None):
    from transformers import DynamicCache

    if config is not None and sliding_window(config) is not None:
        return DynamicCache()  # full layers: rows can be dropped; the run stays within the window
    try:
        return DynamicCache(config=config) if config is not None else DynamicCache()
    except TypeError:  # releases whose DynamicCache takes no config
        return DynamicCache()


def reads_4d_bool_mask(model) -> bool:
    """Whether the model attends through PyTorch's SDPA, which takes a ready 4D boolean mask (True:
    attend) as it is: transformers passes any 4D mask through untouched, but eager attention adds
    its mask (it needs 0 / -inf) and flash attention takes 2D masks only."""
    return getattr(model.config, "_attn_implementation", None) == "sdpa"


def cache_argument(model) -> str:
    """The forward() keyword that takes the cache: ``cache`` in recent 5.x, ``past_key_values`` before."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def get_kv(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """[(keys, values)] per layer, each float[batch, kv_heads, seq, head_dim] (empty layers skipped)."""
    if hasattr(cache, "layers"):
        out = []
        for layer in cache.layers:
            if getattr(layer, "is_sliding", False) or not getattr(layer, "is_croppable", True):
                raise UnsupportedCache(
                    f"cache layer {type(layer).__name__} is sliding-window or bounded: speculative rollback needs "
                    "a full-attention dynamic cache"
                )
            keys = getattr(layer, "keys", None)
            if keys is None or keys.numel() == 0:
                continue
            out.append((layer.keys, layer.values))
        return out
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache))
    raise UnsupportedCache(f"unsupported cache class {type(cache).__name__}")


def set_kv(cache, kvs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    if hasattr(cache, "layers"):
        filled = [layer for layer in cache.layers if getattr(layer, "keys", None) is not None and layer.keys.numel()]
        for layer, (k, v) in zip(filled, kvs):
            layer.keys, layer.values = k, v
        return
    if hasattr(cache, "key_cache"):
        cache.key_cache[:] = [k for k, _ in kvs]
        cache.value_cache[:] = [v for _, v in kvs]
        return
    raise UnsupportedCache(f"unsupported cache class {type(cache).__name__}")


def truncate(cache, length: int) -> None:
    """Keep physical positions [0, length)."""
    set_kv(cache, [(k[:, :, :length], v[:, :, :length]) for k, v in get_kv(cache)])


def select_batch(cache, rows: torch.Tensor) -> None:
    """Keep the batch rows ``rows`` (int64[B']) in that order."""
    set_kv(cache, [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in get_kv(cache)])


def grow_batch(cache, rows: int) -> None:
    """Append ``rows`` zero batch rows (masked out by the caller until written)."""
    set_kv(
        cache,
        [
            (torch.cat([k, k.new_zeros(rows, *k.shape[1:])]), torch.cat([v, v.new_zeros(rows, *v.shape[1:])]))
            for k, v in get_kv(cache)
        ],
    )


def pad_positions(cache, extra: int) -> None:
    """Append ``extra`` zero positions to every row (masked out by the caller)."""
    set_kv(
        cache,
        [
            (
                torch.cat([k, k.new_zeros(*k.shape[:2], extra, k.shape[3])], dim=2),
                torch.cat([v, v.new_zeros(*v.shape[:2], extra, v.shape[3])], dim=2),
            )
            for k, v in get_kv(cache)
        ],
    )


def write_rows(cache, rows: torch.Tensor, source, length: int) -> None:
    """Batch rows ``rows`` (int64[n]), positions [0, length), take the K/V of ``source``'s n rows."""
    for (k, v), (sk, sv) in zip(get_kv(cache), get_kv(source)):
        k[rows, :, :length] = sk[:, :, :length].to(k.dtype)
        v[rows, :, :length] = sv[:, :, :length].to(v.dtype)


def gather_positions(cache, index: torch.Tensor) -> None:
    """index int64[B, L']: new physical position j of row b takes old position index[b, j]."""
    kvs = get_kv(cache)
    if not kvs:
        return
    k0 = kvs[0][0]
    idx = index.to(k0.device)[:, None, :, None]
    out = []
    for k, v in kvs:
        ik = idx.expand(k.shape[0], k.shape[1], idx.shape[2], k.shape[3])
        out.append((k.gather(2, ik), v.gather(2, ik)))
    set_kv(cache, out)
