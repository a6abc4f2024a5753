"""Spark jobs of one MV refresh batch, per step (issue 12's lean batch), on parquet and on Delta.

    python -m bench.batch_jobs                 # the demo MV offers_wide at scale 0.02, both formats
    python -m bench.batch_jobs --scale 0.1 --formats delta

``Jobs`` counts with ``bench.jobs``'s sentinel (job ids are global and sequential); its ``mark``
is a phase hook (``compiler.phases``): passed as a refresh's ``phase``, it attributes the jobs to
the steps between two named points. The demo project is copied to ``bench/.work/batch_jobs/``.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from bench.p4_noop import DEMO_FILES
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work" / "batch_jobs"


class Jobs:
    """Counts the Spark jobs run between ``start`` and each ``mark`` (and in total)."""

    def __init__(self, spark: "SparkSession"):
        self.spark = spark
        self.steps: list[tuple[str, int]] = []
        self.first = self.last = 0

    def _sentinel(self) -> int:
        """Run the sentinel job and return its id (the newest job id)."""
        from bench.jobs import _sentinel

        return max(_sentinel(self.spark))

    def start(self) -> "Jobs":
        self.first = self.last = self._sentinel()
        self.steps.clear()
        return self

    def mark(self, name: str) -> None:
        now = self._sentinel()
        self.steps.append((name, now - self.last - 1))
        self.last = now

    @property
    def total(self) -> int:
        return sum(n for _, n in self.steps)

    def table(self) -> str:
        return "\n".join(f"  {n:4d}  {name}" for name, n in self.steps) + f"\n  {self.total:4d}  total"


def _project(scale: float) -> Path:
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    for name in DEMO_FILES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, WORK / name)
    # a change batch touches shops and categories: keep the key-driven path at this small scale, and
    # count the batch itself (a compaction, when due, adds 7-8 jobs: bench/results/delta_writes.md)
    wide = WORK / "models/marts/offers_wide.sql"
    wide.write_text(wide.read_text().replace("materialized='mv'", "materialized='mv', fanout_threshold=0.9, compact_threshold=100"))
    return WORK


def main(argv: list[str] | None = None) -> None:
    from compiler import demo
    from compiler.compile import compile_project
    from compiler.kinds.mv.refresh import refresh_mv
    from compiler.project import load_project
    from compiler.spark import spark_session
    from compiler.state import open_state_store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.02)
    parser.add_argument("--formats", default="parquet,delta")
    parser.add_argument("--batches", type=int, default=2, help="refresh batches counted per format")
    parser.add_argument("--calls", action="store_true", help="also a batch with the jobs of every Spark call")
    args = parser.parse_args(argv)
    project = _project(args.scale)
    spark = None
    for n, table_format in enumerate(args.formats.split(",")):
        os.environ["MVFLOW_TABLE_FORMAT"] = table_format
        manifest = compile_project(load_project(project))
        target = manifest.project.target()
        spark = spark or spark_session(target, delta=True)
        store = open_state_store(target.state)
        if n == 0:
            demo.init(spark, scale=args.scale, seed=7)
        model = manifest.models["offers_wide"]
        print(f"{table_format}: {refresh_mv(spark, manifest, model, store).mode}")
        for batch in range(args.batches):
            demo.change(spark, fraction=0.01, seed=100 + 10 * n + batch)
            jobs = Jobs(spark).start()
            outcome = refresh_mv(spark, manifest, model, store, phase=jobs.mark)
            jobs.mark("(after the last phase)")
            print(f"{table_format} batch {outcome.batch} ({outcome.mode}, {outcome.affected} keys"
                  f"{', compacted' if outcome.compacted else ''}): {jobs.total} jobs\n{jobs.table()}")
        if args.calls:
            from bench.job_calls import job_calls

            demo.change(spark, fraction=0.01, seed=200 + n)
            with job_calls(spark) as calls:
                outcome = refresh_mv(spark, manifest, model, store)
            print(f"{table_format} batch {outcome.batch}: jobs per Spark call\n{calls.table()}")
    if spark is not None:
        spark.stop()


if __name__ == "__main__":
    main()
