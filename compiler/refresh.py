"""Running an ``mv`` model: change detection, affected keys, the write, the commit.

How the rows are stored is the storage's (``compiler.mv_storage``, one per table format):

- parquet: ``<mv>__mvflow_base_<a|b>`` base slots (blue/green), ``<mv>__mvflow_delta_<a|b>``
  recomputed rows and tombstones partitioned by batch, and a merge-on-read view under the
  model's name; compaction (when the delta passes ``compact_threshold`` × base rows) writes a
  new base into the idle slot and swaps the view;
- delta: one Delta table under the model's name, one ``MERGE`` per batch, ``OPTIMIZE`` where
  parquet compacts.

Both formats also keep ``<mv>__mvflow_changes`` (the MV keys each batch refreshed, so MVs can
be stacked) and ``<mv>__mvflow_snap_<input>`` (snapshots of dictionary-like inputs, per batch).
A refresh writes only the affected keys' rows, so its cost grows with the affected keys.

Offsets (``compiler.state``): topic ``<mv>`` holds the batch number (``last`` committed,
``next`` in flight) and a JSON state (``MvState``: live slot or Delta version, row counts,
definition hash); one topic ``<mv>:<input>`` per input holds its position. A batch first writes
every ``next``, then its rows, then commits every topic in one ``commit_many``: a crash before
the commit is redone with the same batch number and the same ranges (parquet overwrites its own
delta partition, Delta restores the version of the last commit first).
Key sets stay in Spark (checkpointed temporary views); the driver only sees counts.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Callable

from . import watch
from .mv import BATCH, Derived, MvPlan, derive, diffed, lookup_inputs, mv_plan, walk_inputs
from .mv_storage import MvState, storage_for
from .phases import PhaseHook, no_phase
from .state import Commit, Lease, Offset, StateStore, StepLogRow, default_holder, open_state_store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .compile import Manifest, Model
    from .run import Result

LEASE_SECONDS = 3600.0
# Key sets up to this many rows are joined as broadcasts. A checkpoint carries no size
# statistics, so without the hint Spark plans a shuffle join and shuffles the big side
# (every offer, every price) before adaptive execution sees that the key side is small.
BROADCAST_KEYS = 1_000_000
_TAG = "_mvflow_input"  # which input a row of the combined changed-keys checkpoint belongs to


@dataclass
class Outcome:
    """What one refresh did (for the run result and the tests)."""

    batch: int
    mode: str  # build | refresh | noop
    affected: int = 0
    rows: int | None = None
    changed: dict[str, int] = field(default_factory=dict)
    compacted: bool = False
    reason: str = ""
    redo: bool = False  # the batch redid one that crashed, over the ranges planned before the crash
    covered: bool = True  # the batch read every input up to what the probe saw (False: more is waiting)


def definition_hash(derived: Derived) -> str:
    """A change of the MV's derived SQL or of its table format is a breaking change: the MV is rebuilt."""
    text = derived["full"] + ("\n-- delta" if "merge" in derived.queries else "")  # parquet's hash as before
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- the runner ------------------------------------------------------------------------------
def mv_runner(store: StateStore | None = None, full_refresh: bool = False,
              echo: Callable[[str], None] = lambda _: None, file_check: bool = True,
              phase: PhaseHook = no_phase) -> Callable[["SparkSession", "Manifest", "Model"], "Result"]:
    """The ``mv`` runner for ``run_models`` (``runners={"mv": mv_runner(store, ...)}``)."""

    def run(spark: "SparkSession", manifest: "Manifest", model: "Model") -> "Result":
        chosen = store or open_state_store(manifest.project.target(manifest.target).state)
        return run_mv(spark, manifest, model, chosen, full_refresh, echo, file_check, phase)

    return run


