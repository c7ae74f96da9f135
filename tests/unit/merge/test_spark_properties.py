"""merge.spark_conf's properties file: it replaces spark-defaults.conf for spark-submit, so
it starts with that file's settings, and later settings win (as Spark reads them)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from dblog_worker.merge.submit import spark_defaults, write_properties


def java_properties(text: str) -> dict[str, str]:
    """The settings of a simple properties text, the last of a key winning (as
    java.util.Properties.load does for these lines: no escapes, no continuations)."""
    found = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith(("#", "!")):
            key, _, value = line.replace("=", " ", 1).partition(" ")
            found[key.strip()] = value.strip()
    return found


def test_the_file_holds_spark_defaults_then_spark_conf_then_the_dags_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "spark.eventLog.enabled true\nspark.executor.memory 1g\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    folder = tmp_path / "job"
    folder.mkdir(mode=0o700)
    path = write_properties(folder, {"spark.executor.memory": "4g", "spark.x": "y"},
                            also="spark.x=from-the-dag\n", submit="spark-submit")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert java_properties(path.read_text()) == {
        "spark.eventLog.enabled": "true", "spark.executor.memory": "4g",
        "spark.x": "from-the-dag"}


def test_spark_defaults_are_found_where_spark_submit_looks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "conf").mkdir()
    submit = home / "bin" / "spark-submit"
    submit.write_text("#!/bin/sh\n")
    submit.chmod(0o755)
    assert spark_defaults(str(submit)) == ""  # no spark-defaults.conf: nothing
    (home / "conf" / "spark-defaults.conf").write_text("spark.a 1\n")
    assert spark_defaults(str(submit)) == "spark.a 1\n"
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "other"))
    assert spark_defaults(str(submit)) == ""  # $SPARK_HOME/conf comes first
    monkeypatch.setenv("SPARK_CONF_DIR", str(home / "conf"))
    assert spark_defaults(None) == "spark.a 1\n"
