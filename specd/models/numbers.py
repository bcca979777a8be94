"""The one bounded reader of integers a user types (an option's value, the N of a draft source, a
GPU's index and a size in --max-memory).

Python refuses to convert a decimal string of more than 4300 digits (a ValueError that
would surface as an internal error), and no count specd takes comes near 2^64. So a
digit string is judged by its length before it is converted: anything at or above
``MAX_NUMBER`` is one line, "out of range", naming where it came from.
"""

from __future__ import annotations

import re

from specd.errors import UsageError, shown

MAX_NUMBER = 2**64  # no option takes an integer this large (a seed is below it)
_MAX_DIGITS = len(str(MAX_NUMBER))


def digits_only(text: str, most: int = _MAX_DIGITS) -> bool:
    """Is ``text`` a whole number in ASCII digits, at most ``most`` of them (short enough to convert)?
    ``str.isdigit`` alone takes ``'²'`` and ``'٣'``, which ``int`` refuses or reads as another number."""
    return text.isascii() and text.isdigit() and len(text) <= most


def out_of_range(value: int, where: str) -> UsageError:
    """The refusal of an integer too large to take, without printing it (it may not even convert to text)."""
    return UsageError(f"{where}: a number of about {int(abs(value).bit_length() * 0.30103)} digits is out of range")


def integer(text: str, where: str) -> int:
    """A decimal integer typed by a user (an optional sign, digits) -> int, or UsageError naming
    ``where``: not an integer, or of magnitude at least MAX_NUMBER (judged before converting)."""
    body = text.strip()
    digits = body.lstrip("+-")
    if not digits.isascii() or not digits.isdigit() or len(body) - len(digits) > 1:
        raise UsageError(f"{where} must be an integer, got {shown(text)}")
    significant = digits.lstrip("0") or "0"  # int() refuses a long string even when it is all zeros
    if len(significant) > _MAX_DIGITS:
        raise UsageError(f"{where}: a number of {len(significant)} digits is out of range")
    value = -int(significant) if body.startswith("-") else int(significant)
    if abs(value) >= MAX_NUMBER:
        raise out_of_range(value, where)
    return value


def parse_max_memory(text: str, where: str = "--max-memory") -> dict:
    """'cpu=30GiB,0=70GiB' -> {"cpu": "30GiB", 0: "70GiB"} (device: cpu, disk or a GPU index)."""
    out: dict = {}
    for part in text.split(","):
        device, sep, size = part.strip().partition("=")
        if not sep or not size or not (device in ("cpu", "disk", "mps") or digits_only(device, 4)):
            raise UsageError(f"{where} takes DEVICE=SIZE,... (cpu=30GiB,0=70GiB), got {shown(text)}")
        if not re.fullmatch(r"[0-9]{1,15}(\.[0-9]{1,15})?\s*([KMGT]i?B)?", size.strip(), re.IGNORECASE):
            raise UsageError(f"{where}: {shown(size)} is not a size like 512MiB or 30GiB")
        out[int(device) if digits_only(device, 4) else device] = size.strip()
    return out
