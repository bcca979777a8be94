"""The classes of slip a vocabulary's width or a round's depth shows, a chain's and a tree's alike (``verify-oracle
--sampler``): a law over more tokens than a warp or a wavefront, a block's last tokens, an aligned vocabulary, rows
read from another position's place, a wide draft row, the band of 17 to 64 tokens, a ninth draft, ids past a byte, a
correction after eight accepted drafts. Each says why a size hides it (``hidden(vocab, depth)``: the reason, or None);
``size_slips`` makes them a chain's or a tree's classes; specd.oracles.samplers.coverage runs the sizes that show
them."""

from __future__ import annotations

from collections.abc import Callable

from specd.oracles.samplers.slip import Slip, count

# Past a warp's 32 lanes and a wavefront's 64 (a total or a scan over one of them shows), and odd: every block width
# from 2 to 64 leaves a last block of one token (TAIL_VOCABS).
WIDE_VOCAB = 65


def wide_vocabulary(vocab: int, _) -> str | None:
    if vocab <= 64:
        return (
            f"at V = {vocab} every law fits a wavefront's 64 lanes: a total or running sum over the first 64 "
            "tokens (or a warp's 32, where V <= 32) is the whole law's"
        )
    return None


# Vocabularies past 64 that leave a last block of one token and of two after every block width from 4 to 64 (65 and
# 66 mod 4, 8, 16, 32 and 64 are 1 and 2): a law cut into blocks that drops or misreads a last block of that length
# (a vocabulary of 50257 or 151938 tokens has one) passed every size before (a helper's samplers: blocks of 4 at
# V = 5 and 6; the sizes were 2, 3, 4, 16 and 71, whose last blocks hold 3 and 7).
TAIL_VOCABS = (65, 66)


def _tail(length: int):
    def hidden(vocab: int, _) -> str | None:
        if vocab <= 64 or vocab % 64 != length:
            return f"at V = {vocab} blocks of 4 to 64 tokens do not all leave a last block of {count(length, 'token')}"
        return None

    return hidden


def tail_slip(length: int, shown_at) -> Slip:
    return Slip(
        f"tail_of_{('one', 'two')[length - 1]}",
        f"a law cut into blocks of 4 to 64 tokens whose last holds {count(length, 'token')} (dropped or misread)",
        _tail(length),
        shown_at,
    )


# A vocabulary a multiple of 64 past 128, as real ones are multiples of 32 or 64 (32000, 128256, 151936): a path kept
# for aligned rows (a bonus read from the row before it, where V is a multiple of 32), and blocks of 128 or 256 that
# leave a partial last block of 64 (dropped), passed every size below it (a fifth helper's samplers).
ALIGNED_VOCAB = 192


def aligned(vocab: int, _) -> str | None:
    if vocab <= 128 or vocab % 64 or not vocab % 128:
        return f"at V = {vocab} no vocabulary a multiple of 64 past 128, whose blocks of 128 leave a partial last block"
    return None


ALIGNED_WHAT = (
    "a vocabulary a multiple of 64 past 128 (as real ones are multiples of 32 or 64): a path kept for aligned rows, "
    "blocks of 128 or 256 whose partial last block is dropped"
)


FAR_DEPTH = 8  # a round this deep at V = WIDE_VOCAB shows a row read up to 7 places back, or at a stride of 64


def far_rows(vocab: int, depth: int) -> str | None:
    if depth < FAR_DEPTH or vocab <= 64:
        return (
            f"a round {depth} deep at V = {vocab}: row buffers kept in a ring of up to {FAR_DEPTH - 1} show only "
            f"{FAR_DEPTH} deep, rows read at a stride of 64 tokens only past V = 64"
        )
    return None


FAR_ROWS_WHAT = (
    f"a row read from another position's place: row buffers kept in a ring of up to {FAR_DEPTH - 1} by position, "
    "rows wider than 64 tokens read at a stride of 64"
)


WIDE_DRAFT_WHAT = (
    "a draft row with mass on more than 32 tokens: a row kept as its 32 likeliest (sparse draft probabilities), "
    "the residual formed without the rest"
)


def wide_draft(vocab: int, _) -> str | None:
    if vocab <= 32:
        return f"at V = {vocab} a draft row has at most 32 tokens of mass: a row kept as its 32 likeliest is whole"
    return None


