"""The one place that knows how transformers' versions name what specd's cache relies on.

specd keeps every model's K/V in its own slot cache (specd.models.hf.slot_cache), a transformers
``Cache`` whose ``update`` writes each row at its column; this module only reads, from a model,
the forward keyword that takes a cache (``cache`` in recent 5.x releases, ``past_key_values``
before) and the attention window of a model with sliding-window layers. Such a model's layers all
get full K/V in the slot cache, and its runs are kept within the window (``sliding_window``),
where a window hides nothing: every layer then sees every position, as a full-attention layer does.
"""

from __future__ import annotations


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


def cache_argument(model) -> str:
    """The forward() keyword that takes the cache: ``cache`` in recent 5.x, ``past_key_values`` before."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"