def run_mv(spark: "SparkSession", manifest: "Manifest", model: "Model", store: StateStore,
           full_refresh: bool = False, echo: Callable[[str], None] = lambda _: None,
           file_check: bool = True, phase: PhaseHook = no_phase) -> "Result":
    """Refresh one MV and report it as a run Result (errors become an error Result). With
    ``file_check``, first ask ``compiler.watch`` whether anything moved, without Spark. A
    redone batch is followed by a new one when changes landed after the crash."""
    from .run import Result, _spark_message

    started = time.monotonic()
    result = Result(model.name, "mv", "success", started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    try:
        plan = mv_plan(model, manifest)
        spec = watch.mv_spec(plan, definition_hash(_derived(manifest, model)), watch.delta_tables(manifest))
        seen = watch.is_idle(store, spec, datetime.now(timezone.utc)) if file_check and not full_refresh else None
        if seen is not None:
            result.rows = 0
            result.message = f"up to date (no input file or upstream batch moved since batch {json.loads(seen.last)[0]})"
        else:
            observed = watch.observe(spark, store, spec)
            outcomes = [refresh_mv(spark, manifest, model, store, full_refresh=full_refresh, phase=phase, echo=echo)]
            # A redo covers only the ranges planned before the crash: what landed since is the next
            # batch's, whose ranges reach what its own probe sees.
            if not outcomes[0].covered:
                outcomes.append(refresh_mv(spark, manifest, model, store, phase=phase, echo=echo))
            if outcomes[-1].covered:  # a watch may only claim what the batches read
                watch.record(store, spec, observed)
            result.rows = sum(o.rows if o.mode == "build" else o.affected for o in outcomes)
            result.message = "; ".join(describe(o) for o in outcomes)
    except Exception as exc:  # noqa: BLE001 - one failing model must not stop the others
        result.status = "error"
        result.message = _spark_message(exc)
    result.seconds = time.monotonic() - started
    return result


def describe(outcome: Outcome) -> str:
    redo = " (redo of the crashed batch)" if outcome.redo else ""
    if outcome.mode == "build":
        return f"batch {outcome.batch}{redo}: full build ({outcome.reason}), {outcome.rows:,} rows"
    if outcome.reason == "up to date":
        return f"up to date (nothing changed since batch {outcome.batch})"
    changed = ", ".join(f"{k} {v:,}" for k, v in sorted(outcome.changed.items()) if v) or "no changes"
    extra = "; compacted" if outcome.compacted else ""
    return f"batch {outcome.batch}{redo}: {outcome.affected:,} keys refreshed (changed: {changed}){extra}"


def refresh_mv(spark: "SparkSession", manifest: "Manifest", model: "Model", store: StateStore,
               full_refresh: bool = False, holder: str | None = None,
               now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
               phase: PhaseHook = no_phase, echo: Callable[[str], None] = lambda _: None) -> Outcome:
    """One refresh of an MV: a full build on the first run, on ``full_refresh``, on a changed
    definition or past the fan-out guard; otherwise a key-driven batch. ``phase`` is called at
    every point of ``compiler.phases.MV_PHASES`` the batch passes (tests crash it there)."""
    plan = mv_plan(model, manifest)
    run = _Refresh(spark, plan, _derived(manifest, model), store, holder or default_holder(), now, phase, echo, model.kind)
    return run.execute(full_refresh)


def _derived(manifest: "Manifest", model: "Model") -> Derived:
    """The MV's derived SQL, once per compiled manifest (the file check and the refresh both need it)."""
    return manifest.derived("mv_derived", model, lambda: derive(mv_plan(model, manifest)))


class _Refresh:
    def __init__(self, spark, plan: MvPlan, derived: Derived, store: StateStore, holder: str, now, phase: PhaseHook,
                 echo, kind):
        self.spark, self.plan, self.derived, self.store = spark, plan, derived, store
        self.holder, self.now, self.phase, self.echo, self.kind = holder, now, phase, echo, kind
        self.leases: dict[str, Lease] = {}
        self.views: list[str] = []
        self.frames: list["DataFrame"] = []
        self.probe = _Probe()
        self.redo = False  # the batch is a redo of one that crashed before its commit
        self.snapshot_fingerprints: dict[str, str] | None = None  # read with the change counts
        self.ranges: dict[str, tuple[Any, Any]] = {}  # (last, next) per input of the batch
        self.storage = storage_for(self)

    # -- orchestration -------------------------------------------------------------------
    def execute(self, full_refresh: bool) -> Outcome:
        self.leases[self.plan.topic()] = self.store.acquire(self.plan.topic(), self.holder, LEASE_SECONDS, self.now())
        try:
            for input_id in self.plan.inputs:
                topic = self.plan.topic(input_id)
                self.leases[topic] = self.store.acquire(topic, self.holder, LEASE_SECONDS, self.now())
            self.phase("mv:leased")
            return self._batch(full_refresh)
        finally:
            self._drop_views()
            for lease in self.leases.values():
                self.store.release(lease)

    def _batch(self, full_refresh: bool) -> Outcome:
        offset = self.store.get(self.plan.topic()) or Offset(self.plan.topic())
        state = MvState.parse(offset.state)
        reason = self._rebuild_reason(full_refresh, offset, state)
        self.probe = self._probe(since_last=reason is None)
        self.phase("mv:probed")
        if reason is None and not offset.in_flight and self._up_to_date():
            return Outcome(int(offset.last[0]), "noop", reason="up to date")
        self.redo = offset.in_flight
        batch = int(offset.next[0]) if offset.in_flight else int(offset.last[0]) + 1 if offset.last else 1
        self.store.set_next(self.leases[self.plan.topic()], (batch,), self.now())
        ranges = self._plan_ranges(batch, fresh=reason is not None)
        if reason is None and any(last is None and nxt for last, nxt in ranges.values()):
            reason = "a new input"
            ranges = self._plan_ranges(batch, fresh=True)
        self.phase("mv:next-written")
        self._spark_sql(f"CREATE DATABASE IF NOT EXISTS {self.plan.relation.split('.')[0]}")
        outcome = self._build(batch, state, ranges, reason) if reason is not None else self._refresh(batch, state, ranges)
        outcome.redo, outcome.covered = self.redo, self._covers()
        return outcome

    def _covers(self) -> bool:
        """Whether the batch read every input up to the position the probe saw. A redo reads
        the ranges planned before its crash, so changes that landed since are still waiting."""
        for input_id, info in self.plan.inputs.items():
            current = None if diffed(info) else self._current_position(input_id)
            if current is not None and tuple(self.ranges[input_id][1] or ()) != tuple(current):
                return False
        return True

    def _rebuild_reason(self, full_refresh: bool, offset: Offset, state: MvState) -> str | None:
        if full_refresh:
            return "--full-refresh"
        if offset.last is None and not offset.in_flight:
            return "first run"
        if not self.storage.exists(state):
            return "no stored MV"
        if state.definition != definition_hash(self.derived):
            return "the definition changed"
        if state.swapping:
            return "redo of an interrupted build or compaction"
        return None

    # -- the no-op fast path and the current positions -----------------------------------
    def _probe(self, since_last: bool) -> "_Probe":
        """What the inputs hold now, in one Spark query for all of them: the newest position of
        each position or change-feed input, and the fingerprint of each diffed input's used
        columns (see ``_fingerprint_frame``).

        With ``since_last`` the newest position is looked for among the rows past the committed
        ``last`` only (none: it is ``last``), so Parquet's row-group statistics skip the old
        data and the probe reads only what changed. A rebuild asks for the true newest (a
        source re-created with smaller positions must be read from the start)."""
        from pyspark.sql import functions as F

        probe, frames, columns, lasts = _Probe(), [], {}, {}
        for n, (input_id, info) in enumerate(self.plan.inputs.items()):
            if diffed(info):
                frames.append(_fingerprint_frame(self.spark.table(info.relation), info.used_columns, input_id))
            elif info.mode != "mv":
                table = self.spark.table(info.relation if info.mode == "position" else info.feed)
                probe.types[input_id] = types = {f.name.lower(): f.dataType.typeName() for f in table.schema.fields}
                offset = self.store.get(self.plan.topic(input_id)) if since_last else None
                if offset is not None and offset.last:
                    lasts[input_id] = tuple(offset.last)
                    table = table.where(_after(table, info.position, lasts[input_id], types))
                columns[input_id] = f"p{n}"
                newest = F.max(F.struct(*[table[c] for c in info.position]))  # lexicographic, as the range is
                frames.append(table.agg(newest.alias(f"p{n}")).select(F.lit(input_id).alias("input"), f"p{n}"))
        for row in _union_all(frames).collect() if frames else []:
            input_id = row["input"]
            if input_id in columns:
                newest = row[columns[input_id]]
                probe.positions[input_id] = tuple(_encode(v) for v in newest) \
                    if newest is not None and newest[0] is not None else lasts.get(input_id)
            else:
                probe.fingerprints[input_id] = row["fingerprint"]
        return probe

    def _up_to_date(self) -> bool:
        """Whether no input can have changed since the last commit, decided from the probe
        without opening a batch: no newest position differs from the committed ``last``, no
        dictionary's fingerprint from the one stored at the last commit. A missing fingerprint
        or position answers False, so the exact path runs: a false "up to date" would lose changes."""
        for input_id, info in self.plan.inputs.items():
            offset = self.store.get(self.plan.topic(input_id))
            if offset is None or offset.last is None or offset.in_flight:
                return False
            if info.mode == "mv":
                upstream = self.store.get(info.id)
                if upstream is not None and upstream.last and tuple(upstream.last) != tuple(offset.last):
                    return False
            elif diffed(info):
                stored = _stored_fingerprint(offset.state)
                if stored is None or stored != self.probe.fingerprints.get(input_id):
                    return False
            elif self.probe.positions.get(input_id) != (tuple(offset.last) or None):
                return False
        return True

    def _fingerprints(self, batch: int, ranges: dict) -> dict[str, str]:
        """Fingerprints of the snapshots the batch diffed (stored in each input topic's state at
        the commit), computed from the snapshot itself so they describe exactly what was diffed;
        an input whose snapshot was not retaken keeps the fingerprint it was found unchanged by."""
        if self.snapshot_fingerprints is None:
            frames = self._snapshot_fingerprint_frames(batch, ranges)
            self.snapshot_fingerprints = {row["input"]: row["fingerprint"]
                                          for row in (_union_all(frames).collect() if frames else [])}
        found = {**{i: f for i, f in self.probe.fingerprints.items() if i in ranges}, **self.snapshot_fingerprints}
        return {input_id: json.dumps({"fingerprint": fingerprint}) for input_id, fingerprint in found.items()}

    def _snapshot_fingerprint_frames(self, batch: int, ranges: dict) -> list["DataFrame"]:
        from pyspark.sql import functions as F

        frames = []
        for input_id, info in self.plan.inputs.items():
            if diffed(info) and tuple(ranges[input_id][1]) == (batch,):
                snapshot = self.spark.table(self.plan.table_name(f"snap_{info.slug}")).where(F.col(BATCH) == batch)
                frames.append(_fingerprint_frame(snapshot, info.used_columns, input_id))
        return frames

    # -- positions -----------------------------------------------------------------------
    def _plan_ranges(self, batch: int, fresh: bool) -> dict[str, tuple[Any, Any]]:
        """(last, next) per input; ``next`` is written before any work (reused when in flight)."""
        ranges = {}
        for input_id, info in self.plan.inputs.items():
            topic = self.plan.topic(input_id)
            offset = self.store.get(topic) or Offset(topic)
            if diffed(info):
                # Unchanged since the last commit (same fingerprint): keep its snapshot, skip the diff.
                same = not fresh and offset.last and \
                    _stored_fingerprint(offset.state) == self.probe.fingerprints.get(input_id)
                nxt = tuple(offset.last) if same else (batch,)
            elif offset.in_flight and not fresh:
                nxt = offset.next
            else:  # an empty input: a build reads it from the start later, a refresh keeps its last
                nxt = self._current_position(input_id) or (() if fresh else offset.last)
            self.store.set_next(self.leases[topic], nxt if nxt is not None else (), self.now())
            ranges[input_id] = (None if fresh else offset.last, nxt)
        self.ranges = ranges
        return ranges

    def _current_position(self, input_id: str) -> tuple | None:
        info = self.plan.inputs[input_id]
        if info.mode == "mv":
            upstream = self.store.get(info.id)
            return upstream.last if upstream else None
        return self.probe.positions.get(input_id)

    def _position_args(self, input_id: str, last: tuple, nxt: tuple) -> dict[str, Any]:
        info = self.plan.inputs[input_id]
        if diffed(info):
            return {"last": int(last[0]), "next": int(nxt[0])}
        types = self.probe.types.get(input_id)
        if types is None:  # an upstream MV's change table: not probed
            table = info.relation if info.mode == "position" else info.feed
            types = {f.name.lower(): f.dataType.typeName() for f in self.spark.table(table).schema.fields}
        args: dict[str, Any] = {"from_start": not last}
        for i, column in enumerate(info.position):
            args[f"last_{i}"] = _decode(last[i], types.get(column.lower(), "")) if last else None
            args[f"next_{i}"] = _decode(nxt[i], types.get(column.lower(), ""))
        return args

    # -- full build ----------------------------------------------------------------------
    def _build(self, batch: int, state: MvState, ranges: dict, reason: str) -> Outcome:
        self.echo(f"{self.plan.name}: full build, batch {batch} ({reason})")
        self.snapshot_fingerprints = None  # every snapshot is taken anew
        for input_id, info in self.plan.inputs.items():
            if diffed(info):
                snapshot = self.plan.table_name(f"snap_{info.slug}")
                self._spark_sql(f"DROP TABLE IF EXISTS {snapshot}")
                self._sql(f"create_snapshot:{input_id}", batch=batch)
                self._sql(f"snapshot:{input_id}", batch=batch)
        self.phase("mv:build-snapshots")
        new_state = self.storage.build(state, batch)
        self._commit(batch, ranges, new_state, new_state.base_rows, {})
        return Outcome(batch, "build", rows=new_state.base_rows, reason=reason)

    def publish_all(self, keys: "DataFrame", old: "DataFrame | None", batch: int, **args: Any) -> None:
        """After a build every key may have changed: publish the new keys and the ``old`` ones."""
        self._spark_sql(f"DROP TABLE IF EXISTS {self.plan.table_name('changes')}")
        self._sql("create_changes", **args)
        self._view("keys", (keys if old is None else keys.union(old)).distinct())  # read once, by publish
        self._sql("publish", batch=batch)

    # -- key-driven refresh --------------------------------------------------------------
    def _refresh(self, batch: int, state: MvState, ranges: dict) -> Outcome:
        if self.redo:
            self.storage.prepare_redo(state)
        changed = self._changed_keys(batch, ranges)
        outcome = Outcome(batch, "refresh", changed=changed)
        if not any(changed.values()):
            outcome.mode = "noop"
            self._commit(batch, ranges, state, 0, changed)
            return outcome
        self._view("stored", self.storage.stored(state, batch))
        outcome.affected = self._affected(changed)
        self.phase("mv:affected-keys")
        threshold = getattr(self.kind, "fanout_threshold", 0.2)
        if outcome.affected > threshold * max(state.base_rows, 1):
            reason = f"fan-out guard: {outcome.affected:,} affected keys > {threshold:g} × {state.base_rows:,} rows"
            self.echo(f"{self.plan.name}: {reason}, switching to a full build")
            self.phase("mv:fanout-guard")
            self._drop_views()
            return self._build(batch, state, self._plan_ranges(batch, fresh=True), reason)
        self._view("rows", self._sql("refresh"))  # read once, by the write: no checkpoint needed
        self.storage.write(state, batch, outcome.affected)
        self._sql("publish", batch=batch)
        self.phase("mv:published")
        self._commit(batch, ranges, state, outcome.affected, changed)
        compact = getattr(self.kind, "compact_threshold", 0.1)
        if state.delta_rows > compact * max(state.base_rows, 1):
            self.storage.compact(state)
            outcome.compacted = True
        return outcome

    def _changed_keys(self, batch: int, ranges: dict) -> dict[str, int]:
        """The changed keys of every input that moved, materialized together in one checkpoint
        (each input's view selects its rows from it); their counts are read in one more query,
        with the fingerprints of the snapshots taken for the commit."""
        from pyspark.sql import functions as F

        changed, frames = {input_id: 0 for input_id in self.plan.inputs}, {}
        for input_id, info in self.plan.inputs.items():
            last, nxt = ranges[input_id]
            if tuple(last or ()) == tuple(nxt or ()):
                continue  # no position moved, or a dictionary with the fingerprint of its last snapshot
            if diffed(info):
                self._sql(f"snapshot:{input_id}", batch=batch)
                self.phase("mv:snapshot-written")
            frames[input_id] = self._sql(f"changes:{input_id}", **self._position_args(input_id, last, nxt))
        if not frames:
            return changed
        tags = {input_id: n for n, input_id in enumerate(frames)}
        tagged = [frame.select(F.lit(tags[i]).alias(_TAG), *[F.col(c).alias(f"{_TAG}{tags[i]}_{j}")
                                                            for j, c in enumerate(frame.columns)])
                  for i, frame in frames.items()]
        keys = self._checkpoint(_union_all(tagged))
        counts = keys.groupBy(_TAG).count().select(F.col(_TAG).cast("string").alias("input"), "count")
        rows = [r.asDict() for r in _union_all([counts, *self._snapshot_fingerprint_frames(batch, ranges)]).collect()]
        names = {str(n): input_id for input_id, n in tags.items()}
        changed.update({names[r["input"]]: r["count"] for r in rows if r.get("fingerprint") is None})
        self.snapshot_fingerprints = {r["input"]: r["fingerprint"] for r in rows if r.get("fingerprint") is not None}
        for input_id, frame in frames.items():
            n = tags[input_id]
            own = [F.col(f"{_TAG}{n}_{j}").alias(c) for j, c in enumerate(frame.columns)]
            mine = _small(keys.where(F.col(_TAG) == n).select(*own), changed[input_id])
            self._view(f"changed_{self.plan.inputs[input_id].slug}", mine)
        self.phase("mv:changed-keys")
        return changed

    def _affected(self, changed: dict[str, int]) -> int:
        """Affected main keys of every part (checkpointed; views ``affected_p<i>``) and their MV
        keys (view ``keys``); returns how many MV keys."""
        moved = {input_id for input_id, n in changed.items() if n}
        parts = {}
        for part in self.plan.parts:
            names = [f"key:{i}:p{part.index}" for i in sorted(moved)]
            for name, inputs in (("lookup", lookup_inputs(part)), ("walk", walk_inputs(part))):
                if moved & inputs:
                    names.append(f"{name}:p{part.index}")
                    self._empty_changed_views(inputs - moved)  # the query reads the view of each of its inputs
            frames = [self._sql(name) for name in names if name in self.derived.queries]
            if frames:
                parts[part.index] = self._checkpoint(_union_all(frames).distinct())
            else:
                parts[part.index] = self.spark.table(self.plan.inputs[part.main_input].relation).select(*part.main_key).limit(0)
            self._view(f"affected_p{part.index}", parts[part.index])
        keys = self._sql("keys")  # over the checkpoints above: the same keys at every use
        count = keys.count()
        # No part has more distinct main keys than there are MV keys: each maps to its own.
        for index, frame in parts.items():
            self._view(f"affected_p{index}", _small(frame, count))
        self._view("keys", _small(keys, count))
        return count

    def _empty_changed_views(self, inputs: set[str]) -> None:
        for input_id in inputs:
            info = self.plan.inputs[input_id]
            self._view(f"changed_{info.slug}", self.spark.table(info.relation).select(*info.key).limit(0))

    # -- commit --------------------------------------------------------------------------
    def _commit(self, batch: int, ranges: dict, state: MvState, affected: int, changed: dict[str, int]) -> None:
        fingerprints = self._fingerprints(batch, ranges)
        now = self.now()
        commits = [Commit(self.leases[self.plan.topic()], (batch,), affected, state.dump(), now)]
        for input_id, (_, nxt) in ranges.items():
            commits.append(Commit(self.leases[self.plan.topic(input_id)], nxt if nxt is not None else (),
                                  changed.get(input_id, 0), fingerprints.get(input_id, ""), now))
        self.store.commit_many(commits)
        self.phase("mv:committed")
        self.store.log_step(StepLogRow(self.plan.topic(), now, affected, last=(batch - 1,), next=(batch,),
                                       consumer=self.holder))
        self.phase("mv:step-logged")
        for input_id, info in self.plan.inputs.items():
            stale = self._stale_snapshots(batch, *ranges[input_id]) if diffed(info) else []
            if stale:
                partitions = ", ".join(f"PARTITION ({BATCH} = {n})" for n in stale)
                self._spark_sql(f"ALTER TABLE {self.plan.table_name(f'snap_{info.slug}')} DROP IF EXISTS {partitions}")
        self.phase("mv:snapshots-dropped")

    def _stale_snapshots(self, batch: int, last: tuple | None, nxt: tuple) -> list[int]:
        """Snapshot partitions of a diffed input no later batch reads: the one it was diffed
        against, and one a crashed try of this batch may have left when its redo kept the old."""
        stale = {int(last[0])} if last and tuple(last) != tuple(nxt) else set()
        if self.redo:
            stale.add(batch)
        return sorted(stale - {int(nxt[0])})

    # -- Spark helpers -------------------------------------------------------------------
    # what a storage (compiler.mv_storage) uses
    @property
    def definition(self) -> str:
        return definition_hash(self.derived)

    def sql(self, name: str, **args: Any) -> "DataFrame":
        return self._sql(name, **args)

    def view(self, what: str, frame: "DataFrame") -> None:
        self._view(what, frame)

    def save_state(self, state: MvState) -> None:
        self.store.set_state(self.leases[self.plan.topic()], state.dump(), self.now())

    def _sql(self, name: str, **args: Any) -> "DataFrame":
        text = self.derived[name]
        return self.spark.sql(text, args={k: v for k, v in args.items() if f":{k}" in text} or None)

    def _spark_sql(self, text: str) -> None:
        self.spark.sql(text)

    def _checkpoint(self, frame: "DataFrame") -> "DataFrame":
        """Materialize a key set once, in Spark (not in the driver), so every later use sees the same keys."""
        frame = frame.localCheckpoint(eager=True)
        self.frames.append(frame)
        return frame

    def _view(self, what: str, frame: "DataFrame") -> None:
        name = self.plan.view_name(what)
        frame.createOrReplaceTempView(name)
        if name not in self.views:
            self.views.append(name)

    def _drop_views(self) -> None:
        for name in self.views:
            self.spark.catalog.dropTempView(name)
        self.views.clear()
        for frame in self.frames:
            frame.unpersist()
        self.frames.clear()


@dataclass
class _Probe:
    """What the inputs hold now (``_Refresh._probe``): the newest position of each position or
    change-feed input (encoded; None when empty) with its column types, and the fingerprint of
    each diffed input."""

    positions: dict[str, tuple | None] = field(default_factory=dict)
    types: dict[str, dict[str, str]] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)