# A vocabulary in the band no other size reaches, 17 to 64 tokens (a path for one warp, a top-16 correction there); odd,
# so blocks leave a tail.
MID_VOCAB = 33


def mid_vocabulary(vocab: int, _) -> str | None:
    if not 16 < vocab <= 64:
        return (
            f"at V = {vocab} no vocabulary of 17 to 64 tokens, where a path for one warp (its laws cut to 16) is taken"
        )
    return None


MID_WHAT = "a vocabulary of 17 to 64 tokens (a path for one warp: a correction cut to its 16 likeliest)"
NINTH = 9  # a round of this many drafts: past a byte's 8 bits, a ring of 8 rows, a loop unrolled to 8
NINTH_WHAT = "a ninth draft: a mask of accepted drafts in one byte, a ring of eight rows, a loop unrolled eight times"


def ninth_draft(vocab: int, depth: int) -> str | None:
    if depth < NINTH:
        return f"a round {depth} deep: a mask of accepted drafts in a byte, or a ring of eight rows, shows only 9 deep"
    return None


# A vocabulary past 256 (ids past a byte): a path kept for large vocabularies (the terminal's law in a float32 buffer
# or summed in float32) passed every size up to 192 (a sixth helper's samplers).
PAST_BYTE_VOCAB = 257
PAST_BYTE_WHAT = (
    "a vocabulary past 256 tokens: ids past a byte, a path kept for large vocabularies (a terminal's law in a "
    "float32 buffer or running sum)"
)


def past_byte(vocab: int, _) -> str | None:
    if vocab <= 256:
        return f"at V = {vocab} every id fits a byte: a path kept for vocabularies past 256 is never taken"
    return None


# Rows of full support past eight accepted drafts (the deep_rows table): a correction there of three tokens or more,
# siblings at a ninth level
DEEP_ROWS_VOCAB = 6
DEEP_CORRECTION_WHAT = (
    "a correction after eight accepted drafts (a ninth level's) drawn from three tokens or more: a path kept for deep "
    "refusals (its law cut to its likeliest)"
)


def deep_correction(vocab: int, depth: int) -> str | None:
    if depth < NINTH or vocab < 4:
        return (
            f"a round {depth} deep at V = {vocab}: a correction after eight accepted drafts drawn from three tokens "
            f"shows only {NINTH} deep at V >= 4"
        )
    return None


WIDE_VOCABULARY_WHAT = (
    "a terminal drawn over more tokens than a warp (32) or a wavefront (64) holds: its total and running sum"
)


def size_slips(flags: Callable[[int, int], str], depth_of: Callable[[object], int]) -> tuple[Slip, ...]:
    """This module's classes as a chain's or a tree's: ``flags(vocab, depth)`` the flags of a size that shows one (a
    chain's --vocab and --k, a tree's --vocab and chain-shaped --tree), ``depth_of(size)`` the depth of a size a class
    is asked about (a chain's K, a tree's levels)."""

    def by_depth(hidden: Callable[[int, int], str | None]) -> Callable[[int, object], str | None]:
        return lambda vocab, size: hidden(vocab, depth_of(size))

    def at(vocab: int, depth: int = 1) -> Callable[[int], str]:
        return lambda widest: flags(vocab, depth)

    return (
        Slip("wide_vocabulary", WIDE_VOCABULARY_WHAT, wide_vocabulary, at(WIDE_VOCAB)),
        *(tail_slip(v - 64, at(v)) for v in TAIL_VOCABS),
        Slip("aligned_vocabulary", ALIGNED_WHAT, aligned, at(ALIGNED_VOCAB)),
        Slip("far_rows", FAR_ROWS_WHAT, by_depth(far_rows), at(WIDE_VOCAB, FAR_DEPTH)),
        Slip("wide_draft_row", WIDE_DRAFT_WHAT, wide_draft, at(WIDE_VOCAB)),
        Slip("mid_vocabulary", MID_WHAT, mid_vocabulary, at(MID_VOCAB)),
        Slip("ninth_draft", NINTH_WHAT, by_depth(ninth_draft), at(WIDE_VOCAB, NINTH)),
        Slip("vocabulary_past_256", PAST_BYTE_WHAT, past_byte, at(PAST_BYTE_VOCAB)),
        Slip("deep_correction", DEEP_CORRECTION_WHAT, by_depth(deep_correction), at(DEEP_ROWS_VOCAB, NINTH)),
    )
