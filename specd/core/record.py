"""``record``: a frozen dataclass whose constructor costs what a plain class's does.

A frozen dataclass's generated ``__init__`` stores each field through ``object.__setattr__``
(its own ``__setattr__`` refuses): about 4 us for a record of 25 fields against 0.7 us for
stores into the instance's ``__dict__``. A round builds several records per request (its
outcome, the staged state, K/V row identities, processor states), so ``record`` regenerates the
constructor to store straight into ``__dict__``. Everything else is the dataclass's own: the
fields, their defaults and factories, ``__post_init__``, equality, hashing, ``replace``, and the
instance stays frozen (assignment raises FrozenInstanceError).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar

try:
    from typing import dataclass_transform
except ImportError:  # Python 3.10 (it only informs type checkers); typing_extensions comes with torch
    from typing_extensions import dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T]) -> type[T]:
    """``@dataclass(frozen=True)`` with the fast constructor above (a class without ``__slots__``)."""
    own_init = "__init__" in cls.__dict__  # a constructor written by hand stays, as the dataclass keeps it
    cls = dataclass(frozen=True)(cls)
    if own_init:
        return cls
    names: dict[str, object] = {"_MISSING": MISSING}
    params: list[str] = []
    keyword_only: list[str] = []
    body: list[str] = []
    for f in fields(cls):  # type: ignore[arg-type]
        if f.init:
            if f.default is not MISSING:
                names[f"_default_{f.name}"] = f.default
                param = f"{f.name}=_default_{f.name}"
            elif f.default_factory is not MISSING:
                param = f"{f.name}=_MISSING"
            else:
                param = f.name
            (keyword_only if f.kw_only else params).append(param)
        if f.default_factory is not MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            value = (
                f"_factory_{f.name}()" if not f.init else f"_factory_{f.name}() if {f.name} is _MISSING else {f.name}"
            )
        elif not f.init:
            if f.default is MISSING:
                continue  # set by __post_init__
            names[f"_default_{f.name}"] = f.default
            value = f"_default_{f.name}"
        else:
            value = f.name
        body.append(f"    _fields_of_self[{f.name!r}] = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", *params, *(["*", *keyword_only] if keyword_only else [])])
    source = f"def __init__({signature}):\n    _fields_of_self = self.__dict__\n" + "\n".join(body) + "\n"
    exec(source, names)  # noqa: S102: code built above from the class's own field names
    init: Any = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    setattr(cls, "__init__", init)  # noqa: B010
    return cls
