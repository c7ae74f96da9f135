"""A MySQL or MariaDB merge target: the SQL of :class:`~dblog_worker.merge.target.Target`.

Row images are parsed once per row with ``JSON_TABLE`` into text columns; the
insert converts each text to its column's type (strict SQL mode: a value that
does not fit is an error, not a warning; ``ALLOW_INVALID_DATES`` and no
``NO_ZERO_DATE``: a source's zero and invalid dates are held as they are). Values of
another kind's source that MySQL cannot hold are stored as :func:`convert` says.
Tables the merge creates use the ``utf8mb4_nopad_bin`` collation, so that every key
the source tells apart stays apart. Positions are ``ascii_bin``: byte order is position order.

PyMySQL formats every statement here with Python's ``%`` (each is run with parameters,
``()`` when it has none): names are spelled with :func:`~dblog_worker.mysql.catalog.ident`
and other text taken from a name, a type or a member with :func:`_formatted`, which
double ``%``.

Foreign-key action and prune events (:mod:`dblog_worker.merge.derived`) apply after the
keyed ones, by predicate. A row they delete leaves a tombstone keyed by its typed key
(``typed:`` and the JSON array of its key columns' text: the event has no key JSON), which
the upsert checks besides the landing's key JSON.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import pymysql

from dblog_worker import names
from dblog_worker.errors import ConfigError, TargetError, TargetUnavailable
from dblog_worker.merge import derived
from dblog_worker.merge.column_types import Encoding, SourceColumn, logical_of
from dblog_worker.merge.plan import Batch
from dblog_worker.merge.target import POSITION_COLUMN, TARGET_GONE, Applied, Target
from dblog_worker.mysql.catalog import ident, quote_ident
from dblog_worker.mysql.options import MYSQL, parse_dsn
from dblog_worker.mysql.tls import SharedTlsConnection
from dblog_worker.names import split_table

__all__ = ["MySQLTarget"]

_P = ident(POSITION_COLUMN)
_TEXT = "utf8mb4"
_COLLATION = "utf8mb4_nopad_bin"
_POSITION = "VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin"
# explicit_defaults_for_timestamp: a TIMESTAMP column the merge creates is a plain nullable
# column (older servers give the first one NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE ...).
_SESSION = ("SET time_zone = '+00:00',"
            " sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ALLOW_INVALID_DATES',"
            " explicit_defaults_for_timestamp = 1")
# Server error numbers that mean the connection is gone rather than the statement wrong.
_CONNECTION_ERRORS = frozenset({2002, 2003, 2006, 2013, 2055, 1927, 1053})


def _key_condition(key_columns: Sequence[str]) -> str:
    return " AND ".join(f"{ident(c)} = %s" for c in key_columns)


def row_position_sql(table: str, key_columns: Sequence[str]) -> str:
    """The position of the row of one key (parameters: the key's texts)."""
    return f"SELECT {_P} FROM {qualified(table)} WHERE {_key_condition(key_columns)}"


def delete_row_sql(table: str, key_columns: Sequence[str]) -> str:
    """Delete the row of one key if it still has a position (parameters: the key's texts,
    then the position; a NULL position matches NULL)."""
    return f"DELETE FROM {qualified(table)} WHERE {_key_condition(key_columns)} AND {_P} <=> %s"


def qualified(table: str) -> str:
    """``database.table`` in a statement run with parameters."""
    return names.qualified(table, ident)


def _formatted(sql: str) -> str:
    """SQL text (a type, a string literal) in a statement run with parameters."""
    return sql.replace("%", "%%")


def _string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _json_path(name: str) -> str:
    """The JSON path of member ``name``, as a string literal in a statement run with
    parameters."""
    path = '$."' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return _formatted(_string(path))


_FLOAT_MAX = "3.4028234663852886e38"  # the largest float32
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)( unsigned)?")
_NOT_A_NUMBER = "('NaN', 'Infinity', '-Infinity')"


