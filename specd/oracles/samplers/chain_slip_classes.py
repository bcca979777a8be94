"""The classes of slip a foreign chain sampler's check covers (``verify-oracle --sampler`` without ``--tree``),
each with the sizes that hide it and the smallest that shows it (specd.oracles.samplers.slip_classes: the classes'
form, the trees' classes, and the widths both share)."""

from __future__ import annotations

from specd.oracles.samplers.size_classes import size_slips
from specd.oracles.samplers.slip import Slip, count
from specd.oracles.samplers.slip_classes import (
    TOP_K_VOCAB,
)


def _chain_correction(vocab: int, k) -> str | None:
    if vocab < 3:
        return "at V = 2 a refused draft leaves one token: the correction is forced"
    return None


def _second_draft(vocab: int, k) -> str | None:
    if k < 2:
        return "a round of one draft has no test after the first and no row past p_2"
    return None


def _wide_correction(vocab: int, k) -> str | None:
    if vocab < 4:
        left = count(vocab - 1, "token")
        return f"at V = {vocab} a refused draft leaves at most {left} of mass: no correction has three"
    return None


def _later_wide_correction(vocab: int, k) -> str | None:
    if k < 2:
        return "a round of one draft has no correction after an accepted draft"
    return _wide_correction(vocab, k)


def _top_k_correction(vocab: int, k) -> str | None:
    if vocab < TOP_K_VOCAB:
        return (
            f"at V = {vocab} a refused draft leaves at most {count(vocab - 1, 'token')} of mass: a correction cut "
            f"to its {vocab - 2} likeliest is exact there, and to fewer shows only where a table leaves more"
        )
    return None


def _middle_draft(vocab: int, k) -> str | None:
    if k < 3:
        return f"a round of {count(k, 'draft')} has no draft between two others"
    return None


CHAIN_SLIPS = (
    Slip("correction_draw", "a correction drawn from two or more tokens", _chain_correction, lambda w: "--vocab 3"),
    Slip(
        "second_draft",
        "a round's second draft: its test, its row, what follows a refusal",
        _second_draft,
        lambda w: "--k 2",
    ),
    Slip(
        "wide_correction",
        "a correction drawn from three or more tokens (a first, a middle and a last token of its law)",
        _wide_correction,
        lambda w: "--vocab 4",
    ),
    Slip(
        "later_wide_correction",
        "a correction after an accepted draft drawn from three or more tokens (a path of its own past the first)",
        _later_wide_correction,
        lambda w: "--vocab 4 --k 2",
    ),
    Slip(
        "middle_draft",
        "a draft between two others: tested after an acceptance, refused with a draft left untested",
        _middle_draft,
        lambda w: "--k 3",
    ),
    Slip(
        "top_k_correction",
        "a correction cut to a few of its likeliest tokens (a top-k of its law: the 3 to 8 likeliest, on these tables)",
        _top_k_correction,
        lambda w: f"--vocab {TOP_K_VOCAB} --k 1",
    ),
    *size_slips(lambda vocab, k: f"--vocab {vocab} --k {k}", lambda k: k),
)
