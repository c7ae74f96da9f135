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

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dblog_dags import settings

__all__ = ["load", "save"]

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
    path = (ObjectStoragePath(folder) / _name(ti.dag_id) / _name(ti.run_id)
            / f"{ti.try_number}-{_name(table)}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"keys": list(keys), "extra": list(extra)}, ensure_ascii=False)
    if path.protocol in ("", "file", "local"):  # key values are row data: the owner's only
        local = Path(path.path)
        with os.fdopen(os.open(local, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                       "w", encoding="utf-8") as out:
            out.write(text)
    else:  # an object store: its access is its bucket policy's
        path.write_text(text)
    log.info("%d key(s) to dump and %d extra key(s) written to %s", len(keys), len(extra), path)
    return {"keys_file": str(path), "keys_count": len(keys), "extra_count": len(extra)}


def load(url: str) -> dict[str, list[Any]]:
    """The keys and extra keys of a file :func:`save` wrote."""
    from airflow.sdk import ObjectStoragePath

    data = json.loads(ObjectStoragePath(url).read_text())
    return {"keys": list(data["keys"]), "extra": list(data["extra"])}
