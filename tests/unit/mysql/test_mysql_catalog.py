"""MySQL chunk SQL, grants, TRUNCATE parsing and binlog checkpoints: pure functions."""

from __future__ import annotations

import pytest

from dblog_worker.errors import ProtocolError
from dblog_worker.mysql import catalog
from dblog_worker.mysql.catalog import TableShape
from dblog_worker.mysql.checkpoint import BinlogCheckpoint, file_number
from dblog_worker.mysql.translate import truncated_table
from dblog_worker.position import Position

ONE = TableShape("shop.orders", ("id", "note"), ("id",))
TWO = TableShape("shop.lines", ("order_id", "line", "qty"), ("order_id", "line"))


def test_chunk_sql_single_key() -> None:
    assert catalog.chunk_sql(ONE, first=True) == (
        "SELECT `id`, `note` FROM `shop`.`orders` WHERE ((`id` < %s) OR (`id` = %s)) "
        "ORDER BY `id` LIMIT %s"
    )
    assert catalog.chunk_sql(ONE, first=False) == (
        "SELECT `id`, `note` FROM `shop`.`orders` WHERE ((`id` > %s)) AND "
        "((`id` < %s) OR (`id` = %s)) ORDER BY `id` LIMIT %s"
    )
    assert catalog.after_params([7]) == [7]
    assert catalog.at_most_params([9]) == [9, 9]


def test_range_end_sql_selects_the_key_only() -> None:
    assert catalog.key_after_sql(ONE, first=True) == (
        "SELECT `id` FROM `shop`.`orders` WHERE ((`id` < %s) OR (`id` = %s)) "
        "ORDER BY `id` LIMIT 1 OFFSET %s"
    )
    keyed = TableShape("shop.lines", ("order_id", "line", "qty"), ("line", "order_id"),
                       select_key="`line`, CAST(`order_id` AS DOUBLE)")
    sql = catalog.key_after_sql(keyed, first=False)
    assert sql.startswith("SELECT `line`, CAST(`order_id` AS DOUBLE) FROM `shop`.`lines` WHERE ")
    assert sql.endswith("ORDER BY `line`, `order_id` LIMIT 1 OFFSET %s")
    assert sql.split(" FROM ", 1)[1] == catalog.chunk_sql(keyed, first=False).split(
        " FROM ", 1)[1].replace("LIMIT %s", "LIMIT 1 OFFSET %s")


def test_upper_bound_sql_selects_the_key_only() -> None:
    assert catalog.upper_bound_sql(TWO) == (
        "SELECT `order_id`, `line` FROM `shop`.`lines` ORDER BY `order_id` DESC, `line` DESC "
        "LIMIT 1")
    keyed = TableShape("shop.m", ("f", "n"), ("f",), select_key="CAST(`f` AS DOUBLE)")
    assert catalog.upper_bound_sql(keyed) == (
        "SELECT CAST(`f` AS DOUBLE) FROM `shop`.`m` ORDER BY `f` DESC LIMIT 1")


def test_chunk_sql_composite_key_expands_the_row_comparison() -> None:
    sql = catalog.chunk_sql(TWO, first=False)
    assert sql == (
        "SELECT `order_id`, `line`, `qty` FROM `shop`.`lines` WHERE "
        "((`order_id` > %s) OR (`order_id` = %s AND `line` > %s)) AND "
        "((`order_id` < %s) OR (`order_id` = %s AND `line` < %s) OR "
        "(`order_id` = %s AND `line` = %s)) ORDER BY `order_id`, `line` LIMIT %s"
    )
    assert sql.count("%s") == len(catalog.after_params([1, 2])) + len(
        catalog.at_most_params([3, 4])) + 1
    assert catalog.after_params([1, 2]) == [1, 1, 2]
    assert catalog.at_most_params([3, 4]) == [3, 3, 4, 3, 4]


@pytest.mark.parametrize(("after", "upper", "rows"), [
    ((1, 5), (9, 9), [(1, 6), (1, 9), (2, 0), (9, 9)]),
    (None, (1, 9), [(1, 0), (1, 6), (1, 9)]),
    ((9, 9), (9, 9), []),
])
def test_expanded_comparisons_mean_row_comparisons(
    after: tuple[int, int] | None, upper: tuple[int, int], rows: list[tuple[int, int]]
) -> None:
    """Evaluate the generated predicate in Python over a grid: it must select exactly the
    keys k with after < k <= upper (tuple order)."""
    grid = [(a, b) for a in range(11) for b in range(11)]
    expected = [k for k in grid if (after is None or k > after) and k <= upper]
    sql = catalog.chunk_sql(TWO, first=after is None)
    where = sql.split(" WHERE ", 1)[1].split(" ORDER BY ", 1)[0]
    params = ([] if after is None else catalog.after_params(after)) + catalog.at_most_params(
        upper)
    python = where.replace("`order_id`", "{a}").replace("`line`", "{b}").replace(" = ", " == ")
    python = python.replace(" AND ", " and ").replace(" OR ", " or ")
    for value in params:
        python = python.replace("%s", repr(value), 1)
    selected = [(a, b) for a, b in grid if eval(python.format(a=a, b=b))]  # noqa: S307
    assert selected == expected
    assert all(r in selected for r in rows)


def test_keys_sql_joins_the_requested_keys_in_order() -> None:
    assert catalog.keys_sql(TWO, 2) == (
        "SELECT r.n, t.`order_id`, t.`line`, t.`qty` FROM (SELECT %s AS n, %s AS `k0`, "
        "%s AS `k1` UNION ALL SELECT %s, %s, %s) AS r LEFT JOIN `shop`.`lines` AS t ON "
        "t.`order_id` = r.`k0` AND t.`line` = r.`k1` ORDER BY r.n"
    )


