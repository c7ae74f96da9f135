"""Files published atomically: written under a temporary name, fsynced, renamed into
place, the directory fsynced. A reader that lists names and ignores ``.tmp-*`` never sees
a partial file.

Landed rows are the source's data: every file is created ``0600`` and every directory
``0700`` (owner only), whatever the process umask."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Callable
from pathlib import Path

TMP_PREFIX = ".tmp-"
FILE_MODE = 0o600
DIR_MODE = 0o700


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: Path) -> None:
    """Create ``path`` and missing parents, fsyncing each parent of a new directory."""
    if path.is_dir():
        return
    ensure_dir(path.parent)
    try:
        make_dir(path)
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    fsync_dir(path.parent)


def make_dir(path: Path) -> None:
    """Create the directory ``path``, ``0700`` (FileExistsError if it exists)."""
    path.mkdir(mode=DIR_MODE)
    os.chmod(path, DIR_MODE)  # mkdir's mode is masked by the umask; this is exact


def create_file(path: Path) -> None:
    """Create the empty file ``path``, ``0600``, unless it exists."""
    os.close(_open_new(path, exclusive=False))


def _open_new(path: Path, *, exclusive: bool = True) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else 0)
    fd = os.open(path, flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def publish(
    directory: Path, final_name: str, data_writer: Callable[[io.BufferedWriter], object],
    staging: Path | None = None,
) -> Path:
    """Write a file under a temporary name (in ``staging``, else in ``directory``), fsync
    it, rename it into place, fsync the dir."""
    tmp = (staging or directory) / f"{TMP_PREFIX}{uuid.uuid4().hex}"
    final = directory / final_name
    try:
        with os.fdopen(_open_new(tmp), "wb") as f:
            data_writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    return final

