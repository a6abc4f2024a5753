"""Running an ``mv`` model: change detection, affected keys, the write, the commit.

How the rows are stored is the storage's (``compiler.kinds.mv.storage``, one per table format):

- parquet: ``<mv>__mvflow_base_<a|b>`` base slots (blue/green), ``<mv>__mvflow_delta_<a|b>``
  recomputed rows and tombstones partitioned by batch, and a merge-on-read view under the
  model's name; compaction (after every batch of a small MV, else when the delta passes
  ``compact_threshold`` × base rows: ``strategy.compaction_reason``) writes a new base into the
  idle slot and swaps the view;
- delta: one Delta table under the model's name, one ``MERGE`` per batch, ``OPTIMIZE`` where
  parquet compacts.

Both formats also keep ``<mv>__mvflow_changes`` (the MV keys each batch refreshed, so MVs can
be stacked; a key-driven batch writes them only when an MV of the manifest reads this one) and ``<mv>__mvflow_snap_<input>`` (snapshots of dictionary-like inputs, per batch).
A refresh writes only the affected keys' rows, so its cost grows with the affected keys.

Offsets (``compiler.state``): topic ``<mv>`` holds the batch number (``last`` committed,
``next`` in flight) and a JSON state (``MvState``: live slot or Delta version, row counts,
definition hash); one topic ``<mv>:<input>`` per input holds its position. A batch first writes
every ``next``, then its rows, then commits every topic in one ``commit_many``: a crash before
the commit is redone with the same batch number and the same ranges (parquet overwrites its own
delta partition, Delta restores the version of the last commit first).
Key sets stay in Spark (``compiler.kinds.mv.keys``: checkpointed temporary views); the driver only
sees counts.

A key-driven batch is lean in Spark jobs (``python -m bench.batch_jobs``): the probe is one query,
each key set is checkpointed by the job that counts it, the batch runs without adaptive execution
and its write joins the small inputs by shuffles with no runtime bloom filter
(``compiler.kinds.mv.scope``: ``ADAPTIVE``, ``BROADCAST``, ``BLOOM_FILTER``).
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ... import watch
from ...leases import kept
from ...phases import PhaseClock, PhaseHook, no_phase
from ...spark import first_batch
from ...state import Commit, Lease, Offset, StateStore, StepLogRow, default_holder, open_state_store
from ...table_format import DELTA
from ..table import SLOTS, slot_table
from . import MvKind, strategy
from .analyze import mv_plan
from .change_modes import history_gone
from .costs import COMPACTION, HISTORY, Run, cost_lines, cost_model, runs
from .decisions import new_input, rebuild_reason
from .derive import Derived, derived
from .input_set import InputSet
from .keys import affected_keys, changed_keys
from .plan import MvPlan
from .scope import BROADCAST_KEYS, BatchScope, small
from .storage import MvState, rows_words, storage_for
from .strategy import CHUNKED, FULL, Decision

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ...manifest import Manifest, Model
    from ...project import StateSettings
    from ...run import Result

LEASE_SECONDS = 3600.0


@dataclass
class Outcome:
    """What one refresh did (for the run result and the tests)."""

    batch: int
    mode: str  # build | refresh | noop
    affected: int = 0
    decision: Decision | None = None  # how the batch was applied (``compiler.kinds.mv.strategy``) and why
    rows: int | None = None
    groups: int | None = None  # a GROUP BY MV's groups (rows holds its members too)
    changed: dict[str, int] = field(default_factory=dict)
    compacted: bool = False
    reason: str = ""
    redo: bool = False  # the batch redid one that crashed, over the ranges planned before the crash
    covered: bool = True  # the batch read every input up to what the probe saw (False: more is waiting)
    resumed_at: int = 0  # a chunked batch resumed after a crash: the first chunk this try wrote

    @property
    def strategy(self) -> str | None:
        return self.decision.strategy if self.decision is not None else None


def definition_hash(derived: Derived) -> str:
    """A change of the MV's derived SQL or of its table format is a breaking change: the MV is rebuilt."""
    text = derived["full"] + ("\n-- delta" if "merge" in derived.queries else "")  # parquet's hash as before
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _watched_definition(plan: MvPlan, derived: Derived) -> str:
    """What the file check compares besides the inputs: the definition, and the clustering, whose
    change is applied without a rebuild but must not wait for the next change of an input."""
    definition = definition_hash(derived)
    return watch.sql_hash(definition, *plan.cluster_by) if plan.cluster_by else definition


