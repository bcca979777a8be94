"""Tokenizer admission: p(d)/q(d) is only meaningful when both models name the
same event (token) with the same id."""

from __future__ import annotations

from dataclasses import dataclass

from specd.errors import TokenizerMismatch, shown


@dataclass(frozen=True)
class EventSpace:
    real_vocab: int  # tokens the tokenizer can produce
    width: int  # logit columns both adapters expose (>= real_vocab; extra columns are masked)


def admit(target_tok, draft_tok, target_width: int, draft_width: int) -> EventSpace:
    real = len(target_tok)
    if draft_tok is not None:
        vt, vd = target_tok.get_vocab(), draft_tok.get_vocab()
        if len(vt) != len(vd):
            raise TokenizerMismatch(
                f"target and draft tokenizers differ: {len(vt)} vs {len(vd)} tokens; "
                "speculative decoding needs one shared vocabulary"
            )
        for token, tid in vt.items():
            other = vd.get(token)
            if other != tid:
                where = "missing from the draft" if other is None else f"id {other} in the draft"
                raise TokenizerMismatch(
                    f"target and draft tokenizers differ: token {shown(token)} is id {tid} in the target and {where}"
                )
        for attr in ("eos_token_id", "bos_token_id"):
            a, b = getattr(target_tok, attr, None), getattr(draft_tok, attr, None)
            if a != b:
                raise TokenizerMismatch(f"target and draft tokenizers differ: {attr} is {a} vs {b}")
    for who, width in (("target", target_width), ("draft", draft_width)):
        if width < real:
            raise TokenizerMismatch(
                f"the {who} model's logit rows have {width} columns but the tokenizer has {real} tokens: "
                "some tokens could never be scored"
            )
    return EventSpace(real, min(target_width, draft_width))
