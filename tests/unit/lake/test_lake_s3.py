"""A lake warehouse on S3, whatever the landing zone is: ``[target.s3]`` (or the S3 landing
zone's store), the S3A options and jars of the merge job (per bucket when the two stores
differ), and the options verify's readers (pyiceberg, delta-rs) open the warehouse with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dblog_worker import config as config_module
from dblog_worker.errors import ConfigError, ConfigInvalid
from dblog_worker.lake.read import delta_storage_options, delta_uri, one_line, s3_properties
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.merge.submit import check_jars, merge_job

STORE = {"endpoint": "http://127.0.0.1:8333", "path_style": True}
S3A = "spark.hadoop.fs.s3a."


def parse(warehouse: str, target_s3: dict[str, Any] | None = None,
          landing: str = "/tmp/l", landing_s3: dict[str, Any] | None = None,
          kind: str = "delta", s3a_jars: list[str] | None = None,
          jars: list[str] | None = None) -> config_module.Config:
    target: dict[str, Any] = {"kind": kind, "warehouse": warehouse}
    if target_s3 is not None:
        target["s3"] = target_s3
    landing_section: dict[str, Any] = {"path": landing}
    if landing_s3 is not None:
        landing_section["s3"] = landing_s3
    return config_module.parse({
        "source": {"name": "s", "dsn": "host=x", "tables": ["public.a"]},
        "redis": {"url": "redis://x"}, "landing": landing_section, "target": target,
        "merge": {"jars": jars or [], "s3a_jars": s3a_jars or ["/nowhere/hadoop-aws.jar"]},
    }, {})


def warehouse_store(config: config_module.Config) -> S3Location | None:
    lake = config.require_target().lake
    assert lake is not None
    return lake.s3


def job_conf(config: config_module.Config) -> tuple[tuple[str, ...], dict[str, str]]:
    job = merge_job(config, Path("w.toml"), "spark://cluster:7077")
    return job.jars, job.conf


def test_a_warehouse_on_s3_with_its_own_store_and_a_posix_landing_zone(tmp_path: Path
                                                                      ) -> None:
    config = parse("s3a://lake/wh", STORE)
    assert warehouse_store(config) == S3Location("lake", "wh", "http://127.0.0.1:8333",
                                                 path_style=True)
    jars, conf = job_conf(config)
    assert jars == ("/nowhere/hadoop-aws.jar",)
    assert {k: v for k, v in conf.items() if k.startswith(S3A)} == {
        f"{S3A}endpoint": "http://127.0.0.1:8333", f"{S3A}endpoint.region": "us-east-1",
        f"{S3A}path.style.access": "true", f"{S3A}connection.ssl.enabled": "false"}
    delta = [str(tmp_path / "delta-spark_2.12-3.3.2.jar")]
    Path(delta[0]).touch()
    with pytest.raises(ConfigInvalid, match=r"S3A jars .* landing zone or warehouse"):
        check_jars(parse("s3a://lake/wh", STORE, jars=delta))
    (tmp_path / "hadoop-aws.jar").touch()
    check_jars(parse("s3a://lake/wh", STORE, jars=delta,
                     s3a_jars=[str(tmp_path / "hadoop-aws.jar")]))
    # a local warehouse and a local landing zone: no S3A at all
    jars, conf = job_conf(parse("/srv/wh"))
    assert jars == () and not any(k.startswith(S3A) for k in conf)
    check_jars(parse("/srv/wh", jars=delta))  # the S3A jars are not needed


def test_a_warehouse_on_s3_without_options_takes_each_clients_defaults(tmp_path: Path
                                                                       ) -> None:
    """A local landing zone and no ``[target.s3]``: AWS's S3 as S3A and the readers find
    it (S3A's defaults and merge.spark_conf; the AWS_* variables of verify's readers)."""
    config = parse("s3a://lake/wh")
    lake = config.require_target().lake
    assert lake is not None and lake.on_s3 and lake.s3 is None
    jars, conf = job_conf(config)
    assert jars == ("/nowhere/hadoop-aws.jar",), "S3A's jars all the same"
    assert not any(k.startswith(S3A) for k in conf)
    delta = tmp_path / "delta-spark_2.12-3.3.2.jar"
    delta.touch()
    with pytest.raises(ConfigInvalid, match="S3A jars"):
        check_jars(parse("s3a://lake/wh", jars=[str(delta)]))
    assert delta_storage_options(lake.s3) == {}
    assert s3_properties({"AWS_REGION": "eu-west-1"}, lake.s3) == {"s3.region": "eu-west-1"}


def test_a_warehouse_in_the_landing_zones_store_shares_its_options() -> None:
    config = parse("s3://lake/wh", landing="s3://land/x", landing_s3=STORE)
    assert warehouse_store(config) == S3Location("lake", "wh", "http://127.0.0.1:8333",
                                                 path_style=True)
    jars, conf = job_conf(config)
    assert jars == ("/nowhere/hadoop-aws.jar",)
    assert conf[f"{S3A}endpoint"] == "http://127.0.0.1:8333"
    assert not any(".bucket." in k for k in conf), "one store: no per-bucket options"
    # Hadoop has no s3:// file system of its own: S3A serves it
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert "spark.hadoop.fs.s3.impl" not in job_conf(parse("s3a://lake/wh", STORE))[1]


def test_a_warehouse_in_another_store_gets_per_bucket_options() -> None:
    config = parse("s3a://lake.prod/wh", {"region": "eu-west-1"}, landing="s3://land/x",
                   landing_s3=STORE)
    _, conf = job_conf(config)
    assert conf[f"{S3A}endpoint"] == "http://127.0.0.1:8333"  # the landing zone's
    bucket = f"{S3A}bucket.lake.prod."
    assert {k: v for k, v in conf.items() if k.startswith(bucket)} == {
        f"{bucket}endpoint": "https://s3.eu-west-1.amazonaws.com",
        f"{bucket}endpoint.region": "eu-west-1", f"{bucket}path.style.access": "false",
        f"{bucket}connection.ssl.enabled": "true"}
    other = parse("s3a://lake/wh", {"endpoint": "https://store-b:9000", "path_style": True},
                  landing="s3://land/x", landing_s3=STORE)
    _, conf = job_conf(other)
    assert conf[f"{S3A}bucket.lake.endpoint"] == "https://store-b:9000"
    assert conf[f"{S3A}bucket.lake.path.style.access"] == "true"


def test_merge_spark_conf_overrides_the_derived_options(tmp_path: Path) -> None:
    config = config_module.parse({
        "source": {"name": "s", "dsn": "host=x", "tables": ["public.a"]},
        "redis": {"url": "redis://x"}, "landing": {"path": "/tmp/l"},
        "target": {"kind": "delta", "warehouse": "s3a://lake/wh", "s3": STORE},
        "merge": {"spark_conf": {f"{S3A}endpoint": "http://elsewhere:1"}},
    }, {})
    job = merge_job(config, Path("w.toml"), "local[2]")
    assert f"{S3A}endpoint" not in job.conf
    assert job.properties[f"{S3A}endpoint"] == "http://elsewhere:1"


@pytest.mark.parametrize(("options", "message"), [
    ({"target_s3": {"secret_access_key": "x"}}, "target.s3.secret_access_key: credentials"),
    ({"target_s3": {"endpoint": "ftp://x"}}, "target.s3.endpoint must be"),
    ({"target_s3": {"region": "EU West"}}, "target.s3.region"),
    ({"target_s3": {"path_style": "yes"}}, "target.s3.path_style"),
    ({"target_s3": {"ca_bundle": "/nowhere.pem"}}, "target.s3.ca_bundle"),
    ({"target_s3": {"bucket": "x"}}, "unknown option target.s3.bucket"),
    ({"target_s3": "x"}, r"\[target.s3\] must be a table"),
    ({"warehouse": "/srv/wh", "target_s3": STORE}, "applies to a warehouse on S3 only"),
    ({"warehouse": "s3a://A_B/wh"}, "target.warehouse: 's3a://A_B/wh'.* not a bucket name"),
    ({"warehouse": "s3a://lake/../x"}, r"target.warehouse: .*'\.\.'"),
    ({"landing": "s3://lake/landing", "landing_s3": STORE, "target_s3": {"region": "x-1"}},
     "landing zone's bucket 'lake'"),
    ({"kind": "iceberg"}, "renames atomically, which S3 does not"),
])
def test_target_s3_is_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(**{"warehouse": "s3a://lake/wh", **options})


def test_a_database_target_takes_no_s3_section() -> None:
    with pytest.raises(ConfigError, match=r"target\.s3 is an option of lake targets"):
        config_module.parse({
            "source": {"name": "s", "dsn": "host=x", "tables": ["public.a"]},
            "redis": {"url": "redis://x"}, "landing": {"path": "/tmp/l"},
            "target": {"kind": "postgresql", "dsn": "host=y", "s3": STORE}}, {})


def test_the_readers_options() -> None:
    store = S3Location("lake", "wh", "http://127.0.0.1:8333", path_style=True)
    assert delta_storage_options(store) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false"}
    assert delta_storage_options(S3Location("lake", region="eu-west-1")) == {
        "AWS_REGION": "eu-west-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"}
    assert delta_storage_options(None) == {}
    # the configured store wins over the environment's endpoint
    environ = {"AWS_ENDPOINT_URL": "http://env:1", "AWS_REGION": "eu-west-1"}
    assert s3_properties(environ, store) == {
        "s3.endpoint": "http://127.0.0.1:8333", "s3.region": "us-east-1",
        "s3.force-virtual-addressing": "false"}
    assert s3_properties(environ, S3Location("lake", region="eu-west-2")) == {
        "s3.endpoint": "http://env:1", "s3.region": "eu-west-2"}
    lake = warehouse_store(parse("s3a://lake/wh", STORE))
    assert lake is not None
    config = parse("s3a://lake/wh", STORE).require_target().lake
    assert config is not None
    assert delta_uri(config, "public.a") == "s3://lake/wh/public.a"
    local = parse("/srv/wh").require_target().lake
    assert local is not None and delta_uri(local, "public.a") == "/srv/wh/public.a"


def test_a_delta_rs_error_is_one_line() -> None:
    error = OSError("Kernel error -> Generic S3 error\n  \x1b[31m\u21b3\x1b[0m Error performing GET"
                    " http://h/b/k\n   \x1b[31m\u21b3\x1b[0m dns error\n")
    assert one_line(error) == ("Kernel error -> Generic S3 error; Error performing GET"
                               " http://h/b/k; dns error")
