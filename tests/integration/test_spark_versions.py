"""The merge job on the lowest Spark it declares (3.5: ``.tools/spark35``, PySpark 3.5.9
and dblog as a Spark 3.5 cluster's driver has them) into a real PostgreSQL target; the
suite's other merge tests run it on the highest, the main environment's 4.2.

Spark 3.5's ``spark-submit`` reads no ``spark-defaults.conf`` when it is given a
``--properties-file`` (and has no ``--load-spark-defaults``): the file ``dblog merge``
writes for ``merge.spark_conf`` begins with that file's settings. The job's event log,
which a setting of spark-defaults.conf turns on, says which settings the job ran with."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import psycopg
import pytest

from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.position import Position
from tests.lake import ROOT, SPARK35, merge_env
from tests.spark_jvm import FAST_JVM

pytestmark = [pytest.mark.spark]

TABLE = "public.kv"
SCHEMA = {"columns": [{"name": "id", "type": "int8", "type_oid": 20},
                      {"name": "v", "type": "int8", "type_oid": 20},
                      {"name": "note", "type": "text", "type_oid": 25}], "key": ["id"]}


def spark_properties(event_log: Path) -> dict[str, str]:
    """The Spark settings a job ran with, from its event log."""
    for line in event_log.read_text().splitlines():
        event = json.loads(line)
        if event["Event"] == "SparkListenerEnvironmentUpdate":
            return dict(event["Spark Properties"])
    raise AssertionError(f"{event_log} has no environment update")


def test_spark35_merges_into_postgresql(tmp_path: Path, pg_dsn: str) -> None:
    landing = tmp_path / "landing"
    zone = LandingZone(landing, "low")
    zone.write_schema(TABLE, 1, SCHEMA)
    rnd = random.Random(35)
    expected: dict[int, tuple[int, str]] = {}
    for segment in range(4):
        events = []
        for i in range(500):
            index = segment * 500 + i
            key = rnd.randrange(200)
            if key in expected and rnd.random() < 0.2:
                events.append(ChangeEvent(TABLE, Op.DELETE, Position(0x100 + index, 0, 0),
                                          f"[{key}]", None, None, Origin.LOG, 0, 1))
                del expected[key]
                continue
            note = f"n'{index}"
            after = json.dumps({"id": key, "v": index, "note": note}, separators=(",", ":"))
            events.append(ChangeEvent(TABLE, Op.UPDATE if key in expected else Op.CREATE,
                                      Position(0x100 + index, 0, 0), f"[{key}]", after, None,
                                      Origin.LOG, 0, 1))
            expected[key] = (index, note)
        zone.commit_segment(TABLE, events)
    config = tmp_path / "low.toml"
    config.write_text(f"""
[source]
name = "low"
dsn = "host=127.0.0.1"
tables = ["{TABLE}"]
[redis]
url = "redis://127.0.0.1:1"
[landing]
path = {json.dumps(str(landing))}
[target]
kind = "postgresql"
dsn = {json.dumps(pg_dsn)}
[merge]
master = "local[2]"
batch_max_events = 1000
[merge.spark_conf]
"spark.ui.enabled" = "false"
"spark.sql.shuffle.partitions" = "4"
"spark.driver.extraJavaOptions" = "{FAST_JVM}"
""")
    conf_dir, events_dir = tmp_path / "conf", tmp_path / "events"
    conf_dir.mkdir()
    events_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events_dir}\n"
        "spark.eventLog.compress false\nspark.sql.shuffle.partitions 8\n")
    done = subprocess.run([str(SPARK35 / "bin" / "dblog"), "merge", "--config", str(config),
                           "--json"], env={**merge_env(), "SPARK_CONF_DIR": str(conf_dir)},
                          capture_output=True, text=True, timeout=240, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert report["tables"][0]["batches"] == 2, report
    version = subprocess.run([str(SPARK35 / "bin" / "spark-submit"), "--version"],
                             capture_output=True, text=True, check=True, env=merge_env())
    assert "version 3.5.9" in version.stdout + version.stderr
    (event_log,) = events_dir.iterdir()
    ran_with = spark_properties(event_log)
    assert ran_with["spark.eventLog.enabled"] == "true"  # spark-defaults.conf
    assert ran_with["spark.sql.shuffle.partitions"] == "4"  # merge.spark_conf, after it
    assert ran_with["spark.driver.extraJavaOptions"].endswith(FAST_JVM)  # after Spark's own
    assert ran_with["spark.sql.session.timeZone"] == "UTC"  # dblog's own (--conf)
    with psycopg.connect(pg_dsn) as conn:
        got = {int(r[0]): (int(r[1]), str(r[2]))
               for r in conn.execute("SELECT id, v, note FROM public.kv").fetchall()}
    assert got == expected
