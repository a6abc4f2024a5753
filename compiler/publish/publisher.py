"""One publish of an MV (after its batch) or of a table model (after its build) to its store: the
runner of ``compiler.publish``.

By key: the keys the MV's batches ``(published, last]`` replaced (its changes table, where each
batch records them) are joined with the MV's rows; a key with a row is upserted, one without is
deleted; ``chunk_rows`` keys per transaction, the last one writing the published batch. The rows
are read after the MV committed its last batch, so they are that batch's or newer: a redo
publishes them again, and never anything older.
Full: every row into a fresh table, keyed and indexed, then swapped in (``postgres.PostgresStore``).
A table model is rebuilt whole, so it is published in full after each build: its build is known by
its stamp (``compiler.kinds.unchanged.build_stamp``), which the store's offsets row keeps.
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ..leases import kept
from ..phases import PhaseHook, no_phase
from ..state import Lease, StateStore, default_holder
from .decisions import FULL, KEYS, NOTHING, REPLACE, Action, MvBatch, Published, decide, decide_table, up_to_date
from .schema import Table, table_of
from .stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..manifest import Manifest, Model
    from ..kinds.mv.plan import MvPlan
    from ..run import Result

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
        if self.action.what == REPLACE:
            return (f"published {self.table} at batch {self.action.upto}, every row ({self.action.reason}): "
                    f"{self.upserted:,} rows, {self.seconds:.1f} s")
        if self.action.what == FULL:
            at = f" at batch {self.action.upto}" if self.action.upto else ""  # a table model's has no batch
            return f"published {self.table} in full{at} ({self.action.reason}): {self.upserted:,} rows, {self.seconds:.1f} s"
        return (f"published {self.table} by key ({self.action.reason}): {self.upserted:,} rows upserted, "
                f"{self.deleted:,} deleted, {self.chunks} chunk{'s' if self.chunks != 1 else ''}, {self.seconds:.1f} s")


def published_name(spec, model_name: str) -> str:
    """The published table as ``schema.name`` (schema ``public`` unless the config names one)."""
    name = spec.table_for(model_name)
    return name if "." in name else f"public.{name}"


def publish_topic(store_name: str, table: str) -> str:
    """The state-store topic whose lease a publisher of a table model's ``table`` holds (an MV's
    publisher holds the MV's own lease: its refresh and its publish are one job)."""
    return f"publish:{store_name}.{table}"


def lease_topic(model: "Model", store_name: str, table: str) -> str:
    """The topic whose lease a publisher of ``model`` holds: an MV's own, a table model's ``publish_topic``."""
    return publish_topic(store_name, table) if model.kind.name == "table" else model.name


def publish_mv(spark: "SparkSession", manifest: "Manifest", model: "Model", store: StateStore, repair: bool = False,
               holder: str | None = None, phase: PhaseHook = no_phase, echo: Callable[[str], None] = lambda _: None,
               now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
               lease_seconds: float = LEASE_SECONDS, lease: Lease | None = None) -> Publication:
    """Publish ``model`` (an mv with ``config(publish=...)``) up to its last committed batch, under
    the MV topic's lease: ``lease`` when the caller holds it (``run_mv``, from the refresh on), else
    taken here. Its token fences every write to the store."""
    from ..kinds.mv.analyze import mv_plan

    spec = model.kind.publish
    plan = mv_plan(model, manifest)
    target = open_store(manifest.project.target(manifest.target), spec.to)
    qualified = published_name(spec, model.name)
    started = time.monotonic()
    mv, published = mv_batch(store, plan.topic()), target.published(qualified)
    if not repair and up_to_date(published, mv):  # known without a lease or Spark
        return Publication(decide(published, mv, None), f"{spec.to}.{qualified}")
    with _leased(store, lease_topic(model, spec.to, qualified), lease, holder, now, lease_seconds, phase) as lease:
        mv, published = mv_batch(store, plan.topic()), target.published(qualified)  # again, under the lease
        if not repair and up_to_date(published, mv):
            return Publication(decide(published, mv, None), f"{spec.to}.{qualified}")
        rows, table = model_rows(spark, model, qualified, plan.visible_key)
        added = table.added_columns(published.fingerprint) if published is not None else None
        action = decide(published, mv, table.fingerprint, repair, tuple(c.name for c in added or ()))
        done = Published(action.upto, mv.definition, table.fingerprint, lease.token, lease=lease.topic)
        publication = Publication(action, f"{spec.to}.{qualified}")
        if action.what == FULL:
            echo(f"{model.name}: publishing {publication.table} in full ({action.reason})")
            publication.upserted = _full(target, table, spec, rows, lease, done, model.name, phase)
        elif action.what == REPLACE:
            echo(f"{model.name}: publishing every row into {publication.table} ({action.reason})")
            publication.upserted = target.replace_rows(table, added, _local(rows), lease, model.name, done)
        elif action.what == KEYS:
            _by_key(spark, target, table, spec, rows, plan, action, lease, done, model.name, phase, publication)
        publication.seconds = time.monotonic() - started
        return publication


