"""How an MV batch sees the changes of one input: one class per change mode.

A mode owns, for its input, the probe (what the input holds now), the up-to-date test, the
``(last, next]`` range a batch plans, the changed-keys query it binds (its text derived at compile
time by ``compiler.kinds.mv.derive``) and what the input's topic keeps at the commit. ``compiler.kinds.mv.input_set``
asks the modes; it does not compare mode names.

=================  ===========================================  =====================================
mode               position kept in the offsets                 changed keys
=================  ===========================================  =====================================
``position``       newest ``position`` columns of the table      keys of rows in ``(last, next]``
``changes``        newest position of the change feed table      keys of feed rows in ``(last, next]``
``cdf``            the Delta table's version                     keys in its Change Data Feed, versions
                                                                 ``last + 1`` to ``next``
``mv``             the upstream MV's batch                       keys it published in ``(last, next]``
snapshots          the batch of the snapshot last diffed         keys whose used columns differ between
                                                                 two snapshots (parquet dictionaries, tables)
versions           the Delta table's version                     the same diff, by time travel to ``last``
                                                                 and ``next`` (Delta dictionaries, tables)
=================  ===========================================  =====================================

A dictionary (or ``table`` model input) is diffed by snapshots or by versions depending on how
its table is stored, which for a source is known only when the run looks (``resolve``). Modes
that keep versions tag the topic's state (``{"mode": "versions"}``), so a table that changed its
format or its declared mode since the last commit is rebuilt rather than read with positions of
another kind.

Delta's history is not kept for ever: ``VACUUM`` removes the files of old versions (7 days by
default) and log clean-up old commits (30 days). When the versions a batch needs are gone, the
batch becomes a full build (``history_gone`` recognises the errors), which needs no history.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import Problem, RunError
from ...state import Offset, StateStore
from ...table_format import DELTA, commit_time, delta_version, logged_version, rows_unchanged, table_details
from .decisions import Seen, input_range
from .derive import Derived, bind_literal
from .inputs import BATCH
from .plan import MvPlan
from .queries import diffed
from .storage import MvState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .scope import BatchScope

CDF_PROPERTY = "delta.enableChangeDataFeed"
# Delta's error conditions for history a batch needs that is no longer there (or never was).
_HISTORY_GONE = ("DELTA_MISSING_CHANGE_DATA", "DELTA_VERSION_NOT_FOUND", "DELTA_CHANGE_DATA_FILE_NOT_FOUND",
                 "DELTA_CDC_START_VERSION_AFTER_LATEST", "DELTA_FILE_NOT_FOUND", "DELTA_LOG_FILE_NOT_FOUND")
# A data file gone from under a read: history only when the file was a Delta table's (vacuumed).
_FILE_GONE = "FAILED_READ_FILE.FILE_NOT_EXIST"


@dataclass
class Probe:
    """What the inputs hold now: the newest position of each position, feed or version input
    (encoded; None when empty) with its column types, and the fingerprint of each input diffed by
    snapshots."""

    positions: dict[str, tuple | None] = field(default_factory=dict)
    types: dict[str, dict[str, str]] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    changed_keys: dict[str, int] = field(default_factory=dict)  # keys past ``last`` of ``position`` inputs


class Batch(Protocol):
    """What a mode uses of the running batch (``compiler.kinds.mv.input_set.InputSet``)."""

    spark: "SparkSession"
    plan: MvPlan
    derived: Derived
    store: StateStore
    probe: Probe
    ranges: dict[str, tuple[Any, Any]]  # (last, next) per input of the batch, once planned
    redo: bool
    resume: bool  # a chunked batch resumed after a crash: ranges and snapshots as its first try planned

    scope: BatchScope  # the batch's statements, views and checkpoints

    def phase(self, name: str) -> None: ...


class ChangeMode:
    """One input's change detection. The base class is a position-like mode whose newest
    position comes from elsewhere than a probe query (subclasses say where)."""

    tag: str | None = None  # kept in the input topic's state; None for the modes that predate tags
    words = ""  # how ``explain`` names it
    version: int | None = None  # a Delta table's newest version, from its log (a position input's probe reads as of it)
    committed_at: int | None = None  # when that version was committed (``table_format.commit_time``)

    def __init__(self, plan: MvPlan, input_id: str):
        self.plan, self.input_id, self.info = plan, input_id, plan.inputs[input_id]
        self._commit_times: dict[int, int | None] = {}

    # -- what the input holds now ----------------------------------------------------------
    def probe(self, run: Batch, last: tuple | None, column: str) -> "DataFrame | None":
        """A one-row frame ``(input, <column>)`` for the batch's single probe query, or None
        when the mode has nothing to ask there (it may fill ``run.probe`` itself)."""
        return None

    def read_probe(self, run: Batch, row: Any) -> None:
        """Take this input's answer from the probe query's row."""

    def current(self, run: Batch) -> tuple | None:
        """The newest position seen (None: not known, or an input diffed by content)."""
        return run.probe.positions.get(self.input_id)

    # -- decisions (the pure rules are ``compiler.kinds.mv.decisions``'; a mode supplies its figures) --
    def seen(self, run: Batch, offset: Offset) -> Seen:
        """What the up-to-date check compares for this input (``offset`` is committed, not in flight)."""
        return Seen(True, tuple(offset.last) or None, self.current(run))

    def rebuild_reason(self, run: Batch, offset: Offset) -> str | None:
        """Why the committed position cannot be continued from (kept by another mode)."""
        kept = _state(offset.state).get("mode")
        if offset.last is not None and kept != self.tag:
            return (f"{self.input_id} is now read by {self.words}, its offsets hold "
                    f"{_KEPT.get(kept, kept)}")
        return self.recreated(run, offset)

    def recreated(self, run: Batch, offset: Offset) -> str | None:
        """A Delta table dropped and created again since the last commit: its log has fewer versions
        than the one kept, or another commit at it. Its versions started over and its rows past a
        position are not its changes (the rows gone from it are not seen)."""
        kept = _state(offset.state)
        version, committed_at = kept.get("version"), kept.get("commit")
        if version is None or committed_at is None or self.version is None:
            return None
        if self.version < version:
            return f"{self.input_id} was re-created (version {self.version} < {version}, the last one read)"
        now = self._commit_time(run, version)
        if now is not None and now != committed_at:  # None: cleaned up from the log, cannot tell
            return f"{self.input_id} was re-created (its version {version} is another commit than the one last read)"
        return None

    def _same_history(self, run: Batch, version: int, committed_at: int | None) -> bool:
        """Whether the table's commit at ``version`` is the one made at ``committed_at`` (unknown: no)."""
        return committed_at is not None and self._commit_time(run, version) == committed_at

    def _commit_time(self, run: Batch, version: int) -> int | None:
        """``commit_time`` of ``version``, read once per batch (the shortcut and ``recreated`` both ask)."""
        if version == self.version:
            return self.committed_at
        if version not in self._commit_times:
            self._commit_times[version] = commit_time(run.spark, self.table, version)
        return self._commit_times[version]

    def kept_state(self, **more: Any) -> dict:
        """What the topic's state keeps of the version read: it and when it was committed."""
        return {**more, "version": self.version, "commit": self.committed_at} if self.version is not None else more

    @property
    def table(self) -> str:
        """The table whose rows carry the positions."""
        return self.info.relation

    def plan_range(self, run: Batch, offset: Offset, batch: int, fresh: bool, resume: bool) -> tuple[Any, Any]:
        """``(last, next)`` of this batch (``mv_decisions.input_range``): the crashed try's ``next``
        when redoing it, else the newest position."""
        return input_range(batch, fresh, offset.last, offset.next, offset.in_flight, diffed=False,
                           unchanged=False, current=self.current(run), resume=resume)

    # -- the batch -------------------------------------------------------------------------
    def changes(self, run: Batch, batch: int, last: tuple, nxt: tuple) -> "DataFrame":
        """The changed keys in ``(last, next]``, from the compiled ``changes:<input>`` query."""
        return run.scope.sql(f"changes:{self.input_id}", **self.position_args(run, last, nxt))

    def position_args(self, run: Batch, last: tuple, nxt: tuple) -> dict[str, Any]:
        types = run.probe.types.get(self.input_id)
        if types is None:  # not probed (an upstream MV's change table)
            types = {f.name.lower(): f.dataType.typeName() for f in run.spark.table(self.table).schema.fields}
        args: dict[str, Any] = {"from_start": not last}
        for i, column in enumerate(self.info.position):
            args[f"last_{i}"] = decode(last[i], types.get(column.lower(), "")) if last else None
            args[f"next_{i}"] = decode(nxt[i], types.get(column.lower(), ""))
        return args

    def build(self, run: Batch, batch: int) -> None:
        """Before a full build: take what later batches diff against."""

    def fingerprint_frame(self, run: Batch, batch: int, nxt: tuple) -> "DataFrame | None":
        """A one-row ``(input, fingerprint)`` frame of what this batch kept, or None."""
        return None

    def state(self, run: Batch, taken: str | None) -> str:
        """The input topic's ``state`` at the commit (``taken``: the fingerprint of the snapshot this
        batch took, if it took one)."""
        return json.dumps({"mode": self.tag}) if self.tag else ""

    def after_commit(self, run: Batch, batch: int, last: tuple | None, nxt: tuple) -> None:
        """Clean-up once the batch is committed."""


