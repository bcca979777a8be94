"""Files written request by request: the results file and the acceptance log of a prompt set.

Both are JSONL with a header line first (its ``manifest`` says what determines the
output) and then one group of lines per finished request (for results, one
``result`` line; for the acceptance log, its ``request``, ``proposal`` and ``round``
lines). A group is appended and flushed as soon as its request finishes and every
earlier request of the prompt set has been written; a request that finishes early
waits in memory, so the file lists requests in input order and a run's file does
not depend on the batch size or on how many processes ran it. If the run stops
(Ctrl-C, an error), every finished request still waiting is written (out of order)
before it ends, so nothing finished is lost.

``--resume`` reads the file back: a torn last line (a write cut off) is dropped, the
header's manifest must equal this run's on every field that determines output
(a named one-line error otherwise), and the requests already written are skipped.
When a resumed run completes, the file is rewritten once in input order, so it is
byte-identical to an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from specd.errors import ResumeMismatch, UsageError, WriteFailed, shown
from specd.files import (
    MAX_CONFIG_BYTES,
    STDOUT,
    check_output,
    json_line,
    jsonl_records,
    loads_json,
    read_bytes,
    read_text,
    write_failure,
    write_text_atomic,
)
from specd.traces.log import SCHEMA as TRACE_SCHEMA
from specd.traces.log import request_lines

RESULTS_SCHEMA = "specd.results/v1"

# Manifest fields that decide what a request generates (batch size and layout do not).
OUTPUT_FIELDS = (
    "target",
    "draft",
    "draft_sources",
    "dtype",
    "device",
    "graphs",
    "torch",
    "transformers",
    "target_policy",
    "draft_policy",
    "backend",
    "softmax",
    "k",
    "tree",
    "tree_budget",
    "k_max",
    "draft_stop",
    "k_schedule",
    "seed",
    "rule",
    "max_new_tokens",
    "stop",
    "chat",
    "event_space",
    "eos_ids",
)


# Fields of a model entry that name it as the user spelled it: with a weights digest, two
# spellings of one folder (``dir/./target``) are one model.
_SPELLING = ("name", "identity")


def _comparable(name: str, value):
    """A manifest field as resume compares it: a model by its weights (and config), not its path;
    the list of draft sources by what each is (the model among them is compared by ``draft``)."""
    if name in ("target", "draft") and isinstance(value, dict) and value.get("weights_sha256"):
        config = str(value.get("identity", "")).rpartition(":cfg=")[2]
        return {**{k: v for k, v in value.items() if k not in _SPELLING}, "config": config}
    if name == "draft_sources" and isinstance(value, list):
        return [_source_kind(str(identity)) for identity in value]
    if name == "tree" and isinstance(value, dict):  # the shape, not how it was spelled (2,1 or a file of it)
        return {k: v for k, v in value.items() if k != "spec"}
    if name == "k_schedule" and isinstance(value, dict):  # the schedules, not the file they came from
        return value.get("sha256")
    return value


def _source_kind(identity: str) -> str:
    """A draft source's identity without the model's name as spelled: ``hf:NAME:dtype:device:cfg=D``
    -> ``hf:model:dtype:device:cfg=D`` (a shared-body or self copy keeps its ``self:...`` kind)."""
    if not identity.startswith("hf:") or identity.count(":") < 4:
        return identity
    head, *tail = identity.rsplit(":", 3)
    name = head.removeprefix("hf:")
    kind = name.split("(")[0] if name.startswith("self:") else "model"
    return ":".join(["hf", kind, *tail])


def upgraded(manifest: dict) -> dict:
    """A manifest written before runs chose their model backend, in today's fields: its "backend" was
    the softmax's (now "softmax"), and every model ran on Hugging Face."""
    if "softmax" in manifest or manifest.get("backend") not in ("max_shift", "online"):
        return manifest
    return {**manifest, "softmax": manifest["backend"], "backend": "hf"}


def manifest_difference(recorded: dict, current: dict, ignore: Sequence[str] = ()) -> tuple[str, object, object] | None:
    """The first output-determining field (but those in ``ignore``) where two manifests differ:
    (field, recorded, current)."""
    recorded = upgraded(recorded)
    for name in (n for n in OUTPUT_FIELDS if n not in ignore):
        a, b = recorded.get(name), current.get(name)
        if json.dumps(_comparable(name, a), sort_keys=True, default=str) != json.dumps(
            _comparable(name, b), sort_keys=True, default=str
        ):
            return name, a, b
    return None


