"""dblog_repair's key files (dags/dblog_dags/key_files.py) on a local folder."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.airflow import dag_files  # noqa: F401  (puts dags/ on sys.path)

from dblog_dags import key_files  # isort: skip  (dags/ is on sys.path from here)


def context(run_id: str, try_number: int = 1) -> dict[str, object]:
    return {"ti": SimpleNamespace(dag_id="dblog_repair", run_id=run_id, try_number=try_number)}


@pytest.fixture
def keys_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIRFLOW__DBLOG__KEYS_DIR", str(tmp_path / "keys"))
    monkeypatch.setenv("AIRFLOW__DBLOG__KEYS_IN_XCOM", "2")
    return tmp_path / "keys"


def test_few_keys_stay_in_xcom(keys_dir: Path) -> None:
    assert key_files.save("public.items", [1], [9], context("manual__1")) is None
    assert not keys_dir.exists()


def test_many_keys_go_to_an_owner_only_file_that_loads_back(keys_dir: Path) -> None:
    keys, extra = [1, [2, "a"], "é"], [9]
    filed = key_files.save('public."odd % name"', keys, extra, context("manual__2", 3))
    assert filed is not None and (filed["keys_count"], filed["extra_count"]) == (3, 1)
    [written] = keys_dir.rglob("*.json")
    assert written.relative_to(keys_dir).as_posix() == (
        "dblog_repair/manual__2/3-public.%22odd%20%25%20name%22.json")
    assert stat.S_IMODE(written.stat().st_mode) == 0o600, "key values are row data"
    assert json.loads(written.read_text()) == {"keys": keys, "extra": extra}
    assert key_files.load(filed["keys_file"]) == {"keys": keys, "extra": extra}


@pytest.mark.parametrize("run_id", ["..", ".", ".hidden", "a/../..", ""])
def test_a_run_id_never_names_a_folder_outside_its_own(keys_dir: Path, run_id: str) -> None:
    filed = key_files.save("public.items", [1, 2, 3], [], context(run_id))
    assert filed is not None
    [written] = keys_dir.rglob("*.json")
    assert written.parent.parent == keys_dir / "dblog_repair", written
    assert written.parent.name not in (".", "..") and not written.parent.name.startswith(".")
