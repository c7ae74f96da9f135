"""dblog verify without databases: the SQL it builds, its plans, and the walk over keys in
memory (tests/integration/test_verify.py runs it against real servers)."""

from __future__ import annotations

import hashlib
import itertools
import json
from bisect import bisect_right
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dblog_worker.dump.requests import parse_keys
from dblog_worker.errors import RequestRejected
from dblog_worker.mysql import verify_sql as my_verify
from dblog_worker.mysql.column_model import column_from_information_schema
from dblog_worker.mysql.options import MYSQL
from dblog_worker.pg import verify_sql as pg_verify
from dblog_worker.pg.options import POSTGRESQL
from dblog_worker.verify import ranges
from dblog_worker.verify import sql as vs
from dblog_worker.verify.command import InParallel, VerifyOptions, busy_seconds
from dblog_worker.verify.report import (
    TableResult,
    VerifyResult,
    keys_document,
    keys_paths,
    render,
)
from dblog_worker.verify.sql import Column, Family, TableDescription, VerifyFailed
from dblog_worker.verify.walk import (
    Differences,
    Key,
    Sides,
    Summary,
    WalkOptions,
    compare_rows,
    recheck,
    walk,
)

# --- descriptions -----------------------------------------------------------------------


def pg(name: str, typname: str, cast: str, collation: str | None = None,
       category: str = "N") -> Column:
    return Column(name, typname, pg_verify.pg_family(typname, category), cast=cast,
                  collation=collation)


def my(name: str, data_type: str, column_type: str, scale: int = 0,
       collation: str | None = None) -> Column:
    column = column_from_information_schema(
        (name, data_type, column_type, None, scale, 0, None, None))
    return Column(column.name, data_type, my_verify.my_family(column), collation=collation,
                  native=column)


def table(dialect: str, name: str, columns: Sequence[Column], key: Sequence[str]
          ) -> TableDescription:
    return TableDescription(dialect, name, tuple(columns), tuple(key))


PG_ORDERS = table(POSTGRESQL, "public.orders", [
    pg("region", "text", "text", collation="C", category="S"),
    pg("n", "int4", "integer"),
    pg("note", "text", "text", collation="C", category="S"),
], ["region", "n"])

MY_ORDERS = table(MYSQL, "shop.orders", [
    my("region", "varchar", "varchar(20)", collation="utf8mb4_general_ci"),
    my("n", "int", "int(11)"),
    my("note", "text", "text", collation="utf8mb4_general_ci"),
], ["region", "n"])


# --- SQL --------------------------------------------------------------------------------


def test_hostile_identifiers_are_quoted_on_both_dialects() -> None:
    pg_table = table(POSTGRESQL, 'my schema.odd"table', [
        pg('we"ird', "int8", "bigint"), pg("x y", "text", "text", "C", "S")], ['we"ird'])
    plan = vs.plan(pg_table, pg_table)
    assert plan.source.table == '"my schema"."odd""table"'
    assert plan.source.order == ('t."we""ird"',)
    assert plan.source.row == ('coalesce(length(t."we""ird"::text)::text || \':\' || '
                               't."we""ird"::text, \'N\') || \',\' || coalesce(length('
                               't."x y"::text)::text || \':\' || t."x y"::text, \'N\')')
    my_table = table(MYSQL, "d`b.t`1", [my("a`b", "bigint", "bigint(20)")], ["a`b"])
    plan = vs.plan(my_table, my_table)
    assert plan.source.table == "`d``b`.`t``1`"
    assert plan.source.keys == ("CAST(t.`a``b` + 0 AS CHAR)",)
    assert plan.source.order == ("t.`a``b`",)


