"""A class-data-sharing archive of the classes a Spark session loads: a cold mvflow command's JVM
maps them from one file instead of loading and verifying them from Spark's ~300 jars (the JDK's
AppCDS). A session with Delta plus its first queries: 21.0 -> 14.6 s (``python -m bench.jvm_archive``).

    python -m compiler.jvm_archive           # make it once (scripts/setup.sh does; ~40 s)
    python -m compiler.jvm_archive --force   # make it again

A JVM running a representative session (parquet and Delta tables, a view, a MERGE, a join, Hive's
catalog) writes it at exit (``-XX:ArchiveClassesAtExit``), under a temporary name renamed when
complete; every later session reads it (``-XX:SharedArchiveFile``, added by ``compiler.spark``). The
JVM checks that the archive fits (its own build, Spark's class path) and ignores one that does not:
after a Java or Spark upgrade starts are only slower until it is made again. A class path with more
in front (a PostgreSQL metastore's JDBC driver) never fits, and the JVM says so at every start:
``compiler.spark`` passes no archive to such a session. It lies
beside the Delta jars (``.mvflow/jvm/``), named after the PySpark version, ~220 MB.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .maven import DEFAULT_DIR

_MAKING = "-XX:ArchiveClassesAtExit"

# What the archiving JVM runs: a session as mvflow starts it, and the statements an MV batch and a
# fact step use, so their classes are in the archive.
_WORKLOAD = """
import sys
from pathlib import Path
from compiler.project import DEFAULT_SPARK_CONF, SparkSettings, StateSettings, Target
from compiler.spark import spark_session
base, archive = Path(sys.argv[1]), sys.argv[2]
target = Target(name="archive", spark=SparkSettings(
    master="local[2]", app_name="mvflow-jvm-archive", warehouse_dir=base / "warehouse", metastore_dir=base / "metastore",
    conf={**DEFAULT_SPARK_CONF, "spark.driver.extraJavaOptions": "-XX:ArchiveClassesAtExit=" + archive}),
    state=StateSettings(path=base / "state.sqlite"))
try:
    spark, delta = spark_session(target, delta=True), True
except Exception:
    spark, delta = spark_session(target, delta=False), False
sql = spark.sql
sql("CREATE DATABASE w")
sql("CREATE TABLE w.p USING parquet PARTITIONED BY (b) AS SELECT id, id % 7 AS k, CAST(id AS STRING) AS s, 1 AS b FROM range(1000)")
sql("INSERT OVERWRITE TABLE w.p PARTITION (b) SELECT id, k, s, 2 AS b FROM w.p WHERE k = 1")
sql("ANALYZE TABLE w.p COMPUTE STATISTICS NOSCAN")
sql("CREATE VIEW w.v AS SELECT k, COUNT(*) AS n, MAX(s) AS s FROM w.p GROUP BY k")
sql("SELECT a.k, a.n, b.id FROM w.v AS a LEFT JOIN w.p AS b ON a.k = b.k WHERE b.id IN (SELECT id FROM range(10))").collect()
sql("SELECT DISTINCT k FROM w.p").localCheckpoint(eager=False).count()
if delta:
    sql("CREATE TABLE w.d USING delta AS SELECT id, k, s FROM w.p")
    sql("MERGE INTO w.d AS t USING (SELECT id, k + 1 AS k, s FROM w.p WHERE k = 2) AS u ON t.id = u.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    sql("DESCRIBE HISTORY w.d").collect()
    spark.read.option("versionAsOf", 0).table("w.d").count()
spark.stop()
"""


def archive_path(dest: Path | None = None) -> Path:
    """Where the archive of this PySpark version lies (whether or not it was made)."""
    from pyspark import __version__

    return Path(dest or DEFAULT_DIR.parent / "jvm") / f"spark-{__version__}.jsa"


def java_options(user_java: str, path: Path | None = None) -> list[str]:
    """The JVM option that reads the archive: none while one is being made, or before it exists.

    >>> java_options("-XX:ArchiveClassesAtExit=/tmp/a.jsa", Path(__file__))
    []
    >>> java_options("", Path(__file__)) == [f"-XX:SharedArchiveFile={Path(__file__)}"]
    True
    """
    path = path or archive_path()
    if _MAKING in user_java or not path.is_file():
        return []
    return [f"-XX:SharedArchiveFile={path}"]


def make(path: Path) -> float:
    """Run the workload in a JVM that archives its classes at exit; returns the seconds taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mvflow-jvm-archive-") as work:
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        done = subprocess.run([sys.executable, "-c", _WORKLOAD, work, str(partial)], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent.parent)
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
            raise RuntimeError(f"the archiving session failed (exit {done.returncode}): {tail}")
        partial.replace(path)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compiler.jvm_archive", description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="make it again even if it is there")
    args = parser.parse_args(argv)
    path = archive_path()
    if path.is_file() and not args.force:
        print(f"{path} (already there)")
        return 0
    print(f"mvflow: making the JVM's class archive for faster Spark starts (once, about a minute): {path}", file=sys.stderr)
    try:
        seconds = make(path)
    except RuntimeError as exc:
        print(f"mvflow: no JVM class archive, Spark starts slower: {exc}", file=sys.stderr)
        return 2
    print(f"{path} ({path.stat().st_size / 2**20:.0f} MB, {seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
