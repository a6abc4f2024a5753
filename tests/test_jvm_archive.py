"""The JVM's class archive (compiler/jvm_archive.py): scripts/setup.sh makes it, and a session
mvflow starts maps Spark's and Delta's classes from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from compiler.jvm_archive import archive_path

ROOT = Path(__file__).resolve().parent.parent

SESSION = """
import sys
from pathlib import Path
from compiler.project import DEFAULT_SPARK_CONF, SparkSettings, StateSettings, Target
from compiler.spark import spark_session
base, log = Path(sys.argv[1]), sys.argv[2]
java = "-XX:+UseParallelGC -Xlog:class+load=info:file=" + log  # the tests' collector: the archive was made under G1
target = Target(name="t", spark=SparkSettings(master="local[1]", app_name="archive-test", warehouse_dir=base / "wh",
                metastore_dir=base / "ms", conf={**DEFAULT_SPARK_CONF, "spark.driver.extraJavaOptions": java}),
                state=StateSettings(path=base / "s.sqlite"))
spark = spark_session(target, delta=True)
spark.sql("CREATE TABLE t USING delta AS SELECT 1 AS id").collect()
spark.stop()
"""


def test_a_session_maps_spark_and_delta_classes_from_the_archive_setup_made(tmp_path):
    archive = archive_path()
    assert archive.is_file(), f"no {archive}: scripts/setup.sh makes it (python -m compiler.jvm_archive)"
    log = tmp_path / "classes.log"
    subprocess.run([sys.executable, "-c", SESSION, str(tmp_path), str(log)], cwd=ROOT, check=True, capture_output=True)
    lines = log.read_text().splitlines()
    archived = [line for line in lines if "source: shared objects file (top)" in line]  # the dynamic archive's
    assert any("org.apache.spark.sql.SparkSession " in line for line in archived), lines[:20]
    assert any("io.delta." in line or "org.apache.spark.sql.delta." in line for line in archived)
    assert len(archived) > len(lines) / 2, f"only {len(archived)} of {len(lines)} classes came from the archive"