# -- the runner ------------------------------------------------------------------------------
def mv_runner(store: StateStore | None = None, full_refresh: bool = False,
              echo: Callable[[str], None] = lambda _: None, file_check: bool = True,
              phase: PhaseHook = no_phase, holder: str | None = None,
              lease_seconds: float | None = None) -> Callable[["SparkSession", "Manifest", "Model"], "Result"]:
    """The ``mv`` runner for ``run_models`` (``runners={"mv": mv_runner(store, ...)}``)."""

    def run(spark: "SparkSession", manifest: "Manifest", model: "Model") -> "Result":
        chosen = store or open_state_store(manifest.project.target(manifest.target).state)
        return run_mv(spark, manifest, model, chosen, full_refresh, echo, file_check, phase,
                      holder=holder, lease_seconds=lease_seconds or LEASE_SECONDS)

    return run


def run_mv(spark: "SparkSession", manifest: "Manifest", model: "Model", store: StateStore,
           full_refresh: bool = False, echo: Callable[[str], None] = lambda _: None,
           file_check: bool = True, phase: PhaseHook = no_phase,
           now: Callable[[], datetime] = lambda: datetime.now(timezone.utc), holder: str | None = None,
           lease_seconds: float = LEASE_SECONDS) -> "Result":
    """Refresh one MV and report it as a run Result (errors become an error Result). Within
    ``min_interval`` of its last batch it is not due; with ``file_check``, first ask
    ``compiler.watch`` whether anything moved. Both are answered without Spark. A redone batch
    is followed by a new one when changes landed after the crash."""
    from ...run import Result, _spark_message

    started = time.monotonic()
    result = Result(model.name, "mv", "success", started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    leasing = {"holder": holder or default_holder(), "lease_seconds": lease_seconds, "now": now, "phase": phase, "echo": echo}
    lease = None
    try:
        plan = mv_plan(model, manifest)
        spec = watch_spec(plan, _watched_definition(plan, derived(manifest, model)))
        waiting = None if full_refresh else waiting_words(plan, _kind(model.kind), spec, store, now(), file_check)
        if waiting is not None:  # decided from the state store and file listings alone: Spark is not asked
            result.rows = 0
            result.message = waiting
        else:
            # The MV's lease is held from the refresh through its publish: one job, one fencing token
            lease = store.acquire(plan.topic(), leasing["holder"], lease_seconds, now())
            observed = watch.observe(spark, store, spec)
            outcomes = [refresh_mv(spark, manifest, model, store, full_refresh=full_refresh, lease=lease, **leasing)]
            # A redo covers only the ranges planned before the crash: what landed since is the next
            # batch's, whose ranges reach what its own probe sees.
            if not outcomes[0].covered:
                outcomes.append(refresh_mv(spark, manifest, model, store, lease=lease, **leasing))
            if outcomes[-1].covered:  # a watch may only claim what the batches read
                watch.record(spark, store, spec, observed)
            result.rows = sum(o.rows if o.mode == "build" else o.affected for o in outcomes)
            result.message = "; ".join(describe(o) for o in outcomes)
            decided = [o.decision for o in outcomes if o.decision is not None]
            if decided:
                result.strategy, result.estimates = decided[-1].strategy, decided[-1].to_dict()
        if model.kind.publish is not None:
            from ...publish.publisher import publish_after, publish_mv

            publish_after(result, lambda: publish_mv(spark, manifest, model, store, lease=lease, **leasing))
    except Exception as exc:  # noqa: BLE001 - one failing model must not stop the others
        result.status = "error"
        result.message = _spark_message(exc)
    finally:
        if lease is not None:
            store.release(lease)
    result.seconds = time.monotonic() - started
    return result


def waiting_words(plan: MvPlan, kind: MvKind, spec: watch.Spec, store: StateStore, now: datetime,
                  file_check: bool = True) -> str | None:
    """Why the MV has nothing to do now, without Spark: within ``min_interval`` of its last batch,
    or (``file_check``) no input file or upstream batch moved since it last looked; else None."""
    until = strategy.not_due_until(now, last_batch_time(store, plan.topic()), kind.min_interval_seconds)
    if until is not None:
        return strategy.not_due_words(until, kind.min_interval_seconds)
    seen = watch.is_idle(store, spec, now) if file_check else None
    return f"up to date (no input file or upstream batch moved since batch {json.loads(seen.last)[0]})" if seen else None


def next_run(manifest: "Manifest", model: "Model", store: StateStore, now: datetime) -> tuple[str, str]:
    """What the next run does to this MV (``mvflow plan``)."""
    plan = mv_plan(model, manifest)
    offset = store.get(plan.topic())
    if offset is None or offset.last is None:
        return "build", "no batch committed yet"
    if offset.in_flight:
        return "redo", "the batch that did not commit, over the ranges it planned"
    spec = watch_spec(plan, _watched_definition(plan, derived(manifest, model)))
    waiting = waiting_words(plan, _kind(model.kind), spec, store, now)
    if waiting:
        return "nothing", waiting
    if watch.dropped(store, spec):
        return "build", "its table is missing (dropped outside mvflow?): built again"
    early = strategy.before_changes(_kind(model.kind), MvState.parse(offset.state).base_rows if offset.state else 0,
                                    history(store, plan.topic()), readers=readers_rebuild(store, plan), cold=True)
    if early.strategy == FULL:  # decided before the probe, as the run will (``_Refresh._early_build``)
        return "build", f"an input moved; {early.reason}: {early.words()}"
    return "refresh", "an input moved: the affected keys (the strategy is chosen at run time)"


def watch_spec(plan: MvPlan, definition: str) -> watch.Spec:
    """An MV waits on its inputs' tables (the two slots of a parquet table model or seed, else the
    table under the input's name) and on upstream MVs' topics; its own tables are watched too."""
    tables: list[str] = []
    topics: list[str] = []
    for info in plan.inputs.values():
        if info.mode == "mv":
            topics.append(info.id)
        elif info.in_slots:
            tables += [slot_table(info.relation, slot) for slot in SLOTS]
        else:
            tables += [info.relation, *([info.feed] if info.feed else [])]
    own = (plan.table,) if plan.table_format == DELTA else tuple(plan.table_name(f"{what}_{slot}")
                                                                  for what in ("base", "delta") for slot in SLOTS)
    return watch.Spec(plan.topic(), definition, tuple(sorted(set(tables))), tuple(sorted(topics)), own=own)


def describe(outcome: Outcome) -> str:
    """The run line of one batch: ``batch 7: incremental: est. 1.9 s vs full 8.7 s (607 keys of 100,000 rows):
    607 keys refreshed (changed: …)``."""
    redo = " (redo of the crashed batch)" if outcome.redo else ""
    decision = outcome.decision
    estimated = decision is not None and any(v is not None for v in decision.estimates.values())
    if outcome.mode == "build":
        if estimated:
            return f"batch {outcome.batch}{redo}: {decision.words()}: {rows_words(outcome.rows, outcome.groups)} ({outcome.reason})"
        return f"batch {outcome.batch}{redo}: full build ({outcome.reason}), {rows_words(outcome.rows, outcome.groups)}"
    if outcome.reason == "up to date":
        return f"up to date (nothing changed since batch {outcome.batch})"
    changed = ", ".join(f"{k} {v:,}" for k, v in sorted(outcome.changed.items()) if v) or "no changes"
    extra = "; compacted" if outcome.compacted else ""
    how = f"{decision.words()}: " if decision is not None and outcome.affected else ""
    chunks = ""
    if outcome.strategy == CHUNKED:
        chunks = f" in {decision.chunks} chunks" + (f", resumed at chunk {outcome.resumed_at + 1}" if outcome.resumed_at else "")
    return f"batch {outcome.batch}{redo}: {how}{outcome.affected:,} keys refreshed{chunks} (changed: {changed}){extra}"


def last_batch_time(store: StateStore, topic: str) -> datetime | None:
    """When the MV last committed a batch (what ``min_interval`` counts from); None when it never
    did or a batch is in flight (a crashed batch is redone at once)."""
    offset = store.get(topic)
    if offset is None or offset.last is None or offset.in_flight:
        return None
    steps = store.steps(topic, 1)
    return steps[0].ts if steps else offset.run


def history(store: StateStore, topic: str) -> list[Run]:
    """The MV's recorded batches, newest first, as the cost model reads them."""
    return runs(store.steps(topic, 4 * HISTORY))


def readers_rebuild(store: StateStore, plan: MvPlan) -> float:
    """What the MVs that read this one's keys are estimated to spend rebuilding when it builds
    before finding its keys (so publishes none): each one's build at its size, by its own recorded
    builds (none recorded: 0, its first batch builds anyway). A serving store's full publish is not
    counted: its step log does not time it. A GROUP BY or grain MV publishes no keys after any build
    (``_switch_to_build``): its readers rebuild either way, so 0."""
    if plan.grouped or plan.grain:
        return 0.0
    total = 0.0
    for name in plan.consumers:
        if ":" in name:  # a batch-scoped test (``test:``) or a serving store (``publish:``)
            continue
        offset = store.get(name)
        rows = MvState.parse(offset.state).base_rows if offset is not None and offset.state else 0
        total += cost_model(history(store, name)).full(rows) or 0.0
    return total


def strategy_lines(settings: "StateSettings", plan: MvPlan, kind: object, costs: bool = False) -> list[str]:
    """What ``mvflow explain`` says of the MV's strategy: its config and, when the state store
    has recorded batches, the fitted costs and today's estimates; with ``costs``, the batches the
    model read and its last decisions against what they took (no Spark; a state store that does not
    exist yet is not created)."""
    steps, rows, readers = [], None, 0.0
    if settings.dsn or (settings.path is not None and Path(settings.path).exists()):
        store = open_state_store(settings)
        steps = store.steps(plan.topic(), 4 * HISTORY)
        offset = store.get(plan.topic())
        rows = MvState.parse(offset.state).base_rows if offset is not None and offset.state else None
        readers = readers_rebuild(store, plan)
    lines = strategy.explain_lines(_kind(kind), runs(steps), rows, readers)
    return lines + cost_lines(steps) if costs else lines


def _kind(kind: object) -> MvKind:
    return kind if isinstance(kind, MvKind) else MvKind()


def refresh_mv(spark: "SparkSession", manifest: "Manifest", model: "Model", store: StateStore,
               full_refresh: bool = False, holder: str | None = None, lease_seconds: float = LEASE_SECONDS,
               now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
               phase: PhaseHook = no_phase, echo: Callable[[str], None] = lambda _: None,
               lease: Lease | None = None) -> Outcome:
    """One refresh of an MV: a full build on the first run, on ``full_refresh``, on a changed
    definition or past the fan-out guard; otherwise a key-driven batch. ``phase`` is called at
    every point of ``compiler.phases.MV_PHASES`` the batch passes (tests crash it there).
    ``lease``: the MV topic's lease, held by the caller (``run_mv``: through the publish too);
    without it the refresh takes and releases its own."""
    plan = mv_plan(model, manifest)
    run = _Refresh(spark, plan, derived(manifest, model), store, holder or default_holder(), now, phase, echo, model.kind)
    run.lease_seconds = lease_seconds
    return run.execute(full_refresh, lease)


class _Refresh:
    """One batch of one MV, from its leases to its commit: whether to build or go by key (the
    decisions: ``decisions``, ``strategy``), the inputs' side (``InputSet``), the key sets
    (``keys``), the write (the storage of its table format), all in one ``BatchScope``."""

    def __init__(self, spark, plan: MvPlan, derived: Derived, store: StateStore, holder: str, now, phase: PhaseHook,
                 echo, kind):
        self.spark, self.plan, self.derived, self.store = spark, plan, derived, store
        self.scope = BatchScope(spark, plan, derived)  # its statements, views and checkpoints
        self.holder, self.now, self.echo, self.kind = holder, now, echo, _kind(kind)
        self.phase = PhaseClock(phase)  # when the batch began and reached each phase (the step log keeps both)
        self.leases: dict[str, Lease] = {}
        self.lease_seconds = LEASE_SECONDS
        self.inputs = InputSet(self.scope, store, self.leases, now, self.phase)
        self.history: list[Run] = []  # the MV's recorded batches (the cost model's input)
        self.readers = 0.0  # what the MVs that read this one would spend rebuilding (``readers_rebuild``)
        self.cold = False  # the first MV batch of this process (``compiler.spark.first_batch``)
        self.decision: Decision | None = None
        self.span = 1  # batch numbers the batch takes: a chunked batch writes chunk i as batch + i
        self.affected_parts: dict[int, "DataFrame"] = {}
        self.known_keys = False  # a build switched to after its affected keys were counted (view ``keys`` kept)
        self.storage = storage_for(self)

    # -- orchestration -------------------------------------------------------------------
    def execute(self, full_refresh: bool, lease: Lease | None = None) -> Outcome:
        own = lease or self.store.acquire(self.plan.topic(), self.holder, self.lease_seconds, self.now())
        self.leases[self.plan.topic()] = own
        try:
            for input_id in self.plan.inputs:
                topic = self.plan.topic(input_id)
                self.leases[topic] = self.store.acquire(topic, self.holder, self.lease_seconds, self.now())
            self.phase("mv:leased")
            with kept(self.store, self.leases.values, self.lease_seconds, self.now):
                return self._batch(full_refresh)
        finally:
            self.scope.adaptive(True)  # the target's setting back
            self.scope.drop()
            for held in self.leases.values():
                if held is not lease:  # the caller's is released by the caller
                    self.store.release(held)

    def _batch(self, full_refresh: bool) -> Outcome:
        self.phase.start()
        offset = self.store.get(self.plan.topic()) or Offset(self.plan.topic())
        state = MvState.parse(offset.state)
        reason = rebuild_reason(full_refresh, offset.last is not None, offset.in_flight, self.storage.exists(state),
                                state.definition == definition_hash(self.derived), state.swapping)
        inputs = self.inputs
        inputs.resolve()
        self.scope.adaptive(False)  # the probe and a key-driven batch (``_build`` turns it back on)
        reason = reason or inputs.rebuild_reason()  # offsets kept by another mode: before a probe reads them
        self.history = history(self.store, self.plan.topic())
        self.readers = readers_rebuild(self.store, self.plan)
        self.cold = first_batch(self.spark)
        forced = self._early_build(state) if reason is None and not offset.in_flight else None
        pinned = inputs.pin()
        beside = pinned if reason is not None or forced is not None else frozenset()  # probed beside the build
        inputs.look(since_last=reason is None, skip=beside)
        if reason is None and inputs.rebuild_reason():  # a re-created table, seen by the probe
            reason, forced, beside = inputs.rebuild_reason(), None, frozenset()
            inputs.look(since_last=False)
        self.phase("mv:probed")
        if reason is None and not offset.in_flight and inputs.up_to_date():
            self.storage.align(state)
            return Outcome(int(offset.last[0]), "noop", reason="up to date")
        inputs.redo = offset.in_flight
        batch = int(offset.next[0]) if offset.in_flight else int(offset.last[0]) + 1 if offset.last else 1
        if reason is None and inputs.redo and state.chunked.get("batch") == batch:
            inputs.resume, self.span = True, int(state.chunked["chunks"])
        elif reason is None and forced is None:  # decided without any key: on the keys the probe counted
            probed = max((inputs.probe.changed_keys.get(part.main_input, 0) for part in self.plan.parts), default=0)
            decided = strategy.before_changes(self.kind, state.base_rows, self.history, probed, self.readers, self.cold)
            forced = decided if decided.strategy == FULL else None
        reason = forced.reason if forced is not None else reason
        self.store.set_next(self.leases[self.plan.topic()], (batch,), self.now())
        ranges = None if beside else inputs.plan_ranges(batch, fresh=reason is not None)  # else after the build
        if ranges is not None and reason is None and new_input(ranges):
            reason = "a new input"
            ranges = inputs.plan_ranges(batch, fresh=True)
        if ranges is not None:
            self.phase("mv:next-written")
        if forced is not None:
            self.echo(f"{self.plan.name}: {forced.reason}, a full build ({forced.words()})")
            self.phase("mv:fanout-guard")
        self.scope.sql("create_schema")
        outcome = self._build(batch, state, ranges, reason, forced, beside, since_last=forced is not None) \
            if reason is not None \
            else self._refresh(batch, state, ranges)
        outcome.redo, outcome.covered = inputs.redo, inputs.covered()
        return outcome

    def _early_build(self, state: MvState) -> Decision | None:
        """A full build decided before the probe (``config(strategy='full')``, or a small MV whose
        refresh of one key costs more than its build: ``strategy.before_changes`` without keys), so
        that the probe of its pinned inputs can run beside the build. None: the probe decides."""
        decided = strategy.before_changes(self.kind, state.base_rows, self.history, readers=self.readers, cold=self.cold)
        return decided if decided.strategy == FULL else None

    # -- full build ----------------------------------------------------------------------
    def _build(self, batch: int, state: MvState, ranges: dict | None, reason: str, decision: Decision | None = None,
               pinned: frozenset[str] = frozenset(), since_last: bool = False) -> Outcome:
        """A full build. Without ``ranges`` (a build known before the probe) the ``pinned`` inputs'
        probe runs beside it (past each committed ``last`` when ``since_last``: the strategy's build,
        not a rebuild) and the ranges are planned after it, before the commit."""
        self.echo(f"{self.plan.name}: full build, batch {batch} ({reason})")
        self.scope.adaptive(True)
        self.decision = decision or Decision(FULL, reason, rows=state.base_rows)
        self.span = 1  # a chunked try left partitions after batch: the new slot's delta starts empty
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"probe-{self.plan.name}") as beside:
            probing = beside.submit(self.inputs.probe_beside, pinned, since_last) if pinned else None
            self.inputs.build(batch)
            self.phase("mv:build-snapshots")
            new_state = self.storage.build(state, batch)
            if probing is not None:
                probing.result()
        if ranges is None:
            ranges = self.inputs.plan_ranges(batch, fresh=True)
            self.phase("mv:next-written")
        new_state.built = state.built if self.known_keys else batch  # the keys published: serving stores go on by key
        self._commit(batch, ranges, new_state, new_state.base_rows, {}, keys=new_state.base_rows)
        return Outcome(batch, "build", rows=new_state.base_rows, groups=new_state.groups, reason=reason,
                       decision=self.decision)

    def publish_all(self, table: str, old: "Callable[[], DataFrame] | None", batch: int) -> int:
        """After a build, the keys for what reads them (``MvPlan.consumers``). A batch that switched
        to the build after counting its affected keys publishes those, as a refresh by key would: the
        rows of every other key are unchanged, so readers go on by key. Otherwise every key may have
        changed: an MV or serving store reading this one would replace all its rows, so it rebuilds
        instead, and only a batch-scoped test gets every key of the new ``table`` and the ``old`` rows
        (it checks the whole MV after a build). Returns the build's batch when it published no keys
        (``MvState.unpublished``: a reader at an older batch rebuilds), else 0."""
        if not (self.known_keys and self.plan.consumers):  # a reader at an older batch rebuilds: its keys can go
            self.scope.sql("drop_changes")
        self.scope.create_like("create_changes", table, self.plan.published_key)
        if self.known_keys and self.plan.consumers:
            self.scope.sql("publish_all", batch=batch)  # view ``keys``: the affected keys
            return 0
        if not any(c.startswith("test:") for c in self.plan.consumers):
            return batch
        rows = self.published(self.spark.table(table))
        keys = rows if old is None else rows.union(self.published(old()))
        self.scope.view("keys", keys.distinct())  # read once, by the publish
        self.scope.sql("publish_all", batch=batch)
        return 0

    def published(self, rows: "DataFrame") -> "DataFrame":
        """The published keys of stored rows (of a GROUP BY MV, its groups)."""
        if self.plan.grouped:
            rows = rows.where(f"{self.plan.grouped.main_key_columns[0]} IS NULL")
        return rows.select(*self.plan.published_key)

    # -- key-driven refresh --------------------------------------------------------------
    def _refresh(self, batch: int, state: MvState, ranges: dict) -> Outcome:
        if self.inputs.redo:
            self.storage.prepare_redo(state)
        self.storage.align(state)  # after a redo's restore, which may undo an earlier try's ALTER
        try:
            changed = self._changed_keys(batch, ranges)
        except Exception as exc:  # noqa: BLE001 - only Delta history that is gone is handled
            gone = history_gone(exc)
            if gone is None:
                raise
            reason = f"the Delta history this batch needs is not available ({gone}: vacuumed, cleaned up or never recorded)"
            self.echo(f"{self.plan.name}: {reason}, switching to a full build")
            self.scope.drop()
            return self._build(batch, state, self.inputs.plan_ranges(batch, fresh=True), reason)
        outcome = Outcome(batch, "refresh", changed=changed)
        kind, rows = self.kind, state.base_rows
        if not any(changed.values()):
            outcome.mode = "noop"
            self._commit(batch, ranges, state, 0, changed)
            return outcome
        if not self.inputs.resume:
            mains = [part.main_input for part in self.plan.parts]
            early = strategy.before_keys(kind, changed, mains, rows, self.history, spent=self.phase.elapsed(),
                                         cold=self.cold)
            if early.strategy == FULL:
                return self._switch_to_build(batch, state, early)
        self.scope.view("stored", self.storage.stored(state, batch))
        outcome.affected, self.affected_parts = affected_keys(self.scope, changed)
        self.phase("mv:affected-keys")
        if self.inputs.resume:
            done = int(state.chunked.get("done", 0))
            self.decision = Decision(CHUNKED, f"resuming the crashed chunked batch at chunk {done + 1} of {self.span}",
                                     outcome.affected, rows, {}, self.span)
        else:
            publishes = not (self.plan.grouped or self.plan.grain) or not self.plan.consumers  # a switched build's keys
            self.decision = strategy.after_keys(kind, outcome.affected, rows, self.history, spent=self.phase.elapsed(),
                                                cold=self.cold, switch_publishes=publishes)
        if self.decision.strategy == FULL:
            return self._switch_to_build(batch, state, self.decision, keys_known=True)
        outcome.decision = self.decision
        if self.decision.strategy == CHUNKED:
            outcome.resumed_at = self._write_chunks(batch, state, self.decision.chunks)
            state.delta_rows += outcome.affected
        else:
            self._write_keys(batch, state, outcome.affected)
        self._commit(batch, ranges, state, outcome.affected, changed, keys=outcome.affected)
        reason = strategy.compaction_reason(self.kind, state.base_rows, state.delta_rows)
        if reason:
            self._compact(batch, state, reason)
            outcome.compacted = True
        return outcome

    def _compact(self, batch: int, state: MvState, reason: str) -> None:
        """Compact after the batch's commit (a crash leaves the batch committed: parquet's half-swapped
        slot is rebuilt by the next run, Delta's OPTIMIZE commits whole or not at all), its seconds
        logged as a step of its own: the cost model adds them to a batch by key of a small MV."""
        started = time.monotonic()
        self.scope.adaptive(True)
        self.storage.compact(state)
        self._log_step(batch, self.now(), 0, started, COMPACTION, {"rows": state.base_rows, "reason": reason})

    def _switch_to_build(self, batch: int, state: MvState, decision: Decision, keys_known: bool = False) -> Outcome:
        """A full build after all; a plain MV whose affected keys are counted keeps them (view
        ``keys``) for the build to publish (``publish_all``)."""
        self.echo(f"{self.plan.name}: {decision.reason}, switching to a full build ({decision.words()})")
        self.phase("mv:fanout-guard")
        self.known_keys = keys_known and not (self.plan.grouped or self.plan.grain)
        if not self.known_keys:
            self.scope.drop()
        return self._build(batch, state, self.inputs.plan_ranges(batch, fresh=True), decision.reason, decision)

    def _write_keys(self, batch: int, state: MvState, keys: int) -> None:
        """Recompute the rows of the ``keys`` keys in view ``keys`` and write them as batch ``batch``."""
        self.scope.view("rows", self.scope.sql("refresh"))  # read once, by the write: no checkpoint needed
        lean = 0 < keys <= BROADCAST_KEYS and not self.storage.adaptive_write(keys)  # a chunk passes 0 keys
        if not lean:
            self.scope.adaptive(True)
        with self.scope.broadcasts(on=not lean):
            self.storage.write(state, batch, keys)
        if self.plan.consumers:
            self.scope.sql("publish", batch=batch)
        else:  # no MV reads the keys: the job is saved; one that reads this MV later from an older batch rebuilds
            state.unpublished = batch
        self.phase("mv:published")

    def _write_chunks(self, batch: int, state: MvState, chunks: int) -> int:
        """A chunked refresh: the affected keys split into ``chunks`` by a hash of the MV key; chunk
        ``i`` is written as batch ``batch + i`` (its own delta and published partition, so each
        chunk's write is idempotent) and recorded in the MV topic's state, so a crash resumes at
        the next chunk. Returns the first chunk this try wrote."""
        done = int(state.chunked.get("done", 0)) if self.inputs.resume else 0
        self.span = chunks
        self.scope.adaptive(True)  # chunks are wide by definition
        for part in self.plan.parts:
            self.scope.view(f"affected_all_p{part.index}", self.affected_parts[part.index])
        for chunk in range(done, chunks):
            if chunk > done:  # a group spans chunks: each chunk's write replaces what the chunks before it wrote
                self.scope.view("stored", self.storage.stored(state, batch))
            for part in self.plan.parts:
                frame = self.scope.sql(f"chunk:p{part.index}", chunk=chunk, chunks=chunks)
                self.scope.view(f"affected_p{part.index}", small(frame, self.decision.keys or 0))
            self.scope.view("keys", self.scope.sql("keys"))
            self._write_keys(batch + chunk, state, 0)
            self.phase("mv:chunk-written")
            state.chunked = {"batch": batch, "chunks": chunks, "done": chunk + 1}
            self.store.set_state(self.leases[self.plan.topic()], state.dump(), self.now())
            self.phase("mv:chunk-recorded")
        state.chunked = {}
        return done

    def _changed_keys(self, batch: int, ranges: dict) -> dict[str, int]:
        """The changed keys of every input that moved (``compiler.kinds.mv.keys``), 0 for the others."""
        changed = {input_id: 0 for input_id in self.plan.inputs}
        frames = self.inputs.changes(batch, ranges)
        if not frames:
            return changed
        counts, self.inputs.fingerprints = changed_keys(self.scope, frames, self.inputs.fingerprint_frames(batch, ranges))
        changed.update(counts)
        self.phase("mv:changed-keys")
        return changed

    # -- commit --------------------------------------------------------------------------
    def _commit(self, batch: int, ranges: dict, state: MvState, affected: int, changed: dict[str, int],
                keys: int = 0) -> None:
        """Commit every topic in one transaction (the MV topic at the last batch number the batch
        took), then log the step with how it was applied and how long it took."""
        states = self.inputs.states(batch, ranges)
        now = self.now()
        last = batch + self.span - 1
        state.chunked = {}
        commits = [Commit(self.leases[self.plan.topic()], (last,), affected, state.dump(), now)]
        for input_id, (_, nxt) in ranges.items():
            commits.append(Commit(self.leases[self.plan.topic(input_id)], nxt if nxt is not None else (),
                                  changed.get(input_id, 0), states.get(input_id, ""), now))
        self.store.commit_many(commits)
        self.phase("mv:committed")
        decision = self.decision
        detail = {"keys": keys, "rows": state.base_rows, **({"groups": state.groups} if state.groups is not None else {}),
                  "chunks": decision.chunks if decision else 1, **({"redo": True} if self.inputs.redo else {}),
                  **({"changed": sum(changed.values())} if any(changed.values()) else {}),
                  **({"cold": True} if self.cold else {}),
                  **({"affected": decision.keys} if decision and decision.strategy == FULL and "mv:affected-keys" in self.phase.reached else {}),
                  **({"estimates": decision.to_dict()["estimates"], "reason": decision.reason} if decision else {}),
                  "phases": dict(self.phase.reached)}
        self._log_step(batch, now, affected, self.phase.origin, decision.strategy or "" if decision else "", detail)
        self.phase("mv:step-logged")
        self.inputs.after_commit(batch, ranges)
        self.phase("mv:snapshots-dropped")

    def _log_step(self, batch: int, now: datetime, rows: int, started: float, how: str, detail: dict) -> None:
        self.store.log_step(StepLogRow(self.plan.topic(), now, rows, last=(batch - 1,), next=(batch + self.span - 1,),
                                       seconds=time.monotonic() - started, consumer=self.holder,
                                       token=self.leases[self.plan.topic()].token, strategy=how, detail=detail))

    # -- what a storage uses (``compiler.kinds.mv.storage.Runner``) ------------------------
    @property
    def definition(self) -> str:
        return definition_hash(self.derived)

    def save_state(self, state: MvState) -> None:
        self.store.set_state(self.leases[self.plan.topic()], state.dump(), self.now())