class RequestLines:
    """A JSONL file written one request at a time, in input order (see the module docstring).

    Nothing replaces an existing file until the first request's lines are written: the new
    header (or, resumed, the file without a torn tail) goes to a temporary file that is renamed
    over the old one then, so a run refused or stopped before any request finished leaves the
    old file as it was. ``-`` streams the lines to standard output instead.
    """

    def __init__(
        self, path: str, what: str, schema: str, marker: str, manifest: dict, order: Sequence[str], resume: bool
    ):
        """``marker``: the type of the line that ends a request's group (a group without it was cut off)."""
        self.path, self.what, self.schema, self.marker = path, what, schema, marker
        self.order = list(order)
        self.position = {rid: i for i, rid in enumerate(self.order)}
        self.header = {"type": "header", "schema": schema, "manifest": manifest}
        self.groups: dict[str, list[str]] = {}  # request id -> its lines, for a rewrite in order
        self.waiting: dict[str, list[str]] = {}  # finished, not written yet
        self.notes: list[str] = []
        self.to_stdout = str(check_output(path, what)) == STDOUT
        if resume and self.to_stdout:
            raise UsageError(f"--resume needs the {what} as a file, not standard output")
        self._prefix: str | None = json_line(self.header)  # written before the first group; None: append
        if resume and Path(path).exists():
            self._load(manifest)
        self.file_order = list(self.groups)  # ids in the order their lines stand in the file
        self._fh = None
        self._failed: str | None = None
        self._next = 0
        self._advance()

    @property
    def done(self) -> set[str]:
        """Request ids already in the file."""
        return set(self.groups)

    @property
    def written(self) -> int:
        return len(self.file_order)

    def _load(self, manifest: dict) -> None:
        path, where = self.path, f"--resume: {self.path}"
        raw = read_bytes(path, self.what, error=UsageError)
        end = raw.rfind(b"\n") + 1  # whatever follows the last newline was cut off mid-write
        torn = raw[end:]
        if torn:
            self.notes.append(f"{path}: dropped a torn last line ({len(torn)} bytes) left by an interrupted run")
        try:
            text = raw[:end].decode("utf-8")
        except UnicodeDecodeError as err:
            raise UsageError(f"{where} is not UTF-8 text (byte {err.start}); it is not a file specd wrote") from None
        parsed = []
        for n, obj in jsonl_records(text, where, what="is corrupt (not JSON); it is not a file specd wrote"):
            if not isinstance(obj, dict):
                raise UsageError(f"{where}:{n} is not a JSON object; it is not a file specd wrote")
            parsed.append(obj)
        if not parsed or parsed[0].get("type") != "header" or parsed[0].get("schema") != self.schema:
            raise ResumeMismatch(f"--resume: {path} is not a {self.schema} file")
        if not isinstance(parsed[0].get("manifest"), dict):
            raise ResumeMismatch(f"--resume: {path} has a header without a manifest; it is not a file specd wrote")
        difference = manifest_difference(parsed[0]["manifest"], manifest)
        if difference is not None:
            name, was, now = difference
            raise ResumeMismatch(
                f"--resume: {path} was written by another run: its {name} is {_short(was, name)}, this run's is "
                f"{_short(now, name)}; resume with the same options, or write to a new file"
            )
        group_lines: dict[str, list[str]] = {}
        finished: set[str] = set()
        duplicates = 0
        for obj in parsed[1:]:
            rid = obj.get("request_id", obj.get("id"))
            if not isinstance(rid, str):
                raise UsageError(f"--resume: {path} has a line with no request id; it is not a file specd wrote")
            if rid in finished:  # a request's lines once more (a file concatenated or edited): keep the first
                duplicates += 1
                continue
            group_lines.setdefault(rid, []).append(json_line(obj))
            if obj.get("type") == self.marker:
                finished.add(rid)
        if duplicates:
            self.notes.append(f"{path}: dropped {duplicates} duplicate line(s) of requests already complete")
        cut = [rid for rid in group_lines if rid not in finished]
        if cut:
            self.notes.append(f"{path}: dropped the lines of {len(cut)} request(s) cut off before they were complete")
        strangers = [rid for rid in finished if rid not in self.position]
        if strangers:
            raise ResumeMismatch(
                f"--resume: {path} holds requests that are not in this prompt set (e.g. {shown(strangers[0])}); "
                "resume with the same prompts"
            )
        self.groups = {rid: g for rid, g in group_lines.items() if rid in finished}
        self._prefix = None
        if torn or cut or duplicates:  # rewritten (when the first request is), so appends start clean
            body = "".join(line for group in self.groups.values() for line in group)
            self._prefix = json_line(parsed[0]) + body

    def add(self, request_id: str, objects: Iterable[dict]) -> None:
        """A finished request's lines: written now if every earlier request is, else kept until then.
        A request already in the file (resumed) is not written twice."""
        if request_id in self.groups:
            return
        self.waiting[request_id] = [json_line(obj) for obj in objects]
        self._advance()

    def _advance(self) -> None:
        while self._next < len(self.order):
            rid = self.order[self._next]
            if rid in self.groups and rid not in self.waiting:
                self._next += 1  # already in the file (resumed)
                continue
            if rid not in self.waiting:
                return
            self._write(rid, self.waiting.pop(rid))
            self._next += 1

    def _open(self):
        """The stream the groups are appended to; the new file replaces the old one here."""
        if self.to_stdout:
            sys.stdout.write(self._prefix or "")
            return sys.stdout
        if self._prefix is not None:
            write_text_atomic(self.path, self._prefix, self.what)
        return open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held for the whole run

    def _write(self, rid: str, lines: list[str]) -> None:
        if self._failed:
            raise WriteFailed(self._failed)
        try:
            if self._fh is None:
                self._fh = self._open()
            self._fh.write("".join(lines))
            self._fh.flush()
        except WriteFailed as err:  # the new file could not replace the old one, which is unchanged
            self._failed = str(err)
            raise
        except OSError as err:
            where = "standard output" if self.to_stdout else self.path
            self._failed = (
                f"cannot write the {self.what} {where}: {write_failure(err)}; the {self.written} request(s) "
                "written before are kept" + ("" if self.to_stdout else " (run again with --resume once it is fixed)")
            )
            raise WriteFailed(self._failed) from None
        self.groups[rid] = lines
        self.file_order.append(rid)

    def _sync_and_close(self) -> None:
        """Sync and close the file. Its failure (a full disk: data still buffered, or the file
        system's own write-back) is WriteFailed naming the file, unless a write already failed and
        says so (then the line being raised is that one, not a second one about the same disk)."""
        if self._fh is None or self.to_stdout:
            return
        try:
            try:
                self._fh.flush()
                os.fsync(self._fh.fileno())
            finally:
                self._fh.close()  # the descriptor is closed even when its flush fails
        except OSError as err:
            if self._failed is None:
                self._failed = (
                    f"cannot write the {self.what} {self.path}: {write_failure(err)}; the {self.written} "
                    "request(s) written before are kept (run again with --resume once it is fixed)"
                )
                raise WriteFailed(self._failed) from None

    def close(self) -> None:
        """Write whatever finished and still waits (out of order if the run stopped early); once
        every request of the prompt set is in, put the file in input order."""
        try:
            for rid, lines in list(self.waiting.items()):
                self._write(rid, lines)
        finally:
            self.waiting.clear()
            self._sync_and_close()
        complete = all(rid in self.groups for rid in self.order)
        in_order = self.file_order == [rid for rid in self.order if rid in self.groups]
        cleanup = self._fh is None and self._prefix is not None and bool(self.groups)  # resumed, nothing new
        if complete and not self.to_stdout and (not in_order or cleanup):
            body = "".join(line for rid in self.order for line in self.groups[rid])
            write_text_atomic(self.path, json_line(self.header) + body, self.what)


