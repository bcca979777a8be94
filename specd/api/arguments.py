"""The Python API's arguments, checked by name before any work: each wrong type or value is one
``UsageError`` naming the keyword and showing the value abbreviated (``specd.errors.shown``). The
command line's flags arrive typed by Typer; a Python caller can pass anything."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any  # each checker returns the value it checked (None only where optional)

from specd.errors import UsageError, shown


def _kind(value) -> str:
    return type(value).__name__


def whole(value, name: str, minimum: int | None = None, optional: bool = False) -> Any:
    """An integer (not a bool, not 2.0, not "2"), at least ``minimum``; None where ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        none = " or None" if optional else ""
        raise UsageError(f"{name} must be an integer{none}, got {shown(value)} ({_kind(value)})")
    if minimum is not None and value < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {shown(value)}")
    return value


def number(value, name: str, optional: bool = False, finite: bool = True) -> Any:
    """A real number (an int or a float; not a bool, not a string), finite unless told (a range check
    downstream then names it); None where ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name} must be a number, got {shown(value)} ({_kind(value)})")
    if finite and not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, got {shown(value)}")
    return value


def flag(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{name} must be True or False, got {shown(value)} ({_kind(value)})")
    return value


def text(value, name: str, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string, got {shown(value)} ({_kind(value)})")
    return value


def biases(value, name: str) -> dict[int, float]:
    """A logit bias: a mapping of token ids (integers) to finite numbers; None is no bias."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(f"{name} must be a mapping of token ids to numbers ({{0: 0.5}}), got {shown(value)}")
    for token, bias in value.items():
        whole(token, f"{name}: a token id", 0)
        number(bias, f"{name}[{token}]", finite=False)
    return dict(value)


def path(value, name: str, optional: bool = False) -> Any:
    """A file's path: a string or an os.PathLike; an int (a file descriptor) is not a path."""
    if value is None and optional:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a path (a str or os.PathLike), got {shown(value)} ({_kind(value)})")
    return value


def prompts(value, name: str = "prompts") -> list[str]:
    """One prompt (a string) or any iterable of strings (a list, a tuple, a generator: read once)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise UsageError(f"{name} must be a string or a list of strings, got {shown(value)} ({_kind(value)})")
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise UsageError(f"{name} must be a string or a list of strings; item {i} is {shown(item)} ({_kind(item)})")
    if not items:
        raise UsageError(f"{name} is empty: give a string or a list of strings")
    return items
