"""How ``dblog verify`` reads and normalizes a lake target's tables (Iceberg, Delta; see
:mod:`dblog_worker.verify.sql` for the families, rows and key ranges).

A lake has no SQL engine of its own without a JVM: the connection (:class:`LakeConnection`)
reads each compared table once, without Spark (:mod:`.read`: pyiceberg, delta-rs), into an
embedded DuckDB, sorted by its key (DuckDB spills to a temporary folder beyond its memory
limit), and runs verify's range queries there. The table is one snapshot: a merge that
commits meanwhile is not seen (``--recheck`` reads the table again). Describing a table
loads it: the describe query (:data:`DESCRIBE_SQL`) reads the connection's own catalog,
which the connection fills as tables are asked for.

Values are normalized to the texts the PostgreSQL and MySQL sides produce across kinds
(docs/verify.md, *Comparing values*):

========  ==========================================================
family    lake column (DuckDB)
========  ==========================================================
NUMBER    integers as text; decimals with fraction zeros trimmed; booleans ``1``/``0``
FLOAT     as a double: ``[-]<digits>e<exponent>``; 2^53 to 2^90 as exact integers;
          ``NaN`` and infinities NULL
TEXT      the string
BINARY    lower-case hex
DATE      ``YYYY-MM-DD``; outside the years 1 to 9999 ``-infinity``
DATETIME  ``YYYY-MM-DD HH:MM:SS.ffffff`` (a ``timestamptz`` in UTC); as dates
TIME      signed microseconds, from the text a source's time of day lands as (the
          merge stores it as a string marked ``dblog:time``)
========  ==========================================================
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from dblog_worker.config_lake import LakeConfig
from dblog_worker.errors import SourceUnavailable, TargetUnavailable
from dblog_worker.lake.types import TIME_COMMENT
from dblog_worker.verify.sql import (
    Column,
    Family,
    KeyParam,
    Query,
    TableDescription,
    VerifyFailed,
    float_of,
)

if TYPE_CHECKING:
    import duckdb

__all__ = ["DESCRIBE_SQL", "SQL", "LakeConnection"]

DESCRIBE_SQL = ("SELECT column_name, data_type, comment, key_ordinal FROM dblog_columns"
                " WHERE table_name = %s ORDER BY ordinal")
"""A table's columns, loading it first (``%s``: its ``schema.table``)."""
MEMORY_LIMIT = "1GB"  # DuckDB's; a larger table spills to the temporary folder

_INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT",
                            "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"})
_DATETIME_TYPES = frozenset({"TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS",
                             "TIMESTAMP WITH TIME ZONE"})
_PLACEHOLDER = re.compile(r"%%|%s")


def lake_family(data_type: str, comment: str) -> Family:
    """The family of a lake column's DuckDB type (a string marked ``dblog:time``: TIME)."""
    if data_type in _INTEGER_TYPES or data_type == "BOOLEAN" or data_type.startswith("DECIMAL"):
        return Family.NUMBER
    if data_type in ("FLOAT", "DOUBLE"):
        return Family.FLOAT
    if data_type == "VARCHAR":
        return Family.TIME if comment == TIME_COMMENT else Family.TEXT
    if data_type == "BLOB":
        return Family.BINARY
    if data_type == "DATE":
        return Family.DATE
    if data_type in _DATETIME_TYPES:
        return Family.DATETIME
    return Family.OTHER


def quote(name: str) -> str:
    """A DuckDB identifier, ``%`` doubled for the placeholders."""
    return '"' + name.replace('"', '""').replace("%", "%%") + '"'


