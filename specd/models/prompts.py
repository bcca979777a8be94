"""Prompt sets: --prompt values and JSONL files, each prompt with a stable request id."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from specd.errors import UsageError
from specd.files import read_text


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
    raw: list[tuple[str, str | None, str | None]] = [(p, None, None) for p in prompts]
    if prompts_file:
        for n, line in enumerate(read_text(prompts_file, "prompts file").splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise UsageError(f"{prompts_file}:{n}: not JSONL ({err.msg})") from None
            if isinstance(obj, str):
                obj = {"prompt": obj}
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt", obj.get("text")), str):
                raise UsageError(f'{prompts_file}:{n}: each line must be a JSON object with a "prompt" string')
            tag = obj.get("tag", obj.get("domain"))
            raw.append((obj.get("prompt", obj.get("text")), obj.get("id"), None if tag is None else str(tag)))
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
