r"""Canonical serialization of MySQL/MariaDB values: same value, same bytes.

The worker reads every row two ways: from a dump chunk's ``SELECT`` (PyMySQL, text
protocol) and from the binary log (mysql-replication's ``BinLogStreamReader``, whose row
events carry Python values).  :class:`MyRowCodec` turns either into the same canonical
JSON, per column type, so a row from a dump and the same row from the log serialize to
identical bytes.

The other modules of :mod:`dblog_worker.mysql` named below: ``session`` (connection and
session options), ``columns`` (the column model, read from ``information_schema`` or the
log), ``texts`` (the canonical text of each type, key parameters) and ``encodings`` (which
texts each column goes through).  This module generates the row functions from those.

The dump path reads MySQL's own text output: the chunk connection is opened with
:func:`session.dump_connection_options` (``conv=DUMP_CONV`` keeps PyMySQL's parameter
escaping but decodes no result value, so a cell is the server's text as ``str``, or
``bytes`` for binary strings and BIT, or ``None``), runs with
:data:`session.MY_SESSION_SETTINGS`, and selects the columns with
:func:`columns.select_list` (FLOAT and DOUBLE are read as ``CAST(c AS DOUBLE)``: MariaDB
prints a FLOAT column with 6 significant digits, which loses the value).  The log
path takes ``row["values"]`` (or ``before_values``/``after_values``) and the matching
``none_sources`` of a row event; the server must log with ``binlog_format=ROW``,
``binlog_row_image=FULL`` and ``binlog_row_metadata=FULL`` (column names, signedness,
charsets, ENUM/SET members), and the reader must keep ``ignore_decode_errors=False``.

Canonical encodings (dump text / binlog value → JSON)
=====================================================

==========================  ================================================================
MySQL type                  canonical JSON; examples
==========================  ================================================================
NULL                        ``null``, for every type
TINYINT ... BIGINT,         number: ``-128`` → ``-128``, ``18446744073709551615`` →
signed or UNSIGNED          ``18446744073709551615``; ZEROFILL padding dropped: ``00042`` →
(BOOL is TINYINT(1))        ``42``
DECIMAL(p,s)                string keeping the scale: ``1.50`` → ``"1.50"``, ``-0.50`` →
                            ``"-0.50"``, ``Decimal('0E-30')`` → ``"0.000...0"`` (30 zeros);
                            ZEROFILL padding dropped
FLOAT                       number: the shortest decimal that round-trips in float32 (parsed
                            to a double and rounded to float32), written as Python's
                            ``repr`` of that decimal without a trailing ``.0``:
                            ``0.10000000149011612`` → ``0.1``, ``16777216.0`` →
                            ``16777216``, ``3.4028234663852886e+38`` → ``3.4028235e+38``,
                            ``1.401298464324817e-45`` → ``1e-45``
DOUBLE                      number: Python's ``repr`` (shortest round-trip digits) without a
                            trailing ``.0``: ``0.30000000000000004``, ``1e20`` → ``1e+20``,
                            ``0.000012345`` → ``1.2345e-05``, ``5e-324``, ``1.0`` → ``1``
CHAR, VARCHAR, *TEXT,       string: ``'😀'`` → ``"😀"``; CHAR trailing spaces are stripped on
MariaDB JSON (a LONGTEXT)   both paths, VARCHAR/TEXT keep them; a MariaDB JSON document is
                            its text as stored: ``{"a":  1}`` → ``"{\"a\":  1}"``
BINARY, VARBINARY, *BLOB    string, standard base64 (``+/``, ``=`` padding): ``0x00ff`` →
                            ``"AP8="``, empty → ``""``; BINARY(n) is always its n bytes,
                            zero-padded (the log strips the padding, the codec restores it)
DATE                        string: ``"2024-02-29"``
DATETIME(fsp)               string, exactly fsp fraction digits: ``"2024-02-29 12:34:56"``,
                            DATETIME(3) ``"9999-12-31 23:59:59.999"``
TIMESTAMP(fsp)              string in UTC, like DATETIME: ``"2038-01-19 03:14:07.999999"``
zero and invalid dates      string, MySQL's text, on both paths (the log path reads them from
                            the row image's bytes, ``rowimage.py``): DATE ``"0000-00-00"``,
                            ``"2020-05-00"``, ``"2020-02-31"`` (``ALLOW_INVALID_DATES``);
                            DATETIME ``"0000-00-00 00:00:00.000"``; the zero TIMESTAMP
                            ``"0000-00-00 00:00:00"`` (with its fraction digits)
TIME(fsp)                   string, exactly fsp fraction digits, hours beyond 24 and negative
                            values as MySQL prints them: ``"-838:59:59"``,
                            ``"-00:00:01.2345"``, ``"100:00:01.500000"``
YEAR                        number: ``2024``, ``0000`` → ``0``
ENUM                        string, the member: ``"y'q"``; the invalid value ``""``
SET                         string, the members in definition order joined by ``,``, as
                            MySQL prints them: ``"p,r"``; the empty set ``""`` (the log needs
                            ``none_sources`` to tell it from NULL)
BIT(n)                      number: ``b'1000000001'`` → ``513``
JSON (MySQL 8 only)         string, MySQL's text of the document: ``"{\"a\": [1, 2]}"``.
                            The log path rebuilds that text from mysql-replication's decoded
                            document; this is UNTESTED (only MariaDB is available here) and
                            is known to differ for doubles written in other forms than
                            MySQL's and for a document that is the JSON literal ``null``
                            (decoded as SQL NULL)
GEOMETRY, POINT, ... (every string, standard base64 of the value as MySQL stores it: its
spatial type)               SRID (4 bytes, little-endian) then its WKB; the same bytes on
                            both paths (``SELECT c`` and the row image)
UUID (MariaDB)              string, lower-case and hyphenated as MariaDB prints it:
                            ``"123e4567-e89b-12d3-a456-426655440000"``
INET4 (MariaDB)             string, dotted: ``"192.168.0.1"``
INET6 (MariaDB)             string as MariaDB prints it (:func:`texts.inet6_text`): the
                            first longest run of zero groups, even one, is ``::``:
                            ``"2001:db8::ff00:42:8329"``, ``"1::2:3:4:5:6:7"``,
                            ``"::ffff:1.2.3.4"``
YEAR(2), others             unsupported: :func:`columns.column_from_information_schema`
                            and :func:`columns.column_from_binlog` raise
                            :class:`columns.UnsupportedType` naming the column and type
==========================  ================================================================

Strings are JSON-escaped like ``json.dumps(s, ensure_ascii=False)``.  A row is a JSON
object ``{"col":value,...}`` in table column order with no whitespace; a key is a JSON
array ``[value,...]`` of the key columns' values in key order.

Key texts (:meth:`MyRowCodec.key_texts_from_dump`, ``..._from_binlog``) are one text per
key column, identical on both paths: the JSON value's text unquoted (``"42"``,
``"1.50"``, ``"abc"``, base64 for binary, ``"2024-01-01 00:00:00.000"``).
:meth:`MyRowCodec.key_params` turns such texts (or texts typed by a user) into the values
to bind for ``WHERE (k1,k2) > (%s,%s)`` so that the comparison matches ``ORDER BY k1, k2``:
int for integers, YEAR and BIT, ``Decimal`` for DECIMAL, the exact float32 value for FLOAT,
``bytes`` for binary strings, the 1-based member index for ENUM and the member bitmask for
SET (both sort by number), ``str`` otherwise.

Known limits: ENUM/SET members with characters outside the BMP (emoji) are shown as ``?``
by MariaDB's ``information_schema`` (utf8mb3), so such a column's descriptor differs
between the two sources, and a codec built from ``information_schema`` raises ValueError
for a logged SET value holding such a member and for such an ENUM/SET key text in
:meth:`MyRowCodec.key_params`; a codec built from the binlog's descriptors has the true
members and encodes the dump path identically. Non-UTF-8 character sets are read by the
log path with Python's codec of that name (latin1 as cp1252, as PyMySQL does); bytes that
codec rejects make mysql-replication raise. Zero and invalid dates reach the codec as text
only from ``rowimage.py``, which decodes the row images of every table of MariaDB's types;
mysql-replication (tables with a MySQL 8 ``JSON`` column or a pre-5.6.4 temporal column)
gives None for them, which the translator treats as a value the log cut short (its key is
dumped again). TIMESTAMP values after 2038 (MariaDB 11.5+) are not decoded by
mysql-replication 1.0.17. An ENUM's explicit ``''`` member and its invalid value (index 0)
print the same, so both are ``""`` and :meth:`MyRowCodec.key_params` takes ``""`` for the
member. The log path undoes mysql-replication 1.0.17's decoding of negative TIME values
with a fraction (``-00:00:01.25`` comes as ``-00:00:01.75``, see
:func:`texts._negative_fraction_fix`); tests/integration/test_mysql_values.py fails if a
release changes it. The pre-MySQL-5.6.4 DATETIME/TIME/TIMESTAMP binlog formats are mapped
but untested.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

from pymysqlreplication.constants import NONE_SOURCE

from dblog_worker.masking import TableMasks
from dblog_worker.mysql.columns import Kind, MyColumn
from dblog_worker.mysql.encodings import NUMBER, PLAIN, Encoding, encoding_of
from dblog_worker.mysql.session import Cell

__all__ = ["MyRowCodec"]


def _styled(style: str, text: str) -> str:
    """Source of the JSON of canonical text ``text`` (an expression) in ``style``."""
    if style == NUMBER:
        return text
    if style == PLAIN:
        return f"'\"' + {text} + '\"'"
    return f"quote({text})"


def _json_of_text(style: str, text: str) -> str:
    if style == NUMBER:
        return text
    if style == PLAIN:
        return '"' + text + '"'
    return encode_basestring(text)


class _GeneratedFunction:
    """Source lines of one generated function; values reach it only by namespace names."""

    def __init__(self, signature: str) -> None:
        self.lines = [f"def {signature}:"]
        self.namespace: dict[str, object] = {"quote": encode_basestring}

    def add(self, line: str) -> None:
        self.lines.append("    " + line)

    def bind(self, name: str, value: object) -> str:
        self.namespace[name] = value
        return name

    def compile(self, name: str) -> Callable[..., Any]:
        exec("\n".join(self.lines), self.namespace)  # noqa: S102 - names only, see the class
        function: Callable[..., Any] = self.namespace[name]  # type: ignore[assignment]
        return function


def _dump_fragment(function: _GeneratedFunction, i: int, encoding: Encoding) -> None:
    """Line computing ``x{i}``, the JSON of cell ``v{i}``."""
    v, style = f"v{i}", encoding.style
    if encoding.dump_inline is not None:
        d = function.bind(f"d{i}", encoding.dump)
        test, text = (part.format(v=v, d=d) for part in encoding.dump_inline)
        null_test = f"{v} is None or {test}" if test else f"{v} is None"
        function.add(f"x{i} = 'null' if {null_test} else {_styled(style, text)}")
    elif encoding.dump is None:
        function.add(f"x{i} = 'null' if {v} is None else {_styled(style, v)}")
    else:
        d = function.bind(f"d{i}", encoding.dump)
        function.add(f"x{i} = 'null' if {v} is None else {_styled(style, f'{d}({v})')}")


def _binlog_fragment(
    function: _GeneratedFunction, i: int, column: MyColumn, encoding: Encoding,
    *, positional: bool = False,
) -> None:
    """Lines computing ``x{i}``, the JSON of the column's value in ``values`` (by name; with
    ``positional``, already in ``v{i}``)."""
    v = f"v{i}"
    n = function.bind(f"n{i}", column.name)
    b = function.bind(f"b{i}", encoding.binlog)
    if not positional:
        function.add(f"{v} = values[{n}]")
    if column.kind is Kind.SET and not positional:
        # mysql-replication gives None for the empty set; none_sources tells it from NULL.
        absent = f"('\"\"' if none_sources and none_sources.get({n}) == EMPTY_SET else 'null')"
        function.bind("EMPTY_SET", NONE_SOURCE.EMPTY_SET)
    else:
        absent = "'null'"
    function.add(f"x{i} = {absent} if {v} is None else {_styled(encoding.style, f'{b}({v})')}")


def _key_array(positions: Sequence[int]) -> str:
    """Source of the key's JSON array of fragments ``x{i}``."""
    if not positions:
        return "'[]'"
    if len(positions) == 1:
        return f"'[' + x{positions[0]} + ']'"
    return "'[' + ','.join((" + "".join(f"x{i}, " for i in positions) + ")) + ']'"