def convert(column: SourceColumn, text: str, type_sql: str) -> str:
    """SQL that turns ``text`` into a value an insert into ``type_sql`` takes strictly.

    A source value MySQL cannot hold (of another kind's source) is stored so: a decimal
    or float ``NaN`` or ``±Infinity`` as NULL; a date or time stamp outside the years 1 to
    9999 (``±infinity``, BC) as the zero date. A decimal of more fraction digits than a
    DECIMAL column's scale is refused (the database names it), not rounded. A FLOAT
    column takes the largest float32 from its shortest text (``3.4028235e+38``, past the
    largest as a double).
    """
    if column.encoding is Encoding.BASE64:
        return f"FROM_BASE64({text})"
    if column.encoding is Encoding.BOOL:
        return f"(CASE {text} WHEN 'true' THEN 1 WHEN 'false' THEN 0 END)"
    logical = None if column.kind == MYSQL else logical_of(column)
    if logical is not None and logical.name in ("date", "datetime", "timestamptz"):
        zero = "'0000-00-00'" if logical.name == "date" else "'0000-00-00 00:00:00'"
        outside = (f"{text} IN ('infinity', '-infinity') OR {text} LIKE '%% BC'"
                   f" OR LOCATE('-', {text}) > 5")
        if column.encoding is Encoding.TIMESTAMPTZ:  # '... +00': the session is in UTC
            return f"IF({outside}, {zero}, LEFT({text}, CHAR_LENGTH({text}) - 3))"
        return f"IF({outside}, {zero}, {text})"
    lower = type_sql.lower()
    if logical is not None and logical.name in ("decimal", "float32", "float64"):
        value = text
        decimal = _DECIMAL.match(lower)
        if decimal:  # more fraction digits than the scale: refused, not rounded
            fraction = f"TRIM(TRAILING '0' FROM SUBSTRING_INDEX({text}, '.', -1))"
            value = (f"IF(LOCATE('.', {text}) > 0 AND CHAR_LENGTH({fraction}) > {decimal[2]},"
                     f" CONCAT('more than {decimal[2]} digits after the point: ', {text}),"
                     f" {text})")
        text = f"IF({text} IN {_NOT_A_NUMBER}, NULL, {value})"
    if lower.startswith(("bit", "year")):  # YEAR: the number 0 is 0000, the text '0' 2000
        return f"CAST({text} AS UNSIGNED)"
    if lower.startswith("float"):
        return f"LEAST(GREATEST(CAST({text} AS DOUBLE), -{_FLOAT_MAX}), {_FLOAT_MAX})"
    return text


_FSP = re.compile(r"(datetime|timestamp|time)(?:\((\d)\))?$")
_MEMBER = re.compile(r"'((?:[^'\\]|''|\\.)*)'")


def widened(table: str, column: SourceColumn, existing: str) -> str | None:
    """The type a target column of type ``existing`` (``information_schema.COLUMNS``'
    COLUMN_TYPE) grows to for the MySQL source ``column``; None if it holds it already."""
    lower = existing.lower()
    kind = column.type
    if column.kind != MYSQL:
        return None
    if kind in ("datetime", "timestamp", "time"):
        match = _FSP.match(lower)
        if match and match[1] == kind and column.fsp > int(match[2] or 0):
            return f"{kind.upper()}({column.fsp})"
    elif kind == "decimal":
        match = _DECIMAL.match(lower)
        if match and column.scale > int(match[2]):
            # A source value of this scale has at most 65 - scale integer digits: it fits.
            digits = int(match[1]) - int(match[2])
            precision = min(65, digits + column.scale)
            return f"DECIMAL({precision},{column.scale})" + (match[3] or "").upper()
    elif kind in ("enum", "set") and lower.startswith(kind + "("):
        have = [m.replace("''", "'").replace("\\\\", "\\")
                for m in _MEMBER.findall(existing[len(kind) + 1:-1])]
        new = [m for m in column.members if m not in have]
        if new:
            return f"{kind.upper()}({','.join(_string(m) for m in have + new)})"
    return None


