"""Reading user files and writing outputs, with every failure as one typed line.

Inputs: ``read_text`` says plainly when a file is missing, a directory, a device,
unreadable, larger than its limit, not UTF-8 or empty. JSON goes through one reader
(``loads_json``: bounded nesting and integer digits, every failure one line) and
JSONL through ``jsonl_records`` (lines split on ``\\n`` only, so U+2028 or U+0085
inside a string is text, not a line break); every JSON line specd writes goes through
``json_line``, which escapes those characters and lone surrogates, so every file
specd writes reads back.

Paths: ``check_paths`` is the one rule for a command's paths, applied before any
model loads: every input and output is resolved (symlinks, ``./``, ``/dev/stdout``,
``/dev/fd/N``, ``/proc/self/fd/N``) and compared by identity (device and inode when
the file exists); an output that is an input, an output anywhere inside a model folder
the run reads, or two outputs on one file, is refused in one line naming both flags.
``-`` (or a name of standard output, or the file standard output is redirected to)
means "write to standard output as a stream".

Outputs: ``check_output`` refuses, before any work is done, a path that cannot
take a regular file (a directory, a device node or pipe, a missing or read-only
folder, a read-only file); ``write_atomic`` writes a temporary file beside the
target, syncs it, gives it the original file's mode and renames it over the
target, so an interrupted or failed write (a full disk) leaves the old file
whole and no temporary file behind. A device node is never replaced by a file.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from specd.errors import OutputPathError, UsageError, WriteFailed, shown

_WRITABLE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
STDOUT = "-"  # an output path meaning "standard output, as a stream"
MAX_TEXT_BYTES = 1 << 30  # prompts files, logs, results: 1 GiB
MAX_CONFIG_BYTES = 4 << 20  # YAML configs, generation_config.json, K schedules' documents: 4 MiB
MAX_JSON_DEPTH = 200  # nesting of any JSON value specd reads (its own files nest under 10)
# Written raw inside a JSON string these break the reading of a line elsewhere (str.splitlines
# splits on them) or cannot be encoded at all (a lone surrogate); as escapes they are plain JSON.
_UNSAFE_IN_LINE = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")
_FD_PATH = re.compile(r"/(?:dev/fd|proc/(?:self|thread-self|\d+)/fd)/(\d+)")
NAME_MAX, PATH_MAX = 255, 4096  # bytes: the longest file name and path Linux's file systems take


def check_path_name(path: str | Path, what: str) -> None:
    """Refuse, as bad input, a path no file system can hold (a name over NAME_MAX bytes, or a path
    over PATH_MAX), before anything tries it (the system's own error would read as a failed run)."""
    data = os.fsencode(path)
    if len(data) >= PATH_MAX or any(len(part) > NAME_MAX for part in data.split(b"/")):
        raise UsageError(
            f"{what} {shown(str(path))} is too long for a file name or path (at most {NAME_MAX} bytes a name, "
            f"{PATH_MAX} a path)"
        )


def read_bytes(path: str | Path, what: str, limit: int = MAX_TEXT_BYTES, error: type = UsageError) -> bytes:
    """The bytes of a user's file (at most ``limit``), or one line (an ``error``) saying why not.
    A device (``/dev/zero``, directly or through a symlink) is refused without reading it."""
    try:
        check_path_name(path, what)
        st = os.stat(path)
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            raise error(f"{what} {path} is a device, not a file")
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a directory, not a file") from None
    except PermissionError:
        raise error(f"{what} {path} is not readable (permission denied)") from None
    except OSError as err:
        raise error(f"cannot read {what} {path}: {err.strerror or err}") from None
    if len(data) > limit:
        raise error(f"{what} {path} is larger than {limit >> 20} MiB, the most specd reads")
    return data


def read_text(
    path: str | Path, what: str, allow_empty: bool = False, error: type = UsageError, limit: int = MAX_TEXT_BYTES
) -> str:
    """The UTF-8 text of a user's file, or one line (an ``error``) saying why not."""
    data = read_bytes(path, what, limit, error)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{what} {path} is not UTF-8 text (byte {err.start})") from None
    if not allow_empty and not text.strip():
        raise error(f"{what} {path} is empty")
    return text


def loads_json(text: str, where: str, error: type = UsageError, what: str = "not JSON"):
    """One JSON value, or one line naming ``where``: invalid JSON, nesting deeper than
    MAX_JSON_DEPTH, or an integer with more digits than Python converts."""
    if _depth_exceeds(text, MAX_JSON_DEPTH):
        raise error(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{where}: {what} ({err.msg})") from None
    except ValueError:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise error(f"{where}: a number with too many digits ({sys.get_int_max_str_digits()} at most)") from None
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply") from None


def _depth_exceeds(text: str, limit: int) -> bool:
    """Does any bracket nesting (outside strings) go deeper than ``limit``? Cheap when it is shallow."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def jsonl_records(
    text: str, where: str, error: type = UsageError, what: str = "not JSON"
) -> Iterator[tuple[int, object]]:
    """(line number, value) of each non-blank line of JSONL text; lines end at ``\\n`` only."""
    for n, line in enumerate(text.split("\n"), 1):
        if line.strip():
            yield n, loads_json(line, f"{where}:{n}", error, what)


def json_line(obj) -> str:
    """One JSONL line (newline included) that every JSONL reader splits where it should: UTF-8
    text as is, but U+0085, U+2028, U+2029 and lone surrogates escaped; NaN refused."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    return _UNSAFE_IN_LINE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


# -- paths ------------------------------------------------------------------------------
def is_stdout(path: str | Path) -> bool:
    """Does this output path mean standard output: ``-``, a name of file descriptor 1, or the very
    file standard output is redirected to (``--out res.jsonl > res.jsonl``)?"""
    text = str(path)
    if text == STDOUT or text == "/dev/stdout":
        return True
    if (m := _FD_PATH.fullmatch(text)) and m.group(1) == "1":
        return True
    try:
        return os.path.samestat(os.stat(text), os.fstat(1)) and stat.S_ISREG(os.fstat(1).st_mode)
    except (OSError, ValueError):
        return False


def identity(path: str | Path) -> tuple:
    """What a path names, comparable across spellings: standard output, an existing file by
    device and inode (through any symlink), or a file still to be created by its real path."""
    if is_stdout(path):
        return ("stdout",)
    try:
        st = os.stat(path)
        return ("inode", st.st_dev, st.st_ino)
    except (OSError, ValueError):
        return ("path", os.path.realpath(path))


def check_paths(
    inputs: Mapping[str, str | Path | None],
    outputs: Mapping[str, str | Path | None],
    folders: Mapping[str, str | Path | None] | None = None,
) -> None:
    """Refuse, in one line naming both flags, an output that names an input (writing it would
    destroy the input), an output anywhere inside one of ``folders`` (the model folders a run
    reads: specd never writes into a model), or two outputs that name one file. Flags map to
    paths (None: not given)."""
    read = {identity(p): (flag, p) for flag, p in inputs.items() if p is not None and str(p) != STDOUT}
    read_folders = {}
    for flag, folder in (folders or {}).items():
        if folder is not None and (key := folder_identity(folder)) is not None:
            read_folders.setdefault(key, (flag, folder))
    written: dict[tuple, tuple[str, object]] = {}
    for flag, p in outputs.items():
        if p is None:
            continue
        key = identity(p)
        if key in read:
            in_flag, in_path = read[key]
            raise OutputPathError(
                f"{flag} {p} is the same file as {in_flag} {in_path}: writing it would destroy that input; "
                "give another output path"
            )
        if key != ("stdout",) and (inside := _enclosing(p, read_folders)) is not None:
            in_flag, folder = inside
            raise OutputPathError(
                f"{flag} {p} is inside {folder}, the model folder of {in_flag}: specd never writes into a model "
                "it reads; give another output path"
            )
        if key in written:
            other, other_path = written[key]
            where = "standard output" if key == ("stdout",) else f"one file ({other_path} and {p})"
            raise OutputPathError(f"{other} and {flag} both name {where}; give each output its own path")
        written[key] = (flag, p)


def folder_identity(folder: str | Path) -> tuple | None:
    """An existing folder by device and inode (through any symlink), else None."""
    try:
        st = os.stat(folder)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def _enclosing(path: str | Path, folders: Mapping[tuple, tuple[str, object]]):
    """The (flag, folder) of ``folders`` (keyed by folder_identity) that holds ``path`` at any depth,
    following symlinks and ``..`` as the write would, or None."""
    if not folders:
        return None
    here = Path(os.path.realpath(path)).parent
    for folder in (here, *here.parents):
        if (key := folder_identity(folder)) in folders:
            return folders[key]
    return None


IMAGE_FORMATS = ("png", "pdf", "svg")


def image_format(path: str | Path, flag: str = "--plot") -> str:
    """The format a plot is written in: the one its suffix names (png without a suffix, or on
    standard output); any other suffix is refused rather than given bytes of another format."""
    if is_stdout(path):
        return "png"
    suffix = Path(path).suffix.lower().lstrip(".")
    if not suffix:
        return "png"
    if suffix not in IMAGE_FORMATS:
        raise OutputPathError(
            f"{flag} {path}: specd draws {', '.join(IMAGE_FORMATS)}; name the file with one of those suffixes"
        )
    return suffix


def folder_files(folder: str | Path | None, limit: int = 10_000) -> list[Path]:
    """The files in a folder and its subfolders (a model's weights, config, tokenizer), at most
    ``limit`` of them, or [] for anything else."""
    if not folder or not Path(folder).is_dir():
        return []
    found: list[Path] = []
    for root, _, names in os.walk(folder, onerror=lambda err: None):
        found += [p for name in names if (p := Path(root) / name).is_file()]
        if len(found) >= limit:
            return found[:limit]
    return found


def check_output(path: str | Path, what: str) -> Path:
    """The path an output will be written to, checked before any work: -> the resolved target
    (``STDOUT`` itself for standard output)."""
    if not str(path).strip():
        raise OutputPathError(f"{what}: the path is empty")
    check_path_name(path, what)
    if is_stdout(path):
        return Path(STDOUT)
    if _FD_PATH.fullmatch(str(path)) or str(path) in ("/dev/stderr", "/dev/stdin"):
        raise OutputPathError(
            f"{what} {path} names an open file descriptor; give a file path, or - for standard output"
        )
    p = Path(path)
    target = p.resolve() if p.is_symlink() else p
    try:
        st = target.stat()
    except (FileNotFoundError, NotADirectoryError):  # the folder checks below say which
        st = None
    except OSError as err:
        raise OutputPathError(f"{what} {path}: {err.strerror or err}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputPathError(f"{what} {path} is a directory; give a file path")
        if not stat.S_ISREG(st.st_mode):
            raise OutputPathError(f"{what} {path} is not a regular file (a device or a pipe); give a file path")
        if not st.st_mode & _WRITABLE:
            raise OutputPathError(f"{what} {path} is read-only; it is left as it is")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.exists():
        raise OutputPathError(f"{what} {path}: folder {parent} does not exist")
    if not parent.is_dir():
        raise OutputPathError(f"{what} {path}: {parent} is not a folder")
    try:  # can a file be created there at all (read-only file system, no permission, no inodes)?
        fd, probe = tempfile.mkstemp(prefix=".specd-probe-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise OutputPathError(f"{what} {path}: cannot create a file in {parent} ({err.strerror or err})") from None
    return target


def write_atomic(path: str | Path, write: Callable[[BinaryIO], None], what: str) -> None:
    """Write through ``write(binary file)`` to a temporary file, then rename it over ``path``
    (standard output: written to it directly)."""
    target = check_output(path, what)
    if str(target) == STDOUT:
        try:
            write(sys.stdout.buffer)
            sys.stdout.buffer.flush()
        except OSError as err:
            raise WriteFailed(f"cannot write {what} to standard output: {write_failure(err)}") from None
        return
    mode = target.stat().st_mode & 0o7777 if target.exists() else _default_mode()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            reason = write_failure(err)
            raise WriteFailed(f"cannot write {what} {path}: {reason}; the previous file is unchanged") from None
        raise


def write_failure(err: OSError) -> str:
    """Why a write failed, in words a user acts on."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full"
    return err.strerror or str(err)


def write_text_atomic(path: str | Path, text: str, what: str) -> None:
    write_atomic(path, lambda fh: fh.write(text.encode("utf-8")), what)


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