def _short(value, name: str = "", limit: int = 80) -> str:
    if name == "tree" and isinstance(value, dict):  # as the user spelled it, and how big it is
        nodes = f" ({len(value['choices'])} nodes)" if isinstance(value.get("choices"), list) else ""
        return json.dumps(value.get("spec"), default=str)[:limit] + nodes
    if name == "k_schedule" and isinstance(value, dict):
        return f"{json.dumps(value.get('file'), default=str)[:limit]} (schedules {str(value.get('sha256'))[:12]})"
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class PromptSetFiles:
    """The results file and the acceptance log of one prompt set, streamed per request.

    Opening them (with ``resume``) decides what is left to run: the requests complete
    in every file given. ``on_finish`` is the pipeline's callback; ``close`` must run
    whatever happens (it writes what finished and still waits).
    """

    def __init__(self, items, manifest: dict, results: str | None, trace: str | None, resume: bool, token_text):

        ids = [i.request_id for i in items]
        self.token_text = token_text
        self.results = (
            RequestLines(results, "results file", RESULTS_SCHEMA, "result", manifest, ids, resume) if results else None
        )
        self.trace = (
            RequestLines(trace, "acceptance log", TRACE_SCHEMA, "request", manifest, ids, resume) if trace else None
        )
        files = [f for f in (self.results, self.trace) if f is not None]
        done = set.intersection(*(f.done for f in files)) if files else set()
        self._check_prompts(items)
        self.todo = [i for i in items if i.request_id not in done]
        self.already = len(items) - len(self.todo)
        self.notes = [n for f in files for n in f.notes]
        self.to_stdout = any(f.to_stdout for f in files)  # results stream there: tables go to stderr

    def _check_prompts(self, items) -> None:
        """A resumed request must be the same prompt under the same id."""
        texts = {i.request_id: i.text for i in items}
        for f in (self.results, self.trace):
            if f is None:
                continue
            for rid, lines in f.groups.items():
                prompt = json.loads(lines[-1]).get("prompt")
                if prompt != texts[rid]:
                    raise ResumeMismatch(
                        f"--resume: {f.path} holds request {shown(rid)} with another prompt than this prompt set's; "
                        "resume with the same prompts"
                    )

    def on_finish(self, result, log) -> None:
        if self.trace is not None:
            self.trace.add(result.request_id, request_lines(result, log, self.token_text))
        if self.results is not None:
            self.results.add(result.request_id, [{"type": "result", **result.as_dict()}])

    def close(self) -> None:
        for f in (self.trace, self.results):
            if f is not None:
                f.close()