KEYED = "s.op IN ('c', 'u', 'r')"  # the staged events applied by key, besides deletes
_DUPLICATE_TOMBSTONE = (
    " ON DUPLICATE KEY UPDATE {t}.deleted_at = IF({t}.position < VALUES(position),"
    " VALUES(deleted_at), {t}.deleted_at), {t}.position = IF({t}.position"
    " < VALUES(position), VALUES(position), {t}.position)")


def key_text(value: str, type_sql: str) -> str:
    """SQL of the text of a typed key value (``value`` of a column of ``type_sql``): the
    same for the target column and for a staged value cast to its type."""
    lower = type_sql.lower()
    if "binary" in lower or "blob" in lower:
        return f"HEX({value})"
    if lower.startswith("bit"):
        return f"CAST({value} + 0 AS CHAR)"
    return f"CAST({value} AS CHAR)"


def typed_key(values: Sequence[str]) -> str:
    """The text a derived delete's tombstone names a row by: ``typed:`` and the JSON array
    of its key values' texts (:func:`key_text`)."""
    return f"CONCAT('typed:', JSON_ARRAY({', '.join(values)}))"


def _staged_path(slot: int, column: str) -> str:
    path = f'$[{slot}]."' + column.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return _formatted(_string(path))


_CASTS = (
    (re.compile(r"(tiny|small|medium|big)?int\b.*unsigned|year|bit"), "UNSIGNED"),
    (re.compile(r"(tiny|small|medium|big)?int\b"), "SIGNED"),
    (re.compile(r"(decimal\(\d+,\d+\))"), None),
    (re.compile(r"(datetime|timestamp)(\(\d\))?"), "DATETIME"),
    (re.compile(r"date\b"), "DATE"),
    (re.compile(r"time(\(\d\))?"), "TIME"),
    (re.compile(r"float|double"), "DOUBLE"),
)


def typed(value: str, type_sql: str) -> str:
    """``value`` cast for comparing with a key column of ``type_sql`` (never as a double)."""
    lower = type_sql.lower()
    for pattern, cast in _CASTS:
        match = pattern.match(lower)
        if match is None:
            continue
        if cast is None:
            return f"CAST({value} AS {match[1].upper()})"
        if cast in ("DATETIME", "TIME"):
            return f"CAST({value} AS {cast}{match[2] or ''})"
        return f"CAST({value} AS {cast})"
    return value


