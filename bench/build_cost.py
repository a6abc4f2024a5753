"""Spark jobs and seconds of a full build of the demo MV, per phase, beside the peer's one statement
(issue 12 item 3: a full build within 1.2× of the peer's plus 1 s), on parquet and on Delta.

    python -m bench.build_cost                        # 100,000 offers, both formats, 3 runs each
    python -m bench.build_cost --offers 10000 --formats delta --runs 1

One warm SparkSession; the demo's sources are created once (``--source-format``, Delta by default,
as the demo's target). Per format, after one untimed build: ``--runs`` rounds of, in turn,

- ``mvflow`` — ``run_mv(full_refresh=True)``, what ``mvflow run --full-refresh -s offers_wide`` runs
  for the model, timed with nothing observing it but two job sentinels around it;
- ``phased`` — the same build with a phase hook (``compiler.phases``) that counts the Spark jobs
  and the seconds between two named points (the hook's own sentinel job is not counted);
- ``peer`` — the dbt-spark peer over the same SELECT: parquet ``INSERT OVERWRITE TABLE``, Delta
  ``CREATE OR REPLACE TABLE … USING delta AS`` (dbt-spark's ``table`` materialization on Delta).

Medians are printed with the target (mvflow ≤ 1.2 × peer + 1 s). The project is copied to
``bench/.work/build_cost/``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import TYPE_CHECKING, Any, Callable

from bench.batch_jobs import ROOT, Jobs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OFFERS_PER_SCALE = 10_000
RATIO, SLACK = 1.2, 1.0  # the target: mvflow ≤ RATIO × peer + SLACK seconds
PEER_TABLE = "bench_build.peer_{format}"


class PhaseCost(Jobs):
    """``Jobs`` that also times each step between two marks (without its own sentinel's time)."""

    def __init__(self, spark: "SparkSession"):
        super().__init__(spark)
        self.seconds: dict[str, float] = {}
        self.since = 0.0

    def start(self) -> "PhaseCost":
        super().start()
        self.seconds.clear()
        self.since = time.monotonic()
        return self

    def mark(self, name: str) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - self.since
        super().mark(name)
        self.since = time.monotonic()


def peer_statement(table_format: str, select: str) -> str:
    """The peer's full build: one statement over the MV's SELECT."""
    table = PEER_TABLE.format(format=table_format)
    if table_format == "delta":
        from compiler.table_format import DELTA_PROPERTIES, using

        return f"CREATE OR REPLACE TABLE {table}\n{using('delta', DELTA_PROPERTIES)}\nAS {select}"
    return f"INSERT OVERWRITE TABLE {table}\n{select}"


def timed(spark: "SparkSession", call: Callable[[], Any]) -> tuple[float, int]:
    from bench.jobs import count_jobs

    with count_jobs(spark) as counted:
        started = time.monotonic()
        call()
        seconds = time.monotonic() - started
    return seconds, counted.jobs or 0


def measure(spark: "SparkSession", table_format: str, runs: int, echo: Callable[[str], None]) -> dict[str, Any]:
    """Build the demo MV ``runs`` times each way in ``table_format``; medians and the last phase table."""
    from compiler.compile import compile_project
    from compiler.project import load_project
    from compiler.kinds.mv.refresh import refresh_mv, run_mv
    from compiler.state import open_state_store

    os.environ["MVFLOW_TABLE_FORMAT"] = table_format
    project = load_project(os.environ["BENCH_BUILD_PROJECT"])
    manifest = compile_project(project)
    store = open_state_store(project.target().state)
    model = manifest.models["offers_wide"]
    select = manifest.models["offers_wide"].sql
    spark.sql("CREATE DATABASE IF NOT EXISTS bench_build")
    table = PEER_TABLE.format(format=table_format)
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    if table_format == "parquet":
        spark.sql(f"CREATE TABLE {table} USING parquet AS SELECT * FROM ({select}) AS m LIMIT 0")
    statement = peer_statement(table_format, select)

    def build() -> None:
        result = run_mv(spark, manifest, model, store, full_refresh=True, file_check=False)
        if result.status != "success":
            raise RuntimeError(result.message)

    build()  # untimed: the first build creates what later ones replace
    spark.sql(statement)
    got: dict[str, list[tuple[float, int]]] = {"mvflow": [], "peer": []}
    phases: list[PhaseCost] = []
    for _ in range(runs):
        got["mvflow"].append(timed(spark, build))
        got["peer"].append(timed(spark, lambda: spark.sql(statement)))
        cost = PhaseCost(spark).start()
        refresh_mv(spark, manifest, model, store, full_refresh=True, phase=cost.mark)
        cost.mark("(after the last phase)")
        phases.append(cost)
    result = {what: (statistics.median(s for s, _ in values), statistics.median(j for _, j in values))
              for what, values in got.items()}
    names = list(phases[-1].seconds)
    table = [(name, statistics.median(dict(p.steps)[name] for p in phases),
              statistics.median(p.seconds[name] for p in phases)) for name in names]
    mv, peer = result["mvflow"][0], result["peer"][0]
    echo(f"\n{table_format}: mvflow full build {mv:.2f} s ({result['mvflow'][1]:.0f} jobs), peer {peer:.2f} s "
         f"({result['peer'][1]:.0f} jobs): {mv / peer:.2f}× the peer; target ≤ {RATIO} × peer + {SLACK:g} s = "
         f"{RATIO * peer + SLACK:.2f} s: {'met' if mv <= RATIO * peer + SLACK else 'missed'}")
    echo(f"  {table_format} build per phase (medians of {runs}; the hook's own jobs not counted):")
    echo("\n".join(f"  {jobs:4.0f} jobs  {seconds:6.2f} s  {name}" for name, jobs, seconds in table))
    echo(f"  {sum(j for _, j, _ in table):4.0f} jobs  {sum(s for _, _, s in table):6.2f} s  total (phased)")
    return {"format": table_format, **{k: {"seconds": v[0], "jobs": v[1]} for k, v in result.items()},
            "phases": [{"phase": n, "jobs": j, "seconds": s} for n, j, s in table]}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from compiler import demo
    from compiler.project import load_project
    from compiler.spark import spark_session

    parser = argparse.ArgumentParser(prog="python -m bench.build_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--offers", type=int, default=100_000)
    parser.add_argument("--formats", default="parquet,delta")
    parser.add_argument("--source-format", choices=("parquet", "delta"), default="delta")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    from bench.p4_noop import demo_copy

    project = demo_copy(ROOT / "bench" / ".work" / "build_cost")
    os.environ["BENCH_BUILD_PROJECT"] = str(project)
    os.environ["MVFLOW_TABLE_FORMAT"] = args.source_format
    spark = spark_session(load_project(project).target(), delta=True)
    counts = demo.init(spark, scale=args.offers / OFFERS_PER_SCALE, table_format=args.source_format)
    print(f"build_cost: {counts['offers']:,} offers, sources {args.source_format}")
    results = [measure(spark, f.strip(), args.runs, print) for f in args.formats.split(",") if f.strip()]
    spark.stop()
    return results


if __name__ == "__main__":
    main()
