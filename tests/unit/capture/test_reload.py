"""Reloading the configuration: what may change without a restart, what is refused and how,
and what dblog status says of the captured tables."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from dblog_worker.capture.follower import dumped_since, needs_dump, new_table_token, status_lines
from dblog_worker.capture.reload import differences, reload
from dblog_worker.config import Config, load
from dblog_worker.dump.requests import DumpKind, DumpRequest, RequestState

BASE = """
[source]
name = "shop"
dsn = "host=db dbname=shop user=dblog"
tables = {tables}
{source}

[redis]
url = "redis://127.0.0.1:6379/0"

[landing]
path = "/data/landing"
{landing}
"""


def _write(path: Path, source: str = "", landing: str = "",
           tables: str = '["shop.*"]') -> Path:
    path.write_text(BASE.format(source=source, landing=landing, tables=tables))
    return path


@pytest.fixture
def current(tmp_path: Path) -> Config:
    return load(_write(tmp_path / "a.toml"))


def test_what_a_new_session_takes_and_what_needs_a_restart(tmp_path: Path,
                                                           current: Config) -> None:
    taken = load(_write(tmp_path / "b.toml", 'dump_new_tables = true\n'
                        'exclude_tables = ["shop.t*"]\n'
                        '[source.columns."shop.a"]\nnotes = "exclude"',
                        "flush_interval_s = 2", tables='["shop.*", "x.y"]'))
    assert differences(current, taken) == (
        ["source.tables", "source.exclude_tables", "source.dump_new_tables",
         "[source.columns]", "landing.flush_interval_s"], [])
    slots = load(_write(tmp_path / "d.toml", "", "[worker]\nmax_active_dumps = 1"))
    assert differences(current, slots) == (["[worker] max_active_dumps"], [])
    restart = load(_write(tmp_path / "c.toml", 'slot = "other"\nkind = "postgresql"',
                          'format = "parquet"\n'))
    assert differences(current, restart) == ([], ["a [source] option of its kind (slot, "
                                                  "publication, server_id, watermarks, ...)"])


def test_reload_refuses_with_one_line(tmp_path: Path, current: Config) -> None:
    def no_check(config: Config) -> str | None:
        raise AssertionError("a refused reload asks the source nothing")

    path = tmp_path / "a.toml"
    path.write_text(BASE.format(source="", landing="", tables='["shop.*"]').replace(
        "host=db dbname=shop", "host=other dbname=shop"))
    result, new = reload(path, current, no_check)
    assert new is None and not result.accepted
    assert result.reason == ("reload refused: source.dsn (or its password) changed, which "
                             "needs a restart of the worker; nothing changed")
    assert result.to_json() == {"reloaded": False, "error": result.reason}

    path.write_text("[source]\nname = ")
    result, new = reload(path, current, no_check)
    assert not result.accepted and result.reason.startswith(
        f"reload refused: configuration file {path} is not valid TOML")
    assert "\n" not in result.reason

    _write(path, tables='["shop.*", "shop.missing"]')
    result, new = reload(path, current, lambda config: "table shop.missing does not exist "
                         "(fix: check source.tables)\nand more")
    assert new is None and result.reason == (
        "reload refused: the source refuses the new configuration: table shop.missing does "
        "not exist (fix: check source.tables); and more; nothing changed")


def test_reload_takes_what_changed(tmp_path: Path, current: Config) -> None:
    path = _write(tmp_path / "a.toml")
    result, new = reload(path, current, lambda config: None)
    assert result.accepted and new is None  # nothing changed: nothing to do
    assert result.describe() == "configuration read again: nothing changed"
    _write(path, 'exclude_tables = ["shop.tmp*"]\n[source.columns."shop.a"]\nb = "mask"')
    result, new = reload(path, current, lambda config: None)
    assert result.accepted and new is not None and new.source.exclude_tables == ("shop.tmp*",)
    assert result.changed == ("source.exclude_tables", "[source.columns]")
    assert "dump those tables again" in result.notes[0]
    assert result.to_json()["reloaded"] is True


def _request(table: str, created_at: float, state: RequestState = RequestState.COMPLETED,
             kind: DumpKind = DumpKind.TABLES) -> DumpRequest:
    return DumpRequest(id="dump-1", kind=kind, tables=(table,), chunk_size=10, delay_ms=0,
                       state=state, created_at=created_at, updated_at=created_at)


def test_status_says_which_table_needs_a_dump() -> None:
    now = time.time()
    captured: dict[str, dict[str, Any]] = {
        "shop.a": {"why": "matches 'shop.*'", "since": now - 100, "joined": False, "dump": ""},
        "shop.b": {"why": "matches 'shop.*'", "since": now - 50, "joined": True, "dump": ""},
        "shop.c": {"why": "matches 'shop.*'", "since": now - 50, "joined": True,
                   "dump": "dump-9"},
        "shop.d": {"why": "matches 'shop.*'", "since": now - 50, "joined": True, "dump": ""},
        "shop.e": {"malformed": "{"},
    }
    dumped = dumped_since([_request("shop.d", now - 10), _request("shop.b", now - 60),
                           _request("shop.b", now, RequestState.FAILED),
                           _request("shop.b", now, kind=DumpKind.KEYS)])
    assert dumped == {"shop.d": now - 10, "shop.b": now - 60}
    assert [needs_dump(t, e, dumped) for t, e in captured.items()] == [
        False, True, True, False, False]
    lines = status_lines(captured, {"shop.n": "matches 'shop.*', but it has no primary key"},
                         dumped)
    assert lines[0] == "tables: 5 captured, 1 left out by the patterns"
    assert "captured since capture began" in lines[1]
    assert "NEEDS A DUMP" in lines[2] and "dblog dump --table shop.b" in lines[2]
    assert "dump dump-9 reads the rows it had (not completed yet)" in lines[3]
    assert "NEEDS" not in lines[4] and "joined capture" in lines[4]
    assert lines[5] == "  shop.e: malformed record '{'"
    assert lines[6] == "  left out shop.n: matches 'shop.*', but it has no primary key"
    assert new_table_token("shop.b", 12.5) == new_table_token("shop.b", 12.5)
    assert new_table_token("shop.b", 12.5) != new_table_token("shop.c", 12.5)