def _union_all(frames: list["DataFrame"]) -> "DataFrame":
    """One frame of several (by column name; columns a frame lacks are NULL): one Spark job."""
    union = frames[0]
    for other in frames[1:]:
        union = union.unionByName(other, allowMissingColumns=True)
    return union


def _small(frame: "DataFrame", rows: int) -> "DataFrame":
    """The frame, marked to be broadcast in joins when it holds at most ``BROADCAST_KEYS`` rows."""
    from pyspark.sql import functions as F

    return F.broadcast(frame) if rows <= BROADCAST_KEYS else frame


def _fingerprint_frame(frame: "DataFrame", columns: tuple[str, ...], input_id: str) -> "DataFrame":
    """One row ``(input, fingerprint)``: row count and two independent hash sums of the used
    columns (each paired with its null flag, so a null cannot shift into a neighbour)."""
    from pyspark.sql import functions as F

    args = [x for c in columns for x in (F.col(c), F.isnull(F.col(c)))]
    wide = "decimal(38,0)"
    text = F.concat_ws(":", F.count(F.lit(1)).cast("string"),
                       F.coalesce(F.sum(F.xxhash64(*args).cast(wide)).cast("string"), F.lit("")),
                       F.coalesce(F.sum(F.hash(*args).cast(wide)).cast("string"), F.lit("")))
    return frame.agg(text.alias("fingerprint")).select(F.lit(input_id).alias("input"), "fingerprint")


def _after(frame: "DataFrame", columns: tuple[str, ...], last: tuple, types: dict[str, str]) -> Any:
    """Rows whose position is past ``last`` (lexicographic over the position columns)."""
    values = [_decode(v, types.get(c.lower(), "")) for c, v in zip(columns, last)]
    condition = None
    for column, value in reversed(list(zip(columns, values))):
        later = frame[column] > value
        condition = later if condition is None else later | ((frame[column] == value) & condition)
    return condition


def _stored_fingerprint(state: str) -> str | None:
    try:
        value = json.loads(state).get("fingerprint") if state else None
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _encode(value: Any) -> Any:
    """A position value as JSON (timestamps and dates as ISO strings, decimals as strings)."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def _decode(value: Any, type_name: str) -> Any:
    """A stored position value back to the Python type Spark binds for the column's type."""
    if value is None:
        return None
    if type_name.startswith("timestamp"):
        return datetime.fromisoformat(value)
    if type_name == "date":
        return date.fromisoformat(value)
    if type_name.startswith("decimal"):
        return Decimal(value)
    return value


