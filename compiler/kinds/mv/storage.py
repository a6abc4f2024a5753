"""How an MV's rows are stored, per table format: the one place a refresh differs by format.

``compiler.kinds.mv.refresh._Refresh`` finds the changed and affected keys (``compiler.kinds.mv.keys``)
and commits the offsets the same way for both formats; a storage writes what it computed:

- ``ParquetStorage`` (``table_format: parquet``): base tables in slots a/b, a delta table
  partitioned by batch, and a merge-on-read view under the model's name; a batch writes its
  recomputed rows and tombstones into its own delta partition (a redo overwrites it);
  compaction writes a new base into the idle slot and swaps the view (blue/green). While the
  delta is empty (after a build or a compaction) the view reads the base alone; the first write
  puts the merge back. The delta's size is kept in the catalog (``ANALYZE … NOSCAN``) so that a
  reader's plan broadcasts a small delta instead of shuffling the base.
- ``DeltaStorage`` (``table_format: delta``): one Delta table with the MV's columns and its hidden
  key columns (``_mvflow_k_*``): under the model's name when there are none, else beside it
  (``__mvflow_rows``) and read through a view of the SELECT's columns under the model's name. A
  build is ``CREATE OR REPLACE TABLE … AS``; a batch is one ``MERGE`` (one Delta commit). The
  table's version at each commit is kept in ``MvState.version``: key queries read the MV as of
  that version, and a redo first restores the table to it, so a crashed try's MERGE leaves
  nothing behind whatever the redo finds.

Every statement comes from ``compiler.kinds.mv.derive`` (written under ``target/run/<mv>/``).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Protocol

from ...source_keys import DuplicateKeys
from ...spark_connect import observed
from ...table_format import DELTA, delta_commit, delta_version, parquet_rows
from .derive import Derived, bind_literal
from .plan import DELETED, SLOTS, WAS, MvPlan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from . import MvKind
    from .scope import BatchScope

# Whether a MERGE first copies its source (Delta's default: when it is not a Delta table alone); a
# checkpoint is a copy already, read the same at both of the MERGE's reads.
MATERIALIZE = "spark.databricks.delta.merge.materializeSource"
# A MERGE's rows (whole MV rows, not keys) are broadcast up to this many (~50 MB of the demo's).
BROADCAST_ROWS = 100_000


@dataclass
class MvState:
    """What the MV topic's ``state`` column remembers between batches (JSON)."""

    slot: str = ""  # parquet: the live slot
    base_rows: int = 0  # rows of the MV after the last build or compaction (Delta: kept up to date)
    delta_rows: int = 0  # rows written since the last build or compaction
    definition: str = ""
    swapping: str = ""  # set while a build or compaction moves the view: if still set, rebuild
    version: int = -1  # delta: the table's version at the last commit
    chunked: dict = field(default_factory=dict)  # a chunked batch in progress: {batch, chunks, done}
    cluster_by: list = field(default_factory=list)  # delta: the clustering columns the table was given
    unpublished: int = 0  # the last batch that published no keys (a build, or no reader asked for them then)
    built: int = 0  # the batch of the last full build (a serving store's publish then starts anew)
    groups: int | None = None  # a GROUP BY MV's group rows (base_rows holds its members too; parquet: like it, as of
    # the last build or compaction); None: not counted
    deletion_vectors: bool = False  # delta: the table's MERGEs write deletion vectors (an MV past compact_below_rows)

    @classmethod
    def parse(cls, text: str) -> "MvState":
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            data = {}
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__}) if isinstance(data, dict) else cls()

    def dump(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def words(self) -> str:
        """The stored MV in words (``mvflow status``).

        >>> MvState(base_rows=10000, version=12, cluster_by=["shop_id"]).words()
        'Delta table, version 12, 10,000 rows, clustered by shop_id'
        >>> MvState(slot="a", base_rows=5, swapping="b").words()
        'slot a, 5 rows + 0 in delta, moving to slot b (a build or compaction was interrupted: the next run redoes it)'
        >>> MvState(base_rows=9281, version=3, groups=698).words()
        'Delta table, version 3, 698 groups (9,281 rows with their members)'
        >>> MvState(slot="a", base_rows=9281, delta_rows=40, groups=698).words()  # parquet counts groups at a compaction
        'slot a, 698 groups (9,281 rows with their members) at the last build or compaction + 40 in delta'
        """
        if self.version >= 0 and not self.slot:
            words = f"Delta table, version {self.version}, {self.rows_words()}"
            words += f", clustered by {', '.join(self.cluster_by)}" if self.cluster_by else ""
            return words + (", a build was interrupted: the next run redoes it" if self.swapping else "") + self._chunked_words()
        as_of = " at the last build or compaction" if self.groups is not None and self.delta_rows else ""
        words = f"slot {self.slot or '(none)'}, {self.rows_words()}{as_of} + {self.delta_rows:,} in delta"
        if self.swapping:
            words += f", moving to slot {self.swapping} (a build or compaction was interrupted: the next run redoes it)"
        return words + self._chunked_words()

    def rows_words(self) -> str:
        return rows_words(self.base_rows, self.groups)

    def _chunked_words(self) -> str:
        if not self.chunked:
            return ""
        c = self.chunked
        return f", chunked batch {c.get('batch')}: {c.get('done')} of {c.get('chunks')} chunks written (the next run resumes it)"


def rows_words(rows: int, groups: int | None) -> str:
    """``10,000 rows``; a GROUP BY MV's groups first, as readers and ``verify`` count them.

    >>> rows_words(9281, 1)
    '1 group (9,281 rows with their members)'
    """
    if groups is None:
        return f"{rows:,} rows"
    return f"{groups:,} group{'' if groups == 1 else 's'} ({rows:,} rows with their members)"


class Runner(Protocol):
    """What a storage uses of the refresh running it (``compiler.kinds.mv.refresh._Refresh``)."""

    spark: "SparkSession"
    plan: MvPlan
    derived: Derived
    kind: MvKind
    scope: BatchScope  # the batch's statements, views and checkpoints

    def phase(self, name: str) -> None: ...
    def echo(self, text: str) -> None: ...
    def save_state(self, state: MvState) -> None: ...
    def publish_all(self, table: str, old: "Callable[[], DataFrame] | None", batch: int) -> int: ...
    @property
    def definition(self) -> str: ...


class MvStorage(Protocol):
    """The format-specific part of an MV refresh."""

    def adaptive_write(self, keys: int) -> bool:
        """Whether writing the rows of ``keys`` keys needs adaptive execution
        (``compiler.kinds.mv.scope.ADAPTIVE``), which a key-driven batch of a few keys runs without."""

    def exists(self, state: MvState) -> bool:
        """Whether the stored MV the state describes is there (else the next batch rebuilds)."""

    def stored(self, state: MvState, batch: int) -> "DataFrame":
        """The MV's rows with their hidden key columns as of the last commit (view ``stored``)."""

    def prepare_redo(self, state: MvState) -> None:
        """Undo what a crashed try of this batch wrote, where a redo would not overwrite it."""

    def align(self, state: MvState) -> None:
        """Give the stored MV the layout its config asks now, when only that changed (no rebuild)."""

    def build(self, state: MvState, batch: int) -> MvState:
        """A full build (marked in the state first), its keys published; the new state."""

    def write(self, state: MvState, batch: int, affected: int) -> None:
        """Write the batch's recomputed rows (view ``rows``) for the affected keys (view ``keys``)."""

    def compact(self, state: MvState) -> None:
        """Fold what the batches wrote into a compact layout; the state saved."""


def storage_for(run: Runner) -> MvStorage:
    return DeltaStorage(run) if run.plan.table_format == DELTA else ParquetStorage(run)


def _is_view(spark: "SparkSession", relation: str) -> bool | None:
    """True for a view, False for a table, None when nothing has that name."""
    if not spark.catalog.tableExists(relation):
        return None
    return spark.catalog.getTable(relation).tableType == "VIEW"


# A batch of up to this many affected keys writes its delta partition as one file (one task).
SMALL_WRITE_KEYS = 100_000


class ParquetStorage:
    """Base slots, a delta partitioned by batch, a merge-on-read view (see the module doc)."""

    def __init__(self, run: Runner):
        self.run = run

    def adaptive_write(self, keys: int) -> bool:
        return False  # the write joins the sources to broadcast key sets: no runtime choice to make

    def _table(self, what: str, slot: str) -> str:
        return self.run.plan.table_name(f"{what}_{slot}")

    def _args(self, slot: str) -> dict[str, str]:
        return {"base_table": self._table("base", slot), "delta_table": self._table("delta", slot)}

    def _rows(self, slot: str) -> "DataFrame":
        """The MV's current rows with their hidden key columns (what a compaction keeps)."""
        return self.run.scope.sql("state", **self._args(slot))

    def exists(self, state: MvState) -> bool:
        return bool(state.slot) and self.run.spark.catalog.tableExists(self._table("base", state.slot))

    def stored(self, state: MvState, batch: int) -> "DataFrame":
        return self.run.spark.sql(self.run.derived["stored"], args={**self._args(state.slot), "batch": batch})

    def prepare_redo(self, state: MvState) -> None:
        """Nothing: the redo overwrites its own delta partition."""

    def align(self, state: MvState) -> None:
        """Nothing: a parquet MV has no clustering (``cluster_by`` is Delta-only)."""

    def build(self, state: MvState, batch: int) -> MvState:
        run = self.run
        slot = SLOTS[1] if state.slot == SLOTS[0] else SLOTS[0]
        run.save_state(replace(state, swapping=slot))
        run.phase("mv:build-marked")
        rows, groups = self._write_base(slot)
        run.phase("mv:build-base-written")
        old = None
        if run.plan.consumers and self.exists(state) and state.definition == run.definition:
            old = lambda: self._rows(state.slot)  # noqa: E731 - read only if every key is published
        unpublished = run.publish_all(self._table("base", slot), old, batch)
        run.phase("mv:build-published")
        if not state.slot:  # the Delta format's tables, when switching (a state of this format's says there are none)
            if _is_view(run.spark, run.plan.relation) is False:
                run.scope.sql("drop_table")
            if run.spark.catalog.tableExists(run.plan.table_name("rows")):
                run.scope.sql("drop_rows")
        run.scope.sql(f"plain:{slot}")
        run.scope.sql("readable_view")
        run.phase("mv:build-swapped")
        return MvState(slot, rows, 0, run.definition, unpublished=unpublished, groups=groups)

    def _write_base(self, slot: str) -> tuple[int, int | None]:
        base, delta = self._table("base", slot), self._table("delta", slot)
        self.run.scope.sql("drop_base", base_table=base)
        self.run.scope.sql("drop_delta", delta_table=delta)
        self.run.scope.sql("build_base", base_table=base)
        self.run.scope.create_like("create_delta", base, delta_table=delta)
        return self._count(base)

    def _count(self, base: str) -> tuple[int, int | None]:
        """The rows of a base table (from its files' footers, else counted) and, of a GROUP BY MV,
        its group rows (one job)."""
        if not self.run.plan.grouped:
            rows = parquet_rows(self.run.spark, base)
            return (self.run.spark.table(base).count() if rows is None else rows), None
        rows, groups = self.run.scope.sql("count_base", base_table=base).first()
        return int(rows), int(groups)

    def write(self, state: MvState, batch: int, affected: int) -> None:
        """Write the batch's rows as its delta partition; readers see them at once, through the
        merge-on-read view (put back here when a build or a compaction left a plain one)."""
        delta = self._table("delta", state.slot)
        small = 0 < affected <= SMALL_WRITE_KEYS  # a chunk passes 0
        self.run.scope.sql("write_delta_small" if small else "write_delta", delta_table=delta, batch=batch)
        self._refuse_duplicates(delta, batch)
        self.run.scope.sql("delta_stats", delta_table=delta)
        if not state.delta_rows:
            self.run.scope.sql(f"view:{state.slot}")
            self.run.scope.sql("readable_view")
        self.run.phase("mv:delta-written")
        state.delta_rows += affected

    def _refuse_duplicates(self, delta: str, batch: int) -> None:
        """Rows sharing an MV key (a source's rows breaking its keys) would leave readers one of them
        at random: the batch's partition goes and the run fails naming them, as a Delta MERGE does."""
        run = self.run
        found = run.scope.sql("batch_duplicates", delta_table=delta, batch=batch).collect()
        if found:
            run.spark.sql(bind_literal(run.derived["drop_batch"], "batch", batch), args={"delta_table": delta})
            keys = [", ".join(str(v) for v in row[:-1]) for row in found]
            raise DuplicateKeys(run.plan.name, keys)

    def compact(self, state: MvState) -> None:
        """Fold the delta into a new base in the idle slot and swap the view (blue/green)."""
        run = self.run
        slot = SLOTS[1] if state.slot == SLOTS[0] else SLOTS[0]
        base, delta = self._table("base", slot), self._table("delta", slot)
        run.scope.view("current", self._rows(state.slot))
        run.scope.sql("drop_base", base_table=base)
        run.scope.sql("drop_delta", delta_table=delta)
        run.scope.sql("compact", base_table=base)
        run.scope.create_like("create_delta", base, delta_table=delta)
        run.phase("mv:compaction-written")
        run.save_state(replace(state, swapping=slot))
        run.phase("mv:compaction-marked")
        run.scope.sql(f"plain:{slot}")
        run.scope.sql("readable_view")
        run.phase("mv:compaction-swapped")
        (state.base_rows, state.groups), state.slot, state.delta_rows = self._count(base), slot, 0
        run.save_state(state)
        run.phase("mv:compacted")
        run.echo(f"{run.plan.name}: compacted into slot {slot} ({state.base_rows:,} rows)")


class DeltaStorage:
    """One Delta table, replaced by a build, merged into by a batch: under the model's name, or beside it
    and read through a view of the SELECT's columns (of a GROUP BY MV, its group rows) when it holds
    what readers must not see (``MvPlan.table``)."""

    def __init__(self, run: Runner):
        self.run = run

    def adaptive_write(self, keys: int) -> bool:
        """The MERGE joins its rows to the whole table. They are a checkpoint hinted to be broadcast
        up to ``BROADCAST_ROWS`` keys (``_merge``); more (a wide row each) Delta copies, unsized:
        only adaptive execution sees at run time how many they are and whether to broadcast them
        instead of shuffling the table."""
        return not 0 < keys <= BROADCAST_ROWS  # a chunk passes 0 keys

    @property
    def table(self) -> str:
        return self.run.plan.table

    def exists(self, state: MvState) -> bool:
        return state.version >= 0 and _is_view(self.run.spark, self.table) is False

    def _as_of(self, version: int) -> "DataFrame":
        return self.run.spark.read.option("versionAsOf", version).table(self.table)

    def stored(self, state: MvState, batch: int) -> "DataFrame":
        # The version of the last commit, not the newest: a crashed try may have merged since.
        self.run.scope.view("before", self._as_of(state.version))
        return self.run.scope.sql("stored")

    def prepare_redo(self, state: MvState) -> None:
        """A crashed try may have merged keys the redo does not find again (a dictionary edit
        undone since): restore the table to the version of the last commit first."""
        if self.exists(state) and delta_version(self.run.spark, self.table) != state.version:
            self.run.spark.sql(bind_literal(self.run.derived["restore"], "version", state.version))

    def align(self, state: MvState) -> None:
        """A changed ``cluster_by``: ``ALTER TABLE … CLUSTER BY`` (a metadata-only Delta commit) and an
        ``OPTIMIZE`` that clusters the files by the new columns; the rows stay, so nothing is
        recomputed or republished (a rebuild would republish every key downstream). The new version is
        saved with the new columns; a crash before the save leaves the state behind: the next run
        does it again."""
        if list(self.run.plan.cluster_by) == state.cluster_by:
            return
        self.run.scope.sql("cluster_by")
        if self.run.plan.cluster_by:  # OPTIMIZE reclusters the files of the old layout too (measured)
            self.run.scope.sql("optimize")
            state.delta_rows = 0  # compacted as well
        state.cluster_by, state.version = list(self.run.plan.cluster_by), delta_version(self.run.spark, self.table)
        self.run.save_state(state)
        self.run.echo(f"{self.run.plan.name}: clustering set to {', '.join(state.cluster_by) or 'none'}")

    def build(self, state: MvState, batch: int) -> MvState:
        run = self.run
        run.save_state(replace(state, swapping="table"))
        run.phase("mv:build-marked")
        # the old keys, for a publish of every key (read by time travel once the table is replaced)
        old = (lambda: self._as_of(state.version)) \
            if run.plan.consumers and self.exists(state) and state.definition == run.definition else None
        switching = state.version < 0 or bool(state.slot)  # the last state is not this format's: parquet's may be there
        behind_view = self.table != run.plan.relation
        if not behind_view and _is_view(run.spark, self.table):  # the parquet format's view, or this one's reader view
            run.scope.sql("drop_view")
        run.scope.sql("build")
        if run.plan.cluster_by:  # CREATE … CLUSTER BY does not cluster what it writes; OPTIMIZE does
            run.scope.sql("optimize")
        if behind_view:
            if _is_view(run.spark, run.plan.relation) is False:  # its table under the model's name, as kept before
                run.scope.sql("drop_table")
            run.scope.sql("reader_view")
            run.scope.sql("readable_view")
        elif run.spark.catalog.tableExists(run.plan.table_name("rows")):  # the table beside its reader view, as kept before
            run.scope.sql("drop_rows")
        run.phase("mv:build-replaced")
        version, metrics = delta_commit(run.spark, self.table)  # the rows from the commit's metrics: no count
        rows = int(metrics["numOutputRows"]) if "numOutputRows" in metrics else run.spark.table(self.table).count()
        deletion_vectors = self.deletion_vectors(rows, False)
        version = delta_version(run.spark, self.table) if deletion_vectors else version
        leftovers = [n for n in run.derived.queries if n.startswith("drop:")] if switching else []
        for name in leftovers:  # the parquet format's tables
            run.scope.sql(name)
        unpublished = run.publish_all(self.table, old, batch)
        run.phase("mv:build-published")
        groups = int(run.scope.sql("count_groups").first()[0]) if run.plan.grouped else None
        return MvState(base_rows=rows, definition=run.definition, version=version, unpublished=unpublished,
                       cluster_by=list(run.plan.cluster_by), groups=groups, deletion_vectors=deletion_vectors)

    def deletion_vectors(self, rows: int, enabled: bool) -> bool:
        """Whether the table's MERGEs write deletion vectors, turned on once the MV has more than
        ``compact_below_rows``. A MERGE touching a few rows of a big file then marks them instead of
        rewriting the file (at 1M rows, 0.1% random keys: 0.17x a rebuild, a full rewrite without);
        but a table with the feature costs every reader one more Spark job, deletion vector or not
        (bench/results/p5-compaction.md), and a small MV is compacted after every batch
        anyway. Once on, Delta keeps the feature in the table's protocol."""
        from .strategy import compacts_every_batch

        if enabled or compacts_every_batch(self.run.kind, rows):
            return enabled
        self.run.scope.sql("deletion_vectors")
        return True

    def write(self, state: MvState, batch: int, affected: int) -> None:
        metrics = self._merge(state, affected).first()  # Delta returns the MERGE's row counts (no job)
        if metrics is not None:
            state.base_rows += int(metrics["num_inserted_rows"]) - int(metrics["num_deleted_rows"])
        state.delta_rows += affected
        state.version = delta_version(self.run.spark, self.table)
        self.run.phase("mv:merged")

    def _merge(self, state: MvState, affected: int) -> "DataFrame":
        """The batch's MERGE of its rows (``merge_rows``), which it reads twice (the files it touches,
        then the rows it writes). Delta copies them first, in as many jobs as they have joins, each
        input broadcast by a job of its own. The rows of up to ``BROADCAST_ROWS`` keys are a
        checkpoint instead, written by the first read in one job whose joins are stages
        (``scope.BROADCAST``), hinted to be broadcast, and read by Delta as they are
        (``MATERIALIZE``); more, or a chunk (``affected`` 0), are copied by Delta under adaptive
        execution, which sees their size. A GROUP BY MV counts the groups the batch adds and removes
        (their keys as of the last commit: ``stored``): from the checkpoint, or observed on Delta's
        copy, without a pass of their own."""
        run = self.run
        if self.adaptive_write(affected):
            from pyspark.sql import Observation

            rows, observation = run.scope.sql("merge_rows"), None
            if run.plan.grouped:
                observation = Observation(f"mvflow_groups_{uuid.uuid4().hex}")
                rows = rows.observe(observation, *self._group_changes())
            merged = run.scope.sql("merge", frames={"rows": rows})
            counts = observed(observation) if observation is not None else None
        else:
            rows = run.scope.checkpoint(run.scope.sql("merge_rows"), affected)
            chosen = run.spark.conf.get(MATERIALIZE, None)
            run.spark.conf.set(MATERIALIZE, "none")
            try:
                merged = run.scope.sql("merge", frames={"rows": rows})
            finally:
                run.spark.conf.set(MATERIALIZE, chosen) if chosen is not None else run.spark.conf.unset(MATERIALIZE)
            counts = rows.agg(*self._group_changes()).first().asDict() if run.plan.grouped else None
        if run.plan.grouped:
            state.groups = self._groups_after(state, counts)
        return merged

    def _group_changes(self) -> tuple:
        """The groups a batch adds and removes, as aggregates over its rows."""
        from pyspark.sql import functions as F

        group, deleted, was = F.col(self.run.plan.grouped.main_key_columns[0]).isNull(), F.col(DELETED), F.col(WAS)
        return F.count_if(group & ~deleted & ~was).alias("added"), F.count_if(group & deleted).alias("removed")

    def _groups_after(self, state: MvState, counts: dict | None) -> int | None:
        """The MV's groups after the MERGE: unknown when Spark did not deliver the counts (Spark Connect)."""
        if state.groups is None:  # a state kept before groups were counted: counted once, after the merge
            return int(self.run.scope.sql("count_groups").first()[0])
        return None if counts is None else state.groups + int(counts["added"]) - int(counts["removed"])

    def compact(self, state: MvState) -> None:
        """``OPTIMIZE``: bin-packs the small files each MERGE adds and rewrites files whose
        deletion vectors hide many rows (a new version, the same rows); with ``cluster_by`` it also
        clusters the files it has not clustered yet (Delta's liquid clustering)."""
        run = self.run
        run.scope.sql("optimize")
        run.phase("mv:optimized")
        state.deletion_vectors = self.deletion_vectors(state.base_rows, state.deletion_vectors)
        state.version, state.delta_rows = delta_version(run.spark, self.table), 0
        run.save_state(state)
        run.phase("mv:compacted")
        run.echo(f"{run.plan.name}: optimized ({state.base_rows:,} rows, version {state.version})")
