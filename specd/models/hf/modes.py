"""A model runs specd's calls in eval mode, whatever mode its owner left it in.

A model handed over as an object may be put back in training mode (``model.train()``)
between calls; its dropout would then make every call draw different logits, and greedy
decoding emit different text, with nothing said. ``evaluating`` switches the modules that
are training to eval mode for the length of one call and back after, so the owner's
object is left as it was (a training loop that calls ``generate`` keeps its dropout).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from operator import attrgetter

import torch

from specd.models.hf.products import ProductForms

_TRAINING = attrgetter("training")


@contextmanager
def evaluating(modules: Sequence[torch.nn.Module]) -> Iterator[None]:
    """``modules``: every module of a model (``tuple(model.modules())``, taken once: walking a
    tuple costs microseconds a call); those in training mode are in eval mode inside."""
    if not any(map(_TRAINING, modules)):  # the usual case, found by a loop in C
        yield
        return
    training = [m for m in modules if m.training]
    for module in training:
        module.training = False  # module by module: a parent's .eval() would also touch the rest
    try:
        yield
    finally:
        for module in training:
            module.training = True


@contextmanager
def own_call(modules: Sequence[torch.nn.Module], forms: ProductForms | None) -> Iterator[None]:
    """The context of each of specd's calls on a model: in eval mode, and (on a CPU, ``forms``
    given) its products in their chosen forms (specd.models.hf.products)."""
    with evaluating(modules), forms.engaged() if forms is not None else nullcontext():
        yield
