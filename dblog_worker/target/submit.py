"""``dblog merge``: the ``spark-submit`` line of the merge job, and running it.

The job file is ``spark/merge.py`` (installed as ``dblog_spark/merge.py``). The
password of the target never appears on the command line: the job reads the
configuration file and the environment itself.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dblog_worker import kinds
from dblog_worker.config import Config
from dblog_worker.errors import ConfigError

__all__ = ["MergeJob", "job_path", "merge_job", "spark_submit", "submit_command"]

_LOOPBACK = "127.0.0.1"


def job_path() -> Path:
    spec = importlib.util.find_spec("dblog_spark")
    if spec is None or spec.origin is None:
        raise ConfigError("the dblog_spark package (spark/ in the source tree) is not installed;"
                          " reinstall dblog")
    return Path(spec.origin).resolve().parent / "merge.py"


def spark_submit(environ: Mapping[str, str] | None = None) -> str:
    """The ``spark-submit`` to run: on PATH, in ``$SPARK_HOME/bin``, or beside Python."""
    env = os.environ if environ is None else environ
    candidates = [shutil.which("spark-submit", path=env.get("PATH"))]
    if env.get("SPARK_HOME"):
        candidates.append(str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit"))
    candidates.append(str(Path(sys.executable).parent / "spark-submit"))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ConfigError(
        "spark-submit not found: install PySpark (pip install 'dblog[spark]'), put Spark's"
        " bin/ on PATH, or set SPARK_HOME"
    )


@dataclass(frozen=True)
class MergeJob:
    """What a ``spark-submit`` of the merge job says, whoever submits it: ``dblog merge``
    or the Airflow merge operator (which hands these to Spark's own hook)."""

    name: str
    jars: tuple[str, ...]
    conf: dict[str, str]
    application: Path
    arguments: list[str]
    env: dict[str, str]  # what a local master needs in the job's environment


def merge_job(config: Config, config_path: Path, master: str, *, tables: Sequence[str] = (),
              as_json: bool = False) -> MergeJob:
    """The merge job of ``config`` on ``master``: a pure function of its arguments."""
    config.require_target()
    config.source.check_table_names(tables)
    merge = config.merge
    target = config.require_target()
    conf = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
            "spark.log.level": "WARN", "spark.scheduler.mode": "FAIR"}
    if target.is_lake:
        conf.update(kinds.lake("target").session_conf(target))
    conf.update(merge.spark_conf)
    env = {}
    if master.startswith("local"):
        conf.setdefault("spark.driver.host", _LOOPBACK)
        conf.setdefault("spark.driver.bindAddress", _LOOPBACK)
        env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": _LOOPBACK}
    arguments = ["--config", str(config_path.resolve())]
    # --table=T: a table whose name starts with "-" is not taken for an option
    arguments += [f"--table={table}" for table in tables]
    if as_json:
        arguments.append("--json")
    return MergeJob(name=f"dblog-merge-{config.source.name}", jars=merge.jars, conf=conf,
                    application=job_path(), arguments=arguments, env=env)


def submit_command(config: Config, config_path: Path, *, tables: Sequence[str] = (),
                   master: str | None = None, as_json: bool = False,
                   submit: str = "spark-submit") -> list[str]:
    """The exact ``spark-submit`` line ``dblog merge`` runs."""
    chosen_master = master or config.merge.master
    job = merge_job(config, config_path, chosen_master, tables=tables, as_json=as_json)
    command = [submit, "--master", chosen_master, "--name", job.name]
    if job.jars:
        command += ["--jars", ",".join(job.jars)]
    for key, value in job.conf.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, str(job.application), *job.arguments]


def check_jars(config: Config) -> None:
    """Local jars must exist; URLs (``hdfs://``, ``https://``) are the cluster's business.
    A lake target's runtime jar must be listed (which Spark it fits, the job checks)."""
    missing = [j for j in config.merge.jars if "://" not in j and not Path(j).is_file()]
    target = config.require_target()
    if target.is_lake and not missing:
        runtime = kinds.lake("runtime")
        if not any(runtime.jar_spark_line(target.kind, jar) for jar in config.merge.jars):
            raise ConfigError(f"a {target.kind} target needs its Spark runtime jar in"
                              f" merge.jars: {runtime.JAR_NAMES[target.kind]}, of your Spark's line"
                              " (docs/merge.md#spark-versions)")
    if missing:
        raise ConfigError(
            f"JDBC driver jar(s) not found: {', '.join(missing)}; on Debian install them with"
            f" `apt-get install {' '.join(r.jdbc_package for r in kinds.every_rules())}`, or"
            " list other jars in merge.jars"
        )


def run_merge(config: Config, config_path: Path, *, tables: Sequence[str] = (),
              master: str | None = None, as_json: bool = False) -> int:
    """Run the merge job with spark-submit; its exit status."""
    check_jars(config)
    command = submit_command(config, config_path, tables=tables, master=master,
                             as_json=as_json, submit=spark_submit())
    job = merge_job(config, config_path, master or config.merge.master)
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           **job.env, **os.environ}
    return subprocess.run(command, env=env, check=False).returncode