class Positions(ChangeMode):
    """``position``: monotonic columns of the table itself (``changes`` reads a feed table instead)."""

    words = "position"
    rows_are_keys = True  # the table itself: one row per key, so its rows past ``last`` are its changed keys
    past_last: "DataFrame | None" = None  # the rows past ``last`` the probe read, checkpointed (``changes``)

    def pin(self, run: Batch) -> bool:
        """Pin the probe to the table's newest Delta version, read from its log (no job), so that
        it can run beside a build that reads the table after this: the build sees at least that
        version, so every position the probe finds was read. False: not a Delta table."""
        self.version, self.committed_at = logged_version(run.spark, self.table) or (None, None)
        return self.version is not None

    def unchanged(self, run: Batch, offset: Offset | None) -> bool:
        """Whether the table holds no row past the committed ``last``, known without reading it: it
        is pinned at the version the last commit kept with that position (``state``), or at a later
        one whose commits changed no row. The probe then takes ``last`` as the newest position."""
        if self.version is None or offset is None or not offset.last or offset.in_flight:
            return False
        if not self._unchanged_since(run, _state(offset.state)):
            return False
        run.probe.positions[self.input_id] = tuple(offset.last)
        if self.rows_are_keys:
            run.probe.changed_keys[self.input_id] = 0
        return True

    def probe(self, run: Batch, last: tuple | None, column: str) -> "DataFrame":
        """The newest position, among the rows past ``last`` only when given (none: it is ``last``),
        so Parquet's row-group statistics skip the old data. A rebuild asks for the true newest
        (a source re-created with smaller positions must be read from the start). The same
        aggregate counts those rows: the strategy's first estimate of a batch's size. Those rows
        (key and position columns) are kept, checkpointed by the probe's job: the batch's changed
        keys are read from them (``changes``), not from the table a second time."""
        from pyspark.sql import functions as F

        table = run.spark.table(self.table) if self.version is None \
            else run.spark.read.option("versionAsOf", self.version).table(self.table)
        run.probe.types[self.input_id] = types = {f.name.lower(): f.dataType.typeName() for f in table.schema.fields}
        self.last, self.column, self.past_last = last, column, None
        if last:
            table = table.where(_after(table, self.info.position, last, types))
            self.past_last = table = run.scope.checkpoint(table.select(*self._read_columns))
        newest = F.max(F.struct(*[table[c] for c in self.info.position]))  # lexicographic, as the range is
        return table.agg(newest.alias(column), F.count(F.lit(1)).alias(f"{column}_rows")) \
            .select(F.lit(self.input_id).alias("input"), column, f"{column}_rows")

    def changes(self, run: Batch, batch: int, last: tuple, nxt: tuple) -> "DataFrame":
        """The compiled ``changes:<input>`` query over view ``past_last_<input>``: the rows past ``last``
        the probe kept (one read of the table for both), or the table itself when the probe looked
        past another position or not at all (a redo after a rebuild's probe)."""
        kept = self.past_last is not None and tuple(last or ()) == tuple(self.last or ())
        run.scope.view(f"past_last_{self.info.slug}", self.past_last if kept else run.spark.table(self.table))
        return super().changes(run, batch, last, nxt)

    @property
    def _read_columns(self) -> list[str]:
        """What the changed-keys query reads of the table: its key and position columns."""
        seen: dict[str, str] = {}
        for column in (*self.info.key, *self.info.position):
            seen.setdefault(column.lower(), column)
        return list(seen.values())

    def seen(self, run: Batch, offset: Offset) -> Seen:
        """Not probed yet (its probe runs beside a build decided before it): the version pinned
        against the one the last commit kept, if it kept one (``state``); the same version means
        the same rows, and so does a newer one whose commits changed none (an ``OPTIMIZE``, a
        ``VACUUM``: ``rows_unchanged``); another table (dropped and created again) is not known.
        Otherwise the newest position the probe saw."""
        if self.input_id in run.probe.positions or self.version is None:
            return super().seen(run, offset)
        kept = _state(offset.state)
        if self._unchanged_since(run, kept):
            return Seen(True, kept["version"], kept["version"])
        known = kept.get("version") is not None and self._same_history(run, int(kept["version"]), kept.get("commit"))
        return Seen(known, kept.get("version"), self.version)

    def _unchanged_since(self, run: Batch, kept: dict) -> bool:
        """Whether the pinned version holds the rows of the version the last commit ``kept`` with its
        position (none kept: unknown): the same history (its commit at that version) and position
        columns, and no commit since that changed a row."""
        version = kept.get("version")
        return (version is not None and kept.get("position") == [c.lower() for c in self.info.position]
                and self._same_history(run, int(version), kept.get("commit"))
                and rows_unchanged(run.spark, self.table, int(version), self.version))

    def state(self, run: Batch, taken: str | None) -> str:
        """The version the probe read, when the batch read up to the position the probe found there
        (not a redo's older range): the next batch's probe can then be skipped while it is unchanged."""
        planned, probed = run.ranges[self.input_id][1], run.probe.positions.get(self.input_id)
        if self.version is not None and tuple(planned or ()) == tuple(probed or ()):
            return json.dumps(self.kept_state(position=[c.lower() for c in self.info.position]))
        return super().state(run, taken)

    def read_probe(self, run: Batch, row: Any) -> None:
        newest = row[self.column]
        run.probe.positions[self.input_id] = tuple(encode(v) for v in newest) \
            if newest is not None and newest[0] is not None else self.last
        if self.last and self.rows_are_keys:
            run.probe.changed_keys[self.input_id] = int(row[f"{self.column}_rows"] or 0)


