"""Which Spark a lake format's jar was built for: a mismatch fails deep in the JVM
(``IncompatibleClassChangeError``, ``NoSuchMethodError``), so the job checks first.

=====================================  ======================================
jar                                    Spark line
=====================================  ======================================
``iceberg-spark-runtime-X.Y_S-V.jar``  X.Y, Scala S (Iceberg 1.12: 3.5, 4.0, 4.1)
``delta-spark_X.Y_S-V.jar``            X.Y (Delta 4.1 on)
``delta-spark_S-3.V.jar``              3.5
``delta-spark_S-4.0.V.jar``            4.0
``delta-spark_S-4.1.V.jar`` … 4.3      4.1
``delta-spark_S-4.4.V.jar``            4.2 (Delta 4.4's default)
=====================================  ======================================
"""

from __future__ import annotations

import re

__all__ = ["jar_spark_line", "runtime_problem"]

_ICEBERG = re.compile(r"iceberg-spark-runtime-(\d+\.\d+)_(2\.1\d)-[\w.]+\.jar$")
_DELTA_LINE = re.compile(r"delta-spark_(\d+\.\d+)_(2\.1\d)-[\w.]+\.jar$")
_DELTA = re.compile(r"delta-spark_(2\.1\d)-(\d+)\.(\d+)\.[\w.]+\.jar$")
_DELTA_DEFAULT = {"3": "3.5", "4.0": "4.0", "4.1": "4.1", "4.2": "4.1", "4.3": "4.1",
                  "4.4": "4.2"}
JAR_NAMES = {"iceberg": "iceberg-spark-runtime-<spark line>_<scala>-<version>.jar",
             "delta": "delta-spark_<scala>-<version>.jar with delta-storage-<version>.jar"}


def jar_spark_line(kind: str, jar: str) -> tuple[str, str] | None:
    """(Spark line, Scala version) a lake runtime jar is built for; None if not one."""
    name = jar.rsplit("/", 1)[-1]
    if kind == "iceberg":
        found = _ICEBERG.search(name)
        return (found[1], found[2]) if found else None
    line = _DELTA_LINE.search(name)
    if line:
        return (line[1], line[2])
    plain = _DELTA.search(name)
    if plain is None:
        return None
    release = plain[2] if plain[2] == "3" else f"{plain[2]}.{plain[3]}"
    spark = _DELTA_DEFAULT.get(release)
    return (spark, plain[1]) if spark else None


def runtime_problem(kind: str, spark_version: str, scala_version: str, jars: str) -> str | None:
    """Why the job's Spark cannot write ``kind`` tables with ``jars`` (``spark.jars``,
    comma-separated); None when a runtime jar of this Spark line and Scala is among them."""
    line = ".".join(spark_version.split(".")[:2])
    scala = ".".join(scala_version.split(".")[:2])
    found = [(jar, jar_spark_line(kind, jar)) for jar in jars.split(",") if jar]
    runtimes = [(jar, built) for jar, built in found if built is not None]
    if any(built == (line, scala) for _, built in runtimes):
        return None
    wanted = JAR_NAMES[kind]
    if not runtimes:
        return (f"a {kind} target needs its Spark runtime jar in merge.jars ({wanted}) for"
                f" this Spark, {spark_version} (Scala {scala}); docs/merge.md#spark-versions"
                " lists them")
    jar, built = runtimes[0]
    assert built is not None
    return (f"{jar.rsplit('/', 1)[-1]} is built for Spark {built[0]} (Scala {built[1]}), but"
            f" the job runs on Spark {spark_version} (Scala {scala}); list the jar of this"
            " Spark line in merge.jars (docs/merge.md#spark-versions), or run the merge with"
            " the Spark it was built for")