class LakeConnection:
    """The lake tables verify compares, in an embedded DuckDB (one snapshot each)."""

    def __init__(self, lake: LakeConfig, where: str) -> None:
        import duckdb

        from dblog_worker.lake.read import check_reachable

        self._lake = lake
        self._where = where
        try:
            check_reachable(lake)
        except TargetUnavailable as exc:
            raise SourceUnavailable(f"{where} is unreachable: {exc}") from None
        self._folder = tempfile.TemporaryDirectory(prefix="dblog-verify-lake-")
        self._db: duckdb.DuckDBPyConnection = duckdb.connect(":memory:", config={
            "memory_limit": MEMORY_LIMIT, "temp_directory": self._folder.name,
            "threads": 2})
        self._db.execute("SET TimeZone = 'UTC'")
        self._db.execute("CREATE TABLE dblog_columns (table_name VARCHAR, ordinal INTEGER,"
                         " column_name VARCHAR, data_type VARCHAR, comment VARCHAR,"
                         " key_ordinal INTEGER)")
        self._loaded: set[str] = set()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        import duckdb

        try:
            yield
        except duckdb.Error as exc:
            raise VerifyFailed(f"{self._where} refused a query: {exc}") from None

    def query(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        if sql == DESCRIBE_SQL and str(params[0]) not in self._loaded:
            self._load(str(params[0]))
        text = _PLACEHOLDER.sub(lambda m: "%" if m[0] == "%%" else "?", sql)
        with self._errors():
            return self._db.execute(text, list(params)).fetchall()

    def _load(self, table: str) -> None:
        """Read ``table`` into DuckDB, sorted by its key; nothing if it does not exist."""
        from dblog_worker.lake.read import open_table

        self._loaded.add(table)
        try:
            found = open_table(self._lake, table)
        except TargetUnavailable as exc:
            raise SourceUnavailable(f"{self._where} is unreachable: {exc}") from None
        if found is None:
            return
        key, comments = found.key(), found.comments()
        schema, _, name = table.partition(".")
        named = f"{_ddl_quote(schema)}.{_ddl_quote(name)}"
        reader = found.batches()
        order = ", ".join(_ddl_quote(k) for k in key) or "ALL"
        with self._errors():
            self._db.execute(f"CREATE SCHEMA IF NOT EXISTS {_ddl_quote(schema)}")
            self._db.register("dblog_load", reader)
            try:
                self._db.execute(f"CREATE TABLE {named} AS SELECT * FROM dblog_load"
                                 f" ORDER BY {order}")
            finally:
                self._db.unregister("dblog_load")
            described = self._db.execute(
                "SELECT column_name, data_type, ordinal_position FROM"
                " information_schema.columns WHERE table_schema = ? AND table_name = ?"
                " ORDER BY ordinal_position", [schema, name]).fetchall()
            for column, data_type, ordinal in described:
                self._db.execute(
                    "INSERT INTO dblog_columns VALUES (?, ?, ?, ?, ?, ?)",
                    [table, ordinal, column, data_type, comments.get(column, ""),
                     key.index(column) + 1 if column in key else None])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._db.close()
        self._folder.cleanup()


def _ddl_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _float(ref: str) -> str:
    """A double as ``[-]<digits>e<exponent>`` (0.digits times 10^exponent), from DuckDB's
    shortest text (``0.1``, ``123.0``, ``1e+20``, ``1.2345e-05``); 2^53 to 2^90 exact;
    ``NaN`` and infinities NULL (what a MySQL target has for them)."""
    value = f"CAST({ref} AS DOUBLE)"
    text = f"CAST({value} AS VARCHAR)"
    mantissa = f"ltrim(split_part({text}, 'e', 1), '-')"
    digits = f"replace({mantissa}, '.', '')"
    significant = f"trim({digits}, '0')"
    exponent = (f"(coalesce(CAST(nullif(split_part({text}, 'e', 2), '') AS INTEGER), 0)"
                f" + length(split_part({mantissa}, '.', 1))"
                f" - (length({digits}) - length(ltrim({digits}, '0'))))")
    return (f"CASE WHEN isnan({value}) OR isinf({value}) THEN NULL"
            f" WHEN abs({value}) >= {2.0 ** 53!r} AND abs({value}) < {2.0 ** 90!r}"
            f" THEN CAST(CAST({value} AS HUGEINT) AS VARCHAR)"
            f" WHEN {significant} = '' THEN '0' ELSE"
            f" (CASE WHEN {value} < 0 THEN '-' ELSE '' END) || {significant} || 'e' ||"
            f" CAST({exponent} AS VARCHAR) END")


def _date(ref: str, text: str) -> str:
    """A date's or time stamp's ``text``; ``-infinity`` outside the years 1 to 9999, as
    the databases' sides have it."""
    return (f"CASE WHEN {ref} IS NULL THEN NULL WHEN isfinite({ref}) AND {ref} >="
            f" DATE '0001-01-01' AND {ref} < DATE '9999-12-31' + INTERVAL 1 DAY THEN {text}"
            " ELSE '-infinity' END")


def _time(ref: str) -> str:
    """A time of day's text (``[-]H:MM:SS[.ffffff]``) as signed microseconds."""
    plain = f"ltrim({ref}, '-')"
    micros = (f"((CAST(split_part({plain}, ':', 1) AS BIGINT) * 3600"
              f" + CAST(split_part({plain}, ':', 2) AS BIGINT) * 60) * 1000000"
              f" + CAST(CAST(split_part({plain}, ':', 3) AS DECIMAL(18,6)) * 1000000 AS BIGINT))")
    return (f"CAST((CASE WHEN starts_with({ref}, '-') THEN -1 ELSE 1 END) * {micros}"
            " AS VARCHAR)")


class LakeVerifySql:
    same_kind_as_text = False  # a lake is always compared with a database of another kind
    case_insensitive_names = False
    step_bind = "CAST(%s AS BIGINT)"

    @staticmethod
    def connect(dsn: str, where: str) -> LakeConnection:
        raise VerifyFailed("a lake target is connected with its lake options, not a DSN")

    quote = staticmethod(quote)

    def describe(self, query: Query, table: str, role: str) -> TableDescription | None:
        rows = query(DESCRIBE_SQL, [table])
        if not rows:
            return None
        columns = tuple(Column(str(name), str(data_type), lake_family(str(data_type),
                                                                      str(comment or "")),
                               cast=str(data_type))
                        for name, data_type, comment, _ in rows)
        key = tuple(str(r[0]) for r in sorted((r for r in rows if r[3] is not None),
                                              key=lambda r: int(r[3])))
        return TableDescription("lake", table, columns, key)

    def value_sql(self, column: Column, family: Family, *, cross: bool, ref: str) -> str:
        kind = column.type
        if family is Family.NUMBER:
            if kind == "BOOLEAN":
                return f"CAST(CAST({ref} AS INTEGER) AS VARCHAR)"
            if kind.startswith("DECIMAL"):
                text = f"CAST({ref} AS VARCHAR)"
                return (f"CASE WHEN contains({text}, '.') THEN"
                        f" rtrim(rtrim({text}, '0'), '.') ELSE {text} END")
            return f"CAST({ref} AS VARCHAR)"
        if family is Family.FLOAT:
            return _float(ref)
        if family is Family.BINARY:
            return f"lower(hex({ref}))"
        if family is Family.DATE:
            return _date(ref, f"CAST({ref} AS VARCHAR)")  # ISO, four-digit years
        if family is Family.DATETIME:
            instant = (f"make_timestamp(epoch_us({ref}))" if kind == "TIMESTAMP WITH TIME ZONE"
                       else f"CAST({ref} AS TIMESTAMP)")
            return _date(instant, f"strftime({instant}, '%%Y-%%m-%%d %%H:%%M:%%S.%%f')")
        if family is Family.TIME:
            return _time(ref)
        return f"CAST({ref} AS VARCHAR)"

    def row_sql(self, values: Sequence[str], free: Sequence[bool]) -> str:
        items = []
        for value, is_free in zip(values, free, strict=True):
            text = f"CAST(length({value}) AS VARCHAR) || ':' || {value}" if is_free else value
            items.append(f"coalesce({text}, 'N')")
        return " || ',' || ".join(items)

    def bind_sql(self, column: Column, family: Family, *, cross: bool) -> str:
        if family is Family.BINARY:
            return "unhex(%s)"
        return f"CAST(%s AS {column.cast})"

    def key_sql(self, column: Column, *, ref: str) -> str:
        return ref  # DuckDB compares strings by their bytes: code point order

    def md5(self, row: str) -> str:
        return f"md5({row})"

    def checksum(self, row: str) -> str:
        return f"CAST('0x' || substr({self.md5(row)}, 1, 15) AS BIGINT)"

    def compare_keys(self, order: Sequence[str], binds: Sequence[str], operator: str) -> str:
        return f"({', '.join(order)}) {operator} ({', '.join(binds)})"

    def bound_params(self, operator: str, bound: Sequence[object]) -> list[object]:
        return list(bound)

    def lookup_where(self, order: Sequence[str], binds: Sequence[str], count: int) -> str:
        one = "(" + " AND ".join(f"{o} = {b}" for o, b in zip(order, binds, strict=True)) + ")"
        return " OR ".join([one] * count)

    def key_param(self, column: Column, family: Family, *, cross: bool) -> KeyParam:
        if family is Family.FLOAT:
            return lambda text: float_of(text, cross=True)
        if column.type == "TIMESTAMP WITH TIME ZONE":
            return lambda text: text + "+00"
        return str

    def key_json(self, column: Column, family: Family, *, cross: bool) -> KeyParam:
        if family is Family.FLOAT:
            return lambda text: float_of(text, cross=True)
        if column.type in _INTEGER_TYPES:
            return int
        return str

    def cross_key_ok(self, column: Column) -> bool:
        return column.family is not Family.TIME  # a time kept as text orders as text


SQL = LakeVerifySql()