def test_percent_in_names_and_types_is_doubled_for_the_drivers() -> None:
    """Every verify query runs with parameters: ``%`` in a name or a type name is doubled,
    so that neither driver takes it for a placeholder (``k%s`` would take a key value)."""
    pg_table = table(POSTGRESQL, "sch%s.t%", [pg("k%", "mood", '"mo%od"', category="E")],
                     ["k%"])
    side = vs.plan(pg_table, pg_table).source
    assert (side.table, side.binds) == ('"sch%%s"."t%%"', ('CAST(%s AS "mo%%od")',))
    assert ranges.boundary_sql(side, lower=True) == (
        'SELECT t."k%%"::text FROM "sch%%s"."t%%" AS t WHERE t."k%%" > CAST(%s AS "mo%%od")'
        " ORDER BY t.\"k%%\" LIMIT 1 OFFSET %s")
    my_table = table(MYSQL, "db%.t%s", [my("k%s", "int", "int(11)")], ["k%s"])
    side = vs.plan(my_table, my_table).source
    assert ranges.boundary_sql(side, lower=True) == (
        "SELECT CAST(t.`k%%s` + 0 AS CHAR) FROM `db%%`.`t%%s` AS t WHERE t.`k%%s` > %s"
        " ORDER BY t.`k%%s` LIMIT 1 OFFSET %s")


def test_postgresql_range_queries_compare_row_values() -> None:
    side = vs.plan(PG_ORDERS, PG_ORDERS).source
    assert side.binds == ("CAST(%s AS text)", "CAST(%s AS integer)")
    # Columns are qualified: a bare "n" in ORDER BY would be the output column "n"::text.
    assert ranges.boundary_sql(side, lower=True) == (
        'SELECT t."region"::text, t."n"::text FROM "public"."orders" AS t WHERE '
        '(t."region", t."n") > (CAST(%s AS text), CAST(%s AS integer)) '
        'ORDER BY t."region", t."n" LIMIT 1 OFFSET %s')
    assert ranges.boundary_sql(side, lower=False) == (
        'SELECT t."region"::text, t."n"::text FROM "public"."orders" AS t '
        'ORDER BY t."region", t."n" LIMIT 1 OFFSET %s')
    checksum = f"('x' || substr(md5({side.row}), 1, 15))::bit(60)::int8"
    assert ranges.summary_sql(side, lower=True, upper=False, buckets=3) == (
        'SELECT b, count(*), sum(h) FROM (SELECT CASE WHEN (t."region", t."n") <= '
        '(CAST(%s AS text), CAST(%s AS integer)) THEN 0 WHEN (t."region", t."n") <= '
        '(CAST(%s AS text), CAST(%s AS integer)) THEN 1 ELSE 2 END AS b, '
        f'{checksum} AS h FROM "public"."orders" AS t WHERE (t."region", t."n") > '
        "(CAST(%s AS text), CAST(%s AS integer))) AS s GROUP BY b")
    assert ranges.summary_params(side, ["a", "1"], [["b", "2"], ["c", "3"]], None) == [
        "b", "2", "c", "3", "a", "1"]
    assert ranges.condition_params(side, ["a", "1"], ["z", "9"]) == ["a", "1", "z", "9"]
    assert ranges.split_sql(side, lower=False, upper=True) == (
        'SELECT "k0", "k1" FROM (SELECT t."region"::text AS "k0", t."n"::text AS "k1", '
        'row_number() OVER (ORDER BY t."region", t."n") AS rn FROM "public"."orders" AS t '
        'WHERE (t."region", t."n") <= (CAST(%s AS text), CAST(%s AS integer))) AS s '
        "WHERE mod(rn, CAST(%s AS int8)) = 0 ORDER BY rn LIMIT %s")
    assert ranges.lookup_sql(side, 2) == (
        f'SELECT t."region"::text, t."n"::text, md5({side.row}) FROM "public"."orders" AS t '
        'WHERE (t."region", t."n") IN ((CAST(%s AS text), CAST(%s AS integer)), '
        "(CAST(%s AS text), CAST(%s AS integer)))")