class MySQLTarget(Target):
    kind = MYSQL
    position_type = _POSITION

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._conn: pymysql.connections.Connection[Any] | None = None
        self._s = ident(self.state)

    # -- connection ---------------------------------------------------------------------------

    def connect(self) -> None:
        dsn = parse_dsn(self.config.dsn)
        with self._errors("connecting"), dsn.tls_errors():
            self._conn = SharedTlsConnection(**dsn.connect_args(), charset=_TEXT,
                                            autocommit=True, connect_timeout=10)
            self._run(_SESSION)

    def close(self) -> None:
        if self._conn is not None:
            with suppress(pymysql.Error):
                self._conn.close()
            self._conn = None

    @property
    def conn(self) -> pymysql.connections.Connection[Any]:
        if self._conn is None or not self._conn.open:
            raise TargetUnavailable(TARGET_GONE)
        return self._conn

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except pymysql.Error as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
            if isinstance(exc, pymysql.OperationalError) and (
                code in _CONNECTION_ERRORS or code >= 2000
            ):
                raise TargetUnavailable(
                    f"target database {self.config.safe_dsn()} failed while {doing}: {exc};"
                    " nothing of this batch was applied, re-run the merge"
                ) from None
            raise TargetError(f"the target refused {doing}: {exc}") from None

    def row_position(self, table: str, key_columns: Sequence[str], types: Mapping[str, str],
                     key: Sequence[str]) -> tuple[bool, object]:
        rows = self._rows(row_position_sql(table, key_columns), list(key))
        return (True, rows[0][0]) if rows else (False, None)

    def delete_row(self, table: str, key_columns: Sequence[str], types: Mapping[str, str],
                   key: Sequence[str], position: object) -> bool:
        with self._errors("deleting a row"):
            return self._run(delete_row_sql(table, key_columns), [*key, position]) > 0

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._errors("querying"), self.conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def _run(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self.conn.cursor() as cursor:
            return int(cursor.execute(sql, params))

    # -- state ------------------------------------------------------------------------------

    def ensure_state(self) -> None:
        s = self._s
        with self._errors("creating the state tables"):
            self._run(f"CREATE DATABASE IF NOT EXISTS {s} CHARACTER SET {_TEXT}")
            self._run(
                f"CREATE TABLE IF NOT EXISTS {s}.merge_log (source VARCHAR(64) NOT NULL,"
                " source_table VARCHAR(200) NOT NULL, target_table VARCHAR(200) NOT NULL,"
                f" last_segment BIGINT NOT NULL, last_position {_POSITION} NOT NULL,"
                f" truncated_at {_POSITION} NOT NULL, events BIGINT NOT NULL,"
                " batches BIGINT NOT NULL, updated_at DATETIME(6) NOT NULL,"
                " PRIMARY KEY (source, source_table, target_table))"
                f" ENGINE=InnoDB CHARACTER SET {_TEXT} COLLATE {_COLLATION}"
            )
            self._run(
                f"CREATE TABLE IF NOT EXISTS {s}.tombstones (target_table VARCHAR(200) NOT NULL,"
                " key_hash BINARY(16) NOT NULL, key_json LONGTEXT NOT NULL,"
                f" position {_POSITION} NOT NULL, deleted_at DATETIME(6) NOT NULL,"
                " PRIMARY KEY (target_table, key_hash))"
                f" ENGINE=InnoDB CHARACTER SET {_TEXT} COLLATE {_COLLATION}"
            )
            # A multi-table DELETE resolves its aliases only with a default database.
            self._run(f"USE {s}")

    def merge_log_rows(self, sql: str, params: Sequence[str]) -> list[tuple[Any, ...]]:
        return list(self._rows(sql.format(s=self._s), params))

    def try_lock(self, stage: str) -> bool:
        return bool(self._rows("SELECT GET_LOCK(%s, 0)", (f"dblog.{stage}",))[0][0] == 1)

    def unlock(self, stage: str) -> None:
        self._rows("SELECT RELEASE_LOCK(%s)", (f"dblog.{stage}",))

    # -- tables -----------------------------------------------------------------------------

    def table_columns(self, table: str) -> dict[str, str] | None:
        schema, name = split_table(table)
        exists = self._rows(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s"
            " AND TABLE_NAME = %s", (schema, name))
        if not exists:
            return None
        rows = self._rows(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, name),
        )
        return {str(n): str(t) for n, t in rows}

    def primary_key(self, table: str) -> list[str]:
        schema, name = split_table(table)
        rows = self._rows(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s"
            " AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (schema, name),
        )
        return [str(r[0]) for r in rows]

    def create_table(self, table: str, columns: Sequence[tuple[str, str]],
                     key: Sequence[str]) -> None:
        schema, _ = split_table(table)
        described = ", ".join(f"{ident(n)} {_formatted(t)}" for n, t in columns)
        primary = ", ".join(ident(k) for k in key)
        with self._errors(f"creating target table {table}"):
            self._run(f"CREATE DATABASE IF NOT EXISTS {ident(schema)}"
                      f" CHARACTER SET {_TEXT}")
            self._run(f"CREATE TABLE IF NOT EXISTS {qualified(table)} ({described},"
                      f" PRIMARY KEY ({primary})) ENGINE=InnoDB"
                      f" CHARACTER SET {_TEXT} COLLATE {_COLLATION}")

    def add_columns(self, table: str, columns: Sequence[tuple[str, str]]) -> None:
        added = ", ".join(f"ADD COLUMN IF NOT EXISTS {ident(n)} {_formatted(t)}"
                          for n, t in columns)
        with self._errors(f"adding columns to target table {table}"):
            self._run(f"ALTER TABLE {qualified(table)} {added}")

    def widened(self, table: str, column: SourceColumn, existing: str) -> str | None:
        return widened(table, column, existing)

    def modify_columns(self, table: str, columns: Sequence[tuple[str, str]]) -> None:
        schema, name = split_table(table)
        nullable = dict(self._rows(
            "SELECT COLUMN_NAME, IS_NULLABLE FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (schema, name)))
        changes = ", ".join(
            f"MODIFY COLUMN {ident(n)} {_formatted(t)}"
            + (" NOT NULL" if nullable.get(n) == "NO" else " NULL")
            for n, t in columns
        )
        with self._errors(f"widening columns of target table {table}"):
            self._run(f"ALTER TABLE {qualified(table)} {changes}")

    def prepare_stage(self, stage: str) -> None:
        staged = self._stage(stage)
        with self._errors("creating the staging table"):
            self._run(f"DROP TABLE IF EXISTS {staged}")
            self._run(
                f"CREATE TABLE {staged} (key_json LONGTEXT, op VARCHAR(1) NOT NULL,"
                f" position {_POSITION} NOT NULL, after_json LONGTEXT, before_json LONGTEXT)"
                f" ENGINE=InnoDB CHARACTER SET {_TEXT} COLLATE {_COLLATION}"
            )

    def stage_table(self, stage: str) -> str:
        return f"{quote_ident(self.state)}.{quote_ident(stage)}"

    def _stage(self, stage: str) -> str:
        """The staging table in a statement run with parameters."""
        return f"{self._s}.{ident(stage)}"

    def jdbc(self) -> tuple[str, dict[str, str]]:
        dsn = parse_dsn(self.config.dsn)
        # jdbc:mysql: makes Spark use its MySQL dialect (backquoted names); MariaDB's
        # Connector/J 2.x accepts that scheme.
        url = (f"jdbc:mysql://{dsn.host}:{dsn.port}/"
               "?rewriteBatchedStatements=true&useUnicode=true&characterEncoding=UTF-8")
        properties = {"driver": "org.mariadb.jdbc.Driver", "user": dsn.user}
        if dsn.password:
            properties["password"] = dsn.password
        try:
            properties.update(dsn.tls.jdbc())
        except ValueError as exc:
            raise ConfigError(f"target {self.config.safe_dsn()}: {exc}") from None
        return url, properties

    # -- apply ------------------------------------------------------------------------------

    def apply(self, batch: Batch, types: Mapping[str, str], retention_h: float) -> Applied:
        conn = self.conn
        with self._errors(f"applying a batch to {batch.target_table}"):
            conn.begin()
            try:
                result = self._apply(batch, types, retention_h)
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
            # DDL would commit the transaction: the staging table goes after it.
            self._run(f"DROP TABLE IF EXISTS {self._stage(batch.stage)}")
        return result

    def _apply(self, batch: Batch, types: Mapping[str, str], retention_h: float) -> Applied:
        s = self._s
        stage = self._stage(batch.stage)
        target = qualified(batch.target_table)
        ids = (batch.source, batch.source_table, batch.target_table)
        self._run(f"INSERT IGNORE INTO {s}.merge_log VALUES (%s, %s, %s, 0, '', '', 0, 0,"
                  " UTC_TIMESTAMP(6))", ids)
        last, truncated_at = self._rows(
            f"SELECT last_segment, truncated_at FROM {s}.merge_log WHERE source = %s"
            " AND source_table = %s AND target_table = %s FOR UPDATE", ids)[0]
        if last != batch.after_segment:
            raise TargetError(
                f"{batch.target_table}: the merge log moved from segment {batch.after_segment}"
                f" to {last} while this batch was staged; another merge ran at the same time."
                " Re-run the merge."
            )
        cut = max(str(truncated_at), batch.truncate_at)
        truncated = bool(batch.truncate_at) and batch.truncate_at > truncated_at
        if truncated:
            self._run(f"DELETE FROM {target} WHERE {_P} IS NULL OR {_P} < %s", (cut,))
            self._run(f"DELETE FROM {s}.tombstones WHERE target_table = %s AND position < %s",
                      (batch.target_table, cut))
        deleted = self._run(self.delete_sql(batch, types), (cut,))
        self._run(
            f"INSERT INTO {s}.tombstones (target_table, key_hash, key_json, position,"
            " deleted_at) SELECT %s, UNHEX(MD5(s.key_json)), s.key_json, s.position,"
            f" UTC_TIMESTAMP(6) FROM {stage} s WHERE s.op = 'd' AND s.position > %s"
            + self._duplicate_tombstone, (batch.target_table, cut))
        upserted = self._run(self.upsert_sql(batch, types),
                             (cut, batch.target_table, batch.target_table))
        self._run(
            f"DELETE tb FROM {s}.tombstones tb JOIN {stage} s"
            f" ON tb.key_hash = UNHEX(MD5(s.key_json)) WHERE {KEYED}"
            " AND tb.target_table = %s AND tb.position < s.position", (batch.target_table,))
        removed, changed = self._apply_derived(batch, types, cut)
        deleted += removed
        self._run(
            f"DELETE FROM {s}.tombstones WHERE target_table = %s AND position <= %s"
            " AND deleted_at < UTC_TIMESTAMP(6) - INTERVAL %s SECOND",
            (batch.target_table, batch.last_position, int(retention_h * 3600)))
        self._run(
            f"UPDATE {s}.merge_log SET last_segment = %s, last_position = %s,"
            " truncated_at = %s, events = events + %s, batches = batches + 1,"
            " updated_at = UTC_TIMESTAMP(6) WHERE source = %s AND source_table = %s"
            " AND target_table = %s",
            (batch.last_segment, batch.last_position, cut, batch.events, *ids))
        return Applied(upserted=upserted, deleted=deleted, truncated=truncated,
                       derived=removed + changed)

    @property
    def _duplicate_tombstone(self) -> str:
        return _DUPLICATE_TOMBSTONE.format(t=f"{self._s}.tombstones")

    def _apply_derived(self, batch: Batch, types: Mapping[str, str], cut: str
                       ) -> tuple[int, int]:
        """The batch's foreign-key action and prune events, in position order: rows deleted
        and rows changed. A run's values go to an indexed temporary table of the target
        columns' types first (``dblog_run``), so that each statement is one scan of the
        table with an index lookup per row, not a scan per event."""
        staged = self._rows(
            f"SELECT position, op, before_json, after_json FROM {self._stage(batch.stage)}"
            " WHERE op IN ('f', 'p') AND position > %s ORDER BY position", (cut,))
        if not staged:
            return 0, 0
        steps = derived.batch_steps(staged, batch.target_table)
        deleted = changed = 0
        for step in steps:
            if isinstance(step, derived.Prune):
                for sql, params in self.prune_sql(batch, types, step):
                    count = self._run(sql, params)
                deleted += count
                continue
            hits = len(step.slots) > 1
            for sql, params in self.run_sql(batch, types, step):
                self._run(sql, params)
            if hits:
                for sql, params in self.hits_sql(batch, step):
                    self._run(sql, params)
            for index, slot in enumerate(step.slots):
                for sql, params in self.action_sql(batch, types, step, index, hits):
                    count = self._run(sql, params)
                if slot.deletes:
                    deleted += count
                else:
                    changed += count
            self._run("DROP TEMPORARY TABLE IF EXISTS dblog_run, dblog_hits")
        return deleted, changed

    def _typed_key(self, batch: Batch, types: Mapping[str, str], alias: str) -> str:
        return typed_key([key_text(f"{alias}.{ident(k)}", types[k]) for k in batch.key])

    def run_sql(self, batch: Batch, types: Mapping[str, str], run: derived.ActionRun
                ) -> list[tuple[str, list[object]]]:
        """``dblog_run``: a row per event of the run, its position and, per slot ``j``, what
        it matches (``m{j}_{k}``, indexed) and sets (``n{j}_{k}``), in columns of the target
        columns' types (made from a SELECT of them: the same types and collations)."""
        target = qualified(batch.target_table)
        by_name = {c.name: c for c in batch.columns}
        names, values, keys = [], [], []
        for j, slot in enumerate(run.slots):
            matches = [f"m{j}_{k}" for k in range(len(slot.columns))]
            keys.append(f"KEY ({', '.join(matches)})")
            for k, column in enumerate(slot.columns):
                names.append((f"m{j}_{k}", column))
                values.append(convert(by_name[column], f"JSON_VALUE(s.before_json,"
                                      f" {_staged_path(j, column)})", types[column]))
                if not slot.deletes:
                    names.append((f"n{j}_{k}", column))
                    values.append(convert(by_name[column], f"JSON_VALUE(s.after_json,"
                                          f" {_staged_path(j, column)})", types[column]))
        columns = ", ".join(f"t.{ident(column)} AS {name}" for name, column in names)
        return [
            ("DROP TEMPORARY TABLE IF EXISTS dblog_run, dblog_hits", []),
            (f"CREATE TEMPORARY TABLE dblog_run (position {_POSITION} NULL,"
             f" {', '.join(keys)}) SELECT {columns} FROM {target} t WHERE 1 = 0", []),
            (f"INSERT INTO dblog_run (position, {', '.join(n for n, _ in names)})"
             f" SELECT s.position, {', '.join(values)} FROM {self._stage(batch.stage)} s"
             " WHERE s.op = 'f' AND s.position BETWEEN %s AND %s", [run.first, run.last]),
        ]

    def _run_rows(self, run: derived.ActionRun, index: int, guard: str) -> str:
        """The join of the table ``t`` with the run's events (``dblog_run r``) whose slot
        ``index`` matches a row older than the event: after ``FROM target t``."""
        match = " AND ".join(f"t.{ident(c)} = r.m{index}_{k}"
                             for k, c in enumerate(run.slots[index].columns))
        return f"JOIN dblog_run r ON {match} WHERE ({guard} IS NULL OR {guard} < r.position)"

    def hits_sql(self, batch: Batch, run: derived.ActionRun
                 ) -> list[tuple[str, list[object]]]:
        """``dblog_hits``: the rows a run of several slots can change, with their positions
        before it (a temporary table is read once per statement: a fill per slot)."""
        keys = ", ".join(f"t.{ident(k)}" for k in batch.key)
        primary = ", ".join(ident(k) for k in batch.key)
        target = qualified(batch.target_table)
        return [(f"CREATE TEMPORARY TABLE dblog_hits (PRIMARY KEY ({primary})) SELECT {keys},"
                 f" t.{_P} AS dblog_pre FROM {target} t WHERE 1 = 0", []),
                *((f"INSERT IGNORE INTO dblog_hits SELECT {keys}, t.{_P} FROM {target} t"
                   f" {self._run_rows(run, index, f't.{_P}')}", [])
                  for index in range(len(run.slots)))]

    def action_sql(self, batch: Batch, types: Mapping[str, str], run: derived.ActionRun,
                   index: int, hits: bool = False) -> list[tuple[str, list[object]]]:
        """The statements of slot ``index`` of a run: tombstones then DELETE, or an UPDATE
        that sets the slot's columns and the event's position. With ``hits`` (a run of
        several slots), rows are met through ``dblog_hits`` and their earlier positions."""
        slot = run.slots[index]
        target = qualified(batch.target_table)
        guard = "h.dblog_pre" if hits else f"t.{_P}"
        rows = self._run_rows(run, index, guard)
        if hits:
            on = " AND ".join(f"h.{ident(k)} = t.{ident(k)}" for k in batch.key)
            rows = f"JOIN dblog_hits h ON {on} {rows}"
        if slot.deletes:
            return [(
                f"INSERT INTO {self._s}.tombstones (target_table, key_hash, key_json,"
                " position, deleted_at) SELECT %s, UNHEX(MD5(d.k)), d.k, MIN(d.position),"
                f" UTC_TIMESTAMP(6) FROM (SELECT {self._typed_key(batch, types, 't')} AS k,"
                f" r.position FROM {target} t {rows}) d GROUP BY d.k"
                + self._duplicate_tombstone, [batch.target_table]),
                (f"DELETE t FROM {target} t {rows}", [])]
        sets = ", ".join(f"t.{ident(c)} = r.n{index}_{k}" for k, c in enumerate(slot.columns))
        position = f"GREATEST(COALESCE(t.{_P}, ''), r.position)" if hits else "r.position"
        joined = rows.replace(" WHERE ", f" SET {sets}, t.{_P} = {position} WHERE ", 1)
        return [(f"UPDATE {target} t {joined}", [])]

    def prune_sql(self, batch: Batch, types: Mapping[str, str], prune: derived.Prune
                  ) -> list[tuple[str, list[object]]]:
        """A prune event's statements: tombstones (at its position) of the rows older than
        the position it names, then their DELETE."""
        target = qualified(batch.target_table)
        older = f"(t.{_P} IS NULL OR t.{_P} < %s)"
        return [(
            f"INSERT INTO {self._s}.tombstones (target_table, key_hash, key_json, position,"
            " deleted_at) SELECT %s, UNHEX(MD5(d.k)), d.k, %s, UTC_TIMESTAMP(6) FROM"
            f" (SELECT {self._typed_key(batch, types, 't')} AS k FROM {target} t"
            f" WHERE {older}) d" + self._duplicate_tombstone,
            [batch.target_table, prune.position, prune.older_than]),
            (f"DELETE t FROM {target} t WHERE {older}", [prune.older_than])]

    def delete_sql(self, batch: Batch, types: Mapping[str, str]) -> str:
        """Delete the target rows of the staged deletes that are newer; parameter the cut."""
        by_name = {c.name: c for c in batch.columns}
        match = " AND ".join(
            f"t.{ident(k)} = "
            + typed(convert(by_name[k], f"JSON_VALUE(s.key_json, '$[{i}]')", types[k]),
                    types[k])
            for i, k in enumerate(batch.key)
        )
        return (f"DELETE t FROM {qualified(batch.target_table)} t JOIN {self._stage(batch.stage)}"
                f" s ON {match} WHERE s.op = 'd' AND s.position > %s"
                f" AND (t.{_P} IS NULL OR t.{_P} < s.position)")

    def upsert_sql(self, batch: Batch, types: Mapping[str, str]) -> str:
        """The upsert of the staged rows; parameters the cut and the target table twice."""
        target = qualified(batch.target_table)
        stage = self._stage(batch.stage)
        names = [ident(c.name) for c in batch.columns]
        record = ", ".join(
            f"j{i} LONGTEXT CHARACTER SET {_TEXT} PATH {_json_path(c.name)}"
            for i, c in enumerate(batch.columns)
        )
        converted = {c.name: convert(c, f"x.j{i}", types[c.name])
                     for i, c in enumerate(batch.columns)}
        values = ", ".join(converted.values())
        key = typed_key([key_text(typed(converted[k], types[k]), types[k]) for k in batch.key])
        tombstone = (f"SELECT 1 FROM {self._s}.tombstones tb WHERE tb.target_table = %s"
                     " AND tb.key_hash = UNHEX(MD5({})) AND tb.position >= s.position")
        newer = f"{target}.{_P} IS NULL OR {target}.{_P} < VALUES({_P})"
        updates = ", ".join(
            f"{target}.{n} = IF({newer}, VALUES({n}), {target}.{n})" for n in names
        )
        return (
            f"INSERT INTO {target} ({', '.join(names)}, {_P})"
            f" SELECT {values}, s.position FROM {stage} s"
            f" CROSS JOIN JSON_TABLE(s.after_json, '$' COLUMNS ({record})) AS x"
            f" WHERE {KEYED} AND s.position > %s"
            f" AND NOT EXISTS ({tombstone.format('s.key_json')})"
            f" AND NOT EXISTS ({tombstone.format(key)})"
            f" ON DUPLICATE KEY UPDATE {updates},"
            f" {target}.{_P} = IF({newer}, VALUES({_P}), {target}.{_P})"
        )
