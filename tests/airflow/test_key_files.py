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


def test_a_planted_link_or_old_file_is_replaced_not_followed(keys_dir: Path,
                                                             tmp_path: Path) -> None:
    """The file's path is predictable: whoever may write in keys_dir can plant a symbolic
    link there (to a file of the Airflow user's) or leave a file readable by all. The keys
    go to a new 0600 file renamed over it: the link's target is untouched, the old mode is
    not kept."""
    run = keys_dir / "dblog_repair" / "manual__4"
    run.mkdir(parents=True)
    victim = tmp_path / "victim.cfg"
    victim.write_text("precious\n")
    (run / "1-public.items.json").symlink_to(victim)
    old = run / "1-public.other.json"
    old.write_text("{}")
    old.chmod(0o644)
    for table in ("public.items", "public.other"):
        filed = key_files.save(table, [1, 2, 3], [], context("manual__4"))
        assert filed is not None
    assert victim.read_text() == "precious\n"
    for name in ("1-public.items.json", "1-public.other.json"):
        written = run / name
        assert not written.is_symlink()
        assert stat.S_IMODE(written.lstat().st_mode) == 0o600, name
        assert json.loads(written.read_text()) == {"keys": [1, 2, 3], "extra": []}
    assert sorted(p.name for p in run.iterdir()) == ["1-public.items.json",
                                                     "1-public.other.json"]  # no temp file


def test_the_folders_are_the_owners_only(keys_dir: Path) -> None:
    (keys_dir / "dblog_repair" / "manual__5").mkdir(parents=True)
    for folder in (keys_dir / "dblog_repair", keys_dir / "dblog_repair" / "manual__5"):
        folder.chmod(0o755)  # made by an older version
    key_files.save("public.items", [1, 2, 3], [], context("manual__5"))
    key_files.save("public.items", [1, 2, 3], [], context("manual__6"))
    for name in ("dblog_repair", "dblog_repair/manual__5", "dblog_repair/manual__6"):
        assert stat.S_IMODE((keys_dir / name).stat().st_mode) == 0o700, name


def test_a_folder_that_is_a_link_is_refused(keys_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (keys_dir / "dblog_repair").mkdir(parents=True)
    (keys_dir / "dblog_repair" / "manual__7").symlink_to(elsewhere)
    with pytest.raises(OSError, match=r"manual__7 is not a folder of its own"):
        key_files.save("public.items", [1, 2, 3], [], context("manual__7"))
    assert list(elsewhere.iterdir()) == []
