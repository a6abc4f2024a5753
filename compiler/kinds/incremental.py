"""The ``incremental`` kind (dbt's): a table built once from the model's SELECT, then grown by
the same SELECT rendered with ``is_incremental()`` true, by ``incremental_strategy``:

=====================  ======================================================================
``append``             ``INSERT INTO`` the new rows (the default, as in dbt-spark)
``insert_overwrite``   ``INSERT OVERWRITE`` the partitions the new rows fall in (``partition_by``),
                       or the whole table without it
``merge``              ``MERGE`` on ``unique_key``: update matched rows, insert the others
                       (Delta only)
=====================  ======================================================================

Both SELECTs are rendered at compile time (``Model.sql`` and ``Model.incremental_sql``) and
both statement sequences are written to ``target/run/``; the runner picks the first build when
the table does not exist or with ``--full-refresh``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..table_format import DELTA, VIEW, describe_table, provider_of, using
from .base import ModelKind, ModelRunner
from .statements import Statement, execute, script, timed, wrapped

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..manifest import Manifest, Model
    from ..run import Result, RunOptions

STRATEGIES = ("append", "insert_overwrite", "merge")


@dataclass(frozen=True)
class IncrementalKind(ModelKind):
    name: ClassVar[str] = "incremental"
    incremental_strategy: str = "append"
    unique_key: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()

    def next_run(self, manifest, model, store, now) -> tuple[str, str]:
        return self.incremental_strategy.replace("_", " "), "the SELECT with is_incremental() true (the whole SELECT if the table is missing)"

    def first_build(self, model: "Model") -> list[Statement]:
        partitioned = f"\nPARTITIONED BY ({', '.join(self.partition_by)})" if self.partition_by else ""
        return wrapped(model, [
            Statement("a view of this name (an earlier view model) cannot be replaced by a table: drop it",
                      f"DROP VIEW IF EXISTS {model.relation}", layout=VIEW),
            Statement("drop what an earlier full build left", f"DROP TABLE IF EXISTS {model.relation}"),
            Statement("build the table from the whole SELECT",
                      f"CREATE TABLE {model.relation}\n{using(model.table_format)}{partitioned}\nAS\n{model.select_sql}"),
        ])

    def incremental(self, model: "Model") -> list[Statement]:
        new = "(\n" + _indented(model.incremental_sql) + "\n) AS mvflow_new"
        columns = ", ".join(model.columns) if model.columns else None
        select = f"SELECT {columns or '*'} FROM {new}"
        target = f"{model.relation} ({columns})" if columns else model.relation
        if self.incremental_strategy == "merge":
            on = " AND ".join(f"t.{k} = s.{k}" for k in self.unique_key) or "FALSE"
            body = Statement("merge the new rows on unique_key (update matched rows, insert the others)",
                             f"MERGE INTO {model.relation} AS t\nUSING {new.replace('mvflow_new', 's')}\nON {on}\n"
                             "WHEN MATCHED THEN UPDATE SET *\nWHEN NOT MATCHED THEN INSERT *")
        elif self.incremental_strategy == "insert_overwrite":
            what = "the partitions the new rows fall in" if self.partition_by else "the whole table (no partition_by)"
            body = Statement(f"overwrite {what}", f"INSERT OVERWRITE TABLE {target}\n{select}")
        else:
            body = Statement("append the new rows", f"INSERT INTO {target}\n{select}")
        return wrapped(model, [body])

    def runner(self, options: "RunOptions") -> ModelRunner:
        return lambda spark, manifest, model: run_incremental(spark, model, options.full_refresh)

    def run_files(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        first = script(model, self.first_build(model), ["the first build: when the table does not exist, or with --full-refresh"])
        later = script(model, self.incremental(model), [f"later runs: {self.incremental_strategy} of the SELECT rendered "
                                                        "with is_incremental() true"])
        return {f"{model.name}.sql": first + "\n" + later.split("\n", 1)[1]}


def _indented(sql: str) -> str:
    return "\n".join("  " + line if line else line for line in sql.rstrip().splitlines())


def run_incremental(spark: "SparkSession", model: "Model", full_refresh: bool) -> "Result":
    def build(result: "Result") -> None:
        provider = provider_of(describe_table(spark, model.relation))
        kind: IncrementalKind = model.kind  # type: ignore[assignment]
        first = full_refresh or provider in (None, VIEW) or (provider == DELTA) != (model.table_format == DELTA)
        execute(spark, kind.first_build(model) if first else kind.incremental(model), {}, layout=provider)
        result.rows = spark.table(model.relation).count()
        result.message = "first build" if first else kind.incremental_strategy

    return timed(model, build)
