"""A repair's large key sets travel as a file, not through XCom.

Above ``[dblog] keys_in_xcom`` keys (default 10,000; missing, changed and extra together),
``compare`` writes them to ``[dblog] keys_dir``, a folder every Airflow worker reads: a path
or an object-storage URL (``file:///srv/dblog-keys``, ``s3://bucket/dblog-keys`` with its
Airflow connection, through ``ObjectStoragePath``); XCom then carries the file's URL and the
counts. Without ``keys_dir``, the keys stay in XCom whatever their number (a warning says
so). One file per DAG run, try and table: ``<keys_dir>/<dag id>/<run id>/<try>-<table>.json``,
holding ``{"keys": [...], "extra": [...]}``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dblog_dags import settings

__all__ = ["load", "save", "write_private"]

log = logging.getLogger(__name__)

DEFAULT_KEYS_IN_XCOM = 10_000
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def _name(text: str) -> str:
    """A path part from a run id or a table name: safe characters, the rest percent-coded,
    and a leading dot too (a run id ``..`` names no folder above)."""
    coded = _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), text)
    return "%2E" + coded[1:] if coded.startswith(".") else coded or "%00"


def save(table: str, keys: Sequence[Any], extra: Sequence[Any],
         context: Mapping[str, Any]) -> dict[str, Any] | None:
    """Write the keys to a file when there are more than ``keys_in_xcom`` and ``keys_dir`` is
    set; the XCom fields that name it (None: the keys go in XCom)."""
    limit = settings.env_int("DBLOG_KEYS_IN_XCOM", DEFAULT_KEYS_IN_XCOM, 0, 10_000_000)
    count = len(keys) + len(extra)
    if count <= limit:
        return None
    folder = settings.env_str("DBLOG_KEYS_DIR", "")
    if not folder:
        log.warning("%d keys go through XCom (more than keys_in_xcom = %d): set [dblog] "
                    "keys_dir to a folder every worker reads to keep them out of the "
                    "metadata database", count, limit)
        return None
    from airflow.sdk import ObjectStoragePath

    ti = context["ti"]
    parts = (_name(ti.dag_id), _name(ti.run_id), f"{ti.try_number}-{_name(table)}.json")
    root = ObjectStoragePath(folder)
    path = root.joinpath(*parts)
    text = json.dumps({"keys": list(keys), "extra": list(extra)}, ensure_ascii=False)
    if path.protocol in ("", "file", "local"):  # key values are row data: the owner's only
        write_private(Path(root.path), parts, text.encode())
    else:  # an object store: its access is its bucket policy's
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    log.info("%d key(s) to dump and %d extra key(s) written to %s", len(keys), len(extra), path)
    return {"keys_file": str(path), "keys_count": len(keys), "extra_count": len(extra)}


def write_private(root: Path, parts: Sequence[str], data: bytes) -> Path:
    """Write ``data`` to ``root/parts[0]/.../parts[-1]``, readable by this user only: the
    folders below ``root`` are made 0700 (and kept so), none may be a symbolic link, and
    the file is written whole to a new 0600 file beside it, then renamed over the name. A
    link or an old file at that predictable path is replaced, never followed or reused
    (its mode, its owner)."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        where = root
        for part in parts[:-1]:
            where /= part
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=folder)
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                dir_fd=folder)
            except OSError as exc:  # ELOOP, ENOTDIR: a link or a file in the way
                raise OSError(exc.errno, f"{where} is not a folder of its own "
                                         f"({exc.strerror}): remove what is there") from None
            os.close(folder)
            folder = inner
            if os.fstat(folder).st_uid == os.geteuid():
                os.fchmod(folder, 0o700)
        final = parts[-1]
        temporary = f".{final}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.rename(temporary, final, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder)
            raise
        os.fsync(folder)
    finally:
        os.close(folder)
    return root.joinpath(*parts)


def load(url: str) -> dict[str, list[Any]]:
    """The keys and extra keys of a file :func:`save` wrote."""
    from airflow.sdk import ObjectStoragePath

    data = json.loads(ObjectStoragePath(url).read_text())
    return {"keys": list(data["keys"]), "extra": list(data["extra"])}
