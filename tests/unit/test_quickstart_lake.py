"""The configuration ``./scripts/quickstart --lake`` writes loads as the worker, ``dblog merge``
and ``dblog verify`` load it: an s3:// landing zone on the store's endpoint, an Iceberg
target in a JDBC catalog, and the merge on Spark 3.5 with the jars scripts/install fetches
(the same names as the lake tests'). Without a server: the end-to-end run is
tests/integration/test_demo.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dblog_worker import config as config_module
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.merge.submit import s3a_conf
from tests.lake import LAKE_JARS, S3A_SPARK35_JARS, SPARK35

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import quickstart  # type: ignore[import-not-found]  # noqa: E402
import quickstart_lake  # type: ignore[import-not-found]  # noqa: E402
from quickstart_shop import (  # type: ignore[import-not-found]  # noqa: E402
    PostgresLakeShop,
    write_config,
)


class Store:
    endpoint = "http://127.0.0.1:8333"


def lake_config(tmp_path: Path) -> Path:
    shop = PostgresLakeShop.__new__(PostgresLakeShop)  # no server: only its names
    shop.dsn = "host=127.0.0.1 port=5432 dbname=shop user=postgres"
    store = Store()
    path = tmp_path / "shop_pg.toml"
    write_config(path, shop, "redis://127.0.0.1:6379/0", tmp_path / "landing", lake=(
        quickstart_lake.landing_section(store),
        quickstart_lake.target_section(
            shop, "host=127.0.0.1 port=5433 dbname=lake_catalog user=postgres", tmp_path),
        quickstart_lake.merge_section()))
    return path


def test_the_lake_configuration_loads(tmp_path: Path) -> None:
    config = config_module.load(lake_config(tmp_path), {})
    landing = config.landing_path
    assert isinstance(landing, S3Location)
    assert landing == quickstart_lake.landing_root(Store())
    assert s3a_conf(landing)["spark.hadoop.fs.s3a.endpoint"] == Store.endpoint
    assert s3a_conf(landing)["spark.hadoop.fs.s3a.path.style.access"] == "true"
    target = config.require_target()
    lake = target.lake
    assert lake is not None
    assert (lake.format, lake.catalog, lake.catalog_uri, lake.warehouse) == (
        "iceberg", "jdbc", "jdbc:postgresql://127.0.0.1:5433/lake_catalog",
        str(tmp_path / "warehouse"))
    assert target.state_schema == "dblog_shop_pg"
    assert config.merge.jars == ("/usr/share/java/postgresql.jar",
                                 *map(str, LAKE_JARS["iceberg"]))
    assert config.merge.s3a_jars == tuple(map(str, S3A_SPARK35_JARS))
    python = str(SPARK35 / "bin" / "python")
    assert config.merge.spark_conf["spark.pyspark.python"] == python
    assert config.merge.spark_conf["spark.pyspark.driver.python"] == python
    assert "AWS_" not in lake_config(tmp_path).read_text()  # credentials: environment only


def test_the_lake_shop_has_no_array_column() -> None:
    assert "text[]" not in PostgresLakeShop.SCHEMA_SQL
    assert "tags        jsonb," in PostgresLakeShop.SCHEMA_SQL
    assert "ARRAY['vip'" not in PostgresLakeShop.FILL_CUSTOMERS
    assert PostgresLakeShop.tags(PostgresLakeShop.__new__(PostgresLakeShop), ["vip"]) == \
        '["vip"]'


def test_lake_needs_the_postgresql_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert quickstart.parse_args(["--lake"]).lake
    assert quickstart.parse_args(["--lake", "--source", "postgresql"]).sources == ["postgresql"]
    with pytest.raises(SystemExit):
        quickstart.parse_args(["--lake", "--source", "mariadb"])
    assert "--lake keeps the Iceberg catalog in the PostgreSQL" in capsys.readouterr().err


def test_repaired_keys_come_from_the_compare_tasks_spec() -> None:
    spec = '{"kind": "keys", "keys": [["3"], ["2"], ["90000001"]]}'
    assert quickstart._repaired_keys({"spec": spec, "extra": []}) == ["3", "2", "90000001"]
    assert quickstart._repaired_keys({}) == []
