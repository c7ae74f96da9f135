"""An Iceberg target whose warehouse is in an S3-compatible store, read without a JVM (what
``dblog verify`` and the repair do): pyiceberg finds the store's endpoint in the variables the
AWS SDKs read (docker-compose.yml's worker-lake sets ``AWS_ENDPOINT_URL``), or in the
configuration: the warehouse in the S3 landing zone's store."""

from __future__ import annotations

import socket
import time

import pyarrow as pa
import pytest

from dblog_worker import config as config_module
from dblog_worker.config_lake import LakeConfig
from dblog_worker.errors import TargetUnavailable
from dblog_worker.lake.iceberg import CATALOG
from dblog_worker.lake.read import read_table, s3_properties, sqlalchemy_url
from tests.lake import catalog_database
from tests.services import SeaweedServer


def test_s3_properties_follow_the_aws_variables() -> None:
    assert s3_properties({}) == {}
    assert s3_properties({"AWS_ENDPOINT_URL": "http://a:1", "AWS_DEFAULT_REGION": "eu-west-1"}
                         ) == {"s3.endpoint": "http://a:1", "s3.region": "eu-west-1"}
    assert s3_properties({"AWS_ENDPOINT_URL": "http://a:1", "AWS_ENDPOINT_URL_S3": "http://b:2",
                          "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "eu-west-1"}
                         ) == {"s3.endpoint": "http://b:2", "s3.region": "us-east-1"}


def write_customers(lake: LakeConfig, endpoint: str) -> pa.Table:
    """The table ``shop_lake.customers`` of ``lake``, written by pyiceberg (the merge's
    Spark is told the endpoint explicitly too); its rows."""
    from pyiceberg.catalog.sql import SqlCatalog

    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                     "name": pa.array(["a", "b", None], pa.string())})
    writer = SqlCatalog(CATALOG, uri=sqlalchemy_url(lake), warehouse=lake.warehouse,
                        **{"s3.endpoint": endpoint, "s3.region": "us-east-1"})
    try:
        writer.create_namespace("shop_lake")
        writer.create_table(("shop_lake", "customers"), schema=rows.schema).append(rows)
    finally:
        writer.engine.dispose()
    return rows


def test_an_iceberg_table_on_s3_is_read_with_the_endpoint_of_the_environment(
        seaweed_server: SeaweedServer, s3_bucket: str, pg_dsn: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    uri, user = catalog_database(pg_dsn)
    lake = LakeConfig(format="iceberg", warehouse=f"s3a://{s3_bucket}/warehouse",
                      catalog="jdbc", catalog_uri=uri, catalog_user=user)
    rows = write_customers(lake, seaweed_server.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", seaweed_server.endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    found = read_table(lake, "shop_lake.customers")
    assert found is not None
    assert found.sort_by("id").to_pylist() == rows.to_pylist()
    assert read_table(lake, "shop_lake.orders") is None


def test_an_iceberg_table_in_the_landing_zones_store_is_read_with_its_options(
        seaweed_server: SeaweedServer, s3_bucket: str, pg_dsn: str) -> None:
    """No ``AWS_ENDPOINT_URL``: the warehouse (no ``[target.s3]``) is in the store of
    ``[landing.s3]``, whose endpoint pyiceberg is given."""
    uri, user = catalog_database(pg_dsn)
    config = config_module.parse({
        "source": {"name": "s", "dsn": "host=x", "tables": ["shop_lake.customers"]},
        "redis": {"url": "redis://x"},
        "landing": {"path": f"s3://{s3_bucket}/landing",
                    "s3": {"endpoint": seaweed_server.endpoint, "path_style": True}},
        "target": {"kind": "iceberg", "warehouse": f"s3a://{s3_bucket}/warehouse",
                   "catalog": "jdbc", "catalog_uri": uri, "catalog_user": user},
    }, {})
    lake = config.require_target().lake
    assert lake is not None and lake.s3 is not None
    assert lake.s3.endpoint == seaweed_server.endpoint
    rows = write_customers(lake, seaweed_server.endpoint)
    found = read_table(lake, "shop_lake.customers")
    assert found is not None
    assert found.sort_by("id").to_pylist() == rows.to_pylist()


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_a_warehouse_store_that_does_not_answer_is_target_unavailable(
        kind: str, seaweed_server: SeaweedServer, s3_bucket: str, pg_dsn: str) -> None:
    """``[target.s3]`` at a port nothing listens on: verify's reader says so on one line
    (TargetUnavailable: verify's exit status 3), it does not crash."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri, user = catalog_database(pg_dsn)
    catalog = {"catalog": "jdbc", "catalog_uri": uri, "catalog_user": user} \
        if kind == "iceberg" else {}
    if kind == "iceberg":  # the catalog knows the table; its files are out of reach
        write_customers(LakeConfig(format="iceberg", warehouse=f"s3a://{s3_bucket}/warehouse",
                                   catalog="jdbc", catalog_uri=uri, catalog_user=user),
                        seaweed_server.endpoint)
    config = config_module.parse({
        "source": {"name": "s", "dsn": "host=x", "tables": ["shop_lake.customers"]},
        "redis": {"url": "redis://x"}, "landing": {"path": "/tmp/landing"},
        "target": {"kind": kind, "warehouse": f"s3a://{s3_bucket}/warehouse", **catalog,
                   "s3": {"endpoint": f"http://127.0.0.1:{port}", "path_style": True}},
    }, {})
    lake = config.require_target().lake
    assert lake is not None
    started = time.monotonic()
    with pytest.raises(TargetUnavailable) as raised:
        read_table(lake, "shop_lake.customers")
    message = str(raised.value)
    assert "\n" not in message and "cannot be read" in message, message
    assert time.monotonic() - started < 60