def load_k_schedules(path: str) -> dict[str, tuple[tuple[int, str | None], ...]]:
    """Request id -> (K, draft source) of each of its rounds, from a ``generate --json`` document, a
    results file or an acceptance log (every request carries ``acceptance.k_schedule`` and
    ``acceptance.source_schedule``; a file without sources replays K from the first source that
    proposes)."""
    text = read_text(path, "K schedule file")
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) > 1 and all(line.lstrip().startswith("{") and line.rstrip().endswith("}") for line in lines):
        objects = [obj for _, obj in jsonl_records(text, f"--k-schedule {path}")]  # JSONL: one object a line
    else:  # one document (generate --json)
        if len(text.encode("utf-8")) > MAX_CONFIG_BYTES * 64:
            raise UsageError(f"--k-schedule {path}: a JSON document larger than {MAX_CONFIG_BYTES * 64 >> 20} MiB")
        whole = loads_json(text, f"--k-schedule {path}")
        objects = whole.get("results", []) if isinstance(whole, dict) else None
        if not isinstance(objects, list):
            raise UsageError(
                f"--k-schedule {path}: not a generate --json document (its results must be a list), a results "
                "file or an acceptance log"
            )
    schedules: dict[str, tuple[int, ...]] = {}
    for obj in objects:
        if not isinstance(obj, dict) or obj.get("type") not in (None, "result", "request"):
            continue
        rid = obj.get("id", obj.get("request_id"))
        acceptance = obj.get("acceptance")
        schedule = acceptance.get("k_schedule") if isinstance(acceptance, dict) else None
        if rid is None or schedule is None:
            continue
        if not isinstance(schedule, list) or not all(type(k) is int and k >= 0 for k in schedule):
            raise UsageError(f"--k-schedule {path}: request {shown(rid)} has a k_schedule that is not a list of K >= 0")
        sources = acceptance.get("source_schedule", [None] * len(schedule))
        if not isinstance(sources, list) or len(sources) != len(schedule):
            raise UsageError(f"--k-schedule {path}: request {shown(rid)} has a source_schedule unlike its k_schedule")
        if not all(s is None or isinstance(s, str) for s in sources):
            raise UsageError(
                f"--k-schedule {path}: request {shown(rid)} has a source_schedule that is not a list of names"
            )
        schedules[str(rid)] = tuple((k, s or None) for k, s in zip(schedule, sources))
    if not schedules:
        raise UsageError(
            f"--k-schedule {path}: no recorded K schedule in it (give a generate --json document, a results file "
            "or an acceptance log)"
        )
    return schedules
