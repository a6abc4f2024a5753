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
DELTA_TABLE = "bench_dbt.offers_wide_delta"


def insert_overwrite(spark, select: str) -> float:
    """Seconds of the peer's ``INSERT OVERWRITE`` (the table is created, empty, the first time)."""
    if not spark.catalog.tableExists(TABLE):
        spark.sql("CREATE DATABASE IF NOT EXISTS bench_dbt")
        spark.sql(f"CREATE TABLE {TABLE} USING parquet AS SELECT * FROM ({select}) AS m LIMIT 0")
    started = time.monotonic()
    spark.sql(f"INSERT OVERWRITE TABLE {TABLE}\n{select}")
    return time.monotonic() - started


def merge_delta(spark, select: str, key: str, table: str = DELTA_TABLE) -> float:
    """Seconds of the peer's incremental run on Delta: dbt-spark's ``incremental_strategy='merge'``
    with ``unique_key`` over the full recompute (a multi-source join has no one ``updated_at`` to
    filter by), as dbt-spark writes it (``spark__get_merge_sql``): a temporary view of the SELECT,
    then ``MERGE … UPDATE SET * … INSERT *``. Like dbt's, it never deletes: keys that left the
    SELECT stay in the table. The first call is dbt's first run (``CREATE TABLE … AS``), untimed;
    the table has deletion vectors on, as mvflow's Delta tables."""
    from compiler.table_format import DELTA_PROPERTIES, using

    view = table.split(".")[-1] + "__dbt_tmp"
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} AS\n{select}")
    if not spark.catalog.tableExists(table):
        spark.sql("CREATE DATABASE IF NOT EXISTS bench_dbt")
        spark.sql(f"CREATE TABLE {table}\n{using('delta', DELTA_PROPERTIES)}\nAS SELECT * FROM {view}")
    started = time.monotonic()
    spark.sql(f"MERGE INTO {table} AS DBT_INTERNAL_DEST\nUSING {view} AS DBT_INTERNAL_SOURCE\n"
              f"ON DBT_INTERNAL_SOURCE.{key} = DBT_INTERNAL_DEST.{key}\n"
              "WHEN MATCHED THEN UPDATE SET *\nWHEN NOT MATCHED THEN INSERT *")
    return time.monotonic() - started


def main() -> None:
    project = load_project(sys.argv[1])
    select = compile_project(project).models[MODEL].sql
    spark = spark_session(project.target())
    print(f"insert_seconds={insert_overwrite(spark, select):.3f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
