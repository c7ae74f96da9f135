"""``merge.spark_conf`` values (S3 secret keys, as docs/merge.md suggests) never reach a
command line, which every user of the machine can read (``ps``): ``dblog merge`` hands them
to ``spark-submit`` in a properties file only its user may read, and ``--print-command``
prints its path, not the values. Spark reads the file as written (its own parser), and a
real merge applies it."""

from __future__ import annotations

import json
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.integration.harness import cli, write_config
from tests.spark_local import jdbc_jars

SECRET = "S3-secret-Wq8v/+x"
SPARK_CONF = {
    "spark.hadoop.fs.s3a.secret.key": SECRET,
    "spark.hadoop.fs.s3a.access.key": "AKIA-Wq8v",
    "spark.dblog.test.odd value": " lead = : # ! \\ \t end\nnext line ü",
}


def configuration(tmp_path: Path, pg_target: str, redis_url: str,
                  spark_conf: dict[str, str]) -> Path:
    lines = "\n".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in spark_conf.items())
    extra = (f'[target]\nkind = "postgresql"\ndsn = {json.dumps(pg_target)}\n\n[merge]\n'
             f"jars = {json.dumps([str(j) for j in jdbc_jars()])}\n\n"
             f"[merge.spark_conf]\n{lines}\n")
    return write_config(tmp_path, "host=127.0.0.1 dbname=shop user=dblog", redis_url,
                        ["public.items"], extra=extra)


class CommandLines(threading.Thread):
    """Reads every process's command line (/proc/*/cmdline), as ``ps`` does, until
    stopped; ``seen`` holds those that carry ``secret``."""

    def __init__(self, secret: str) -> None:
        super().__init__(daemon=True)
        self.secret = secret.encode()
        self.seen: list[str] = []
        self.processes: set[str] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    line = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"spark" in line.lower():
                    self.processes.add(line.split(b"\0")[0].decode(errors="replace"))
                if self.secret in line:
                    self.seen.append(line.replace(b"\0", b" ").decode(errors="replace"))

    def __enter__(self) -> CommandLines:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.join()


@pytest.fixture
def pg_target(pg_dsn: str) -> Iterator[str]:
    yield pg_dsn


def test_print_command_shows_the_file_not_the_values(
        tmp_path: Path, pg_target: str, redis_url: str, spark: SparkSession) -> None:
    config = configuration(tmp_path, pg_target, redis_url, SPARK_CONF)
    printed = cli(config, "merge", "--print-command")
    assert SECRET not in printed.stdout + printed.stderr and "AKIA" not in printed.stdout
    words = printed.stdout.split()
    path = Path(words[words.index("--properties-file") + 1])
    assert "--load-spark-defaults" not in words  # Spark 3.5's spark-submit has no such option
    assert str(path) in printed.stderr  # where the values are, and to delete it
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for key in ("spark.sql.session.timeZone=UTC", "spark.log.level=WARN"):
        assert key in words  # dblog's own settings stay on the line
    # Spark's own reader of --properties-file finds every value as configured (it trims
    # the whitespace around a value, as it does for any properties file)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    read = jvm.org.apache.spark.util.Utils.getPropertiesFromFile(str(path))
    found = {key: read.apply(key) for key in SPARK_CONF}
    assert found == {k: v.strip() for k, v in SPARK_CONF.items()}
    path.unlink()
    path.parent.rmdir()


def test_a_setting_of_spark_conf_is_not_overridden_by_dblogs_own(
        tmp_path: Path, pg_target: str, redis_url: str) -> None:
    config = configuration(tmp_path, pg_target, redis_url, {"spark.log.level": "INFO"})
    words = cli(config, "merge", "--print-command").stdout.split()
    assert "spark.log.level=WARN" not in words  # --conf would win over the file
    path = Path(words[words.index("--properties-file") + 1])
    assert "spark.log.level=INFO" in path.read_text()
    path.unlink()
    path.parent.rmdir()


def test_without_spark_conf_there_is_no_file(tmp_path: Path, pg_target: str,
                                            redis_url: str) -> None:
    printed = cli(configuration(tmp_path, pg_target, redis_url, {}), "merge",
                  "--print-command")
    assert "--properties-file" not in printed.stdout and printed.stderr == ""


def test_dblog_merge_keeps_the_values_off_every_command_line(
        tmp_path: Path, pg_target: str, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))  # where dblog merge writes the file
    events = tmp_path / "events"
    events.mkdir()
    conf = {**SPARK_CONF, "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"file://{events}", "spark.ui.enabled": "false"}
    config = configuration(tmp_path, pg_target, redis_url, conf)
    (tmp_path / "landing").mkdir()
    with CommandLines(SECRET) as lines:
        merged = cli(config, "merge", "--json", timeout=300)
    assert json.loads(merged.stdout[merged.stdout.index("{"):])["ok"], merged.stdout
    assert any("spark-submit" in p or "java" in p for p in lines.processes), lines.processes
    assert lines.seen == []
    assert SECRET not in merged.stdout + merged.stderr
    assert list(events.iterdir()), "Spark did not read the properties file (no event log)"
    assert not list(temporary.glob("dblog-merge-*")), "the file outlived the merge"