def test_mysql_range_queries_spell_out_the_row_comparison() -> None:
    side = vs.plan(MY_ORDERS, MY_ORDERS).source
    assert side.keys == ("CAST(t.`region` AS CHAR)", "CAST(t.`n` + 0 AS CHAR)")
    assert ranges.rows_sql(side, lower=True, upper=True) == (
        f"SELECT CAST(t.`region` AS CHAR), CAST(t.`n` + 0 AS CHAR), MD5({side.row}) "
        "FROM `shop`.`orders` AS t WHERE ((t.`region` > %s) OR (t.`region` = %s AND t.`n` > %s))"
        " AND ((t.`region` < %s) OR (t.`region` = %s AND t.`n` < %s) OR (t.`region` = %s AND "
        "t.`n` = %s)) ORDER BY t.`region`, t.`n`")
    assert ranges.condition_params(side, ["a", 1], ["z", 9]) == [
        "a", "a", 1, "z", "z", 9, "z", 9]
    assert ranges.lookup_sql(side, 2).endswith(
        "WHERE (t.`region` = %s AND t.`n` = %s) OR (t.`region` = %s AND t.`n` = %s)")
    assert ranges.summary_sql(side, lower=False, upper=False, buckets=1) == (
        "SELECT b, count(*), sum(h) FROM (SELECT 0 AS b, CAST(CONV(SUBSTRING("
        f"MD5({side.row}), 1, 15), 16, 10) AS UNSIGNED) AS h FROM `shop`.`orders` AS t) AS s "
        "GROUP BY b")


def test_rows_mark_null_and_prefix_free_text_with_its_length() -> None:
    assert vs.row_sql(MYSQL, ["CAST(`a` AS CHAR)", "CAST(`b` + 0 AS CHAR)"], [True, False]) == (
        "CONCAT(IFNULL(CONCAT(CHAR_LENGTH(CAST(`a` AS CHAR)), ':', CAST(`a` AS CHAR)), 'N'), "
        "',', IFNULL(CAST(`b` + 0 AS CHAR), 'N'))")
    assert vs.row_sql(POSTGRESQL, ['"b"::text'], [False]) == "coalesce(\"b\"::text, 'N')"


@pytest.mark.parametrize(("dialect", "column", "expected"), [
    (POSTGRESQL, pg("n", "numeric", "numeric"),
     "CASE WHEN \"n\"::text IN ('NaN', 'Infinity', '-Infinity') THEN NULL"
     " ELSE trim_scale(\"n\")::text END"),
    (POSTGRESQL, pg("i", "inet", "inet"),
     'CASE WHEN "i" IS NULL THEN NULL ELSE concat("i") END'),
    (POSTGRESQL, pg("d", "date", "date"),
     "CASE WHEN \"d\" IS NULL THEN NULL WHEN isfinite(\"d\") AND \"d\" >= '0001-01-01'"
     " AND \"d\" < '10000-01-01' THEN \"d\"::text ELSE '-infinity' END"),
    (POSTGRESQL, pg("b", "bool", "boolean"), '"b"::int::text'),
    (POSTGRESQL, pg("b", "bytea", "bytea"), "encode(\"b\", 'hex')"),
    (POSTGRESQL, pg("t", "interval", "interval"),
     '(extract(epoch FROM "t") * 1000000)::int8::text'),
    (POSTGRESQL, pg("c", "bpchar", "character", "C", "S"),
     'CASE WHEN "c" IS NULL THEN NULL ELSE concat("c") END'),
    (MYSQL, my("d", "decimal", "decimal(10,2)", scale=2),
     "TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM CAST(`d` AS CHAR)))"),
    (MYSQL, my("d", "decimal", "decimal(10,0)"), "CAST(`d` AS CHAR)"),
    (MYSQL, my("v", "varbinary", "varbinary(8)"), "LOWER(HEX(`v`))"),
    (MYSQL, my("t", "time", "time(6)"),
     "CAST(CAST(TIME_TO_SEC(`t`) * 1000000 AS SIGNED) AS CHAR)"),
    (MYSQL, my("d", "date", "date"), "IF(`d` IS NOT NULL AND (`d` + INTERVAL 0 DAY) IS NULL,"
                                     " '-infinity', DATE_FORMAT(`d`, '%%Y-%%m-%%d'))"),
    (MYSQL, my("g", "point", "point"), "LOWER(HEX(`g`))"),
    (MYSQL, my("u", "uuid", "uuid"), "CAST(`u` AS CHAR)"),
])
def test_cross_dialect_normalizations(dialect: str, column: Column, expected: str) -> None:
    ref = vs.sql_of(dialect).quote(column.name)
    assert vs.value_sql(dialect, column, column.family, cross=True, ref=ref) == expected