class Feed(Positions):
    """``changes: {table, position}``: a keys-only change feed; keys gone from the source are deletes."""

    words = "change feed"
    rows_are_keys = False  # a key may have several feed rows

    @property
    def table(self) -> str:
        return self.info.feed or self.info.relation


class UpstreamMv(ChangeMode):
    """An upstream ``mv``: the keys it published per batch (its ``__mvflow_changes`` table)."""

    words = "upstream MV batches"

    @property
    def table(self) -> str:
        return self.info.feed or self.info.relation

    def current(self, run: Batch) -> tuple | None:
        upstream = run.store.get(self.info.id)
        return tuple(upstream.last) if upstream and upstream.last is not None else None

    def seen(self, run: Batch, offset: Offset) -> Seen:
        return Seen(True, tuple(offset.last), self.current(run) or tuple(offset.last))

    def rebuild_reason(self, run: Batch, offset: Offset) -> str | None:
        """An upstream batch that published no keys (a build, or no MV read it then) ends what can be continued."""
        upstream = run.store.get(self.info.id)
        skipped = MvState.parse(upstream.state).unpublished if upstream is not None and upstream.state else 0
        if offset.last and skipped and int(offset.last[0]) < skipped:
            return f"{self.input_id} was rebuilt in batch {skipped} without publishing its keys (every key may have changed)"
        return super().rebuild_reason(run, offset)


