"""How an option is declared, typed and checked: ``option(...)`` declares a dataclass field with
its flags, kind, help and range check (a ``Spec``); ``typed`` reads a value of a kind, or refuses
it naming where it came from; ``specs`` lists a dataclass's declared options. The options of a
generation run (specd.models.run.options) and sweep-k's own are declared this way."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from specd.errors import UsageError, shown
from specd.models.numbers import MAX_NUMBER, integer, out_of_range

Check = Callable[[object, str], None]  # (value, where it came from) -> None, or UsageError


@dataclass(frozen=True)
class Spec:
    """How an option is written and checked. ``kind``: int, float, str, bool, strs (a list of
    strings) or k (auto or an integer); a trailing ? admits None (the option is unset)."""

    flags: tuple[str, ...]
    kind: str
    help: str
    check: Check | None = None
    metavar: str | None = None

    @property
    def flag(self) -> str:
        """The flag messages name: the first declared."""
        return self.flags[0].split("/")[0]


def option(default, *flags: str, kind: str, help: str, check: Check | None = None, metavar: str | None = None):
    """A dataclass field declared with everything the command line and config files need."""
    return field(default=default, metadata={"spec": Spec(flags, kind, help, check, metavar)})


def specs(cls) -> dict[str, tuple[Spec, object]]:
    """name -> (Spec, default) of every declared option of a dataclass, in declaration order."""
    return {f.name: (f.metadata["spec"], f.default) for f in fields(cls) if "spec" in f.metadata}


def typed(kind: str, value, where: str):
    """``value`` as the ``kind`` says, or UsageError naming ``where`` (YAML can hold anything; a flag's
    text arrives as a string for kind k; ints are fine where floats are)."""
    base = kind.rstrip("?")
    if value is None and kind.endswith("?"):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_NUMBER:
        raise out_of_range(value, where)  # refused without printing it: it may not even convert to text
    if base == "k":
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            return integer(value, where)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise UsageError(f"{where} must be auto or an integer, got {shown(value)}")
    if base == "strs" and isinstance(value, str):
        return (value,)
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
        "strs": isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value),
    }[base]
    if not ok:
        what = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}
        raise UsageError(f"{where} must be {what.get(base, 'a string or a list of strings')}, got {shown(value)}")
    if base == "float":
        value = float(value)
        if not math.isfinite(value):
            raise UsageError(f"{where} must be a finite number, got {value}")
    return tuple(value) if base == "strs" else value


# -- range checks that any option may use --------------------------------------------------
def one_of(what: str, choices) -> Check:
    def check(value, where):
        if value not in choices:
            raise UsageError(f"{where}: unknown {what} {shown(value)}; choose one of {', '.join(choices)}")

    return check


def at_least_one(value, where):
    if value < 1:
        raise UsageError(f"{where} must be >= 1, got {value}")
