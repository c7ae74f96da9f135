"""A lake table read without a JVM: pyiceberg for Iceberg (its JDBC catalog through
SQLAlchemy and psycopg, or a Hadoop catalog's newest metadata file), deltalake (delta-rs)
for Delta. ``dblog verify`` and the tests read lake targets so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from dblog_worker.config_lake import LakeConfig
from dblog_worker.errors import TargetError
from dblog_worker.lake.delta import table_path
from dblog_worker.lake.iceberg import CATALOG
from dblog_worker.names import split_table

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["read_table", "sqlalchemy_url"]


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


def read_table(lake: LakeConfig, table: str) -> pa.Table | None:
    """The rows of ``table`` (``schema.table``); None if it does not exist."""
    if lake.format == "delta":
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(table_path(lake, table)).to_pyarrow_table()
        except TableNotFoundError:
            return None
    schema, name = split_table(table)
    if lake.catalog == "jdbc":
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.exceptions import NoSuchTableError

        catalog = SqlCatalog(CATALOG, uri=sqlalchemy_url(lake), warehouse=lake.warehouse)
        try:
            return catalog.load_table((schema, name)).scan().to_arrow()
        except NoSuchTableError:
            return None
        finally:
            catalog.engine.dispose()
    from pyiceberg.table import StaticTable

    metadata = Path(lake.warehouse.removeprefix("file:")) / schema / name / "metadata"
    hint = metadata / "version-hint.text"
    if not hint.is_file():
        return None
    version = hint.read_text().strip()
    found = metadata / f"v{version}.metadata.json"
    if not found.is_file():
        raise TargetError(f"{found} is missing: the Hadoop catalog's table {table} is damaged")
    return StaticTable.from_metadata(str(found)).scan().to_arrow()
