"""Prompt sets: --prompt values and JSONL files, each prompt with a stable request id."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from specd.errors import UsageError
from specd.files import jsonl_records, read_text

_SURROGATE = re.compile("[\\ud800-\\udfff]")


@dataclass(frozen=True)
class PromptItem:
    request_id: str
    text: str
    tag: str | None = None


def prompt_items(prompts: Sequence[str], prompts_file: str | None) -> list[PromptItem]:
    """--prompt values, then JSONL lines {"prompt": ..., "id"?: ..., "tag"?: ...}.

    Default ids hash the prompt text, so a request's id (and with it its random
    streams) does not depend on its position in the prompt set.
    """
    for p in prompts:
        _refuse_lone_surrogate(p, "--prompt")
    raw: list[tuple[str, str | None, str | None]] = [(p, None, None) for p in prompts]
    if prompts_file:
        text = read_text(prompts_file, "prompts file")
        for n, obj in jsonl_records(text, prompts_file, what="not JSONL"):
            if isinstance(obj, str):
                obj = {"prompt": obj}
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt", obj.get("text")), str):
                raise UsageError(f'{prompts_file}:{n}: each line must be a JSON object with a "prompt" string')
            tag = obj.get("tag", obj.get("domain"))
            rid = obj.get("id")
            for name, value in (("prompt", obj.get("prompt", obj.get("text"))), ("id", rid), ("tag", tag)):
                _refuse_lone_surrogate(value, f"{prompts_file}:{n}: the {name}")
            raw.append((obj.get("prompt", obj.get("text")), rid, None if tag is None else str(tag)))
    if not raw:
        raise UsageError("no prompt: give --prompt TEXT or --prompts-file FILE.jsonl")
    items, seen = [], {}
    for text, rid, tag in raw:
        if not text.strip():
            raise UsageError("empty prompt")
        if rid is None:
            base = "p" + hashlib.sha1(text.encode()).hexdigest()[:8]
            seen[base] = seen.get(base, 0) + 1
            rid = base if seen[base] == 1 else f"{base}-{seen[base]}"
        items.append(PromptItem(str(rid), text, tag))
    if len({i.request_id for i in items}) != len(items):
        raise UsageError("prompt ids must be unique")
    return items


def _refuse_lone_surrogate(value, where: str) -> None:
    """A lone surrogate (a JSON escape like \\ud800, or bytes that are not UTF-8 on the command line)
    is no character: no tokenizer encodes it and no UTF-8 file can hold it."""
    if isinstance(value, str) and (m := _SURROGATE.search(value)):
        raise UsageError(
            f"{where} holds a lone surrogate (\\u{ord(m.group()):04x}) at character {m.start()}, which is not "
            "text; remove it or write the character it was meant to be"
        )
