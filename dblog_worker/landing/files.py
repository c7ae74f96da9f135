"""Files published atomically: written under a temporary name, fsynced, renamed into
place, the directory fsynced. A reader that lists names and ignores ``.tmp-*`` never sees
a partial file."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Callable
from pathlib import Path

TMP_PREFIX = ".tmp-"


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
        path.mkdir()
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    fsync_dir(path.parent)


def publish(
    directory: Path, final_name: str, data_writer: Callable[[io.BufferedWriter], object],
    staging: Path | None = None,
) -> Path:
    """Write a file under a temporary name (in ``staging``, else in ``directory``), fsync
    it, rename it into place, fsync the dir."""
    tmp = (staging or directory) / f"{TMP_PREFIX}{uuid.uuid4().hex}"
    final = directory / final_name
    try:
        with open(tmp, "xb") as f:
            data_writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    return final

