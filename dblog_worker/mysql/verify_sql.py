"""How ``dblog verify`` reads and normalizes MySQL/MariaDB tables (see
:mod:`dblog_worker.verify_sql` for the families, rows and key ranges).

========  ==========================================================
family    MySQL / MariaDB
========  ==========================================================
NUMBER    integers, YEAR, BIT ``c + 0`` as text; DECIMAL with trailing fraction zeros
          (and the dot) trimmed
FLOAT     as DOUBLE: shortest digits (see verify_sql); MySQL → MySQL
          ``CAST(CAST(c AS DOUBLE) AS CHAR)``
TEXT      ``CAST(c AS CHAR)`` (utf8mb4)
BINARY    ``LOWER(HEX(c))``
DATE      ``%Y-%m-%d``, zero and invalid dates too (``0000-00-00``); against another
          kind, a value that is no date (``c + INTERVAL 0 DAY`` is NULL: a zero year,
          month or day, an impossible day) is ``-infinity``, as its target has it
DATETIME  ``%Y-%m-%d %H:%i:%s.%f`` in UTC; no date: as for DATE
TIME      microseconds, ``TIME_TO_SEC``
========  ==========================================================

GEOMETRY and the spatial types are BINARY (their SRID and WKB); UUID, INET4 and INET6
are TEXT (MariaDB's text of them).

Key ranges spell row comparisons out so the index is used, ``k1 > b1 OR (k1 = b1 AND k2 >
b2)``; in ``binary`` key order text keys compare as ``CAST(CONVERT(c USING utf8mb4) AS
BINARY)`` (the bytes of UTF-8 sort like the code points; no padding rule applies).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from json.encoder import encode_basestring
from typing import Any

import pymysql

from dblog_worker.errors import ConfigError, RequestRejected, SourceUnavailable
from dblog_worker.mysql.catalog import KEY_COLUMNS_SQL, ident
from dblog_worker.mysql.columns import Kind, MyColumn, column_from_information_schema
from dblog_worker.mysql.options import MYSQL, parse_dsn
from dblog_worker.mysql.resultset import DumpConnection
from dblog_worker.mysql.session import dump_connection_options
from dblog_worker.mysql.values import MyRowCodec
from dblog_worker.verify_sql import (
    Column,
    Family,
    KeyParam,
    Query,
    TableDescription,
    VerifyFailed,
    float_of,
    time_text,
)

_FAMILIES = {
    Kind.INTEGER: Family.NUMBER, Kind.DECIMAL: Family.NUMBER, Kind.YEAR: Family.NUMBER,
    Kind.BIT: Family.NUMBER, Kind.FLOAT: Family.FLOAT, Kind.DOUBLE: Family.FLOAT,
    Kind.TEXT: Family.TEXT, Kind.ENUM: Family.TEXT, Kind.SET: Family.TEXT,
    Kind.JSON: Family.TEXT, Kind.BINARY: Family.BINARY, Kind.DATE: Family.DATE,
    Kind.DATETIME: Family.DATETIME, Kind.TIMESTAMP: Family.DATETIME, Kind.TIME: Family.TIME,
    Kind.GEOMETRY: Family.BINARY, Kind.UUID: Family.TEXT, Kind.INET4: Family.TEXT,
    Kind.INET6: Family.TEXT,
}
_INTEGER_KINDS = (Kind.INTEGER, Kind.YEAR, Kind.BIT)


def my_family(column: MyColumn) -> Family:
    return _FAMILIES[column.kind]


def _native(column: Column) -> MyColumn:
    assert isinstance(column.native, MyColumn), "a MySQL column carries its MyColumn"
    return column.native


def _text(cell: object) -> str:
    return cell.decode() if isinstance(cell, bytes) else str(cell)


MY_COLUMNS_SQL = (
    "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE,"
    " DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_OCTET_LENGTH, COLLATION_NAME"
    " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
    " ORDER BY ORDINAL_POSITION"
)
"""``mysql.columns.COLUMNS_SQL`` plus each column's collation."""


def _my_float_digits(text: str) -> str:
    mantissa = f"TRIM(LEADING '-' FROM SUBSTRING_INDEX({text}, 'e', 1))"
    digits = f"REPLACE({mantissa}, '.', '')"
    significant = f"TRIM(BOTH '0' FROM {digits})"
    exponent = (f"(IF(LOCATE('e', {text}) > 0, CAST(SUBSTRING_INDEX({text}, 'e', -1) AS SIGNED),"
                f" 0) + CHAR_LENGTH(SUBSTRING_INDEX({mantissa}, '.', 1))"
                f" - (CHAR_LENGTH({digits}) - CHAR_LENGTH(TRIM(LEADING '0' FROM {digits}))))")
    return (f"IF({significant} = '', '0', CONCAT(IF(LEFT({text}, 1) = '-', '-', ''), "
            f"{significant}, 'e', {exponent}))")


