"""A migrated Airflow metadata database (SQLite), migrated once and copied.

``airflow db migrate`` of an empty SQLite database takes 7-10 CPU s, and the suite needs one
database per pytest-xdist worker (``airflow_db``) and per live Airflow: each gets a copy of
one migrated by the installed Airflow, kept in a cache folder named by Airflow's version and
migrations (made by the first process that needs it, the others wait for it). A database
migrated here and one migrated in place are the same file: ``db migrate`` writes no path or
setting of its home into it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["migrated"]

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dblog-tests" / "airflow"


def _key() -> str:
    """Airflow's version and its migration scripts: a new Airflow migrates anew."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("airflow")
    root = Path(spec.origin).resolve().parent if spec is not None and spec.origin else Path()
    scripts = sorted((root / "migrations" / "versions").glob("*.py"))
    text = "\n".join([importlib.metadata.version("apache-airflow-core"), str(root),
                      *(f"{p.name} {p.stat().st_size}" for p in scripts)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _migrate(target: Path, environ: Mapping[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="dblog-airflow-migrate-") as home:
        database = Path(home) / "airflow.db"
        env = {k: v for k, v in environ.items() if not k.startswith("AIRFLOW")} | {
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{database}",
        }
        result = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"],
                                capture_output=True, text=True, timeout=300, cwd=home,
                                env=env, check=False)
        if result.returncode != 0 or not database.is_file():
            raise RuntimeError(f"airflow db migrate exited {result.returncode}:\n"
                               f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        partial = target.with_suffix(".partial")
        shutil.copyfile(database, partial)
        partial.replace(target)


def migrated(database: Path, environ: Mapping[str, str] | None = None) -> Path:
    """A migrated metadata database at ``database`` (a copy of the cached one)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    template = CACHE / f"airflow-{_key()}.db"
    if not template.is_file():
        with (CACHE / f"{template.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not template.is_file():
                for stale in CACHE.glob("airflow-*.db"):
                    stale.unlink()  # of an Airflow no longer installed
                _migrate(template, os.environ if environ is None else environ)
    database.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, database)
    return database