def test_same_dialect_postgresql_compares_text_and_mysql_floats_as_doubles() -> None:
    column = pg("f", "float8", "double precision")
    assert vs.value_sql(POSTGRESQL, column, column.family, cross=False, ref='"f"') == '"f"::text'
    column = my("f", "float", "float")
    assert vs.value_sql(MYSQL, column, column.family, cross=False, ref="`f`") == (
        "CAST(CAST(`f` AS DOUBLE) AS CHAR)")


# --- plans ------------------------------------------------------------------------------


def test_cross_dialect_text_keys_compare_by_code_point() -> None:
    plan = vs.plan(MY_ORDERS, PG_ORDERS)
    assert plan.key_order == "binary"
    assert plan.source.order == (
        "CAST(CONVERT(t.`region` USING utf8mb4) AS BINARY)", "t.`n`")
    assert plan.target.order == ('t."region" COLLATE "C"', 't."n"')
    assert vs.plan(PG_ORDERS, PG_ORDERS).key_order == "native"
    other = table(POSTGRESQL, "public.orders", [
        pg("region", "text", "text", "en_US.utf8", "S"), *PG_ORDERS.columns[1:]],
        ["region", "n"])
    assert vs.plan(PG_ORDERS, other).key_order == "binary"  # collations differ


def test_target_columns_of_the_merge_are_ignored_and_missing_ones_reported() -> None:
    target = table(POSTGRESQL, "public.orders",
                   [*PG_ORDERS.columns, pg("_dblog_position", "bpchar", "character")],
                   ["region", "n"])
    plan = vs.plan(PG_ORDERS, target)
    assert "_dblog_position" not in plan.target.row
    without_note = table(POSTGRESQL, "public.orders", PG_ORDERS.columns[:2], ["region", "n"])
    with pytest.raises(VerifyFailed, match=r"column note of public\.orders is missing"):
        vs.plan(PG_ORDERS, without_note)


