"""Helpers shared by commands: option parsing and output streams."""

from __future__ import annotations

import json
import sys

from rich.console import Console

from specd.errors import UsageError

stdout = Console(highlight=False, soft_wrap=False)
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


def print_json(document: dict) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")


def not_available(command: str, issue: str) -> None:
    from specd.errors import NotImplementedCommand

    raise NotImplementedCommand(f"'specd {command}' is not available in this release yet ({issue})")
