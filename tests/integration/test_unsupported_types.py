"""A column type the worker does not read never stops it.

MariaDB 10.11 still creates ``YEAR(2)`` columns, which dblog does not read (a two-digit
year: deprecated, removed from MySQL). A source captures a table with one next to a table
of the types the worker once refused (spatial, UUID, INET4, INET6): ``dblog preflight``
names the table, the column and the fix; ``dblog run`` captures the other table (its dump
and its log) and leaves this one out until the column's type is changed (then a dump
brings what it missed); every ``dblog`` subcommand answers with lines of its own, never a
traceback, a refusal in one line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pymysql

from dblog_worker.landing.parquet import LandingZone, read_events
from tests.integration.harness import Workers, cli, wait_for, write_config
from tests.services import MariaDBServer


def _run(config: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A ``dblog`` subcommand: no traceback, and a failure said in one line (``dblog merge``
    runs spark-submit, whose own log is Spark's)."""
    result = cli(config, *args, check=False, timeout=timeout)
    assert "Traceback" not in result.stderr + result.stdout, (args, result.stderr)
    assert result.returncode in (0, 1, 2, 3), (args, result.returncode, result.stderr)
    if args[0] != "merge":
        assert len(result.stderr.strip().splitlines()) <= 1, (args, result.stderr)
    return result


def test_a_table_of_a_type_the_worker_does_not_read_leaves_the_others_captured(
        tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str,
        redis_url: str) -> None:
    database = mariadb_database

    def execute(*statements: str) -> None:
        conn: Any = pymysql.connect(**mariadb_server.connect_args(database))
        with conn, conn.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)

    execute("CREATE TABLE shapes (id int PRIMARY KEY, p point, u uuid, a inet4, b inet6)",
            "CREATE TABLE legacy (id int PRIMARY KEY, y year(2))",
            "INSERT INTO shapes VALUES (1, ST_GeomFromText('POINT(1 2)', 4326), UUID(),"
            " '10.0.0.1', '::1')",
            "INSERT INTO legacy VALUES (1, 24)")
    tables = [f"{database}.shapes", f"{database}.legacy"]
    target = (f'[target]\nkind = "mariadb"\ndsn = {json.dumps(mariadb_server.url())}\n'
              f'state_schema = "{database}_state"\n'
              f'tables = {{ "{tables[0]}" = "{database}.t_shapes",'
              f' "{tables[1]}" = "{database}.t_legacy" }}\n')
    config = write_config(tmp_path, mariadb_server.url(), redis_url, tables, kind="mariadb",
                          extra=target)

    checked = _run(config, "preflight")
    assert checked.returncode == 1, checked.stdout
    assert (f"table {tables[1]} cannot be captured: its column 'y' has type year(2), which"
            " dblog does not read") in checked.stdout
    assert f"fix: ALTER TABLE `{database}`.`legacy` MODIFY `y` YEAR;" in checked.stdout
    problems = [line for line in checked.stdout.splitlines() if line.startswith("- ")]
    assert len(problems) == 1 and "legacy" in problems[0], checked.stdout

    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config)
        assert f"table {tables[1]} cannot be captured" in worker.log()
        refused = _run(config, "dump", "--all")
        assert refused.returncode == 2 and refused.stderr.startswith(
            f"refused: table {tables[1]} cannot be captured"), refused.stderr
        assert _run(config, "dump", "--table", tables[1]).returncode == 2
        dumped = _run(config, "dump", "--table", tables[0], "--wait", timeout=90)
        assert dumped.returncode == 0 and "completed" in dumped.stdout, dumped.stdout
        request = next(word for word in dumped.stdout.split() if word.startswith("dump-"))
        execute("INSERT INTO shapes VALUES (2, NULL, NULL, '10.0.0.2', NULL)",
                "INSERT INTO legacy VALUES (2, 25)", "UPDATE legacy SET y = 26 WHERE id = 1",
                "INSERT INTO shapes VALUES (3, NULL, NULL, NULL, '::2')")
        zone = LandingZone(tmp_path / "landing", "src")
        wait_for(lambda: any(e["key"] == "[3]" for e in read_events(zone, tables[0])), 30,
                 "the last insert into shapes to land", lambda: worker.log()[-3000:])
        assert [e["op"] for e in read_events(zone, tables[0])] == ["r", "c", "c"]
        assert list(read_events(zone, tables[1])) == []  # left out
        for args in (["list"], ["show", request], ["wait", request, "--timeout", "5"],
                     ["status"], ["pause", request], ["resume", request], ["cancel", request],
                     ["set", request, "--chunk-size", "10"]):
            _run(config, *args)
        # the column's type fixed: the table's changes are captured from then on
        execute("ALTER TABLE legacy MODIFY y year", "INSERT INTO legacy VALUES (3, 2027)")
        wait_for(lambda: [e["key"] for e in read_events(zone, tables[1])] == ["[3]"], 30,
                 "the insert into legacy after the fix to land", lambda: worker.log()[-3000:])
        # ...and a dump brings what it missed
        assert _run(config, "verify", "--table", tables[1]).returncode == 2  # not merged yet
        fixed = _run(config, "dump", "--table", tables[1], "--wait", timeout=90)
        assert fixed.returncode == 0 and "completed" in fixed.stdout, fixed.stdout
        assert worker.stop() == 0
    merged = _run(config, "merge", "--json", timeout=300)
    assert merged.returncode == 0, merged.stdout[-3000:]
    for table in tables:
        verified = _run(config, "verify", "--table", table)
        assert verified.returncode == 0, verified.stdout
    assert _run(config, "reset", "--yes").returncode == 0
