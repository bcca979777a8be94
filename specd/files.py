"""Reading user files and writing outputs, with every failure as one typed line.

Inputs: ``read_text`` says plainly when a file is missing, a directory, unreadable,
not UTF-8 or empty.

Outputs: ``check_output`` refuses, before any work is done, a path that cannot
take a regular file (a directory, a device node or pipe, a missing or read-only
folder, a read-only file); ``write_atomic`` writes a temporary file beside the
target, syncs it, gives it the original file's mode and renames it over the
target, so an interrupted or failed write (a full disk) leaves the old file
whole and no temporary file behind. A device node is never replaced by a file.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from specd.errors import OutputPathError, UsageError, WriteFailed

_WRITABLE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def read_text(path: str | Path, what: str, allow_empty: bool = False, error: type = UsageError) -> str:
    """The UTF-8 text of a user's file, or one line (an ``error``) saying why not."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a directory, not a file") from None
    except PermissionError:
        raise error(f"{what} {path} is not readable (permission denied)") from None
    except OSError as err:
        raise error(f"cannot read {what} {path}: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{what} {path} is not UTF-8 text (byte {err.start})") from None
    if not allow_empty and not text.strip():
        raise error(f"{what} {path} is empty")
    return text


def check_output(path: str | Path, what: str) -> Path:
    """The path an output will be written to, checked before any work: -> the resolved target."""
    if not str(path).strip():
        raise OutputPathError(f"{what}: the path is empty")
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
    """Write through ``write(binary file)`` to a temporary file, then rename it over ``path``."""
    target = check_output(path, what)
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
            reason = "the disk is full" if err.errno == errno.ENOSPC else (err.strerror or str(err))
            raise WriteFailed(f"cannot write {what} {path}: {reason}; the previous file is unchanged") from None
        raise


def write_text_atomic(path: str | Path, text: str, what: str) -> None:
    write_atomic(path, lambda fh: fh.write(text.encode("utf-8")), what)


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