class Snapshots(ChangeMode):
    """A dictionary (or ``table`` model) stored as parquet: each batch that finds it changed takes
    a snapshot of its used columns and diffs it against the last one. The probe fingerprints the
    used columns (``fingerprint_frame``): the same fingerprint means no snapshot and no diff."""

    words = "snapshot diff"
    kept: str | None = None  # the fingerprint of the last commit, read when the batch plans its range

    def probe(self, run: Batch, last: tuple | None, column: str) -> "DataFrame":
        return fingerprint_frame(run.spark.table(self.info.relation), self.info.used_columns, self.input_id)

    def read_probe(self, run: Batch, row: Any) -> None:
        run.probe.fingerprints[self.input_id] = row["fingerprint"]

    def current(self, run: Batch) -> tuple | None:
        return None  # positions are batch numbers: a redo of the same batch covers the same content

    def seen(self, run: Batch, offset: Offset) -> Seen:
        stored = stored_fingerprint(offset.state)
        return Seen(stored is not None, stored, run.probe.fingerprints.get(self.input_id))

    def plan_range(self, run: Batch, offset: Offset, batch: int, fresh: bool, resume: bool) -> tuple[Any, Any]:
        """A snapshot as of the batch, unless the fingerprint is the last commit's (its snapshot is kept,
        nothing diffed); a resumed chunked batch keeps the snapshot of its first try."""
        self.kept = stored_fingerprint(offset.state)
        unchanged = self.kept is not None and self.kept == run.probe.fingerprints.get(self.input_id)
        return input_range(batch, fresh, offset.last, offset.next, offset.in_flight, diffed=True,
                           unchanged=unchanged, current=None, resume=resume)

    def changes(self, run: Batch, batch: int, last: tuple, nxt: tuple) -> "DataFrame":
        if not run.resume:  # a resumed chunked batch diffs the snapshot its first try took
            run.scope.sql(f"snapshot:{self.input_id}", batch=batch)
            run.phase("mv:snapshot-written")
        return run.scope.sql(f"changes:{self.input_id}", last=int(last[0]), next=int(nxt[0]))

    def build(self, run: Batch, batch: int) -> None:
        run.scope.sql(f"drop_snapshot:{self.input_id}")
        run.scope.sql(f"create_snapshot:{self.input_id}", batch=batch)

    def fingerprint_frame(self, run: Batch, batch: int, nxt: tuple) -> "DataFrame | None":
        """Of the snapshot itself, so that it describes exactly what was diffed."""
        from pyspark.sql import functions as F

        if tuple(nxt) != (batch,):
            return None
        snapshot = run.spark.table(self._snapshot).where(F.col(BATCH) == batch)
        return fingerprint_frame(snapshot, self.info.used_columns, self.input_id)

    def state(self, run: Batch, taken: str | None) -> str:
        """The fingerprint of the snapshot taken, else of the last commit's snapshot, which is still the
        one diffed against: a resumed chunked batch keeps it even when the probe now finds other
        contents (the probe's newer fingerprint would hide that change from the next batch)."""
        fingerprint = taken or self.kept or run.probe.fingerprints.get(self.input_id)
        return json.dumps({"fingerprint": fingerprint}) if fingerprint else ""

    def after_commit(self, run: Batch, batch: int, last: tuple | None, nxt: tuple) -> None:
        """Drop the snapshot partitions no later batch reads: the one diffed against, and one a
        crashed try of this batch may have left when its redo kept the old."""
        stale = {int(last[0])} if last and tuple(last) != tuple(nxt) else set()
        if run.redo:
            stale.add(batch)
        for old in sorted(stale - {int(nxt[0])}):
            run.scope.execute(bind_literal(run.derived[f"drop_snapshot_batch:{self.input_id}"], "batch", old))

    @property
    def _snapshot(self) -> str:
        return self.plan.table_name(f"snap_{self.info.slug}")


