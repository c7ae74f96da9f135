"""A lake table without a JVM: pyiceberg for Iceberg (its JDBC catalog through SQLAlchemy
and psycopg, or a Hadoop catalog's newest metadata file), deltalake (delta-rs) for Delta.
``dblog verify`` reads lake targets so, the repair DAG deletes extra rows so, and the tests
read them so.

:func:`delete_rows` deletes rows by key, each only where it still has the position it was
read with: a row the merge wrote meanwhile (a newer position) is kept. Iceberg commits the
delete on the snapshot it read (a concurrent commit fails it: read again, delete again);
Delta checks the commit against the commits since its read the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from dblog_worker.config_lake import LakeConfig
from dblog_worker.errors import TargetError, TargetUnavailable
from dblog_worker.lake.delta import table_path
from dblog_worker.lake.format import EMPTY, KEY_PROPERTY, LOG_PROPERTY, MergeLog
from dblog_worker.lake.iceberg import CATALOG
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.names import split_table

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["LakeTable", "check_catalog", "check_reachable", "delete_rows",
           "delta_storage_options", "delta_uri", "merge_log_of", "one_line", "open_table",
           "partition_columns", "read_table", "s3_properties", "sqlalchemy_url"]

POSITION = "_dblog_position"
DELETE_ATTEMPTS = 5  # a delete that meets a concurrent commit reads the rows again

logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)  # "v0 schema": Java's


def s3_properties(environ: Mapping[str, str], store: S3Location | None = None
                  ) -> dict[str, str]:
    """pyiceberg's S3 options: the warehouse's store (``[target.s3]``, or the S3 landing
    zone's) where it names them, else the variables the AWS SDKs read: the endpoint
    (``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``: a self-hosted store's, addressed
    path-style) and the region (``AWS_REGION``, else ``AWS_DEFAULT_REGION``). pyarrow's S3
    file system, which pyiceberg reads an ``s3a://`` warehouse with, takes the credentials
    from the environment but not the endpoint."""
    properties = {}
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        properties["s3.endpoint"] = endpoint
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        properties["s3.region"] = region
    if store is not None:
        properties["s3.region"] = store.region
        if store.endpoint:
            properties["s3.endpoint"] = store.endpoint
            properties["s3.force-virtual-addressing"] = "false" if store.path_style else "true"
    return properties


def delta_storage_options(store: S3Location | None) -> dict[str, str]:
    """delta-rs's options for a Delta warehouse on S3 (``[target.s3]``, or the S3 landing
    zone's store): its endpoint (plain HTTP allowed only when the endpoint says http://),
    region and addressing. Credentials are not options: delta-rs finds them in the
    environment and the standard AWS chain, as the worker does. Without a store, delta-rs
    reads the ``AWS_*`` variables itself."""
    if store is None:
        return {}
    options = {"AWS_REGION": store.region,
               "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false" if store.path_style else "true"}
    if store.endpoint:
        options["AWS_ENDPOINT_URL"] = store.endpoint
        if store.endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    return options


def delta_uri(lake: LakeConfig, table: str) -> str:
    """A Delta table's location as delta-rs opens it: Spark's ``s3a://`` is its ``s3://``."""
    path = table_path(lake, table)
    return "s3://" + path[len("s3a://"):] if path.startswith("s3a://") else path


def sqlalchemy_url(lake: LakeConfig) -> str:
    """The JDBC catalog's database as SQLAlchemy names it (psycopg 3 for PostgreSQL)."""
    from sqlalchemy.engine import URL

    parts = urlsplit(lake.catalog_uri.removeprefix("jdbc:"))
    scheme = parts.scheme
    driver = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql",
              "mariadb": "mysql+pymysql"}.get(scheme, scheme)
    return URL.create(driver, username=lake.catalog_user or None,
                      password=lake.catalog_password or None, host=parts.hostname,
                      port=parts.port, database=parts.path.lstrip("/")
                      ).render_as_string(hide_password=False)


@dataclass
class LakeTable:
    """One lake table as loaded: pyiceberg's ``Table`` or deltalake's ``DeltaTable``."""

    lake: LakeConfig
    name: str  # schema.table
    handle: Any

    def arrow(self) -> pa.Table:
        return self.batches().read_all()

    def batches(self) -> pa.RecordBatchReader:
        """The rows, a batch at a time (memory bounded by a batch, not the table). Delta
        through delta-rs's query engine: its pyarrow dataset ignores column mapping."""
        if self.lake.format == "delta":
            import pyarrow as pa
            from deltalake import QueryBuilder

            found = QueryBuilder().register("t", self.handle).execute("SELECT * FROM t")
            return pa.RecordBatchReader.from_stream(found)
        return self.handle.scan().to_arrow_batch_reader()

    def properties(self) -> dict[str, str]:
        if self.lake.format == "delta":
            return dict(self.handle.metadata().configuration)
        return dict(self.handle.properties)

    def key(self) -> list[str]:
        import json

        found = self.properties().get(KEY_PROPERTY)
        key = json.loads(found) if found else []
        return [str(k) for k in key] if isinstance(key, list) else []

    def comments(self) -> dict[str, str]:
        """Each column's comment (``dblog:time`` marks a source's time of day)."""
        if self.lake.format == "delta":
            return {f.name: str(f.metadata.get("comment", "")) for f in self.handle.schema().fields}
        return {f.name: f.doc or "" for f in self.handle.schema().fields}


