"""One MV batch's footprint in the Spark session: the derived statements it runs, the temporary
views and key-set checkpoints it makes (dropped when the batch ends) and the session switches it
flips (adaptive execution, broadcast joins), set back to what the target asked.

Key sets stay in Spark (checkpoints): the driver only sees their counts, and a count is also the
job that materializes a checkpoint (``BatchScope.checkpoint``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from ...spark_connect import launch_conf
from ...table_format import column_definitions
from .derive import bind_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .derive import Derived
    from .plan import MvPlan

# Key sets up to this many rows are joined as broadcasts. A checkpoint carries no size
# statistics, so without the hint Spark plans a shuffle join and shuffles the big side
# (every offer, every price) before adaptive execution sees that the key side is small.
BROADCAST_KEYS = 1_000_000
# Key sets up to this many rows are read by one task: a checkpoint of the union of every input's
# DISTINCT keys has the shuffle partitions of each (8 × inputs), and each broadcast of 13 changed
# keys ran 40 tasks (bench.batch_jobs, Delta: ~0.1 s a broadcast on 2 cores).
ONE_TASK_KEYS = 100_000
# Adaptive execution runs every shuffle of a query as a Spark job of its own and re-plans after
# it (~0.1-0.3 s each). A key-driven batch shuffles only small key sets, so it runs without it
# (one job per action); a build, a chunked batch and a compaction move much data and keep it.
# The switch is the session's: models other threads run meanwhile see it (their speed, not their
# results). A session of the batch's own would not do: another session keeps its file listings
# of the tables a batch rewrites (a compaction's new slot) and fails reading them.
ADAPTIVE = "spark.sql.adaptive.enabled"
# When the written keys are broadcast, the rows' other inputs are joined by shuffles of their
# rows of those keys, stages of the write's own job, rather than one broadcast job each.
BROADCAST = "spark.sql.autoBroadcastJoinThreshold"
# Spark injects a bloom filter into such a shuffle join when the other side has a selective filter
# and is small (InjectRuntimeFilter): a job of its own that scans that input whole (the demo's
# offers, to filter prices), where the broadcast keys already filter both sides. Off with them.
BLOOM_FILTER = "spark.sql.optimizer.runtime.bloomFilter.enabled"


class BatchScope:
    """The statements, views and checkpoints of one batch of ``plan`` in ``spark``."""

    def __init__(self, spark: "SparkSession", plan: "MvPlan", derived: "Derived"):
        self.spark, self.plan, self.derived = spark, plan, derived
        # what the target set (not the session's value now: a batch in another thread may have switched it)
        self._adaptive = launch_conf(spark, ADAPTIVE, "true")  # classic: the SparkContext's conf; Spark Connect too
        self._broadcast = launch_conf(spark, BROADCAST, "10MB")
        self._bloom_filter = launch_conf(spark, BLOOM_FILTER, "true")
        self._views: list[str] = []
        self._frames: list["DataFrame"] = []

    def sql(self, name: str, frames: dict[str, "DataFrame"] | None = None, **args: Any) -> "DataFrame":
        """Derived statement ``name`` with its markers bound from ``args`` and its ``{name}``s read from ``frames``."""
        return self._run(self.derived[name], args, frames)

    def create_like(self, name: str, like: str, columns: "tuple[str, ...] | None" = None, **args: Any) -> None:
        """Derived ``CREATE TABLE`` ``name`` with the columns of table ``like`` (``columns`` of them only)."""
        self._run(bind_columns(self.derived[name], column_definitions(self.spark.table(like).schema, columns)), args)

    def _run(self, text: str, args: dict[str, Any], frames: dict[str, "DataFrame"] | None = None) -> "DataFrame":
        """``text`` with the markers it holds bound from ``args`` (Spark refuses unused ones in some statements)."""
        return self.spark.sql(text, args={k: v for k, v in args.items() if f":{k}" in text} or None, **(frames or {}))

    def execute(self, text: str) -> None:
        """A statement built by the caller (its literals bound already)."""
        self.spark.sql(text)

    def view(self, what: str, frame: "DataFrame") -> None:
        """``frame`` as the batch's temporary view ``what`` (``MvPlan.view_name``), which statements read."""
        name = self.plan.view_name(what)
        frame.createOrReplaceTempView(name)
        if name not in self._views:
            self._views.append(name)

    def checkpoint(self, frame: "DataFrame", rows: int | None = None) -> "DataFrame":
        """A key set materialized once, in Spark (not in the driver), so every later use sees the
        same keys. Lazily: the caller's next action reads every row of it (a count), which stores
        it in the same job as the count. With its ``rows`` known, hinted as ``small`` says."""
        frame = frame.localCheckpoint(eager=False)
        self._frames.append(frame)
        return frame if rows is None else small(frame, rows)

    def adaptive(self, on: bool) -> None:
        """Adaptive execution on (as the target set it) or off, for the session."""
        self.spark.conf.set(ADAPTIVE, self._adaptive if on else "false")

    @contextmanager
    def broadcasts(self, on: bool) -> Iterator[None]:
        """Automatic broadcast joins and runtime bloom filters as the target set them, or off, for
        the statements inside."""
        self.spark.conf.set(BROADCAST, self._broadcast if on else "-1")
        self.spark.conf.set(BLOOM_FILTER, self._bloom_filter if on else "false")
        try:
            yield
        finally:
            self.spark.conf.set(BROADCAST, self._broadcast)
            self.spark.conf.set(BLOOM_FILTER, self._bloom_filter)

    def drop(self) -> None:
        """Drop every view and checkpoint the batch made."""
        for name in self._views:
            self.spark.catalog.dropTempView(name)
        self._views.clear()
        for frame in self._frames:
            frame.unpersist()
        self._frames.clear()


def union_all(frames: list["DataFrame"]) -> "DataFrame":
    """One frame of several (by column name; columns a frame lacks are NULL): one Spark job."""
    union = frames[0]
    for other in frames[1:]:
        union = union.unionByName(other, allowMissingColumns=True)
    return union


def small(frame: "DataFrame", rows: int) -> "DataFrame":
    """The frame, marked to be broadcast in joins when it holds at most ``BROADCAST_KEYS`` rows, and
    read by one task when it holds at most ``ONE_TASK_KEYS``."""
    from pyspark.sql import functions as F

    if 0 < rows <= ONE_TASK_KEYS:
        frame = frame.coalesce(1)
    return F.broadcast(frame) if rows <= BROADCAST_KEYS else frame