class Versions(ChangeMode):
    """Delta table versions: the newest version is the position (one read of the table's log),
    so an unchanged version means no work without scanning anything."""

    tag = "versions"

    def probe(self, run: Batch, last: tuple | None, column: str) -> None:
        logged = logged_version(run.spark, self.info.relation)  # over Spark Connect: no commit time
        version, self.committed_at = logged or (delta_version(run.spark, self.info.relation), None)
        self.version = version if logged else None
        run.probe.positions[self.input_id] = (version,) if version >= 0 else None
        return None

    def state(self, run: Batch, taken: str | None) -> str:
        return json.dumps(self.kept_state(mode=self.tag))

    def rebuild_reason(self, run: Batch, offset: Offset) -> str | None:
        reason = super().rebuild_reason(run, offset)
        current = self.current(run)
        if reason is None and offset.last and current and current[0] < offset.last[0]:
            reason = f"{self.input_id} was re-created (version {current[0]} < {offset.last[0]}, the last one read)"
        return reason


class DeltaVersions(Versions):
    """A dictionary (or ``table`` model) stored as Delta: the changed keys are those whose used
    columns differ between the table as of version ``last`` and as of ``next`` (time travel)."""

    words = "time-travel diff of Delta versions"

    def changes(self, run: Batch, batch: int, last: tuple, nxt: tuple) -> "DataFrame":
        for which, version in (("last", last), ("next", nxt)):
            frame = run.spark.read.option("versionAsOf", int(version[0])).table(self.info.relation)
            run.scope.view(f"as_of_{which}_{self.info.slug}", frame.select(*self.info.used_columns))
        return run.scope.sql(f"versions:{self.input_id}")


