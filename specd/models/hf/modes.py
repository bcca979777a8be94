"""A model runs specd's calls in eval mode, whatever mode its owner left it in.

A model handed over as an object may be put back in training mode (``model.train()``)
between calls; its dropout would then make every call draw different logits, and greedy
decoding emit different text, with nothing said. ``evaluating`` switches the modules that
are training to eval mode for the length of one call and back after, so the owner's
object is left as it was (a training loop that calls ``generate`` keeps its dropout).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from operator import attrgetter, itemgetter

import torch

from specd.models.hf.products import ProductForms

_TRAINING = attrgetter("training")
_TRAINING_FLAG = itemgetter("training")
# A module's flag set as ``Module.train`` sets it, without ``Module.__setattr__``'s checks for parameters,
# buffers and submodules (about 1.3 us a module: a model of 400 modules left training paid 1 ms a call).
_SET = object.__setattr__


class Modules:
    """Every module of a model, taken once (walking a tuple costs microseconds a call, the module tree
    more), and ``flags``: the instance dicts their ``training`` flags lie in (where ``Module.train``
    and ``evaluating`` write them), read by a dict lookup at about half an attribute read's cost
    (SmolLM2's 397 modules: 7 us against 13 a call); None where a module keeps its flag elsewhere."""

    __slots__ = ("all", "flags")

    def __init__(self, model: torch.nn.Module) -> None:
        self.all = tuple(model.modules())
        dicts = tuple(vars(m) for m in self.all)
        plain = all(type(d.get("training")) is bool and d["training"] is m.training for m, d in zip(self.all, dicts))
        self.flags: tuple[dict, ...] | None = dicts if plain else None

    def __iter__(self) -> Iterator[torch.nn.Module]:
        return iter(self.all)


class evaluating:  # noqa: N801 - a context manager, used as a function: ``with evaluating(modules):``
    """``modules``: every module of a model (``Modules``, or any sequence of them); those in training
    mode are in eval mode inside. A class, not a generator: entered once per model call, its cost is
    the host's per step."""

    __slots__ = ("modules", "flags", "training")

    def __init__(self, modules: Iterable[torch.nn.Module]) -> None:
        self.modules, self.training = modules, ()
        self.flags = getattr(modules, "flags", None)

    def __enter__(self) -> None:
        flags = self.flags
        if not (any(map(_TRAINING_FLAG, flags)) if flags is not None else any(map(_TRAINING, self.modules))):
            self.training = ()  # (entered again: none left over from the last call to set back)
            return
        self.training = [m for m in self.modules if m.training]
        for module in self.training:  # module by module: a parent's .eval() would also touch the rest
            _SET(module, "training", False)

    def __exit__(self, *exc) -> None:
        for module in self.training:
            _SET(module, "training", True)


class own_call:  # noqa: N801 - a context manager, used as a function
    """The context of each of specd's calls on a model: in eval mode, and (on a CPU, ``forms``
    given) its products in their chosen forms (specd.models.hf.products)."""

    __slots__ = ("mode", "forms")

    def __init__(self, modules: Iterable[torch.nn.Module], forms: ProductForms | None) -> None:
        self.mode, self.forms = evaluating(modules), forms.engaged() if forms is not None else None

    def __enter__(self) -> None:
        self.mode.__enter__()
        if self.forms is not None:
            self.forms.__enter__()

    def __exit__(self, *exc) -> None:
        if self.forms is not None:
            self.forms.__exit__(*exc)
        self.mode.__exit__(*exc)