@contextlib.contextmanager
def _catalog(lake: LakeConfig) -> Iterator[Any]:
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import OperationalError

    try:
        catalog = SqlCatalog(CATALOG, uri=sqlalchemy_url(lake), warehouse=lake.warehouse,
                             **s3_properties(os.environ, lake.s3))
    except OperationalError as exc:
        raise TargetUnavailable(f"the Iceberg catalog ({lake.catalog_uri}) is unreachable:"
                                f" {str(exc.orig).strip().splitlines()[0]}") from None
    try:
        yield catalog
    except OperationalError as exc:
        raise TargetUnavailable(f"the Iceberg catalog ({lake.catalog_uri}) is unreachable:"
                                f" {str(exc.orig).strip().splitlines()[0]}") from None
    finally:
        catalog.engine.dispose()


def one_line(exc: BaseException) -> str:
    """A reader's error (delta-rs's chain of causes, pyarrow's) as one line, without
    colours and markers."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [line.strip().lstrip("\u21b3").strip() for line in text.splitlines()]
    return "; ".join(line for line in lines if line)[:500]


def check_catalog(lake: LakeConfig) -> None:
    """TargetUnavailable unless an Iceberg JDBC catalog's database answers; nothing to check
    for a catalog that is the warehouse itself (a merge creates it), or without pyiceberg
    (a Spark driver with the ``spark`` extra only: the job's session checks it)."""
    if lake.format != "iceberg" or lake.catalog != "jdbc":
        return
    try:
        import pyiceberg.catalog.sql  # noqa: F401
    except ImportError:
        return
    with _catalog(lake) as catalog, catalog.engine.connect():
        return


def check_reachable(lake: LakeConfig) -> None:
    """TargetUnavailable unless the lake's catalog answers (a JDBC catalog's database) or
    its warehouse exists (a local one)."""
    if lake.format == "iceberg" and lake.catalog == "jdbc":
        with _catalog(lake) as catalog, catalog.engine.connect():
            return
    if "://" not in lake.warehouse.removeprefix("file://") and \
            not Path(lake.warehouse.removeprefix("file:")).is_dir():
        raise TargetUnavailable(f"the warehouse {lake.warehouse} does not exist")


def open_table(lake: LakeConfig, table: str) -> LakeTable | None:
    """``table`` (``schema.table``) of a lake target; None if it does not exist.
    TargetUnavailable when the JDBC catalog's database is unreachable."""
    if lake.format == "delta":
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        uri = delta_uri(lake, table)
        try:
            return LakeTable(lake, table, DeltaTable(
                uri, storage_options=delta_storage_options(lake.s3) or None))
        except TableNotFoundError:
            return None
        except OSError as exc:  # delta-rs: the store unreachable or refusing
            raise TargetUnavailable(f"the Delta table {uri} cannot be read:"
                                    f" {one_line(exc)}") from None
    schema, name = split_table(table)
    if lake.catalog == "jdbc":
        from pyiceberg.exceptions import NoSuchTableError

        with _catalog(lake) as catalog:
            try:
                return LakeTable(lake, table, catalog.load_table((schema, name)))
            except NoSuchTableError:
                return None
            except OSError as exc:  # pyarrow: the warehouse's store unreachable or refusing
                raise TargetUnavailable(f"the Iceberg table {table} in {lake.warehouse} cannot"
                                        f" be read: {one_line(exc)}") from None
    from pyiceberg.table import StaticTable

    metadata = Path(lake.warehouse.removeprefix("file:")) / schema / name / "metadata"
    hint = metadata / "version-hint.text"
    if not hint.is_file():
        return None
    version = hint.read_text().strip()
    found = metadata / f"v{version}.metadata.json"
    if not found.is_file():
        raise TargetError(f"{found} is missing: the Hadoop catalog's table {table} is damaged")
    return LakeTable(lake, table, StaticTable.from_metadata(str(found)))


def read_table(lake: LakeConfig, table: str) -> pa.Table | None:
    """The rows of ``table`` (``schema.table``); None if it does not exist."""
    found = open_table(lake, table)
    return None if found is None else found.arrow()


def partition_columns(lake: LakeConfig, table: str) -> list[str]:
    """The table's partition fields: Iceberg's as ``transform:column``
    (``bucket[4]:id``), Delta's columns."""
    found = open_table(lake, table)
    if found is None:
        return []
    if lake.format == "delta":
        return list(found.handle.metadata().partition_columns)
    schema = found.handle.schema()
    return [f"{f.transform}:{schema.find_column_name(f.source_id)}"
            for f in found.handle.spec().fields]


def merge_log_of(lake: LakeConfig, table: str) -> MergeLog:
    """The table's merge log: the newer of its newest commit's and its property's."""
    found = open_table(lake, table)
    if found is None:
        return EMPTY
    copied = MergeLog.parse(found.properties().get(LOG_PROPERTY)) or EMPTY
    if lake.format == "delta":
        for commit in found.handle.history():  # newest first
            logged = MergeLog.parse(commit.get("userMetadata"))
            if logged is not None:
                return logged.newer(copied)
        return copied
    snapshot = found.handle.current_snapshot()
    while snapshot is not None:
        logged = MergeLog.parse((snapshot.summary or {}).get(LOG_PROPERTY))
        if logged is not None:
            return logged.newer(copied)
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else found.handle.snapshot_by_id(parent)
    return copied


def delete_rows(lake: LakeConfig, table: str, key_columns: Sequence[str],
                rows: Mapping[tuple[object, ...], str | None]) -> list[tuple[object, ...]]:
    """Delete each row whose key (values typed as the table's columns) is in ``rows``, only
    where it still has the position given (None: a row the merge did not write); the keys
    deleted."""
    if not rows:
        return []
    if lake.format == "iceberg" and lake.catalog != "jdbc":
        raise TargetError(f"{table}: extra rows of an Iceberg table in a Hadoop catalog cannot"
                          " be deleted without Spark (pyiceberg reads such a table, it cannot"
                          " commit to it); delete them with Spark SQL, or use"
                          ' target.catalog = "jdbc"')
    for _attempt in range(DELETE_ATTEMPTS):
        found = open_table(lake, table)
        if found is None:
            return []
        present = _positions(found, key_columns, list(rows))
        doomed = [k for k, position in rows.items() if k in present and present[k] == position]
        if not doomed:
            return []
        if _delete(found, key_columns, {k: rows[k] for k in doomed}):
            return doomed
    raise TargetError(f"{table}: the delete of extra rows met a concurrent commit"
                      f" {DELETE_ATTEMPTS} times; run the repair again")


def _positions(found: LakeTable, key_columns: Sequence[str],
               keys: Sequence[tuple[object, ...]]) -> dict[tuple[object, ...], str | None]:
    table = found.arrow().select([*key_columns, POSITION])
    wanted = set(keys)
    result: dict[tuple[object, ...], str | None] = {}
    for row in table.to_pylist():
        key = tuple(row[c] for c in key_columns)
        if key in wanted:
            result[key] = row[POSITION]
    return result


def _delete(found: LakeTable, key_columns: Sequence[str],
            rows: Mapping[tuple[object, ...], str | None]) -> bool:
    """One commit deleting ``rows`` where their position is still the one given; False if
    a concurrent commit refused it (read again)."""
    predicate = " OR ".join(_row_predicate(found.lake.format, key_columns, key, position)
                            for key, position in rows.items())
    if found.lake.format == "delta":
        from deltalake.exceptions import CommitFailedError

        try:
            found.handle.delete(predicate)
        except CommitFailedError:
            return False
        return True
    from pyiceberg.exceptions import CommitFailedException

    try:
        with warnings.catch_warnings():  # the table is merge-on-read; pyiceberg rewrites files
            warnings.filterwarnings("ignore", "Merge on read is not yet supported",
                                    UserWarning)
            found.handle.delete(predicate)
    except CommitFailedException:
        return False
    finally:  # the commit reopened the catalog's pool that open_table had closed
        engine = getattr(found.handle.catalog, "engine", None)
        if engine is not None:
            engine.dispose()
    return True


def _row_predicate(kind: str, key_columns: Sequence[str], key: tuple[object, ...],
                   position: str | None) -> str:
    """One row's key and position as a filter: delta-rs's SQL (names in backquotes) or
    pyiceberg's row filter (names in double quotes)."""
    def name(text: str) -> str:
        mark = "`" if kind == "delta" else '"'
        return mark + text.replace(mark, mark * 2) + mark

    parts = [f"{name(c)} = {_literal(v)}" for c, v in zip(key_columns, key, strict=True)]
    parts.append(f"{name(POSITION)} IS NULL" if position is None
                 else f"{name(POSITION)} = {_literal(position)}")
    return "(" + " AND ".join(parts) + ")"


def _literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, bytes):
        return "X'" + value.hex() + "'"
    return "'" + str(value).replace("'", "''") + "'"
