"""P2's dbt-spark peer, hand-written: what a dbt-spark user gets for the demo's ``offers_wide`` on
plain parquet. dbt-spark offers ``append`` and ``insert_overwrite`` there (``merge`` needs Delta,
Hudi or Iceberg). An exact ``insert_overwrite`` model of a multi-source join cannot filter by one
``updated_at`` (changes of shops, prices or a dictionary would be missed), and without a
partition column it replaces the whole table: the incremental run is an ``INSERT OVERWRITE`` of
the full recompute. This script runs that statement in its own SparkSession with the project's
settings (the same start-up cost as ``mvflow run``), instead of running dbt itself, and prints
the statement's own seconds (``insert_seconds=…``).

``python bench/p2_dbt.py PROJECT_DIR``
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.compile import compile_project  # noqa: E402
from compiler.project import load_project  # noqa: E402
from compiler.spark import spark_session  # noqa: E402

MODEL = "offers_wide"
TABLE = "bench_dbt.offers_wide"


def insert_overwrite(spark, select: str) -> float:
    """Seconds of the peer's ``INSERT OVERWRITE`` (the table is created, empty, the first time)."""
    if not spark.catalog.tableExists(TABLE):
        spark.sql("CREATE DATABASE IF NOT EXISTS bench_dbt")
        spark.sql(f"CREATE TABLE {TABLE} USING parquet AS SELECT * FROM ({select}) AS m LIMIT 0")
    started = time.monotonic()
    spark.sql(f"INSERT OVERWRITE TABLE {TABLE}\n{select}")
    return time.monotonic() - started


def main() -> None:
    project = load_project(sys.argv[1])
    select = compile_project(project).models[MODEL].sql
    spark = spark_session(project.target())
    print(f"insert_seconds={insert_overwrite(spark, select):.3f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
