"""The quickstart on the object store and a lake target (``./scripts/quickstart --lake``).

Used by ``scripts/quickstart.py``: a private SeaweedFS (``weed server -s3``, the object store
the tests use) holds the landing zone (``s3://dblog/landing``); the Iceberg tables live in the
run directory's ``warehouse`` (``dblog verify`` and the repair read them through pyiceberg,
which a lake target gives no S3 endpoint yet) and their catalog is a JDBC catalog in a database
of the PostgreSQL source's server (``lake_catalog``). The merge runs on Spark 3.5
(``.tools/spark35``, which ``scripts/install`` sets up: Iceberg publishes no runtime for the
main environment's Spark 4.2) with the Iceberg runtime and Hadoop 3.3.4's S3A connector
(``hadoop-aws`` 3.3.4 and the AWS SDK v1 modules it calls: Spark 3.5 ships Hadoop 3.3.4).
Credentials are the store's test identity, in the environment of every process the quickstart
starts, never in a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict
from quickstart_shop import Failed, Shop

from dblog_worker import config as config_module
from dblog_worker.config_lake import LakeConfig
from dblog_worker.lake.iceberg import CATALOG
from dblog_worker.lake.read import open_table
from dblog_worker.landing.s3_objects import S3Location
from tests.lake import LAKE_JARS, S3A_SPARK35_JARS, SPARK35
from tests.services import SeaweedServer

__all__ = ["BUCKET", "CATALOG", "CATALOG_DATABASE", "SPARK35", "corrupt_table", "landing_root",
           "landing_section", "merge_section", "missing", "object_store", "spark_home",
           "target_section", "warehouse"]

BUCKET = "dblog"
CATALOG_DATABASE = "lake_catalog"


def spark_home() -> Path:
    """Spark 3.5's home: the pyspark folder of .tools/spark35 (its spark-submit would
    otherwise look for its home with the Python of PYSPARK_PYTHON, the job's: Spark 4.2)."""
    found = sorted(SPARK35.glob("lib/python3*/site-packages/pyspark"))
    return found[0] if found else SPARK35 / "pyspark"


def missing() -> list[str]:
    """What ``scripts/install`` puts in place and is not there."""
    needed = [SPARK35 / "bin" / "spark-submit", spark_home() / "jars",
              *LAKE_JARS["iceberg"], *S3A_SPARK35_JARS]
    return [str(path) for path in needed if not path.exists()]


@contextlib.contextmanager
def object_store() -> Iterator[SeaweedServer]:
    """A private SeaweedFS with the quickstart's bucket; its credentials in this process's
    environment, which every child inherits."""
    with SeaweedServer().start() as store:
        store.create_bucket(BUCKET)
        os.environ.update(store.env())
        yield store


def warehouse(run_dir: Path) -> str:
    return str(run_dir / "warehouse")


def landing_section(store: SeaweedServer) -> str:
    return (f'path = "s3://{BUCKET}/landing"\n'
            f'flush_interval_s = 1.0\n\n'
            f'[landing.s3]\nendpoint = "{store.endpoint}"\nregion = "us-east-1"\n'
            'path_style = true\n')


def landing_root(store: SeaweedServer) -> S3Location:
    return S3Location.parse(f"s3://{BUCKET}/landing", endpoint=store.endpoint,
                            region="us-east-1", path_style=True)


def target_section(shop: Shop, catalog_dsn: str, run_dir: Path) -> str:
    """An Iceberg target: the warehouse in ``run_dir``, the JDBC catalog in
    ``catalog_dsn``'s database, each source's tombstones in a namespace of its own."""
    params = conninfo_to_dict(catalog_dsn)
    uri = f"jdbc:postgresql://{params['host']}:{params['port']}/{params['dbname']}"
    return (f'[target]\nkind = "iceberg"\nwarehouse = {json.dumps(warehouse(run_dir))}\n'
            f'catalog = "jdbc"\ncatalog_uri = "{uri}"\ncatalog_user = "{params["user"]}"\n'
            f'state_schema = "dblog_{shop.source}"\n')


def merge_section() -> str:
    """Spark 3.5 with the Iceberg runtime, PostgreSQL's JDBC driver (the catalog) and S3A."""
    jars = ["/usr/share/java/postgresql.jar", *map(str, LAKE_JARS["iceberg"])]
    python = str(SPARK35 / "bin" / "python")
    return (f"[merge]\njars = {json.dumps(jars)}\n"
            f"s3a_jars = {json.dumps([str(path) for path in S3A_SPARK35_JARS])}\n"
            "# No Spark UI (it would take port 4040); a few shuffle partitions for small\n"
            "# batches; the job's Python is Spark 3.5's.\n"
            "[merge.spark_conf]\n"
            '"spark.ui.enabled" = "false"\n"spark.sql.shuffle.partitions" = "4"\n'
            f'"spark.pyspark.python" = "{python}"\n"spark.pyspark.driver.python" = "{python}"\n'
            '"spark.driver.extraJavaOptions" = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"\n')


def lake_of(config: Path) -> LakeConfig:
    lake = config_module.load(config).require_target().lake
    assert lake is not None
    return lake


def corrupt_table(config: Path, table: str, changed: int, deleted: int, copied: int,
                  extra: int) -> None:
    """Damage the Iceberg table of ``table`` through pyiceberg, as another engine would: the
    name of ``changed`` changed, ``deleted`` deleted, a copy of ``copied`` added as
    ``extra`` (without a position: the merge never wrote it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = open_table(lake_of(config), table)
    if found is None:
        raise Failed(f"the Iceberg table of {table} does not exist after the merge")
    handle = found.handle
    with warnings.catch_warnings():  # pyiceberg rewrites the files of a merge-on-read table
        warnings.filterwarnings("ignore", "Merge on read is not yet supported", UserWarning)
        row = handle.scan(row_filter=f"id = {changed}").to_arrow()
        names = row.schema.get_field_index("name")
        row = row.set_column(names, "name", pa.array(["corrupted"] * row.num_rows))
        schema = handle.schema().as_arrow()  # the key NOT NULL, as the table has it
        handle.refresh().overwrite(row.cast(schema), overwrite_filter=f"id = {changed}")
        handle.refresh().delete(f"id = {deleted}")
        copy = handle.refresh().scan(row_filter=f"id = {copied}").to_arrow()
        copy = copy.set_column(copy.schema.get_field_index("id"), "id",
                               pc.cast(pa.array([extra] * copy.num_rows), copy["id"].type))
        position = copy.schema.get_field_index("_dblog_position")
        copy = copy.set_column(position, "_dblog_position",
                               pa.array([None] * copy.num_rows, pa.string()))
        handle.refresh().append(copy.cast(schema))
    if row.num_rows != 1 or copy.num_rows != 1:
        raise Failed(f"corrupting the Iceberg table of {table} found {row.num_rows} and "
                     f"{copy.num_rows} rows, not one each")
