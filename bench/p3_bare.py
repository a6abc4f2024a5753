"""P3's baseline: the bare ``INSERT INTO … SELECT`` of the range an ``orders_enriched`` step
covered (read from its step log), into a separate unpartitioned table, with the project's
Spark settings.

``python bench/p3_bare.py PROJECT_DIR``: in a fresh SparkSession, the range of the last step;
prints the statement's seconds (``insert_seconds=…``).

``python bench/p3_bare.py PROJECT_DIR --alternate N``: in one SparkSession, N+1 times a fact
step (``run_fact`` with ``--max-steps 1``, as ``mvflow run`` does) then the bare statement of
the same range; the first pair warms the JVM and is left out. Prints one line per pair
(``pair step_seconds=… run_seconds=… bare_seconds=… rows=…``): the step's own seconds from
its step log, the whole ``run_fact`` call (lease, file watch, step), and the bare statement.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.compile import compile_project  # noqa: E402
from compiler.kinds.fact.plan import fact  # noqa: E402
from compiler.kinds.fact.steps import StepOptions, bind_range, run_fact  # noqa: E402
from compiler.project import load_project  # noqa: E402
from compiler.spark import spark_session  # noqa: E402
from compiler.state import open_state_store  # noqa: E402

MODEL = "orders_enriched"
TABLE = "bench_bare.orders_enriched"


def bare_insert(spark, plan, step) -> float:
    """Seconds of ``INSERT INTO bench_bare… <the step's SELECT>`` over the step's range."""
    args = {k: v for k, v in bind_range(plan, step.last, step.next).items() if f":{k}" in plan.step}
    if not spark.catalog.tableExists(TABLE):
        spark.sql("CREATE DATABASE IF NOT EXISTS bench_bare")
        spark.sql(f"CREATE TABLE {TABLE} USING parquet AS SELECT * FROM ({plan.step}) AS s LIMIT 0", args=args)
    started = time.monotonic()
    spark.sql(f"INSERT INTO {TABLE}\n{plan.step}", args=args)
    return time.monotonic() - started


def alternate(spark, manifest, plan, store, pairs: int) -> None:
    model = manifest.models[MODEL]
    for i in range(pairs + 1):
        started = time.monotonic()
        result = run_fact(spark, manifest, model, store, StepOptions(max_steps=1), echo=lambda line: None)
        run_seconds = time.monotonic() - started
        step = store.steps(plan.topic, 1)[0]
        if result.status != "success" or not result.rows:
            sys.exit(f"pair {i}: the fact step did not run: {result.status} {result.message}")
        bare_seconds = bare_insert(spark, plan, step)
        label = "warm-up" if i == 0 else "pair"
        print(f"{label} step_seconds={step.seconds:.3f} run_seconds={run_seconds:.3f} "
              f"bare_seconds={bare_seconds:.3f} rows={step.rows}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("project", type=Path)
    parser.add_argument("--alternate", type=int, default=0, metavar="N")
    args = parser.parse_args()
    project = load_project(args.project)
    manifest = compile_project(project)
    plan = fact(manifest, manifest.models[MODEL])
    store = open_state_store(project.target().state)
    spark = spark_session(project.target())
    if args.alternate:
        alternate(spark, manifest, plan, store, args.alternate)
    else:
        print(f"insert_seconds={bare_insert(spark, plan, store.steps(plan.topic, 1)[0]):.3f}")
    spark.stop()


if __name__ == "__main__":
    main()
