"""``dblog merge``: the ``spark-submit`` line of the merge job, and running it.

The job file is ``spark/merge.py`` (installed as ``dblog_spark/merge.py``). The
password of the target never appears on the command line: the job reads the
configuration file and the environment itself. Nor do the values of ``merge.spark_conf``
(S3 secret keys, ...): every user of the machine may read a command line (``ps``), so they
go to Spark in a properties file only its owner may read (``--properties-file``). Such a
file takes the place of ``spark-defaults.conf``, so the file starts with that one's
settings (Spark 4's ``--load-spark-defaults`` would do it, Spark 3.5's spark-submit has
no such option); the line carries only dblog's own settings that ``merge.spark_conf``
does not set.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dblog_worker import kinds
from dblog_worker.config import Config
from dblog_worker.errors import ConfigInvalid
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.merge.loop import open_target

__all__ = ["MergeJob", "job_path", "merge_job", "s3_stores", "s3a_conf", "spark_submit",
           "submit_command", "uses_s3", "write_properties"]

_LOOPBACK = "127.0.0.1"


def job_path() -> Path:
    spec = importlib.util.find_spec("dblog_spark")
    if spec is None or spec.origin is None:
        raise ConfigInvalid("the dblog_spark package (spark/ in the source tree) is not installed;"
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
    raise ConfigInvalid(
        "spark-submit not found: install PySpark (pip install 'dblog[spark]'), put Spark's"
        " bin/ on PATH, or set SPARK_HOME"
    )


@dataclass(frozen=True)
class MergeJob:
    """What a ``spark-submit`` of the merge job says, whoever submits it: ``dblog merge``
    or the Airflow merge operator (which hands these to Spark's own hook)."""

    name: str
    jars: tuple[str, ...]
    conf: dict[str, str]  # dblog's own settings: on the command line (--conf)
    properties: dict[str, str]  # merge.spark_conf: in the properties file, never on the line
    application: Path
    arguments: list[str]
    env: dict[str, str]  # what a local master needs in the job's environment


def merge_job(config: Config, config_path: Path, master: str, *, tables: Sequence[str] = (),
              as_json: bool = False) -> MergeJob:
    """The merge job of ``config`` on ``master``: a pure function of its arguments."""
    target = config.require_target()
    config.source.check_table_names(tables)
    merge = config.merge
    defaults = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
                "spark.log.level": "WARN", "spark.scheduler.mode": "FAIR"}
    jars = merge.jars
    if uses_s3(config):
        jars = (*jars, *merge.s3a_jars)
    stores = s3_stores(config)
    if stores:
        defaults |= s3a_conf(*stores)
    if target.lake is not None and target.lake.warehouse.startswith("s3://"):
        # Hadoop names no file system s3://: S3A serves it (as on EMR's s3://)
        defaults |= {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
                     "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A"}
    if target.is_lake:
        defaults |= kinds.lake("target").session_conf(target)
    env = {}
    if master.startswith("local"):
        defaults |= {"spark.driver.host": _LOOPBACK, "spark.driver.bindAddress": _LOOPBACK}
        env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": _LOOPBACK}
    # --conf wins over the properties file: a setting of merge.spark_conf is not repeated
    conf = {k: v for k, v in defaults.items() if k not in merge.spark_conf}
    arguments = ["--config", str(config_path.resolve())]
    # --table=T: a table whose name starts with "-" is not taken for an option
    arguments += [f"--table={table}" for table in tables]
    if as_json:
        arguments.append("--json")
    return MergeJob(name=f"dblog-merge-{config.source.name}", jars=jars, conf=conf,
                    properties=dict(merge.spark_conf), application=job_path(),
                    arguments=arguments, env=env)


def uses_s3(config: Config) -> bool:
    """The job reads or writes S3: an s3:// landing zone, or a lake warehouse there."""
    lake = config.target.lake if config.target is not None else None
    return isinstance(config.landing_path, S3Location) or (lake is not None and lake.on_s3)


def s3_stores(config: Config) -> list[S3Location]:
    """The places on S3 whose store is configured: the landing zone, a lake warehouse
    (without either, S3A's defaults and ``merge.spark_conf``)."""
    stores = [config.landing_path] if isinstance(config.landing_path, S3Location) else []
    lake = config.target.lake if config.target is not None else None
    if lake is not None and lake.s3 is not None:
        stores.append(lake.s3)
    return stores


def s3a_conf(first: S3Location, *others: S3Location) -> dict[str, str]:
    """Spark's S3A options for the stores of ``first`` (an s3:// landing zone, else the
    warehouse) and, per bucket (``fs.s3a.bucket.<bucket>.*``), of each other location whose
    store differs. Credentials: S3A's default chain, which reads AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY from the environment, then the machine's role; never the command
    line. ``merge.spark_conf`` overrides any of them."""
    conf = _s3a_store("spark.hadoop.fs.s3a.", first)
    for other in others:
        if other.store_options() != first.store_options() and other.bucket != first.bucket:
            conf |= _s3a_store(f"spark.hadoop.fs.s3a.bucket.{other.bucket}.", other,
                               explicit=True)
    return conf


def _s3a_store(prefix: str, location: S3Location, *, explicit: bool = False
               ) -> dict[str, str]:
    """``explicit``: name AWS's regional endpoint when the location has none (a bucket's
    option must replace the endpoint of the other store)."""
    conf = {f"{prefix}endpoint.region": location.region,
            f"{prefix}path.style.access": "true" if location.path_style else "false"}
    endpoint = location.endpoint or (
        f"https://s3.{location.region}.amazonaws.com" if explicit else "")
    if endpoint:
        conf[f"{prefix}endpoint"] = endpoint
        conf[f"{prefix}connection.ssl.enabled"] = (
            "true" if endpoint.startswith("https") else "false")
    return conf