def _my_float(ref: str, cross: bool) -> str:
    value = f"CAST({ref} AS DOUBLE)"
    text = f"CAST({value} AS CHAR)"
    if not cross:
        return text
    high = f"TRUNCATE({value} / 4294967296, 0)"
    exact = (f"CAST(CAST(CAST({high} AS SIGNED) AS DECIMAL(65,0)) * 4294967296"
             f" + CAST({value} - {high} * 4294967296 AS SIGNED) AS CHAR)")
    return (f"IF(ABS({value}) >= POW(2, 53) AND ABS({value}) < POW(2, 90), {exact}, "
            f"{_my_float_digits(text)})")


def _my_date(ref: str, text: str, cross: bool) -> str:
    """A DATE's or DATETIME's ``text``; against another kind, ``-infinity`` for a value
    that is no date (what the merge gives the other kind's target for it)."""
    if not cross:
        return text
    return f"IF({ref} IS NOT NULL AND ({ref} + INTERVAL 0 DAY) IS NULL, '-infinity', {text})"


_UNREACHABLE = (pymysql.err.OperationalError, pymysql.err.InterfaceError)
_DENIED = (1044, 1045, 1142, 1143, 1227)


class MySqlConnection:
    def __init__(self, dsn: str, where: str) -> None:
        self._where = where
        parsed = parse_dsn(dsn)
        with self._errors(), parsed.tls_errors():
            self._conn = DumpConnection(**parsed.connect_args(), **dump_connection_options(),
                                        autocommit=True, connect_timeout=10)
        self.query("SET SESSION TRANSACTION READ ONLY", [])

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except _UNREACHABLE as exc:
            if exc.args and exc.args[0] in _DENIED:
                raise ConfigError(f"{self._where} refused access: {exc.args[-1]}") from None
            raise SourceUnavailable(f"{self._where} is unreachable: {exc}") from None
        except pymysql.MySQLError as exc:
            raise VerifyFailed(f"{self._where} refused a query: {exc}") from None

    def query(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        with self._errors(), self._conn.cursor() as cursor:
            cursor.execute(sql, list(params))
            return list(cursor.fetchall())

    def close(self) -> None:
        self._conn.close()


class MySqlVerifySql:
    same_kind_as_text = False
    case_insensitive_names = True  # MySQL column names are case-insensitive
    step_bind = "%s"

    connect = MySqlConnection
    quote = staticmethod(ident)

    def describe(self, query: Query, table: str, role: str) -> TableDescription | None:
        schema, _, name = table.partition(".")
        rows = query(MY_COLUMNS_SQL, [schema, name])
        if not rows:
            return None
        columns = []
        for row in rows:
            try:
                my = column_from_information_schema(row[:8])
            except ValueError as exc:
                raise RequestRejected(f"{role} table {table}: {exc}; verify cannot compare it"
                                      ) from None
            collation = None if row[8] is None else _text(row[8])
            columns.append(Column(my.name, _text(row[1]).lower(), my_family(my),
                                  collation=collation, native=my))
        key = tuple(_text(row[0]) for row in query(KEY_COLUMNS_SQL, [schema, name]))
        return TableDescription(MYSQL, table, tuple(columns), key)

    def value_sql(self, column: Column, family: Family, *, cross: bool, ref: str) -> str:
        my = column.native
        if family is Family.NUMBER:
            if isinstance(my, MyColumn) and my.kind is Kind.DECIMAL:
                text = f"CAST({ref} AS CHAR)"
                if my.scale == 0:
                    return text
                return f"TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM {text}))"
            return f"CAST({ref} + 0 AS CHAR)"
        if family is Family.FLOAT:
            return _my_float(ref, cross)
        if family is Family.BINARY:
            return f"LOWER(HEX({ref}))"
        if family is Family.DATE:
            return _my_date(ref, f"DATE_FORMAT({ref}, '%%Y-%%m-%%d')", cross)
        if family is Family.DATETIME:
            return _my_date(ref, f"DATE_FORMAT({ref}, '%%Y-%%m-%%d %%H:%%i:%%s.%%f')", cross)
        if family is Family.TIME:
            return f"CAST(CAST(TIME_TO_SEC({ref}) * 1000000 AS SIGNED) AS CHAR)"
        return f"CAST({ref} AS CHAR)"

    def fragment_sql(self, column: Column, ref: str) -> str:
        my = column.native
        if isinstance(my, MyColumn) and my.kind in (Kind.FLOAT, Kind.DOUBLE):
            return f"CAST({ref} AS DOUBLE)"  # as the dump reads it (columns.select_list)
        return ref

    def fragment_of(self, query: Query, column: Column) -> Callable[[Any], str | None]:
        my = column.native
        assert isinstance(my, MyColumn)
        codec = MyRowCodec([my], [])
        prefix = len("{" + encode_basestring(my.name) + ":")

        def fragment(cell: Any) -> str | None:
            if cell is None:
                return None
            text = codec.row_from_dump([cell])[prefix:-1]
            return None if text == "null" else text  # a zero date: null on both paths

        return fragment

    def row_sql(self, values: Sequence[str], free: Sequence[bool]) -> str:
        items = []
        for value, is_free in zip(values, free, strict=True):
            text = f"CONCAT(CHAR_LENGTH({value}), ':', {value})" if is_free else value
            items.append(f"IFNULL({text}, 'N')")
        return "CONCAT(" + ", ',', ".join(items) + ")" if len(items) > 1 else items[0]

    def bind_sql(self, column: Column, family: Family, *, cross: bool) -> str:
        my = column.native
        if isinstance(my, MyColumn) and my.kind is Kind.DECIMAL:
            return f"CAST(%s AS DECIMAL(65,{my.scale}))"
        return "%s"

    def key_sql(self, column: Column, *, ref: str) -> str:
        return f"CAST(CONVERT({ref} USING utf8mb4) AS BINARY)"  # UTF-8 bytes: code point order

    def md5(self, row: str) -> str:
        return f"MD5({row})"

    def checksum(self, row: str) -> str:
        return f"CAST(CONV(SUBSTRING({self.md5(row)}, 1, 15), 16, 10) AS UNSIGNED)"

    def compare_keys(self, order: Sequence[str], binds: Sequence[str], operator: str) -> str:
        strict = ">" if operator == ">" else "<"
        terms = []
        for i in range(len(order)):
            equal = [f"{order[j]} = {binds[j]}" for j in range(i)]
            terms.append("(" + " AND ".join([*equal, f"{order[i]} {strict} {binds[i]}"])
                         + ")")
        if operator == "<=":
            terms.append("(" + " AND ".join(f"{o} = {b}" for o, b in zip(order, binds,
                                                                         strict=True)) + ")")
        return "(" + " OR ".join(terms) + ")"

    def bound_params(self, operator: str, bound: Sequence[object]) -> list[object]:
        params = [v for i in range(len(bound)) for v in bound[: i + 1]]
        return [*params, *bound] if operator == "<=" else params

    def lookup_where(self, order: Sequence[str], binds: Sequence[str], count: int) -> str:
        one = "(" + " AND ".join(f"{o} = {b}" for o, b in zip(order, binds,
                                                              strict=True)) + ")"
        return " OR ".join([one] * count)

    def key_param(self, column: Column, family: Family, *, cross: bool) -> KeyParam:
        my = _native(column)
        if my.kind in _INTEGER_KINDS:
            return int
        if family is Family.FLOAT:
            return lambda text: float_of(text, cross=cross)
        if family is Family.BINARY:
            return bytes.fromhex
        if family is Family.TIME:
            return lambda text: time_text(int(text))
        if my.kind is Kind.ENUM:  # compared and ordered by the member's index
            indexes = {member: i for i, member in enumerate(my.members, 1)}
            return lambda text: indexes.get(text, 0)
        if my.kind is Kind.SET:  # by the members' bit mask
            bits = {member: 1 << i for i, member in enumerate(my.members)}
            return lambda text: sum(bits.get(m, 0) for m in text.split(",")) if text else 0
        return str

    def key_json(self, column: Column, family: Family, *, cross: bool) -> KeyParam:
        if family is Family.FLOAT:
            return lambda text: float_of(text, cross=cross)
        if family is Family.TIME:
            return lambda text: time_text(int(text))
        if _native(column).kind in _INTEGER_KINDS:
            return int
        if family is Family.BINARY:
            return lambda text: base64.b64encode(bytes.fromhex(text)).decode("ascii")
        return str

    def cross_key_ok(self, column: Column) -> bool:
        return column.family is not Family.TEXT or _native(column).kind is Kind.TEXT


SQL = MySqlVerifySql()