class ChangeDataFeed(Versions):
    """``changes: cdf``: the Delta table's own Change Data Feed. The changed keys are the distinct
    keys of its change rows in versions ``last + 1`` to ``next`` (inserts, both images of an
    update, deletes: a deleted key is gone from the table, a hard delete)."""

    tag = "cdf"
    words = "Change Data Feed"

    def probe(self, run: Batch, last: tuple | None, column: str) -> None:
        path, _, line = self.info.origin.rpartition(":")
        problem = cdf_problem(run.spark, self.info.id, path or None, int(line) if line.isdigit() else None)
        if problem is not None:
            raise RunError(problem)
        return super().probe(run, last, column)

    def changes(self, run: Batch, batch: int, last: tuple, nxt: tuple) -> "DataFrame":
        return run.scope.sql(f"changes:{self.input_id}", first_version=int(last[0]) + 1, next_version=int(nxt[0]))


_KEPT = {None: "positions or snapshot batches of another change mode", "versions": "Delta versions of a "
         "time-travel diff", "cdf": "Delta versions of a Change Data Feed"}
_MODES = {"position": Positions, "changes": Feed, "cdf": ChangeDataFeed, "mv": UpstreamMv}


def resolve(spark: "SparkSession", plan: MvPlan) -> dict[str, ChangeMode]:
    """The mode of every input of the MV. A diffed input is diffed by time travel when its table
    is Delta (a model's format is in the plan; a source's table is looked at: one catalog call)."""
    modes: dict[str, ChangeMode] = {}
    for input_id, info in plan.inputs.items():
        if diffed(info):
            table_format = info.table_format or table_details(spark, info.relation)[0]
            modes[input_id] = (DeltaVersions if table_format == DELTA else Snapshots)(plan, input_id)
        else:
            modes[input_id] = _MODES[info.mode](plan, input_id)
    return modes


def cdf_problem(spark: "SparkSession", source: str, path: str | None, line: int | None) -> Problem | None:
    """Why the table of a ``changes: cdf`` source (declared at ``path:line``) cannot be read by its
    Change Data Feed (None: it can): it must be a Delta table that records it."""
    table_format, properties = table_details(spark, source)
    where = {"path": path, "line": line}
    if table_format is None:
        return Problem(f"source {source} declares 'changes: cdf' but its table does not exist", **where,
                       hint="create it as a Delta table with TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",
                       code="table-not-found")
    if table_format != DELTA:
        return Problem(f"source {source} declares 'changes: cdf' but its table is {table_format}, not Delta", **where,
                       hint="the Change Data Feed is Delta Lake's: convert the table to Delta, or declare "
                            "'position' or 'changes: {table, position}'", code="cdf-not-delta")
    if properties.get(CDF_PROPERTY, "").lower() != "true":
        return Problem(f"source {source} declares 'changes: cdf' but its Delta table does not record its Change Data "
                       "Feed", **where, code="cdf-off",
                       hint=f"ALTER TABLE {source} SET TBLPROPERTIES ('{CDF_PROPERTY}' = 'true'), then run "
                            "with --full-refresh (versions before it have no change data)")
    return None


