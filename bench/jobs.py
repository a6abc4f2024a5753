"""How many Spark jobs a block of code runs, through ``SparkContext.statusTracker()`` (works with
the UI off): job ids are global and sequential, so a one-job sentinel before and after the block
brackets the ids of every job the block ran, whatever thread or job group ran them. The tracker
hears of jobs through Spark's asynchronous listener bus, so a sentinel waits until its job shows.

    with count_jobs(spark) as counted:
        spark.sql("...").collect()
    counted.jobs   # jobs between the sentinels
"""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_GROUP = "spark.jobGroup.id"
_WAIT_SECONDS = 60.0  # the status tracker learns of a job from the listener bus, which lags under load
_serial = itertools.count()


@dataclass
class JobCount:
    """Filled in when the ``with`` block ends."""

    jobs: int | None = None
    first_id: int | None = None  # the first id after the opening sentinel


@contextmanager
def count_jobs(spark: "SparkSession") -> Iterator[JobCount]:
    """Count the Spark jobs the ``with`` block runs (every job of the SparkContext, also from
    other threads, so run nothing else meanwhile)."""
    counted = JobCount()
    before = max(_sentinel(spark))
    counted.first_id = before + 1
    yield counted
    counted.jobs = min(_sentinel(spark)) - before - 1


def _sentinel(spark: "SparkSession") -> list[int]:
    """Run a tiny JVM-only job in a job group of its own; its job ids."""
    context = spark.sparkContext
    group = f"bench-job-sentinel-{next(_serial)}"
    previous = context.getLocalProperty(_GROUP)
    context.setLocalProperty(_GROUP, group)
    try:
        spark.range(1).write.format("noop").mode("overwrite").save()
    finally:
        context.setLocalProperty(_GROUP, previous)  # type: ignore[arg-type] - None removes it
    deadline = time.monotonic() + _WAIT_SECONDS
    while not (ids := list(context.statusTracker().getJobIdsForGroup(group))):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the status tracker did not report the job sentinel's job in {_WAIT_SECONDS:g} s")
        time.sleep(0.02)
    return ids