def publish_table(spark: "SparkSession", manifest: "Manifest", model: "Model", store: StateStore, repair: bool = False,
                  holder: str | None = None, phase: PhaseHook = no_phase, echo: Callable[[str], None] = lambda _: None,
                  now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                  lease_seconds: float = LEASE_SECONDS) -> Publication:
    """Publish ``model`` (a table with ``config(publish=...)``) in full when its last build is not
    published yet (known without Spark where the run watches its files)."""
    from ..kinds.unchanged import build_stamp

    spec = model.kind.publish
    target = open_store(manifest.project.target(manifest.target), spec.to)
    qualified = published_name(spec, model.name)
    started = time.monotonic()
    with _leased(store, lease_topic(model, spec.to, qualified), None, holder, now, lease_seconds, phase) as lease:
        stamp = build_stamp(store, manifest, model)
        action = decide_table(target.published(qualified), stamp, repair)
        publication = Publication(action, f"{spec.to}.{qualified}")
        if action.what == FULL:
            rows, table = model_rows(spark, model, qualified, model.kind.unique_key)
            echo(f"{model.name}: publishing {publication.table} in full ({action.reason})")
            done = Published(0, stamp or "", table.fingerprint, lease.token, lease=lease.topic)
            publication.upserted = _full(target, table, spec, rows, lease, done, model.name, phase)
        publication.seconds = time.monotonic() - started
        return publication


def publish_model(spark: "SparkSession", manifest: "Manifest", model: "Model", store: StateStore,
                  **options) -> Publication:
    """``publish_table`` for a table model, ``publish_mv`` for an mv."""
    return (publish_table if model.kind.name == "table" else publish_mv)(spark, manifest, model, store, **options)


def publish_after(result: "Result", publish: Callable[[], Publication]) -> None:
    """Run a model's publish after its own work succeeded; its words join the model's message, and a
    failed publish fails the model's result (what the model wrote stays: the next run publishes)."""
    from ..run import _spark_message

    def add(words: str) -> None:  # a table's build has no message of its own
        result.message = f"{result.message}; {words}" if result.message else words

    try:
        publication = publish()
    except Exception as exc:  # noqa: BLE001 - reported as the model's error; the next run publishes again
        result.status = "error"
        add(f"publishing failed: {_spark_message(exc)}")
        return
    if publication.action.what != NOTHING:
        add(publication.words())


@contextmanager
def _leased(store: StateStore, topic: str, held: Lease | None, holder: str | None, now: Callable[[], datetime],
            lease_seconds: float, phase: PhaseHook) -> Iterator[Lease]:
    """The lease of ``topic`` (``held`` if the caller has it, else taken and released here), kept
    alive while the publish works; its token fences the store's writes."""
    lease = held or store.acquire(topic, holder or default_holder(), lease_seconds, now())
    try:
        phase("publish:leased")
        with kept(store, lambda: [lease], lease_seconds, now):
            yield lease
    finally:
        if held is None:
            store.release(lease)


def published_key(manifest: "Manifest", model: "Model") -> tuple[str, ...]:
    """The published table's key: an mv's unique key among its columns, a table's ``unique_key``."""
    from ..kinds.mv.analyze import mv_plan

    return model.kind.unique_key if model.kind.name == "table" else mv_plan(model, manifest).visible_key


def model_rows(spark: "SparkSession", model: "Model", qualified: str, key: tuple[str, ...]) -> tuple["DataFrame", Table]:
    """The model's rows as readers see them, and the published table they make."""
    rows = spark.table(model.relation)
    rows = rows.select(*model.columns) if model.columns else rows
    return rows, table_of(rows.schema, qualified, key)


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
    target.create_new(table, lease)
    count = 0
    for chunk in _chunks(_local(rows), spec.chunk_rows):
        target.load_new(table, chunk, lease)
        count += len(chunk)
    phase("publish:loaded")
    target.index_new(table, spec.indexes, lease)
    phase("publish:indexed")
    target.swap_in(table, spec.indexes, lease, mv, done)
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
    for chunk, last in _with_last(_chunks(_local(joined), spec.chunk_rows)):
        upserts = [tuple(r)[:-1] for r in chunk if r["_mvflow_found"]]
        gone = [tuple(r[k] for k in key) for r in chunk if not r["_mvflow_found"]]
        publication.upserted += len(upserts)
        publication.deleted += len(gone)
        target.upsert_chunk(table, upserts, gone, lease, done if last else None, mv)
        publication.chunks += 1
        phase("publish:chunk-committed")


def _local(rows: "DataFrame") -> Iterator:
    """The rows streamed to this process a partition at a time (the next one read meanwhile)."""
    return rows.toLocalIterator(prefetchPartitions=True)


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
