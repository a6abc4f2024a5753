"""The ``fact`` kind: an append-mostly table built in idempotent steps over ``(last, next]``
positions of its main source (DESIGN.md §5).

- ``plan``: compile time: the main source followed through views, the step and bounds queries
  (written under ``target/run/<fact>/``), the dependencies gating each step;
- ``steps``: the runner: gates, ranges, one step at a time, the offsets and the step log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..base import ModelKind, ModelRunner

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ...manifest import Manifest, Model
    from ...run import RunOptions
    from ...state import StateStore
    from ...verify import Expected


ON_SCHEMA_CHANGE = ("fail", "append_new_columns", "rebuild")


@dataclass(frozen=True)
class FactKind(ModelKind):
    """An append-mostly table built in idempotent steps over ``(last, next]`` positions."""

    name: ClassVar[str] = "fact"
    breaking: ClassVar[tuple[str, ...]] = ("source", "partition_by")
    operational: ClassVar[tuple[str, ...]] = ("maxstep", "delay_seconds", "depends_on", "on_schema_change")
    on_breaking: ClassVar[str] = "refuse"
    run_folder: ClassVar[bool] = True
    source: str | None = None
    maxstep: int = 1_000_000
    delay_seconds: int = 0
    depends_on: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    #: a breaking change of its definition (``compiler.catalog``): ``fail`` (the run refuses),
    #: ``append_new_columns`` (new columns appended to the SELECT are added to the table; rows
    #: already written keep what the old definition gave) or ``rebuild`` (a full refresh)
    on_schema_change: str = "fail"

    @property
    def is_incremental(self) -> bool:
        return True

    def runner(self, options: "RunOptions") -> ModelRunner:
        from .steps import StepOptions, fact_runner

        steps = StepOptions(max_steps=options.max_steps, full_refresh=options.full_refresh,
                            file_check=options.file_check, phase=options.phase, stopping=options.stopping)
        if options.holder:
            steps.holder = options.holder
        if options.lease_ttl:
            steps.lease_ttl_seconds = options.lease_ttl
        return fact_runner(options.store, steps, options.echo)

    def watched(self, model: "Model") -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (), (model.name,)  # a fact's rows change only by a committed step: its topic moves

    def next_run(self, manifest, model, store, now) -> tuple[str, str]:
        from .steps import next_run

        return next_run(manifest, model, store, now)

    def run_files(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        from .plan import add_columns_script, bounds_script, fact, step_script

        plan = fact(manifest, model)
        files = {"step.sql": step_script(plan), "bounds.sql": bounds_script(plan)}
        if self.on_schema_change == "append_new_columns":
            files["add_columns.sql"] = add_columns_script(model.relation)
        return files

    def add_columns(self, spark: "SparkSession", model: "Model", columns: list[tuple[str, str]]) -> None:
        """Add ``(name, type)`` columns to the fact's table (``add_columns.sql``): a catalog verdict
        under ``on_schema_change='append_new_columns'``. No table yet: its first step creates it whole."""
        from .plan import add_columns_statement

        if columns and spark.catalog.tableExists(model.relation):
            spark.sql(add_columns_statement(model.relation, ", ".join(f"{name} {type_}" for name, type_ in columns)))

    def expected(self, manifest: "Manifest", model: "Model", store: "StateStore | None") -> "Expected":
        """The fact's SELECT over everything up to the committed position, keyed by its main
        source's primary key (``verify`` tolerates different values: a fact keeps what its
        joined inputs said when the step ran)."""
        from ...verify import Expected
        from .plan import fact
        from .steps import bind_range

        plan = fact(manifest, model)
        key = manifest.sources[plan.source].primary_key
        offset = store.get(plan.topic) if store else None
        if offset is None or offset.last is None:
            return Expected("", key, skipped="no committed step yet: run the model first")
        if not set(key) <= set(model.columns or ()):
            return Expected("", key, skipped=f"its output does not hold the key {', '.join(key)} of {plan.source}")
        late = (f"rows that arrived at or before the committed position after their step (late) are not loaded, and "
                f"mvflow run says how many; mvflow run --full-refresh -s {plan.topic} takes them in")
        return Expected(plan.step, key, bind_range(plan, None, offset.last), tolerate_different=True, missing_why=late)
