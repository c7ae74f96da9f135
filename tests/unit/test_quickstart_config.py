"""The configuration ``./scripts/quickstart`` writes (without ``--lake``) loads as the worker
and ``dblog merge`` load it, and its merge starts Spark's driver on a JVM made for short jobs
(C1 only, the serial collector): with the default JVM the quickstart's merges took three
times the CPU. Without a server: the end-to-end run is tests/integration/test_demo.py."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from dblog_worker import config as config_module

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from quickstart_shop import PostgresShop, write_config  # type: ignore[import-not-found]  # noqa: E402


def test_the_merge_runs_on_a_jvm_for_short_jobs(tmp_path: Path) -> None:
    shop = PostgresShop.__new__(PostgresShop)  # no server: only its names
    shop.dsn = "host=127.0.0.1 port=5432 dbname=shop user=postgres"
    shop.server = SimpleNamespace(
        dsn=lambda dbname: f"host=127.0.0.1 port=5432 dbname={dbname} user=postgres")
    path = tmp_path / "shop_pg.toml"
    write_config(path, shop, "redis://127.0.0.1:6379/0", tmp_path / "landing")
    config = config_module.load(path, {})
    assert config.require_target().dsn.endswith("dbname=shop_replica user=postgres")
    assert config.merge.spark_conf == {
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