def _row_object(function: _GeneratedFunction, names: Sequence[str], masks: TableMasks) -> str:
    """Source of the row's JSON object of fragments ``x{i}``: excluded columns left out,
    masked ones masked (not a NULL's ``null``)."""
    parts: list[str] = []
    for i, name in enumerate(names):
        if masks.excluded(name):
            continue
        prefix = ("," if parts else "{") + encode_basestring(name) + ":"
        mask = masks.scalar(name)
        value = f"x{i}"
        if mask is not None:
            value = f"(x{i} if x{i} == 'null' else {function.bind(f'm{i}', mask)}(x{i}))"
        parts += [function.bind(f"p{i}", prefix), value]
    return f"''.join(({', '.join(parts)}, '}}'))" if parts else "'{}'"


class MyRowCodec:
    """Serializes rows of one table version: built once per column list, used per row.

    The dump methods take a row's cells as PyMySQL returns them with
    :data:`session.DUMP_CONV` from a SELECT of :func:`columns.select_list`; the binlog
    methods take a row event's values (``row["values"]``, ``row["before_values"]``,
    ``row["after_values"]``) and, so that an empty SET is not taken for NULL, the matching
    ``none_sources`` dict.  The functions
    are generated per table: one line per column, no loop and no dispatch.
    """

    __slots__ = (
        "_binlog_key",
        "_binlog_key_row",
        "_binlog_row",
        "_dump_key",
        "_dump_key_row",
        "_dump_row",
        "_encodings",
        "_key_positions",
        "_masks",
        "_row_at",
        "columns",
        "key_columns",
    )

    def __init__(self, columns: Sequence[MyColumn], key_columns: Sequence[str],
                 masks: TableMasks | None = None) -> None:
        position: dict[str, int] = {}
        for i, column in enumerate(columns):
            if column.name in position:
                raise ValueError(f"duplicate column name {column.name!r}")
            position[column.name] = i
        missing = [k for k in key_columns if k not in position]
        if missing:
            raise ValueError(f"key columns {missing!r} are not among the columns")
        if len(set(key_columns)) != len(key_columns):
            raise ValueError(f"duplicate key columns in {list(key_columns)!r}")
        self.columns: tuple[MyColumn, ...] = tuple(columns)
        self.key_columns: tuple[str, ...] = tuple(key_columns)
        self._encodings = tuple(encoding_of(column) for column in columns)
        self._key_positions = tuple(position[k] for k in key_columns)
        self._masks = masks or TableMasks()
        self._row_at = tuple(i for i, c in enumerate(columns)
                             if not self._masks.excluded(c.name))
        self._dump_row = self._compile_dump(key=False, row=True)
        self._dump_key = self._compile_dump(key=True, row=False)
        self._dump_key_row = self._compile_dump(key=True, row=True)
        self._binlog_row = self._compile_binlog(key=False, row=True)
        self._binlog_key = self._compile_binlog(key=True, row=False)
        self._binlog_key_row = self._compile_binlog(key=True, row=True)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def _result(self, function: _GeneratedFunction, key: bool, row: bool) -> str:
        results = []
        if key:
            results.append(_key_array(self._key_positions))
        if row:
            results.append(_row_object(function, self.column_names, self._masks))
        return ", ".join(results)

    def _needed(self, row: bool) -> list[int]:
        """The columns whose JSON a function computes: the key's, and the row's."""
        return sorted({*self._key_positions, *(self._row_at if row else ())})

    def _compile_dump(self, key: bool, row: bool) -> Callable[..., Any]:
        function = _GeneratedFunction("encode(cells)")
        width = len(self.columns)
        function.add(f"({''.join(f'v{i}, ' for i in range(width))}) = cells")
        for i in self._needed(row):
            _dump_fragment(function, i, self._encodings[i])
        function.add(f"return {self._result(function, key, row)}")
        return function.compile("encode")

    def _compile_binlog(self, key: bool, row: bool) -> Callable[..., Any]:
        function = _GeneratedFunction("encode(values, none_sources)")
        for i in self._needed(row):
            _binlog_fragment(function, i, self.columns[i], self._encodings[i])
        function.add(f"return {self._result(function, key, row)}")
        return function.compile("encode")

    def json_lines(self, i: int, namespace: dict[str, object]) -> list[str]:
        """For code generated elsewhere (``rowtext.py``): lines computing ``x{i}``, the JSON
        of column ``i``'s value ``v{i}`` as ``rowimage.py`` decodes it (None is NULL: the
        empty SET is an empty set there); the names they use are put in ``namespace``."""
        function = _GeneratedFunction("lines()")
        _binlog_fragment(function, i, self.columns[i], self._encodings[i], positional=True)
        namespace.update(function.namespace)
        return [line.removeprefix("    ") for line in function.lines[1:]]

    def key_row_source(self, namespace: dict[str, object]) -> str:
        """For code generated elsewhere: the source of ``(key, row)`` from every column's
        JSON ``x{i}``; the names it uses are put in ``namespace``."""
        function = _GeneratedFunction("lines()")
        source = self._result(function, key=True, row=True)
        namespace.update(function.namespace)
        return source

    # -- dump path -----------------------------------------------------------------------

    def row_from_dump(self, cells: Sequence[Cell]) -> str:
        """The canonical JSON object of a dump row."""
        result: str = self._dump_row(cells)
        return result

    def key_from_dump(self, cells: Sequence[Cell]) -> str:
        """The canonical JSON array of a dump row's key columns."""
        result: str = self._dump_key(cells)
        return result

    def key_row_from_dump(self, cells: Sequence[Cell]) -> tuple[str, str]:
        """``(key_from_dump(cells), row_from_dump(cells))``, each value encoded once."""
        result: tuple[str, str] = self._dump_key_row(cells)
        return result

    def key_texts_from_dump(self, cells: Sequence[Cell]) -> tuple[str, ...]:
        """The canonical text of each key column of a dump row, in key order."""
        if len(cells) != len(self.columns):
            raise ValueError(f"row has {len(cells)} cells, the table {len(self.columns)} columns")
        return self._key_texts([cells[i] for i in self._key_positions])

    def key_texts_from_key_cells(self, cells: Sequence[Cell]) -> tuple[str, ...]:
        """The same from a SELECT of the key columns only, in key order
        (``catalog.key_after_sql``)."""
        if len(cells) != len(self._key_positions):
            raise ValueError(f"{len(cells)} cells for {len(self._key_positions)} key columns")
        return self._key_texts(cells)

    def _key_texts(self, cells: Sequence[Cell]) -> tuple[str, ...]:
        texts = []
        for i, cell in zip(self._key_positions, cells, strict=True):
            dump = self._encodings[i].dump
            text: str | None
            if cell is None:
                text = None
            elif dump is not None:
                text = dump(cell)
            elif isinstance(cell, str):
                text = cell
            else:
                raise ValueError(f"key column {self.columns[i].name!r}: bytes cell {cell!r}")
            texts.append(self._key_text(i, text))
        return tuple(texts)

    # -- binlog path ---------------------------------------------------------------------

    def row_from_binlog(
        self, values: Mapping[str, object], none_sources: Mapping[str, str] | None = None
    ) -> str:
        """The canonical JSON object of a row image of a binlog row event."""
        result: str = self._call_binlog(self._binlog_row, values, none_sources)
        return result

    def key_from_binlog(
        self, values: Mapping[str, object], none_sources: Mapping[str, str] | None = None
    ) -> str:
        """The canonical JSON array of the key columns of a binlog row image."""
        result: str = self._call_binlog(self._binlog_key, values, none_sources)
        return result

    def key_row_from_binlog(
        self, values: Mapping[str, object], none_sources: Mapping[str, str] | None = None
    ) -> tuple[str, str]:
        """``(key_from_binlog(...), row_from_binlog(...))``, each value encoded once."""
        result: tuple[str, str] = self._call_binlog(self._binlog_key_row, values, none_sources)
        return result

    def key_texts_from_binlog(
        self, values: Mapping[str, object], none_sources: Mapping[str, str] | None = None
    ) -> tuple[str, ...]:
        """The canonical text of each key column of a binlog row image, in key order."""
        texts = []
        for i in self._key_positions:
            column = self.columns[i]
            value = self._binlog_value(values, column.name)
            if value is None and column.kind is Kind.SET and none_sources:
                text = "" if none_sources.get(column.name) == NONE_SOURCE.EMPTY_SET else None
            else:
                text = None if value is None else self._encodings[i].binlog(value)
            texts.append(self._key_text(i, text))
        return tuple(texts)

    def _call_binlog(
        self,
        encode: Callable[..., Any],
        values: Mapping[str, object],
        none_sources: Mapping[str, str] | None,
    ) -> Any:
        try:
            return encode(values, none_sources)
        except KeyError as exc:
            raise ValueError(
                f"the binlog row has no column {exc.args[0]!r}"
                " (the server needs binlog_row_image=FULL and binlog_row_metadata=FULL)"
            ) from None

    @staticmethod
    def _binlog_value(values: Mapping[str, object], name: str) -> object:
        try:
            return values[name]
        except KeyError:
            raise ValueError(
                f"the binlog row has no column {name!r}"
                " (the server needs binlog_row_image=FULL and binlog_row_metadata=FULL)"
            ) from None

    # -- keys ----------------------------------------------------------------------------

    def _key_text(self, i: int, text: str | None) -> str:
        if text is None:
            column = self.columns[i]
            raise ValueError(f"key column {column.name!r} is NULL")
        return text

    def key_params(self, texts: Sequence[str]) -> list[object]:
        """The parameters to bind for key texts (from this codec or typed by a user), in key
        order: see the module docstring.  Raises ValueError for a text the column cannot hold."""
        if len(texts) != len(self._key_positions):
            raise ValueError(f"{len(texts)} key texts for {len(self._key_positions)} key columns")
        params = []
        for i, text in zip(self._key_positions, texts, strict=True):
            try:
                params.append(self._encodings[i].param(text))
            except ValueError as exc:
                raise ValueError(f"key column {self.columns[i].name!r}: {exc}") from None
        return params

    def column_param(self, name: str, text: str) -> object:
        """The parameter to bind for a user's text compared with column ``name`` (a
        filter's value); ValueError for a text the column cannot hold or no such column."""
        for column, encoding in zip(self.columns, self._encodings, strict=True):
            if column.name == name:
                try:
                    return encoding.param(text)
                except ValueError as exc:
                    raise ValueError(f"column {name!r}: {exc}") from None
        raise ValueError(f"there is no column {name!r}")

    def key_from_texts(self, texts: Sequence[str]) -> str:
        """The canonical JSON array of canonical key texts (as the ``key_texts_*`` give)."""
        if len(texts) != len(self._key_positions):
            raise ValueError(f"{len(texts)} key texts for {len(self._key_positions)} key columns")
        parts = [
            _json_of_text(self._encodings[i].style, text)
            for i, text in zip(self._key_positions, texts, strict=True)
        ]
        return "[" + ",".join(parts) + "]"
