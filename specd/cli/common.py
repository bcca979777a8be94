"""Helpers shared by commands: option parsing and output streams."""

from __future__ import annotations

import json
import math
import sys

from rich.console import Console

from specd.errors import UsageError
from specd.files import read_text

stdout = Console(highlight=False, soft_wrap=False)
if not stdout.is_terminal:  # piped or captured: wide enough that tables keep their headers
    stdout = Console(highlight=False, soft_wrap=False, width=150)
stderr = Console(stderr=True, highlight=False)


def parse_bias(items: list[str] | None, option: str) -> dict[int, float]:
    """['0=0.5', '3=-1'] -> {0: 0.5, 3: -1.0}."""
    out: dict[int, float] = {}
    for item in items or []:
        token, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[int(token)] = float(value)
        except ValueError:
            raise UsageError(f"{option} takes TOKEN=VALUE (e.g. 0=0.5), got {item!r}") from None
    return out


def load_yaml_mapping(path: str | None, allowed: set[str], what: str) -> dict:
    """A YAML file holding a mapping of known keys ('-' and '_' alike), or {} without a path."""
    import yaml

    if not path:
        return {}
    try:
        data = yaml.safe_load(read_text(path, "config file", allow_empty=True)) or {}
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: {what} must be a mapping of option names to values")
    data = {str(k).replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise UsageError(f"{path}: unknown option(s) {', '.join(unknown)}")
    return data


def finite(value):
    """The document with every NaN or infinity replaced by null: --json is always strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def print_json(document: dict) -> None:
    sys.stdout.write(json.dumps(finite(document), indent=2, sort_keys=False, default=str, allow_nan=False) + "\n")