def history_gone(exc: BaseException) -> str | None:
    """The Delta error condition of ``exc`` when it says that history a batch needs is gone
    (vacuumed change data or versions, cleaned-up log) or was never recorded; else None.

    >>> history_gone(Exception("[DELTA_MISSING_CHANGE_DATA] Error getting change data for range [1 , 1]"))
    'DELTA_MISSING_CHANGE_DATA'
    >>> history_gone(Exception("[FAILED_READ_FILE.FILE_NOT_EXIST] file:/w/t/part-0.parquet")) is None
    True
    """
    condition = getattr(exc, "getCondition", lambda: None)() or ""
    text = str(exc)
    found = next((c for c in _HISTORY_GONE if c == condition or f"[{c}]" in text), None)
    if found is None and (condition == _FILE_GONE or f"[{_FILE_GONE}]" in text) and _names_delta_file(text):
        found = _FILE_GONE
    return found


def _names_delta_file(text: str) -> bool:
    """Whether an error names a file of a Delta table (its change data, or a directory beside a
    ``_delta_log``) on this machine's file system."""
    if "/_change_data/" in text:
        return True
    for match in re.finditer(r"file:(/[^\s'\"\]]+)", text):
        if any((parent / "_delta_log").is_dir() for parent in Path(match.group(1)).parents):
            return True
    return False


# -- helpers ---------------------------------------------------------------------------------
def fingerprint_frame(frame: "DataFrame", columns: tuple[str, ...], input_id: str) -> "DataFrame":
    """One row ``(input, fingerprint)``: row count and two independent hash sums of the used
    columns (each paired with its null flag, so a null cannot shift into a neighbour)."""
    from pyspark.sql import functions as F

    args = [x for c in columns for x in (F.col(c), F.isnull(F.col(c)))]
    wide = "decimal(38,0)"
    text = F.concat_ws(":", F.count(F.lit(1)).cast("string"),
                       F.coalesce(F.sum(F.xxhash64(*args).cast(wide)).cast("string"), F.lit("")),
                       F.coalesce(F.sum(F.hash(*args).cast(wide)).cast("string"), F.lit("")))
    return frame.agg(text.alias("fingerprint")).select(F.lit(input_id).alias("input"), "fingerprint")


def stored_fingerprint(state: str) -> str | None:
    value = _state(state).get("fingerprint")
    return value if isinstance(value, str) else None


def _state(state: str) -> dict:
    try:
        data = json.loads(state) if state else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _after(frame: "DataFrame", columns: tuple[str, ...], last: tuple, types: dict[str, str]) -> Any:
    """Rows whose position is past ``last`` (lexicographic over the position columns)."""
    values = [decode(v, types.get(c.lower(), "")) for c, v in zip(columns, last)]
    condition = None
    for column, value in reversed(list(zip(columns, values))):
        later = frame[column] > value
        condition = later if condition is None else later | ((frame[column] == value) & condition)
    return condition


def encode(value: Any) -> Any:
    """A position value as JSON (timestamps and dates as ISO strings, decimals as strings).

    >>> encode(datetime(2026, 1, 1, 12, 30)), encode(Decimal("1.50")), encode(7)
    ('2026-01-01T12:30:00', '1.50', 7)
    """
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def decode(value: Any, type_name: str) -> Any:
    """A stored position value back to the Python type Spark binds for the column's type.

    >>> decode("2026-01-01T12:30:00", "timestamp"), decode("1.50", "decimal(12,2)")
    (datetime.datetime(2026, 1, 1, 12, 30), Decimal('1.50'))
    """
    if value is None:
        return None
    if type_name.startswith("timestamp"):
        return datetime.fromisoformat(value)
    if type_name == "date":
        return date.fromisoformat(value)
    if type_name.startswith("decimal"):
        return Decimal(value)
    return value
