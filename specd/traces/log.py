"""The acceptance-log file format, schema ``specd.trace/v1`` (JSONL, one object per line).

Line types, in order of appearance:

- ``header`` (first line): {"type": "header", "schema": "specd.trace/v1", "manifest": {...}}
  where manifest carries the run coordinate: model names and weight digests,
  dtype, device, torch/transformers versions, both policies, layout, K, seed.
- ``request``: {"type": "request", "request_id", "prompt", "tag", "prompt_tokens",
  "text", "finish_reason"}
- ``proposal`` (one per proposed draft token): request_id, round_id, round_index,
  draft_index (1-based), position, draft_token, draft_text, q_prob, p_prob,
  accept_ratio, uniform (null if not reached or greedy), reached, accepted,
  correction_distribution_id, committed_token_count
- ``round`` (one per round): request_id, round_id, round_index, k, accepted,
  terminal_kind (correction | bonus | stop), terminal_token, terminal_text,
  emitted, start_position, committed_token_count, finish_reason
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from specd.errors import BadTrace

SCHEMA = "specd.trace/v1"


def write_trace(
    path: str | Path,
    manifest: dict,
    requests: Iterable[dict],
    acceptance: Iterable,
    rounds: Iterable,
    token_text: Callable[[int], str] | None = None,
) -> int:
    """Write atomically (temp file + rename). Returns the number of lines."""
    path = Path(path)
    lines = [{"type": "header", "schema": SCHEMA, "manifest": manifest}]
    lines += [{"type": "request", **r} for r in requests]
    for rec in acceptance:
        d = rec.as_dict()
        if token_text:
            d["draft_text"] = token_text(rec.draft_token)
        lines.append(d)
    for rec in rounds:
        d = rec.as_dict()
        if token_text:
            d["terminal_text"] = token_text(rec.terminal_token)
        lines.append(d)
    parent = path.parent if str(path.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(json.dumps(line, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(lines)


def read_trace(path: str | Path) -> tuple[dict, list[dict], list[dict], list[dict]]:
    """-> (header, requests, proposals, rounds). Refuses files that are not specd traces."""
    path = Path(path)
    if not path.is_file():
        raise BadTrace(f"trace file not found: {path}")
    header, requests, proposals, rounds = None, [], [], []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise BadTrace(f"{path}:{n}: not JSONL ({err.msg})") from None
            kind = obj.get("type") if isinstance(obj, dict) else None
            if n == 1:
                if kind != "header" or obj.get("schema") != SCHEMA:
                    raise BadTrace(f"{path}: not a specd trace (first line must be a {SCHEMA} header)")
                header = obj
            elif kind == "request":
                requests.append(obj)
            elif kind == "proposal":
                proposals.append(obj)
            elif kind == "round":
                rounds.append(obj)
            else:
                raise BadTrace(f"{path}:{n}: unknown line type {kind!r}")
    if header is None:
        raise BadTrace(f"{path}: empty trace")
    return header, requests, proposals, rounds