def test_identifiers_are_quoted() -> None:
    assert catalog.qualified("we`ird.ta ble") == "`we``ird`.`ta ble`"
    evil = TableShape("d.t", ("a`; DROP TABLE x; --",), ("a`; DROP TABLE x; --",))
    assert "`a``; DROP TABLE x; --`" in catalog.chunk_sql(evil, first=True)


def test_grants() -> None:
    scopes = catalog.grants([
        ("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `dblog`@`%`",),
        ("GRANT SELECT, INSERT, UPDATE ON `dblog`.* TO `dblog`@`%`",),
        ("GRANT SELECT (`id`, `note`) ON `shop`.`orders` TO `dblog`@`%`",),
        ("GRANT ALL PRIVILEGES ON `billing`.* TO `dblog`@`%`",),
    ])
    assert catalog.has_privilege(scopes, "REPLICATION SLAVE")
    assert catalog.has_privilege(scopes, "INSERT", "dblog", "watermark")
    assert not catalog.has_privilege(scopes, "CREATE", "dblog")
    assert catalog.has_privilege(scopes, "SELECT", "shop", "orders")
    assert not catalog.has_privilege(scopes, "SELECT", "shop", "customers")
    assert catalog.has_privilege(scopes, "SELECT", "billing", "invoices")


def test_setting_problems_name_the_fix() -> None:
    problems = catalog.setting_problems({"log_bin": "ON", "binlog_format": "MIXED",
                                         "binlog_row_image": "FULL"})
    assert [p.what for p in problems] == [
        "binlog_format is MIXED, capture needs ROW",
        "the server has no binlog_row_metadata setting (MySQL before 8.0.1, MariaDB before "
        "10.5): the binary log carries no column names",
    ]
    assert "binlog-format = ROW" in problems[0].fix
    assert catalog.setting_problems({"log_bin": "ON", "binlog_format": "ROW",
                                     "binlog_row_image": "FULL",
                                     "binlog_row_metadata": "FULL"}) == []


READY = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
         "binlog_row_metadata": "FULL"}


@pytest.mark.parametrize(("name", "value", "what", "fix"), [
    ("binlog_transaction_compression", "ON", "compressed payload event",
     "SET GLOBAL binlog_transaction_compression = 'OFF'; and set "
     "`binlog-transaction-compression = OFF` in the server's configuration ([mysqld]) to keep "
     "it (sessions opened before keep their own value until they reconnect)"),
    ("log_bin_compress", "ON", "row events compressed",
     "SET GLOBAL log_bin_compress = 'OFF'; and set `log-bin-compress = OFF` in the server's "
     "configuration ([mysqld]) to keep it"),
    ("binlog_row_value_options", "PARTIAL_JSON", "the row after the change is not whole",
     "SET GLOBAL binlog_row_value_options = ''; and set `binlog-row-value-options = ''` in "
     "the server's configuration ([mysqld]) to keep it (sessions opened before keep their own "
     "value until they reconnect)"),
    ("binlog_order_commits", "OFF", "another order than it logs them",
     "SET GLOBAL binlog_order_commits = 'ON'; and set `binlog-order-commits = ON` in the "
     "server's configuration ([mysqld]) to keep it"),
])
def test_settings_that_lose_changes_are_refused(name: str, value: str, what: str,
                                                fix: str) -> None:
    [problem] = catalog.setting_problems({**READY, name: value.lower()})
    assert problem.what.startswith(f"{name} is {value.lower()}: ") and what in problem.what
    assert problem.fix == fix
    assert name in catalog.SETTINGS


@pytest.mark.parametrize("settings", [
    {},  # MariaDB: none of the MySQL variables; MySQL: no log_bin_compress
    {"binlog_transaction_compression": "OFF", "binlog_row_value_options": "",
     "binlog_order_commits": "ON"},
    {"log_bin_compress": "OFF"},
])
def test_safe_defaults_and_missing_variables_pass(settings: dict[str, str]) -> None:
    assert catalog.setting_problems({**READY, **settings}) == []


@pytest.mark.parametrize(("query", "schema", "table"), [
    ("TRUNCATE TABLE shop.orders", "", "shop.orders"),
    ("truncate shop.orders;", "", "shop.orders"),
    ("TRUNCATE TABLE `shop`.`or``ders`", "", "shop.or`ders"),
    ("TRUNCATE orders", "shop", "shop.orders"),
    ("TRUNCATE TABLE `weird name`", "shop", "shop.weird name"),
    ("TRUNCATE orders", "", None),
    ("DELETE FROM shop.orders", "", None),
    ("ALTER TABLE shop.orders ADD COLUMN x int", "", None),
])
def test_truncated_table(query: str, schema: str, table: str | None) -> None:
    assert truncated_table(query, schema) == table


def test_binlog_checkpoints() -> None:
    checkpoint = BinlogCheckpoint("mariadb-bin.000042", 1234, "0-1-9,1-2-5")
    assert BinlogCheckpoint.decode(checkpoint.encode()) == checkpoint
    assert checkpoint.position == Position(42, 1234)
    assert file_number("binlog.000003") == 3
    with pytest.raises(ProtocolError, match="does not end in a number"):
        file_number("binlog")
    with pytest.raises(ProtocolError, match="not a binlog checkpoint"):
        BinlogCheckpoint.decode("0/16B3748")