@pytest.mark.parametrize(("source", "target", "error", "match"), [
    (PG_ORDERS, table(POSTGRESQL, "r.o", PG_ORDERS.columns, ["n", "region"]), RequestRejected,
     r"primary key of target table r.o \(n, region\) is not the one of source table "
     r"public.orders \(region, n\)"),
    (PG_ORDERS, table(POSTGRESQL, "r.o", PG_ORDERS.columns, []), RequestRejected,
     r"\(none\)"),
    (table(POSTGRESQL, "p.t", PG_ORDERS.columns, []), PG_ORDERS, RequestRejected,
     "source table p.t has no primary key"),
    (MY_ORDERS, table(POSTGRESQL, "r.o", [PG_ORDERS.columns[0], pg("n", "text", "text", "C", "S"),
                                          PG_ORDERS.columns[2]], ["region", "n"]),
     VerifyFailed, "column n: source type int .* and target type text"),
    (table(POSTGRESQL, "p.t", [pg("k", "bpchar", "character", "C", "S")], ["k"]),
     table(MYSQL, "d.t", [my("k", "varchar", "varchar(768)", collation="x")], ["k"]),
     RequestRejected, r"key column k \(bpchar\)"),
    (table(POSTGRESQL, "p.t", [pg("k", "int4", "integer"), pg("a", "_int4", "integer[]",
                                                             category="A")], ["k"]),
     table(MYSQL, "d.t", [my("k", "int", "int"), my("a", "longtext", "longtext")], ["k"]),
     RequestRejected, "column a of p.t: type _int4 cannot be compared across databases"),
])
def test_plans_refuse_what_cannot_be_compared(source: TableDescription, target: TableDescription,
                                              error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        vs.plan(source, target)


# --- key values -------------------------------------------------------------------------


def test_key_values_convert_between_databases_and_dump_keys() -> None:
    assert vs.time_text(-3020399999999) == "-838:59:59.999999"
    assert vs.time_text(500000) == "00:00:00.500000"
    assert vs.float_of("-25e3", cross=True) == -250.0
    assert vs.float_of("1e0", cross=True) == 0.1
    assert vs.float_of("0", cross=True) == 0.0
    assert vs.float_of("123456789012345678901", cross=True) == 123456789012345678901.0
    assert vs.float_of("0.30000000000000004", cross=False) == 0.1 + 0.2
    blob = my("b", "varbinary", "varbinary(4)")
    assert vs.key_json(MYSQL, blob, Family.BINARY, cross=True)("00ff") == "AP8="
    assert vs.key_param(MYSQL, blob, Family.BINARY, cross=True)("00ff") == b"\x00\xff"
    bytea = pg("b", "bytea", "bytea")
    assert vs.key_json(POSTGRESQL, bytea, Family.BINARY, cross=True)("00ff") == "\\x00ff"
    assert vs.key_json(POSTGRESQL, bytea, Family.BINARY, cross=False)("\\x00ff") == "\\x00ff"
    assert vs.key_json(POSTGRESQL, pg("i", "int8", "bigint"), Family.NUMBER,
                       cross=False)("-9223372036854775808") == -9223372036854775808
    enum = my("e", "enum", "enum('b','a')")
    assert vs.key_param(MYSQL, enum, Family.TEXT, cross=False)("a") == 2
    members = my("s", "set", "set('x','y','z')")
    assert vs.key_param(MYSQL, members, Family.TEXT, cross=False)("x,z") == 5
    decimal = my("d", "decimal", "decimal(65,30)", scale=30)
    assert vs.bind_sql(MYSQL, decimal, Family.NUMBER, cross=True) == (
        "CAST(%s AS DECIMAL(65,30))")


# --- the walk, over keys in memory --------------------------------------------------------


def digest(value: str) -> str:
    return hashlib.md5(value.encode()).hexdigest()  # noqa: S324 - a checksum, as in SQL


class MemoryTable:
    """A RangeReader over sorted keys, recording the size of each rows() answer."""

    def __init__(self, rows: dict[int, str]) -> None:
        self.keys: list[Key] = sorted(key(k) for k in rows)
        self.digests = {key(k): digest(v) for k, v in rows.items()}
        self.fetched: list[int] = []

    def _range(self, lower: Key | None, upper: Key | None) -> list[Key]:
        start = 0 if lower is None else bisect_right(self.keys, lower)
        end = len(self.keys) if upper is None else bisect_right(self.keys, upper)
        return self.keys[start:end]

    def boundary(self, lower: Key | None, offset: int) -> Key | None:
        keys = self._range(lower, None)
        return keys[offset] if offset < len(keys) else None

    def summaries(self, lower: Key | None, bounds: Sequence[Key],
                  upper: Key | None) -> list[Summary]:
        edges = [lower, *bounds, upper]
        result = []
        for a, b in itertools.pairwise(edges):
            keys = self._range(a, b)
            result.append(Summary(len(keys), sum(int(self.digests[k][:15], 16) for k in keys)))
        return result

    def split_points(self, lower: Key | None, upper: Key | None, step: int,
                     limit: int) -> list[Key]:
        keys = self._range(lower, upper)
        return [keys[i - 1] for i in range(step, len(keys) + 1, step)][:limit]

    def rows(self, lower: Key | None, upper: Key | None,
             limit: int | None = None) -> list[tuple[Key, str]]:
        rows = [(k, self.digests[k]) for k in self._range(lower, upper)][:limit]
        self.fetched.append(len(rows))
        return rows

    def lookup(self, keys: Sequence[Key]) -> dict[Key, str]:
        return {k: self.digests[k] for k in keys if k in self.digests}


def key(number: int) -> Key:
    """A key whose text sorts like the number (as the database would order it)."""
    return (f"{number + 10**8:09d}",)


def numbers(keys: Sequence[Key]) -> list[int]:
    return [int(k[0]) - 10**8 for k in keys]


SOURCE = {k: f"row {k}" for k in range(0, 3000, 2)}  # 1,500 rows, even keys


def edited(changed: Sequence[int] = (), deleted: Sequence[int] = (),
           added: Sequence[int] = ()) -> dict[int, str]:
    rows = {k: v for k, v in SOURCE.items() if k not in deleted}
    rows.update({k: "other" for k in changed})
    rows.update({k: "new" for k in added})
    return rows


@pytest.mark.parametrize(("target", "missing", "extra", "changed"), [
    (edited(), [], [], []),
    (edited(changed=[0, 1000, 2998]), [], [], [0, 1000, 2998]),
    (edited(deleted=[2, 4, 6, 1500]), [2, 4, 6, 1500], [], []),
    (edited(added=[-10, -1, 1, 2999, 50000]), [], [-10, -1, 1, 2999, 50000], []),
    (edited(changed=[10], deleted=[20], added=[21]), [20], [21], [10]),
    ({}, list(SOURCE), [], []),
])
def test_walk_finds_exactly_the_differing_keys(target: dict[int, str], missing: list[int],
                                               extra: list[int], changed: list[int]) -> None:
    source, other = MemoryTable(SOURCE), MemoryTable(target)
    found, stats = walk(Sides(source, other), WalkOptions(range_rows=400, leaf_rows=16,
                                                              fanout=4))
    assert (numbers(found.missing), numbers(found.extra), numbers(found.changed)) == (
        missing, extra, changed)
    assert (stats.source_rows, stats.target_rows, stats.ranges) == (1500, len(target), 4)
    assert (stats.differing_ranges > 0) == bool(missing or extra or changed)
    # Ranges with rows on both sides are bisected down to small fetches.
    if target and len(found) < 10:
        assert max(source.fetched + other.fetched, default=0) <= 16


def test_walk_of_an_empty_source_reports_every_target_key_in_one_range() -> None:
    target = MemoryTable({k: "x" for k in range(100)})
    found, stats = walk(Sides(MemoryTable({}), target), WalkOptions(range_rows=10))
    assert numbers(found.extra) == list(range(100))
    assert (stats.ranges, target.fetched) == (1, [100])
    found, stats = walk(Sides(MemoryTable({}), MemoryTable({})), WalkOptions())
    assert (len(found), stats.ranges, stats.differing_ranges) == (0, 1, 0)


def test_walk_stops_at_max_keys_and_pauses_between_ranges() -> None:
    pauses: list[float] = []
    found, stats = walk(Sides(MemoryTable(SOURCE), MemoryTable(edited(deleted=list(SOURCE)[:50]))),
                        WalkOptions(range_rows=20, max_keys=30, delay_s=0.25), pauses.append)
    assert (len(found), stats.truncated) == (30, True)
    assert numbers(found.missing) == list(SOURCE)[:30]
    assert pauses == [0.25]  # stopped in the second range
    _, stats = walk(Sides(MemoryTable(SOURCE), MemoryTable(SOURCE)),
                    WalkOptions(range_rows=500, delay_s=0.5), pauses.append)
    assert (stats.ranges, stats.delay_seconds) == (4, 1.5)


def test_walk_with_the_target_in_a_thread_finds_the_same_keys() -> None:
    target = edited(changed=[10, 2000], deleted=[20], added=[-3, 21, 9999])
    expected, _ = walk(Sides(MemoryTable(SOURCE), MemoryTable(target)), WalkOptions(range_rows=300))
    with ThreadPoolExecutor(1) as executor:
        found, _ = walk(Sides(MemoryTable(SOURCE), MemoryTable(target), InParallel(executor)),
                        WalkOptions(range_rows=300))
    assert (found.missing, found.extra, found.changed) == (
        expected.missing, expected.extra, expected.changed)
    assert (numbers(found.missing), numbers(found.extra), numbers(found.changed)) == (
        [20], [-3, 21, 9999], [10, 2000])


def test_busy_seconds_count_overlapping_queries_once() -> None:
    assert busy_seconds([(1.0, 3.0), (2.0, 4.0), (6.0, 7.0), (6.5, 6.75)]) == 4.0
    assert busy_seconds([(1.0, 3.0), (2.0, 4.0)], since=2.5) == 1.5
    assert busy_seconds([]) == 0.0


def test_compare_rows_and_recheck_classify_keys() -> None:
    into = Differences()
    compare_rows([(("1",), "a"), (("2",), "b"), (("3",), "c")],
                 [(("2",), "b"), (("3",), "x"), (("4",), "d")], into)
    assert (into.missing, into.changed, into.extra) == ([("1",)], [("3",)], [("4",)])
    source = MemoryTable({1: "a", 2: "b", 3: "c"})
    target = MemoryTable({1: "a", 2: "changed", 4: "d"})
    again = recheck(Sides(source, target), [key(k) for k in (1, 2, 3, 4)])
    assert (numbers(again.missing), numbers(again.changed), numbers(again.extra)) == (
        [3], [2], [4])


# --- output -----------------------------------------------------------------------------


def result(**fields: object) -> TableResult:
    base: dict[str, object] = {"table": "public.orders", "target_table": "replica.orders",
                               "key_columns": ("id",)}
    return TableResult(**(base | fields))  # type: ignore[arg-type]


def test_keys_files_are_what_dump_accepts(tmp_path: Path) -> None:
    single = result(missing=((1,),), changed=((2,),), extra=((-3,),))
    assert keys_document(single.keys()) == "[1, 2, -3]\n"
    assert parse_keys(json.loads(keys_document(single.keys())), 1) == [("1",), ("2",), ("-3",)]
    composite = [(7, "EU"), (8, "😀")]
    assert keys_document(composite) == '[[7, "EU"], [8, "😀"]]\n'
    assert parse_keys(json.loads(keys_document(composite)), 2) == [("7", "EU"), ("8", "😀")]
    paths = keys_paths(str(tmp_path / "diff-{table}.json"), ["public.orders", "my s.t/x"])
    assert paths["my s.t/x"] == tmp_path / "diff-my%20s.t%2Fx.json"
    with pytest.raises(RequestRejected, match=r"needs \{table\}"):
        keys_paths(str(tmp_path / "keys.json"), ["a.b", "a.c"])
    with pytest.raises(RequestRejected, match="does not exist"):
        keys_paths(str(tmp_path / "no" / "keys.json"), ["a.b"])


def test_render_summarizes_each_table_and_lists_keys() -> None:
    verified = VerifyResult((
        result(source_rows=1000, target_rows=1001, ranges=1, differing_ranges=1,
               missing=((1,),), extra=((5,), (6,)), seconds=2.0, database_seconds=1.2,
               source_seconds=0.5, target_seconds=0.7),
        result(table="public.b", target_table="public.b", error="column x is missing"),
    ), seconds=2.5, database_seconds=1.2)
    text = render(verified, max_listed=1)
    assert text.splitlines() == [
        "public.orders -> replica.orders: 3 keys differ (1 missing, 2 extra, 0 changed)",
        "  rows: source 1,000, target 1,001; 1 ranges, 1 differing; key order native",
        "  time: 2.00 s, 500 rows/s; databases 1.20 s (source 0.50 s, target 0.70 s, side by "
        "side), python 0.80 s, delay 0.00 s",
        "  missing  [1]",
        "  extra    [5]",
        "  extra    ... and 1 more (all of them: --keys-out FILE or --json)",
        "public.b -> public.b: not compared: column x is missing",
        "RESULT: different: 2 of 2 table(s) differ",
    ]
    document = verified.to_json()
    assert document["equal"] is False
    assert document["python_seconds"] == pytest.approx(1.3)
    tables = document["tables"]
    assert isinstance(tables, list) and tables[0]["extra"] == [[5], [6]]


@pytest.mark.parametrize("options", [
    VerifyOptions(range_rows=1), VerifyOptions(delay_ms=-1), VerifyOptions(recheck_s=4000),
    VerifyOptions(fanout=1),
])
def test_options_out_of_range_are_refused(options: VerifyOptions) -> None:
    with pytest.raises(RequestRejected, match="must be from"):
        options.check()
