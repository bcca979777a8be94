"""The acceptance-log file format, schema ``specd.trace/v1`` (JSONL, one object per line).

A header line first, then one group of lines per request: its ``proposal`` and
``round`` lines, then its ``request`` line (written as the request finishes; see
specd/models/run/results.py). Line types:

- ``header`` (first line): {"type": "header", "schema": "specd.trace/v1", "manifest": {...}}
  where manifest carries the run coordinate: model names and weight digests,
  dtype, device, torch/transformers versions, both policies, layout, K, seed.
- ``request``: {"type": "request", "request_id", "prompt", "tag", "prompt_tokens",
  "text", "tokens", "finish_reason", "acceptance"}
- ``proposal`` (one per proposed draft token): request_id, round_id, round_index,
  draft_index (1-based), position, draft_token, draft_text, q_prob, p_prob,
  accept_ratio, uniform (null if not reached or greedy), reached, accepted,
  correction_distribution_id, committed_token_count
- ``round`` (one per round): request_id, round_id, round_index, k, accepted,
  terminal_kind (correction | bonus | stop), terminal_token, terminal_text,
  emitted, start_position, committed_token_count, finish_reason, source (the draft
  source, null without drafts), match (a lookup's match length that the drafts
  continued: how many tokens of the output's suffix occurred earlier; null for a model)
"""

from __future__ import annotations

from pathlib import Path

from specd.errors import BadTrace, shown
from specd.files import jsonl_records, read_text

SCHEMA = "specd.trace/v1"


def request_lines(result, log, token_text) -> list[dict]:
    """One request's acceptance-log lines (specd.trace/v1): proposals, rounds, then its request line."""
    lines = []
    for rec in log.acceptance:
        lines.append({**rec.as_dict(), "draft_text": token_text(rec.draft_token)})
    for rec in log.rounds:
        lines.append({**rec.round_row(), "terminal_text": token_text(rec.terminal_token)})
    lines.append(
        {
            "type": "request",
            "request_id": result.request_id,
            "prompt": result.prompt,
            "tag": result.tag,
            "prompt_tokens": result.prompt_tokens,
            "text": result.text,
            "tokens": list(result.tokens),
            "finish_reason": result.finish_reason,
            "acceptance": result.history.as_dict(),
        }
    )
    return lines


# Fields each line type must carry, and their types (None allowed where listed).
_REQUIRED = {
    "request": {"request_id": str},
    "proposal": {"request_id": str, "round_id": str, "draft_index": int, "reached": bool, "accepted": bool},
    "round": {"request_id": str, "round_id": str, "k": int, "accepted": int, "emitted": list, "terminal_kind": str},
}
_OPTIONAL = {
    "prompt": (str,),
    "tag": (str, type(None)),
    "text": (str,),
    "draft_text": (str,),
    "terminal_text": (str,),
    "draft_token": (int,),
    "terminal_token": (int,),
    "uniform": (int, float, type(None)),
    "q_prob": (int, float),
    "p_prob": (int, float),
    "accept_ratio": (int, float),
    "source": (str, type(None)),
    "match": (int, type(None)),
}
TERMINAL_KINDS = ("correction", "bonus", "stop")


def read_trace(path: str | Path) -> tuple[dict, list[dict], list[dict], list[dict]]:
    """-> (header, requests, proposals, rounds). Refuses, naming the line, files that are not
    complete specd.trace/v1 logs: another schema, a truncated line, a row missing a field."""
    text = read_text(path, "acceptance log", error=BadTrace)
    header, rows = None, {"request": [], "proposal": [], "round": []}
    for n, obj in jsonl_records(text, str(path), BadTrace, what="truncated or not JSON"):
        kind = obj.get("type") if isinstance(obj, dict) else None
        if header is None:
            if kind != "header" or "schema" not in obj:
                raise BadTrace(f"{path}: not a specd trace (the first line must be a {SCHEMA} header)")
            if obj["schema"] != SCHEMA:
                raise BadTrace(
                    f"{path}: trace schema {shown(obj['schema'])} is not supported (this specd reads {SCHEMA})"
                )
            header = obj
            continue
        if kind not in rows:
            raise BadTrace(f"{path}:{n}: unknown line type {shown(kind)}")
        _check_row(path, n, kind, obj)
        rows[kind].append(obj)
    if header is None:
        raise BadTrace(f"{path}: empty trace")
    return header, rows["request"], rows["proposal"], rows["round"]


def _check_row(path, n: int, kind: str, obj: dict) -> None:
    for name, typ in _REQUIRED[kind].items():
        value = obj.get(name)
        if name not in obj or not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise BadTrace(f"{path}:{n}: {kind} line without a valid {shown(name)} ({typ.__name__} expected)")
    for name, types in _OPTIONAL.items():
        if name in obj and (not isinstance(obj[name], types) or isinstance(obj[name], bool)):
            raise BadTrace(f"{path}:{n}: {kind} line has an invalid {shown(name)}: {shown(obj[name])}")
    if kind == "round":
        if not 0 <= obj["accepted"] <= obj["k"] or obj["terminal_kind"] not in TERMINAL_KINDS:
            raise BadTrace(
                f"{path}:{n}: round line with accepted {obj['accepted']} of k {obj['k']}, "
                f"terminal {shown(obj['terminal_kind'])}"
            )
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in obj["emitted"]):
            raise BadTrace(f"{path}:{n}: round line whose 'emitted' is not a list of token ids")
    if kind == "proposal" and obj["draft_index"] < 1:
        raise BadTrace(f"{path}:{n}: proposal line with draft_index {obj['draft_index']} (1-based)")
