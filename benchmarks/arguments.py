"""The benchmark scripts' option types: a bad value is argparse's one line and exit 2, not a traceback.
Imports nothing of specd, so any script (or a child running another checkout) can use it."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    """An integer of at least 1 (argparse says so in one line otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positives(text: str) -> list[int]:
    """Comma-separated integers of at least 1 ("2,4,8" -> [2, 4, 8]); blanks between commas are skipped."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers like 2,4,8, got {text!r}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"each must be at least 1, got {text!r}")
    return values


def copy_pair(text: str) -> tuple[float, float]:
    """-k auto's copy constants as MEMORY,CEILING ("1.75,1.0"): a memory above 0, a ceiling in (0, 1]."""
    try:
        memory, ceiling = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MEMORY,CEILING, two numbers like 1.75,1.0, got {text!r}") from None
    if not (memory > 0 and 0 < ceiling <= 1):
        raise argparse.ArgumentTypeError(f"the memory must be above 0 and the ceiling in (0, 1], got {text!r}")
    return memory, ceiling
