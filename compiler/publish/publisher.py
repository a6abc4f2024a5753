"""One publish of an MV to its store, after its batch: the runner of ``compiler.publish``.

By key: the keys the MV's batches ``(published, last]`` replaced (its changes table, where each
batch records them) are joined with the MV's rows; a key with a row is upserted, one without is
deleted; ``chunk_rows`` keys per transaction, the last one writing the published batch. The rows
are read after the MV committed its last batch, so they are that batch's or newer: a redo
publishes them again, and never anything older.
Full: every row into a fresh table, keyed and indexed, then swapped in (``postgres.PostgresStore``).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ..leases import kept
from ..phases import PhaseHook, no_phase
from ..state import Lease, StateStore, default_holder
from .decisions import FULL, KEYS, NOTHING, Action, MvBatch, Published, decide, up_to_date
from .schema import Table, table_of
from .stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..manifest import Manifest, Model
    from ..kinds.mv.plan import MvPlan

LEASE_SECONDS = 120.0


@dataclass
class Publication:
    """What one publish did (``mvflow run`` adds its words to the MV's message)."""

    action: Action
    table: str
    upserted: int = 0
    deleted: int = 0
    chunks: int = 0
    seconds: float = 0.0

    def words(self) -> str:
        if self.action.what == NOTHING:
            return f"published {self.table}: {self.action.reason}"
        if self.action.what == FULL:
            return (f"published {self.table} in full at batch {self.action.upto} ({self.action.reason}): "
                    f"{self.upserted:,} rows, {self.seconds:.1f} s")
        return (f"published {self.table} by key ({self.action.reason}): {self.upserted:,} rows upserted, "
                f"{self.deleted:,} deleted, {self.chunks} chunk{'s' if self.chunks != 1 else ''}, {self.seconds:.1f} s")


def published_name(spec, model_name: str) -> str:
    """The published table as ``schema.name`` (schema ``public`` unless the config names one)."""
    name = spec.table_for(model_name)
    return name if "." in name else f"public.{name}"


def publish_topic(store_name: str, table: str) -> str:
    """The state-store topic whose lease a publisher of ``table`` holds (its token fences the store's writes)."""
    return f"publish:{store_name}.{table}"


def publish_mv(spark: "SparkSession", manifest: "Manifest", model: "Model", store: StateStore, repair: bool = False,
               holder: str | None = None, phase: PhaseHook = no_phase, echo: Callable[[str], None] = lambda _: None,
               now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
               lease_seconds: float = LEASE_SECONDS) -> Publication:
    """Publish ``model`` (an mv with ``config(publish=...)``) up to its last committed batch."""
    from ..kinds.mv.plan import mv_plan

    spec = model.kind.publish
    plan = mv_plan(model, manifest)
    target = open_store(manifest.project.target(manifest.target), spec.to)
    qualified = published_name(spec, model.name)
    started = time.monotonic()
    lease = store.acquire(publish_topic(spec.to, qualified), holder or default_holder(), lease_seconds, now())
    try:
        phase("publish:leased")
        with kept(store, lambda: [lease], lease_seconds, now):
            mv = mv_batch(store, plan.topic())
            published = target.published(qualified)
            if not repair and up_to_date(published, mv):  # known without Spark
                return Publication(decide(published, mv, None), f"{spec.to}.{qualified}")
            rows, table = mv_rows(spark, model, plan, qualified)
            action = decide(published, mv, table.fingerprint, repair)
            done = Published(action.upto, mv.definition, table.fingerprint, lease.token)
            publication = Publication(action, f"{spec.to}.{qualified}")
            if action.what == FULL:
                echo(f"{model.name}: publishing {publication.table} in full ({action.reason})")
                publication.upserted = _full(target, table, spec, rows, lease, done, model.name, phase)
            elif action.what == KEYS:
                _by_key(spark, target, table, spec, rows, plan, action, lease, done, model.name, phase, publication)
            publication.seconds = time.monotonic() - started
            return publication
    finally:
        store.release(lease)


def mv_rows(spark: "SparkSession", model: "Model", plan: "MvPlan", qualified: str) -> tuple["DataFrame", Table]:
    """The MV's rows as readers see them, and the published table they make."""
    rows = spark.table(model.relation).select(*model.columns)
    return rows, table_of(rows.schema, qualified, plan.visible_key)


def mv_batch(store: StateStore, topic: str) -> MvBatch:
    """The MV's last committed batch, as its state-store topic has it (no Spark)."""
    from ..kinds.mv.storage import MvState

    offset = store.get(topic)
    if offset is None or not offset.last:
        return MvBatch(0, 0, 0, "")
    state = MvState.parse(offset.state)
    return MvBatch(int(offset.last[0]), state.built, state.unpublished, state.definition)


def _full(target, table: Table, spec, rows: "DataFrame", lease: Lease, done: Published, mv: str,
          phase: PhaseHook) -> int:
    target.create_new(table, lease.token)
    count = 0
    for chunk in _chunks(rows.toLocalIterator(prefetchPartitions=True), spec.chunk_rows):
        target.load_new(table, chunk, lease.token)
        count += len(chunk)
    phase("publish:loaded")
    target.index_new(table, spec.indexes, lease.token)
    phase("publish:indexed")
    target.swap_in(table, spec.indexes, lease.token, mv, done)
    phase("publish:swapped")
    return count


def _by_key(spark, target, table: Table, spec, rows: "DataFrame", plan: "MvPlan", action: Action, lease: Lease,
            done: Published, mv: str, phase: PhaseHook, publication: Publication) -> None:
    """The changed keys of batches ``(since, upto]`` left-joined with the MV's rows: a key without a
    row is deleted; ``chunk_rows`` keys per transaction, the last one writing the offsets row."""
    from pyspark.sql import functions as F

    from ..kinds.mv.inputs import BATCH

    key = list(table.key)
    changes = spark.table(plan.table_name("changes"))
    keys = changes.where((F.col(BATCH) > action.since) & (F.col(BATCH) <= action.upto)).select(*key).distinct()
    found = rows.withColumn("_mvflow_found", F.lit(True)).alias("r")
    same = [F.col(f"k.`{k}`").eqNullSafe(F.col(f"r.`{k}`")) for k in key]  # a NULL group is a key too
    columns = [F.col(f"{'k' if c.name in key else 'r'}.`{c.name}`").alias(c.name) for c in table.columns]
    joined = keys.alias("k").join(found, functools.reduce(lambda a, b: a & b, same), "left").select(
        *columns, "r._mvflow_found")
    for chunk, last in _with_last(_chunks(joined.toLocalIterator(prefetchPartitions=True), spec.chunk_rows)):
        upserts = [tuple(r)[:-1] for r in chunk if r["_mvflow_found"]]
        gone = [tuple(r[k] for k in key) for r in chunk if not r["_mvflow_found"]]
        publication.upserted += len(upserts)
        publication.deleted += len(gone)
        target.upsert_chunk(table, upserts, gone, lease.token, done if last else None, mv)
        publication.chunks += 1
        phase("publish:chunk-committed")


def _with_last(chunks: Iterator[list]) -> Iterator[tuple[list, bool]]:
    """Each chunk and whether it is the last (no chunk at all: one empty one, which records the batch).

    >>> list(_with_last(iter([[1], [2]]))), list(_with_last(iter([])))
    ([([1], False), ([2], True)], [([], True)])
    """
    current = next(chunks, [])
    for following in chunks:
        yield current, False
        current = following
    yield current, True


def _chunks(rows: Iterable, size: int) -> Iterator[list]:
    chunk: list = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