def submit_command(config: Config, config_path: Path, *, tables: Sequence[str] = (),
                   master: str | None = None, as_json: bool = False,
                   submit: str = "spark-submit", properties_file: Path | None = None
                   ) -> list[str]:
    """The exact ``spark-submit`` line ``dblog merge`` runs; ``properties_file``: where
    :func:`write_properties` wrote ``merge.spark_conf`` (needed when it sets anything)."""
    chosen_master = master or config.merge.master
    job = merge_job(config, config_path, chosen_master, tables=tables, as_json=as_json)
    command = [submit, "--master", chosen_master, "--name", job.name]
    if job.jars:
        command += ["--jars", ",".join(job.jars)]
    for key, value in job.conf.items():
        command += ["--conf", f"{key}={value}"]
    if job.properties:
        if properties_file is None:
            raise ValueError("merge.spark_conf sets options: give the properties file")
        command += ["--properties-file", str(properties_file)]
    return [*command, str(job.application), *job.arguments]


def write_properties(folder: Path, properties: Mapping[str, str], also: str = "",
                     submit: str | None = None) -> Path:
    """``properties`` in a new file ``spark.properties`` of ``folder`` that only its owner
    may read: Spark's format, each key and value escaped (Spark trims whitespace around a
    value, as it always does). After the settings of the ``spark-defaults.conf`` that the
    file replaces (:func:`spark_defaults`, of the ``submit`` command), and before the
    properties text ``also``: a later setting of a key wins."""
    path = folder / "spark.properties"
    lines = [f"{_escape(k, key=True)}={_escape(v)}" for k, v in properties.items()]
    defaults = spark_defaults(submit)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        for text in (defaults, "# merge.spark_conf of the dblog configuration\n"
                     + "\n".join(lines), also):
            if text:
                out.write(text if text.endswith("\n") else text + "\n")
    return path


def spark_defaults(submit: str | None = None) -> str:
    """The text of the ``spark-defaults.conf`` that ``spark-submit`` would read: in
    ``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``, else beside the ``submit`` command
    (``<spark home>/bin/spark-submit``); empty when there is none."""
    folders = [os.environ.get("SPARK_CONF_DIR"), None if not os.environ.get("SPARK_HOME")
               else os.path.join(os.environ["SPARK_HOME"], "conf")]
    if submit:
        found = shutil.which(submit)
        if found:
            folders.append(str(Path(found).resolve().parent.parent / "conf"))
    for folder in folders:
        if folder:
            path = Path(folder) / "spark-defaults.conf"
            if path.is_file():
                return path.read_text(encoding="utf-8")
            return ""  # the first folder spark-submit would look in is the one
    return ""


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _escape(text: str, key: bool = False) -> str:
    """A key or value of a Java properties file (``java.util.Properties.load``): no
    character may end it or start a comment."""
    out = []
    for index, char in enumerate(text):
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif (key and char in " =:#!") or (char == " " and index == 0):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def reach_target(config: Config) -> None:
    """Connect to the target once (TargetUnavailable if it cannot be reached); a lake
    target's JDBC catalog, where pyiceberg is installed (else the job's session finds it)."""
    target_config = config.require_target()
    if target_config.lake is not None:
        kinds.lake("read").check_catalog(target_config.lake)
        return
    target = open_target(target_config)
    target.connect()
    target.close()


def check_jars(config: Config) -> None:
    """Local jars must exist; URLs (``hdfs://``, ``https://``) are the cluster's business.
    A lake target's runtime jar must be listed (which Spark it fits, the job checks)."""
    if uses_s3(config):
        absent = [j for j in config.merge.s3a_jars if "://" not in j and not Path(j).is_file()]
        if absent:
            raise ConfigInvalid(
                "the S3A jars Spark reaches an s3:// landing zone or warehouse with are"
                f" missing: "
                f"{', '.join(absent)}; run scripts/install (it fetches them from Maven Central"
                " into .tools/jars), or list them in merge.s3a_jars")
    missing = [j for j in config.merge.jars if "://" not in j and not Path(j).is_file()]
    target = config.require_target()
    if target.is_lake and not missing:
        runtime = kinds.lake("runtime")
        if not any(runtime.jar_spark_line(target.kind, jar) for jar in config.merge.jars):
            raise ConfigInvalid(f"a {target.kind} target needs its Spark runtime jar in"
                                f" merge.jars: {runtime.JAR_NAMES[target.kind]}, of your Spark's"
                                " line (docs/merge.md#spark-versions)")
    if missing:
        raise ConfigInvalid(
            f"JDBC driver jar(s) not found: {', '.join(missing)}; on Debian install them with"
            f" `apt-get install {' '.join(r.jdbc_package for r in kinds.every_rules())}`, or"
            " list other jars in merge.jars"
        )


def run_merge(config: Config, config_path: Path, *, tables: Sequence[str] = (),
              master: str | None = None, as_json: bool = False) -> int:
    """Run the merge job with spark-submit; its exit status. A target that cannot be reached
    fails here (TargetUnavailable), before Spark starts."""
    check_jars(config)
    job = merge_job(config, config_path, master or config.merge.master, tables=tables,
                    as_json=as_json)
    reach_target(config)
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           **job.env, **os.environ}
    with tempfile.TemporaryDirectory(prefix="dblog-merge-") as folder:  # 0700
        submit = spark_submit()
        properties = write_properties(Path(folder), job.properties, submit=submit) \
            if job.properties else None
        command = submit_command(config, config_path, tables=tables, master=master,
                                 as_json=as_json, submit=submit, properties_file=properties)
        return subprocess.run(command, env=env, check=False).returncode
