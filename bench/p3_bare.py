"""P3's baseline: the bare ``INSERT INTO … SELECT`` of the range the last ``orders_enriched`` step
covered (read from its step log), in its own SparkSession with the project's settings, into a
separate table. Prints the statement's seconds (``insert_seconds=…``) for the in-process ratio.

``python bench/p3_bare.py PROJECT_DIR``
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.compile import compile_project  # noqa: E402
from compiler.fact import fact  # noqa: E402
from compiler.project import load_project  # noqa: E402
from compiler.spark import spark_session  # noqa: E402
from compiler.state import open_state_store  # noqa: E402

MODEL = "orders_enriched"
TABLE = "bench_bare.orders_enriched"

project = load_project(sys.argv[1])
manifest = compile_project(project)
plan = fact(manifest, manifest.models[MODEL])
step = open_state_store(project.target().state).steps(plan.topic, 1)[0]
args = {**dict(zip(plan.markers("last"), step.last or (None,) * len(plan.position))),
        **dict(zip(plan.markers("next"), step.next))}
args = {k: v for k, v in args.items() if f":{k}" in plan.step}
spark = spark_session(project.target())
spark.sql("CREATE DATABASE IF NOT EXISTS bench_bare")
if not spark.catalog.tableExists(TABLE):
    spark.sql(f"CREATE TABLE {TABLE} USING parquet AS SELECT * FROM ({plan.step}) AS s LIMIT 0", args=args)
started = time.monotonic()
spark.sql(f"INSERT INTO {TABLE}\n{plan.step}", args=args)
print(f"insert_seconds={time.monotonic() - started:.3f}")
spark.stop()
