"""Running ``fact`` models: the step protocol on Spark and the state store.

For one fact (its topic is the model's name):

1. take the topic's lease (``LeaseHeld`` names the live holder);
2. if ``next`` differs from ``last`` a previous step crashed: redo exactly that range;
   otherwise choose ``next``: the last row after ``last`` that is ready (older than ``upto`` =
   min(now − delay, freshness of every ``depends_on`` entry)), at most ``maxstep`` rows on;
   if nothing is ready, record why and stop;
3. write ``next``, then write the SELECT over ``(last, next]`` so that it replaces whatever a
   crashed try of the step wrote (parquet: its hidden partition; delta: ``REPLACE WHERE`` the range);
4. commit ``last = next`` (fenced by the lease's token) and append a step log row;
5. repeat until caught up or ``max_steps``, then release the lease.

The queries come from ``fact.py`` (pure); this module binds their markers and runs them.
``phase`` is called at the named points of a step (``compiler.phases.FACT_PHASES``) so tests
can crash or kill the process exactly there.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Callable

from ... import watch
from ...manifest import Manifest, Model
from ...errors import MvflowError, Problem, RunError
from ...leases import kept
from ...phases import PhaseHook, no_phase
from ...run import Result, _spark_message
from ...spark_connect import observed, tag_jobs
from ...state import Lease, Offset, StateStore, StepLogRow, default_holder, open_state_store
from ...status import duration as _duration
from ...table_format import DELTA, quoted, table_provider
from .plan import STEP_COLUMN, FactPlan, fact, stats_query, step_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FAR_FUTURE = "9999-12-31 23:59:59.999999"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class StepOptions:
    max_steps: int | None = None
    full_refresh: bool = False
    file_check: bool = True  # first ask compiler.watch whether anything moved, without Spark
    lease_ttl_seconds: float = 600.0
    holder: str = field(default_factory=default_holder)
    clock: Callable[[], datetime] = utc_now
    phase: PhaseHook = no_phase
    stopping: Callable[[], bool] = lambda: False  # a graceful stop asked: no new step starts


@dataclass(frozen=True)
class Freshness:
    """How far one dependency has caught up in natural time (UTC, naive)."""

    label: str
    time: datetime | None  # None: not caught up to anything yet
    why: str = ""  # why time is None ("never refreshed", "no rows yet")


@dataclass(frozen=True)
class Gate:
    """The upper time bound of a step, and which limit set it."""

    upto: datetime
    limit: str  # "delay" or a dependency label
    blocked: str = ""  # non-empty: nothing can run, and why


def gate(now: datetime, delay_seconds: int, freshness: list[Freshness]) -> Gate:
    """``upto`` = min(now − delay, every dependency's freshness); a dependency that has not
    caught up to anything blocks the step.

    >>> now = datetime(2026, 1, 1, 12, 0)
    >>> gate(now, 60, [Freshness("stage.offers", datetime(2026, 1, 1, 11, 0))])
    Gate(upto=datetime.datetime(2026, 1, 1, 11, 0), limit='stage.offers', blocked='')
    >>> gate(now, 60, [Freshness("offers_wide", None, "never refreshed")]).blocked
    'waiting for offers_wide (never refreshed)'
    """
    upto, limit = now - timedelta(seconds=delay_seconds), "delay"
    for item in freshness:
        if item.time is None:
            return Gate(upto, item.label, f"waiting for {item.label} ({item.why})")
        if item.time < upto:
            upto, limit = item.time, item.label
    return Gate(upto, limit)


def waiting_reason(gate_: Gate, first_pending: datetime | None, delay_seconds: int) -> str:
    """Why no row is ready although ``first_pending`` (the oldest unprocessed row) exists.

    >>> g = Gate(datetime(2026, 1, 1, 11, 48), "stage.payments")
    >>> waiting_reason(g, datetime(2026, 1, 1, 12, 0), 0)
    'waiting for stage.payments, 12 min behind (caught up to 2026-01-01 11:48:00)'
    >>> waiting_reason(Gate(datetime(2026, 1, 1, 11, 59), "delay"), datetime(2026, 1, 1, 11, 59, 30), 60)
    'waiting for the delay of 60s: the oldest new row is 30s younger than now - delay'
    """
    if first_pending is None:
        return "caught up"
    behind = _duration((first_pending - gate_.upto).total_seconds())
    if gate_.limit == "delay":
        return f"waiting for the delay of {delay_seconds}s: the oldest new row is {behind} younger than now - delay"
    return f"waiting for {gate_.limit}, {behind} behind (caught up to {gate_.upto:%Y-%m-%d %H:%M:%S})"


@dataclass
class Audit:
    """What steps cannot see of the main source, counted once per run (``FactPlan.audit_sql``)."""

    source: str
    position: tuple[str, ...]
    late: int = 0  # rows at or before last beyond those the steps counted: they arrived after their step
    null_position: int = 0  # rows with a NULL in the position: no step places them
    covered: int = 0  # source rows at or before last: the next run's baseline, grown by every step

    def words(self, topic: str) -> str:
        """What the run says of them (empty when nothing was skipped).

        >>> Audit("stage.orders", ("ts", "id"), late=3, null_position=1).words("orders")
        'stage.orders: 3 rows arrived late (at or before the committed position, after their step), not loaded: mvflow run --full-refresh -s orders takes them in; 1 row with a NULL in (ts, id) never loaded'
        """
        said = []
        if self.late:
            said.append(f"{_rows(self.late)} arrived late (at or before the committed position, after their step), "
                        f"not loaded: mvflow run --full-refresh -s {topic} takes them in")
        if self.null_position:
            said.append(f"{_rows(self.null_position)} with a NULL in ({', '.join(self.position)}) never loaded")
        return f"{self.source}: " + "; ".join(said) if said else ""


def audit(source: str, position: tuple[str, ...], counts: dict, last, previous: StepLogRow | None) -> Audit:
    """The run's audit from the source's counts and the newest step log row: late rows are the rows
    at or before ``last`` beyond the ones that step counted (``covered``); unknown (none said) when
    that row is not the step that committed ``last`` (a log written before mvflow counted, or lost).

    >>> step = StepLogRow("orders", datetime(2026, 1, 1), 5, next=(7,), detail={"covered": 40})
    >>> audit("s.o", ("id",), {"at_or_before_last": 43, "null_position": 0}, (7,), step).late
    3
    >>> audit("s.o", ("id",), {"at_or_before_last": 43, "null_position": 0}, (9,), step).late
    0
    """
    baseline = previous.detail.get("covered") if previous and tuple(previous.next or ()) == tuple(last or ()) else None
    if last is None:
        baseline = 0
    upto_last = int(counts["at_or_before_last"])
    late = max(0, upto_last - baseline) if baseline is not None else 0
    return Audit(source, position, late, int(counts["null_position"]), upto_last)


def _rows(count: int) -> str:
    return f"{count:,} row{'' if count == 1 else 's'}"


def fact_runner(store: StateStore | None, options: StepOptions, echo: Callable[[str], None] = print):
    """A ``run_models`` runner for the ``fact`` kind (``store`` None: the target's state store)."""

    def runner(spark: "SparkSession", manifest: Manifest, model: Model) -> Result:
        chosen = store or open_state_store(manifest.project.target(manifest.target).state)
        return run_fact(spark, manifest, model, chosen, options, echo)

    return runner


def watch_spec(plan: FactPlan) -> watch.Spec:
    """A fact waits on its main source, the sources it depends on, and upstream facts' and MVs' topics."""
    return watch.Spec(
        plan.topic, watch.sql_hash(repr(plan)),
        tables=tuple(sorted({plan.source, *(d.name for d in plan.depends_on if d.kind == "source")})),
        topics=tuple(sorted(d.name for d in plan.depends_on if d.kind == "fact")),
        own=(plan.relation,),
        prefixes=tuple(sorted(f"{d.name}:" for d in plan.depends_on if d.kind == "mv")))


def next_run(manifest: Manifest, model: Model, store: StateStore, now: datetime) -> tuple[str, str]:
    """What the next run does to this fact (``mvflow plan``)."""
    from ...status import show_position

    def _words(position) -> str:
        return show_position(position) if position else "the start"

    plan = fact(manifest, model)
    offset = store.get(plan.topic)
    if offset is None or (offset.last is None and offset.next is None):
        return "build", "no step committed yet"
    if offset.in_flight:
        return "redo", f"the step ({_words(offset.last)}, {_words(offset.next)}] that did not commit"
    spec = watch_spec(plan)
    seen = watch.is_idle(store, spec, now)
    if seen is not None:
        return "nothing", _idle_message(offset.state, seen, now, plan.delay_seconds)
    if watch.dropped(store, spec):
        return "REFUSE", f"{plan.relation} is missing (dropped outside mvflow?): mvflow run --full-refresh -s {plan.topic}"
    return "steps", f"after {_words(offset.last)} (at most {plan.maxstep:,} rows each)"


def run_fact(spark: "SparkSession", manifest: Manifest, model: Model, store: StateStore,
             options: StepOptions, echo: Callable[[str], None] = print) -> Result:
    """Run steps of one fact model until it is caught up, blocked or ``max_steps`` are done."""
    started = time.monotonic()
    result = Result(model.name, "fact", "success", rows=0, started_at=options.clock().isoformat(timespec="seconds"))
    try:
        plan = fact(manifest, model)
        spec = watch_spec(plan)
        seen = watch.is_idle(store, spec, options.clock()) if options.file_check and not options.full_refresh else None
        if seen is not None:
            result.message = _idle_message(store.get(plan.topic).state, seen, options.clock(), plan.delay_seconds)
            result.seconds = time.monotonic() - started
            return result
        lease = store.acquire(plan.topic, options.holder, options.lease_ttl_seconds, options.clock())
    except MvflowError as exc:
        return _failed(result, exc, started)
    try:
        observed = watch.observe(spark, store, spec)
        stepper = _Stepper(spark, manifest, plan, store, lease, options, echo, result)
        with kept(store, lambda: [stepper.lease], options.lease_ttl_seconds, options.clock):
            stepper.run()
        if stepper.settled:
            watch.record(spark, store, spec, observed, stepper.ready_at)
    except MvflowError as exc:
        _failed(result, exc, started)
    except Exception as exc:  # noqa: BLE001 - a failing model must not stop the others
        result.status, result.message = "error", _spark_message(exc)
    finally:
        store.release(lease)
    result.seconds = time.monotonic() - started
    return result


def _idle_message(state: str, seen: watch.Watch, now: datetime, delay_seconds: int) -> str:
    """The reason recorded by the last check; a wait for the delay is re-told for ``now``."""
    if seen.ready_at and state.startswith("waiting for the delay"):
        first = datetime.fromisoformat(seen.ready_at) - timedelta(seconds=delay_seconds)
        state = waiting_reason(Gate(_naive(now) - timedelta(seconds=delay_seconds), "delay"), first, delay_seconds)
    return f"{state} (no input file or upstream offset moved)"


def _failed(result: Result, exc: MvflowError, started: float) -> Result:
    result.status, result.message = "error", "; ".join(p.format() for p in exc.problems)
    result.seconds = time.monotonic() - started
    return result


class _Stepper:
    def __init__(self, spark, manifest: Manifest, plan: FactPlan, store: StateStore, lease: Lease,
                 options: StepOptions, echo, result: Result):
        self.spark, self.manifest, self.plan, self.store = spark, manifest, plan, store
        self.lease, self.options, self.echo, self.result = lease, options, echo, result
        self.steps = 0
        self.settled = False  # the run ended with nothing to do until an input moves or ready_at
        self.ready_at: datetime | None = None
        self.table_ready = False  # the fact table is known to exist (asked once per run)
        self.source_times: dict[str, Freshness] | None = None  # kept for the run: see plan_next
        self.audit: Audit | None = None  # asked once per run, before the first step

    def run(self) -> None:
        plan, store = self.plan, self.store
        stored = table_provider(self.spark, plan.relation)
        if self.options.full_refresh:
            store.reset(plan.topic)  # first: a crash before the drop leaves a topic that refuses to run
            if not plan.is_delta or stored not in (None, DELTA):
                self.sql(plan.drop, {})
            if plan.is_delta:  # replaced in one commit (readers keep its name and history), emptied
                self.create()
            stored = DELTA if plan.is_delta else None
        offset = store.get(plan.topic)
        if offset.last is None and offset.next is None and stored is not None and not self.options.full_refresh:
            raise RunError(Problem(
                f"fact '{plan.topic}': {plan.relation} exists but the state store has no position for it",
                plan.path, hint="rebuild it with mvflow run --full-refresh -s " + plan.topic
                + " (or point the target at the state store that built it)", code="fact-no-offsets"))
        if offset.last is not None and stored is None and not self.options.full_refresh:
            from ...status import show_position

            raise RunError(Problem(
                f"fact '{plan.topic}': {plan.relation} is missing but the state store has its steps up to "
                f"{show_position(offset.last)} (dropped outside mvflow?): steps after them would leave the rows before out",
                plan.path, hint="rebuild it with mvflow run --full-refresh -s " + plan.topic
                + " (or point the target at the warehouse that holds it)", code="fact-table-missing"))
        if stored is not None and (stored == DELTA) != plan.is_delta:
            raise RunError(Problem(
                f"fact '{plan.topic}': {plan.relation} is a {stored} table but the model's table_format is {plan.table_format}",
                plan.path, hint="rebuild it in the new format with mvflow run --full-refresh -s " + plan.topic
                + " (or set config(table_format='" + (DELTA if stored == DELTA else "parquet") + "') to keep it)",
                code="fact-format"))
        self.table_ready = stored is not None
        self.audit = self.audit_source(offset)
        if self.audit.words(plan.topic):
            self.echo(f"  {plan.topic}: {self.audit.words(plan.topic)}")
        while self.options.max_steps is None or self.steps < self.options.max_steps:
            if self.options.stopping():
                self.note(f"stopped after {self.steps} step(s): the runner is stopping")
                return
            self.lease = store.renew(self.lease, self.options.lease_ttl_seconds, self.options.clock())
            if not self.step(store.get(plan.topic)):
                return
        self.note(f"stopped after {self.steps} step(s) (--max-steps)")

    def create(self) -> None:
        """The schema (only when missing: Hive logs an ERROR for an existing one) and the empty table."""
        schema, table = self.plan.create
        if not self.spark.catalog.databaseExists(self.plan.relation.split(".")[0]):
            self.sql(schema, {})
        self.sql(table, {})

    def audit_source(self, offset: Offset) -> Audit:
        """Count the source rows steps cannot see (one scan of the source)."""
        counts = self.spark.sql(self.plan.audit_sql, args=_bind(self.plan.markers("last"), offset.last)).collect()[0]
        logged = self.store.steps(self.plan.topic, limit=1)
        return audit(self.plan.source, self.plan.position, counts.asDict(), offset.last, logged[0] if logged else None)

    def source_rows(self, last, next_) -> int:
        """The main source's rows in (last, next]."""
        return self.spark.sql(self.plan.count_sql, args=bind_range(self.plan, last, next_)).collect()[0][0]

    def note(self, state: str, seen=None) -> None:
        if self.audit and self.audit.words(self.plan.topic):
            state = f"{state}; {self.audit.words(self.plan.topic)}"
        self.store.set_state(self.lease, state, self.options.clock(), seen)
        self.result.message = state if not self.steps else f"{self.steps} step(s); {state}"

    def step(self, offset: Offset) -> bool:
        """One step; False when there is nothing (more) to do."""
        plan, clock, phase = self.plan, self.options.clock, self.options.phase
        began = time.monotonic()
        now = clock()
        last = offset.last
        if offset.in_flight:
            next_, first, redo, planned = offset.next, None, True, None
            self.echo(f"  {plan.topic}: redoing the unfinished step ({_show(last)}, {_show(next_)}]")
        else:
            planned = self.plan_next(last, now)
            if planned is None:
                return False
            next_, first, planned = planned
            redo = False
        phase("fact:planned")
        if not redo:
            self.store.set_next(self.lease, next_, clock())
        phase("fact:next-written")
        step = step_id(next_)
        params = {**bind_range(plan, last, next_), "step": step}
        group = f"mvflow:{plan.topic}:{step}:{uuid.uuid4().hex[:8]}"
        untag = tag_jobs(self.spark, group, f"mvflow fact step {plan.topic}")  # classic or Spark Connect
        try:
            if not self.table_ready and not self.spark.catalog.tableExists(plan.relation):
                self.create()
            self.table_ready = True
            for hook in plan.before:
                self.sql(hook, params)
            phase("fact:writing")
            stats = self.write(params)
            for hook in plan.after:
                self.sql(hook, params)
            phase("fact:written")
            if stats is None or plan.after:  # after hooks may change the step's rows: count what they left
                stats = self.stats(params)
        finally:
            untag()
        rows, nulls = stats
        detail = self.step_detail(planned if planned is not None else self.source_rows(last, next_))
        self.store.commit(self.lease, next_, rows, "ok", clock())
        phase("fact:committed")
        self.steps += 1
        self.result.rows = (self.result.rows or 0) + rows
        lag = (_naive(now) - _time_of(first or next_)).total_seconds() if _time_of(first or next_) else None
        self.store.log_step(StepLogRow(
            plan.topic, now, rows, last=last, next=next_, min_pos=first, max_pos=next_, max_lag_seconds=lag,
            nulls={k: int(v) for k, v in nulls.items() if v}, query_id=group,
            seconds=round(time.monotonic() - began, 3), consumer=self.lease.holder, token=self.lease.token,
            detail=detail))
        phase("fact:step-logged")
        self.echo(f"  {plan.topic}: step {self.steps}{' (redo)' if redo else ''} ({_show(last)}, {_show(next_)}] "
                  f"{rows:,} rows in {time.monotonic() - began:.1f}s")
        self.result.message = f"{self.steps} step(s)"
        return True

    def step_detail(self, planned: int) -> dict:
        """The step log's account of the source: rows the step covers, all covered so far, and (on
        a run's first step) the late and NULL-position rows the run found."""
        audit_ = self.audit
        audit_.covered += planned
        detail = {"source_rows": planned, "covered": audit_.covered}
        if not self.steps:
            detail.update({k: v for k, v in (("late", audit_.late), ("null_position", audit_.null_position)) if v})
        return detail

    def plan_next(self, last, now: datetime):
        """(next, first position, source rows or None when unsure) of a new step, or None after
        recording why nothing is ready."""
        plan = self.plan
        kept = self.source_times is not None
        freshness, gate_, ready = self.bounds(last, now)
        if kept and gate_.limit in self.source_times and (gate_.blocked or not ready["rows"]):
            # the sources' freshness kept from an earlier step of this run holds the step back: ask again
            self.source_times = None
            freshness, gate_, ready = self.bounds(last, now)
        if gate_.blocked:
            self.note(gate_.blocked)
            self.settled, self.ready_at = True, None  # only a dependency moving can unblock it
            return None
        if ready["rows"] == 0:
            pending = self.range(last, FAR_FUTURE)
            first = _time_of(_position(pending, "lo", plan.position)) if pending["rows"] else None
            newest = _position(pending, "hi", plan.position) if pending["rows"] else last
            self.note(waiting_reason(gate_, first, plan.delay_seconds), seen=newest)
            if first is not None or not pending["rows"]:
                self.settled, self.ready_at = True, ready_at(first, plan.delay_seconds, freshness)
            return None
        rows = int(ready["rows"])  # all of (last, next] unless the top-N stopped among rows tied at next
        return _position(ready, "hi", plan.position), _position(ready, "lo", plan.position), \
            rows if rows < plan.maxstep else None

    def bounds(self, last, now: datetime) -> tuple[list[Freshness], Gate, dict | None]:
        """The dependencies' freshness, the gate, and the first ``maxstep`` ready rows (None: blocked).

        A source's freshness is asked once per run (one query for all sources): it only grows,
        so a value kept from an earlier step can only make a step smaller, never wrong. While it
        is asked, a second thread looks the rows up to the other limits (delay, the state store's
        dependencies); they are the step's rows when the last of them is older than every
        source's time (a backlog), otherwise they are looked up again below the sources' time."""
        plan = self.plan
        early, others = None, gate(_naive(now), plan.delay_seconds,
                                   [self.freshness(d) for d in plan.depends_on if d.kind != "source"])
        if self.source_times is None and plan.freshness_sql and not others.blocked:
            with ThreadPoolExecutor(1) as pool:
                looked_up = pool.submit(self.ready_rows, last, others.upto)
                self.freshness(next(d for d in plan.depends_on if d.freshness_sql))  # asks every source
                early = looked_up.result()
        freshness = [self.freshness(d) for d in plan.depends_on]
        gate_ = gate(_naive(now), plan.delay_seconds, freshness)
        if gate_.blocked:
            return freshness, gate_, None
        if early is not None and _all_before(early, gate_.upto, plan.position):
            return freshness, gate_, early
        return freshness, gate_, self.ready_rows(last, gate_.upto)

    def ready_rows(self, last, upto: datetime) -> dict:
        """Count, first and last position of the first ``maxstep`` rows after ``last`` older than ``upto``."""
        args = {**_bind(self.plan.markers("last"), last), "upto": _text(upto)}
        return self.spark.sql(self.plan.next_sql, args=args).collect()[0].asDict()

    def range(self, last, upto: str) -> dict:
        args = {**_bind(self.plan.markers("last"), last), "upto": upto}
        return self.spark.sql(self.plan.range_sql, args=args).collect()[0].asDict()

    def freshness(self, dep) -> Freshness:
        label = dep.label()
        if dep.kind == "source":
            if self.source_times is None:
                row = self.spark.sql(self.plan.freshness_sql).collect()[0]
                sources = [d.label() for d in self.plan.depends_on if d.freshness_sql]
                self.source_times = {k: Freshness(k, _parse(v), "no rows yet") for k, v in zip(sources, row)}
            return self.source_times[label]
        if dep.kind == "fact":
            offset = self.store.get(dep.name)
            when = _time_of(offset.last) if offset and offset.last else None
            return Freshness(label, when, "never run" if not offset or not offset.last else "position has no time")
        return _mv_freshness(label, dep.name, self.store.offsets())

    def sql(self, text: str, params: dict) -> None:
        self.spark.sql(text, args=_args(text, params))

    def write(self, params: dict) -> tuple[int, dict] | None:
        """Run ``plan.insert`` with the step's rows and null counts observed while it writes
        (Spark's observed metrics, no second pass); None when Spark did not deliver them."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        rows = self.spark.sql(self.plan.step, args=_args(self.plan.step, params))
        columns = [c for c in rows.columns if c != STEP_COLUMN]
        observation = Observation(f"mvflow_step_{uuid.uuid4().hex}")
        metrics = [F.count(F.lit(1)).alias("m0")] + [
            F.count_if(F.col(quoted(c)).isNull()).alias(f"m{i}") for i, c in enumerate(columns, 1)]
        self.spark.sql(self.plan.insert_observed, args=_args(self.plan.insert_observed, params),
                       rows=rows.observe(observation, *metrics), step=params["step"])
        # Spark 4 completes the observation when the command returns; never block on one it did not
        values = observed(observation)  # classic or Spark Connect
        if values is None:
            return None
        return int(values["m0"]), {c: values[f"m{i}"] for i, c in enumerate(columns, 1)}

    def stats(self, params: dict) -> tuple[int, dict]:
        """Rows and null counts per column of the written step, read back from the table."""
        text = self.plan.stats_sql or stats_query(self.plan.relation, self.spark.table(self.plan.relation).columns,
                                                  self.plan.written)
        row = self.spark.sql(text, args=_args(text, params)).collect()[0]
        return int(row[0]), dict(zip(row.__fields__[1:], row[1:]))


def ready_at(first_pending: datetime | None, delay_seconds: int, freshness: list[Freshness]) -> datetime | None:
    """When time alone can make the oldest pending row ready, if the dependencies stay as they
    are: ``now - delay`` must pass it; a dependency not past it blocks it until it moves (None).

    >>> row = datetime(2026, 1, 1, 12, 0)
    >>> ready_at(row, 60, [Freshness("stage.payments", datetime(2026, 1, 1, 12, 5))])
    datetime.datetime(2026, 1, 1, 12, 1)
    >>> ready_at(row, 60, [Freshness("stage.payments", datetime(2026, 1, 1, 11, 0))]) is None
    True
    """
    if first_pending is None or any(f.time is not None and f.time <= first_pending for f in freshness):
        return None
    return first_pending + timedelta(seconds=delay_seconds)


def _mv_freshness(label: str, name: str, offsets: list[Offset]) -> Freshness:
    """An MV is as fresh as the newest natural time its inputs' committed positions reached
    (topics ``<mv>:<input>``); with no committed input it was never refreshed."""
    inputs = [o for o in offsets if o.topic.startswith(name + ":") and o.last is not None]
    if not inputs:
        return Freshness(label, None, "never refreshed")
    times = [t for t in (_time_of(o.last) for o in inputs) if t is not None]
    if times:
        return Freshness(label, max(times))
    runs = [o.run for o in inputs if o.run is not None]
    return Freshness(label, _naive(max(runs)) if runs else None, "never refreshed")


def _all_before(ready: dict, upto: datetime, position) -> bool:
    """Whether every row of ``ready`` (ordered by position, time first) is older than ``upto``:
    then the first ``maxstep`` rows below a later bound are also the first ones below ``upto``."""
    if not ready["rows"]:
        return True
    newest = _time_of(_position(ready, "hi", position))
    return newest is not None and newest < upto


def _args(text: str, params: dict) -> dict | None:
    """The parameters whose markers ``text`` holds (Spark refuses unused ones in some statements)."""
    return {k: v for k, v in params.items() if f":{k}" in text} or None


def _position(row: dict, prefix: str, position) -> tuple:
    return tuple(row[f"{prefix}_{c}"] for c in position)


def bind_range(plan: FactPlan, last, next_) -> dict:
    """Parameters of the step SELECT for ``(last, next]`` (``last`` None: from the start)."""
    return {**_bind(plan.markers("last"), last), **_bind(plan.markers("next"), next_)}


def _bind(markers: list[str], position) -> dict:
    values = position if position is not None else (None,) * len(markers)
    return dict(zip(markers, values))


def _naive(value: datetime) -> datetime:
    """Natural time in Spark's session zone (UTC) without tzinfo, as positions are."""
    return value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value


def _text(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def _parse(value) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def _time_of(position) -> datetime | None:
    return _parse(position[0]) if position else None


def _show(position) -> str:
    return "start" if position is None else ", ".join(str(v) for v in position)

