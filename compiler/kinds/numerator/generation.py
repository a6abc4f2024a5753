"""Running ``numerator`` models: one generation on Spark and the state store.

For one numerator (its topic is the model's name; ``plan.py`` has the statements):

1. take the topic's lease (``LeaseHeld`` names the live holder): its fencing token names this
   build's tables, so a stale writer and the one that took its lease over never write the same table;
2. make sure the view reads the published state (``last``): a crash may have come between a
   commit and the view's swap;
3. snapshot the input's key tuples with their shard; decide (``decisions.py``): nothing changed,
   append, rebuild or re-shard;
4. write ``next`` = the version being built, build the new state table, check its invariants;
5. commit ``last = next`` (fenced: a writer whose lease was taken over is refused here, so it never
   publishes), point the view at the committed state, then drop the builds that are neither the
   published state nor its predecessor (older than this build only: newer ones are a newer holder's).

A crashed generation leaves ``next`` ahead of ``last``; the next run plans again from ``last`` and,
given the same input, builds the same ids (new keys are numbered in key order). ``phase`` is called
at the named points (``compiler.phases.NUMERATOR_PHASES``) so tests can crash there.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

from ... import watch
from ...errors import Problem, RunError
from ...failures import running_statement
from ...leases import kept
from ...phases import PhaseHook, no_phase
from ...state import Lease, Offset, StateStore, StepLogRow, default_holder, open_state_store
from ...table_format import VIEW, describe_table, provider_of, readable_view
from ..statements import bound, timed
from .decisions import FIRST, Generation, ShardCounts, message, with_counts, without_counts
from .plan import NumeratorPlan, build_of, input_table, numerator, state_table
from .version import Position

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ...manifest import Manifest, Model
    from ...run import Result

_PUBLISHED = re.compile(r"__mvflow_state_(\d+)\b")


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class GenerationOptions:
    rebuild: bool = False  # ``--rebuild-state``: compact the state (a new V) in this generation
    fresh: bool = False  # ``--full-refresh``: a new state from the input alone (new ids)
    file_check: bool = True  # first ask compiler.watch whether an input file moved, without Spark
    lease_ttl_seconds: float = 600.0
    holder: str = field(default_factory=default_holder)
    clock: Callable[[], datetime] = utc_now
    phase: PhaseHook = no_phase


def numerator_runner(store: StateStore | None, options: GenerationOptions):
    """A ``run_models`` runner for the ``numerator`` kind (``store`` None: the target's state store)."""

    def runner(spark: "SparkSession", manifest: "Manifest", model: "Model") -> "Result":
        chosen = store or open_state_store(manifest.project.target(manifest.target).state)
        return run_numerator(spark, model, chosen, options)

    return runner


def run_numerator(spark: "SparkSession", model: "Model", store: StateStore, options: GenerationOptions) -> "Result":
    """Build one generation of a numerator model (or find that its input changes nothing). With
    ``file_check``, first ask ``compiler.watch`` whether an input file moved: if none did since a
    run found the input changed nothing or built from it, Spark is not asked."""

    def work(result: "Result") -> None:
        plan = numerator(model)
        spec = watch_spec(plan, model)
        if options.file_check and not (options.rebuild or options.fresh):
            waiting = waiting_words(spec, store, options.clock())
            if waiting is not None:  # decided from the state store and file listings alone
                offset = store.get(plan.topic)
                result.rows, result.message = (offset.rows if offset is not None else 0), waiting
                return
        observed = watch.observe(spark, store, spec)  # before the input is read
        lease = store.acquire(plan.topic, options.holder, options.lease_ttl_seconds, options.clock())
        try:
            with kept(store, lambda: [lease], options.lease_ttl_seconds, options.clock):
                _Generation(spark, plan, store, lease, options, result).run()
        finally:
            store.release(lease)
        watch.record(spark, store, spec, observed)

    return timed(model, work)


def watch_spec(plan: NumeratorPlan, model: "Model") -> watch.Spec:
    """A numerator waits on the tables its SELECT reads."""
    return watch.Spec(plan.topic, watch.sql_hash(repr(plan)), tuple(sorted({table for table, _ in model.tables_read})))


def waiting_words(spec: watch.Spec, store: StateStore, now: datetime) -> str | None:
    """Why the numerator has nothing to do, without Spark: no input file moved since a run read
    its input (which then changed nothing, or was numbered); else None."""
    seen = watch.is_idle(store, spec, now)
    if seen is None:
        return None
    offset = store.get(spec.topic)
    published = Position.from_list(offset.last) if offset is not None and offset.last else None
    return f"up to date (no input file moved since state {published.version if published else '-'})"


class _Generation:
    def __init__(self, spark: "SparkSession", plan: NumeratorPlan, store: StateStore, lease: Lease,
                 options: GenerationOptions, result: "Result"):
        self.spark, self.plan, self.store, self.lease = spark, plan, store, lease
        self.options, self.result = options, result
        self.phase = options.phase
        self.build = lease.token

    def run(self) -> None:
        plan, store = self.plan, self.store
        self.phase("numerator:leased")
        offset = store.get(plan.topic)
        published = Position.from_list(offset.last)
        self.prepare(published)
        params = {"input_table": input_table(plan.relation, self.build), "state_table": state_table(plan.relation, self.build),
                  "previous_table": state_table(plan.relation, published.build) if published else ""}
        self.replace("input_table", plan.input, params)
        self.phase("numerator:input-written")
        generation = self.decide(published, params)
        self.phase("numerator:planned")
        if generation.builds:
            self.publish_new(published, generation, params)
        else:
            self.keep(offset, published, generation)
        self.sql(plan.drop, {"table": params["input_table"]})
        for hook in plan.after:
            self.sql(hook, params)
        self.clean(Position.from_list(store.get(plan.topic).last))
        self.phase("numerator:cleaned")

    def prepare(self, published: Position | None) -> None:
        """The schema, the view reading the published state, the before hooks."""
        plan = self.plan
        if not self.spark.catalog.databaseExists(plan.relation.split(".")[0]):
            self.sql(plan.create_schema, {})
        self.refuse_foreign(published)
        if published is not None and not self.options.fresh:
            self.point_view(published)
        for hook in plan.before:
            self.sql(hook, {})

    def refuse_foreign(self, published: Position | None) -> None:
        """A name held by another table, a state the store does not know or a lost state table stop
        the run (``--full-refresh`` starts a new state over the last two)."""
        plan, fresh = self.plan, self.options.fresh
        provider = provider_of(describe_table(self.spark, plan.relation))
        problem = None
        if provider not in (None, VIEW):
            problem = Problem(f"numerator '{plan.topic}': {plan.relation} is a {provider} table; a numerator publishes a view there",
                              plan.path, hint=f"drop or rename {plan.relation} (a model of another kind before?), then run again",
                              code="numerator-relation")
        elif published is None and not fresh and _published_build(self.spark, plan.relation) is not None:
            problem = Problem(f"numerator '{plan.topic}': {plan.relation} reads a state the state store knows nothing of",
                              plan.path, hint="point the target at the state store that built it, or start a new state from "
                              f"the input alone (new ids): mvflow run --full-refresh -s {plan.topic}", code="numerator-no-state")
        elif published is not None and not fresh and not self.spark.catalog.tableExists(state_table(plan.relation, published.build)):
            problem = Problem(f"numerator '{plan.topic}': the published state {published.version} "
                              f"({state_table(plan.relation, published.build)}) is missing", plan.path,
                              hint="restore the table, or start a new state from the input alone (new ids): "
                              f"mvflow run --full-refresh -s {plan.topic}", code="numerator-state-missing")
        if problem is not None:
            raise RunError(problem)

    def decide(self, published: Position | None, params: dict) -> Generation:
        settings = self.plan.settings
        decided = without_counts(published, settings, self.options.rebuild, self.options.fresh)
        if decided is not None:
            return decided
        args = {**params, "generation": published.version.generation + 1}
        rows = self.sql(self.plan.counts, args).collect()
        return with_counts(published, settings, [ShardCounts(**row.asDict()) for row in rows])

    def publish_new(self, published: Position | None, generation: Generation, params: dict) -> None:
        """Build, check, commit (fenced), then point the view at the committed state."""
        plan, clock = self.plan, self.options.clock
        began = time.monotonic()
        position = Position(generation.version, self.build, published.build if published else None,
                            plan.settings.scheme.fingerprint)
        self.store.set_next(self.lease, position.to_list(), clock())
        self.phase("numerator:next-written")
        build = plan.first if generation.action == FIRST else plan.rebuild if generation.renumbers else plan.append
        self.replace("state_table", build, {**params, "generation": generation.version.generation})
        self.phase("numerator:state-written")
        present = self.check(generation, params)
        self.phase("numerator:checked")
        text = message(published, generation, present)
        self.store.commit(self.lease, position.to_list(), present, text, clock())
        self.phase("numerator:committed")
        self.point_view(position)
        self.phase("numerator:published")
        self.store.log_step(StepLogRow(
            plan.topic, clock(), present, last=published.to_list() if published else None, next=position.to_list(),
            seconds=round(time.monotonic() - began, 3), consumer=self.lease.holder, token=self.lease.token,
            strategy=generation.action, detail={"version": str(generation.version), "new_ids": generation.new_ids,
                                                "reused": generation.reused, "gone": generation.gone}))
        self.result.rows, self.result.message = present, text

    def keep(self, offset: Offset, published: Position, generation: Generation) -> None:
        """Nothing to build: say so (a crashed try's ``next`` is cleared by committing ``last`` again)."""
        text = message(published, generation, offset.rows)
        if offset.in_flight:
            self.store.commit(self.lease, offset.last, offset.rows, text, self.options.clock())
        else:
            self.store.set_state(self.lease, text, self.options.clock())
        self.result.rows, self.result.message = offset.rows, text

    def check(self, generation: Generation, params: dict) -> int:
        """The new state's invariants (``plan.check``); its present keys. A broken one is a RunError
        and nothing is committed."""
        row = self.sql(self.plan.check, params).collect()[0].asDict()
        broken = [f"{row[k]:,} {words}" for k, words in (
            ("keys_twice", "keys numbered twice"), ("ids_twice", "(shard_id, doc_id) given twice"),
            ("out_of_range", "ids or shards out of range")) if row[k]]
        if row["present"] != row["input_keys"]:
            broken.append(f"{row['present']:,} present keys for {row['input_keys']:,} input keys")
        if generation.renumbers and row["sparse_shards"]:
            broken.append(f"{row['sparse_shards']:,} shards not numbered 0..n-1")
        if broken:
            raise RunError(Problem(f"numerator '{self.plan.topic}': the new state {generation.version} is wrong: "
                                   + "; ".join(broken), self.plan.path, code="numerator-check",
                                   hint="nothing was committed; report this with the model and its input"))
        return int(row["present"])

    def point_view(self, position: Position) -> None:
        """Point the view at ``position``'s state, then at whatever ``last`` says now, until they agree:
        a writer that lost its lease after its commit cannot leave the view on an older state."""
        for _ in range(5):
            if _published_build(self.spark, self.plan.relation) != position.build:
                running_statement(self.plan.publish)
                self.spark.sql(self.plan.publish, build=position.build)
                self.spark.sql(readable_view(self.plan.relation))
            latest = Position.from_list(self.store.get(self.plan.topic).last)
            if latest is None or latest.build == position.build:
                return
            position = latest

    def clean(self, published: Position | None) -> None:
        """Drop this model's builds older than this one, but the published state and its predecessor."""
        keep = {published.build, published.previous} if published else set()
        schema = self.plan.relation.split(".")[0]
        for row in self.sql(self.plan.builds, {}).collect():
            found = build_of(row["tableName"])
            if found and found[1] < self.build and not (found[0] == "state" and found[1] in keep):
                self.sql(self.plan.drop, {"table": f"{schema}.{row['tableName']}"})

    def replace(self, marker: str, create: str, params: dict) -> None:
        """(Re)create this build's table ``params[marker]`` (a retry of this build replaces its own try)."""
        self.sql(self.plan.drop, {"table": params[marker]})
        self.sql(create, params)

    def sql(self, text: str, params: dict):
        running_statement(text)
        return self.spark.sql(text, args=bound(text, params))


def _published_build(spark: "SparkSession", relation: str) -> int | None:
    """The build whose state the model's view reads now (None: no view)."""
    info = describe_table(spark, relation)
    if provider_of(info) != VIEW:
        return None
    found = _PUBLISHED.search(info.get("View Text", "") or info.get("View Original Text", ""))
    return int(found.group(1)) if found else None
