"""The ``table`` kind: a full rebuild of the model's SELECT at every run where an input moved
(``compiler.kinds.unchanged``).

In the parquet format a table is built blue/green: two physical slots ``<name>__mvflow_a`` /
``__mvflow_b`` and a view under the model's name. A build fills the slot the view does not read,
then replaces the view: readers see the old rows or the new rows, never a half-built or missing
table (dbt-spark drops and recreates). The previous slot stays until the next build, so queries
that started before the swap finish on it.

In the delta format the model's name is the table itself, rebuilt by one ``CREATE OR REPLACE
TABLE … AS SELECT``: one Delta commit, so readers see the old rows or the new ones, and queries
that started before it finish on the old version's files.

Switching formats: a statement with a ``layout`` runs only when the name holds that layout now
(``view``: the parquet layout's view, or a former view model; ``delta``: a Delta table). Neither
Delta nor a view can replace the other in place, so the old one is dropped right before the new
one is made: readers miss the name for that moment, once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..table_format import DELTA, VIEW, describe_table, provider_of, readable_view, using
from . import unchanged
from .base import ModelKind, ModelRunner
from .statements import Statement, execute, script, timed, wrapped

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..manifest import Manifest, Model
    from ..publish.spec import PublishSpec
    from ..run import Result, RunOptions

SLOTS = ("a", "b")


@dataclass(frozen=True)
class TableKind(ModelKind):
    """Full rebuild: parquet into the idle slot, then an atomic swap of the view readers query;
    delta as one ``CREATE OR REPLACE TABLE … AS SELECT``."""

    name: ClassVar[str] = "table"
    operational: ClassVar[tuple[str, ...]] = ("cluster_by", "publish")
    partition_by: tuple[str, ...] = ()
    #: the rows' unique key, so that mv models may join it (they diff it like a dictionary), and the
    #: published table's primary key
    unique_key: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()  # Delta liquid clustering columns (``table_format.using``)
    #: a serving store's table that each build is published to in full (``compiler.publish``)
    publish: "PublishSpec | None" = None

    def statements(self, model: "Model") -> list[Statement]:
        return wrapped(model, _delta_body(model) if model.table_format == DELTA else _parquet_body(model))

    def runner(self, options: "RunOptions") -> ModelRunner:
        build = unchanged.skipping(run_table, options)
        return _publishing(build, options) if self.publish is not None else build

    def next_run(self, manifest, model, store, now) -> tuple[str, str]:
        return unchanged.next_run(manifest, model, store, now, ("rebuild", "an input moved, or it was not built yet"))

    def watched(self, model: "Model") -> tuple[tuple[str, ...], tuple[str, ...]]:
        if model.table_format == DELTA:
            return (model.relation,), ()
        return tuple(slot_table(model.relation, slot) for slot in SLOTS), ()  # the name is a view over one of them

    def run_files(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        if model.table_format == DELTA:
            notes = [f"table format delta: {model.relation} is a Delta table"]
        else:
            slots = " or ".join(slot_table(model.relation, s) for s in SLOTS)
            notes = [f"table format parquet: {model.relation} is a view over the slot built last",
                     f":build_table = the slot {model.relation} does not read now ({slots})"]
        return {f"{model.name}.sql": script(model, self.statements(model), notes)}


def slot_table(relation: str, slot: str) -> str:
    """Physical table of one blue/green slot.

    >>> slot_table("marts.shop_stats", "a")
    'marts.shop_stats__mvflow_a'
    """
    return f"{relation}__mvflow_{slot}"


def _delta_body(model: "Model") -> list[Statement]:
    return [
        Statement("switching from the parquet layout: drop the view over its slots", f"DROP VIEW IF EXISTS {model.relation}",
                  layout=VIEW),
        Statement("build the new version and replace the table in one Delta commit (readers see the old rows or the new)",
                  f"CREATE OR REPLACE TABLE {model.relation}\n{using(DELTA, cluster_by=model.kind.cluster_by)}"
                  f"{_partitioned(model)}\nAS\n{model.select_sql}"),
        *([Statement("cluster the new version's files by cluster_by (CREATE … CLUSTER BY writes them unclustered)",
                     f"OPTIMIZE {model.relation}")] if model.kind.cluster_by else []),
        *(Statement(f"switching from the parquet layout: drop its slot {slot}",
                    f"DROP TABLE IF EXISTS {slot_table(model.relation, slot)}", layout=VIEW) for slot in SLOTS),
    ]


def _parquet_body(model: "Model") -> list[Statement]:
    return [
        Statement("clear the idle slot (:build_table is the slot the view does not read now)",
                  "DROP TABLE IF EXISTS IDENTIFIER(:build_table)"),
        Statement("build the new version in the idle slot",
                  f"CREATE TABLE IDENTIFIER(:build_table)\nUSING parquet{_partitioned(model)}\nAS\n{model.select_sql}"),
        Statement("switching from the delta layout: drop the Delta table, which a view cannot replace",
                  f"DROP TABLE IF EXISTS {model.relation}", layout=DELTA),
        # A view's text holds no parameter markers: one swap statement per slot, by name.
        *(statement for slot in SLOTS for statement in (
            Statement(f"swap: point the model's view at the new slot (atomic in the metastore), when building slot {slot}",
                      f"CREATE OR REPLACE VIEW {model.relation} AS\nSELECT * FROM {slot_table(model.relation, slot)}", slot),
            Statement("readable by a Spark without Delta Lake", readable_view(model.relation), slot))),
    ]


def _partitioned(model: "Model") -> str:
    return f"\nPARTITIONED BY ({', '.join(model.kind.partition_by)})" if model.kind.partition_by else ""


def run_table(spark: "SparkSession", manifest: "Manifest", model: "Model") -> "Result":
    def build(result: "Result") -> None:
        layout, slot = table_layout(spark, model.relation)
        params = {} if model.table_format == DELTA else {"build_table": slot_table(model.relation, slot)}
        execute(spark, model.kind.statements(model), params, slot, layout)
        result.rows = spark.table(params.get("build_table", model.relation)).count()

    return timed(model, build)


def _publishing(build: ModelRunner, options: "RunOptions") -> ModelRunner:
    """``build``, then the table's publish when its last build is not published yet."""

    def run(spark: "SparkSession", manifest: "Manifest", model: "Model") -> "Result":
        from ..publish.publisher import publish_after, publish_table

        result = build(spark, manifest, model)
        if result.status == "success":
            store = unchanged.state_store(options, manifest)
            publish_after(result, lambda: publish_table(spark, manifest, model, store, holder=options.holder,
                                                        phase=options.phase, echo=options.echo))
        return result

    return run


def table_layout(spark: "SparkSession", relation: str) -> tuple[str | None, str]:
    """What a table model's name holds now (None: nothing, ``view``, ``delta``) and the
    blue/green slot the parquet layout builds next: the one its view does not read ("a" first)."""
    info = describe_table(spark, relation)
    provider = provider_of(info)
    if provider is None:
        return None, SLOTS[0]
    if provider == DELTA:
        return DELTA, SLOTS[0]
    if provider != VIEW:
        raise RuntimeError(f"{relation} exists and is not a view or Delta table mvflow manages: drop or rename it first")
    live = re.search(r"__mvflow_([ab])\b", info.get("View Text", ""))
    return VIEW, SLOTS[1] if live and live.group(1) == SLOTS[0] else SLOTS[0]
