"""The ``view`` kind: ``CREATE OR REPLACE VIEW`` over the model's SELECT."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..table_format import readable_view
from . import unchanged
from .base import ModelKind, ModelRunner
from .statements import Statement, execute, script, timed, wrapped

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..manifest import Manifest, Model
    from ..run import Result, RunOptions


@dataclass(frozen=True)
class ViewKind(ModelKind):
    name: ClassVar[str] = "view"

    def statements(self, model: "Model") -> list[Statement]:
        return wrapped(model, [Statement("replace the view", f"CREATE OR REPLACE VIEW {model.relation} AS\n{model.select_sql}"),
                               Statement("readable by a Spark without Delta Lake", readable_view(model.relation))])

    def runner(self, options: "RunOptions") -> ModelRunner:
        return unchanged.skipping(run_view, options)

    def next_run(self, manifest, model, store, now) -> tuple[str, str]:
        return unchanged.next_run(manifest, model, store, now, ("run", "an input moved, or the view was not made yet"))

    def watched(self, model: "Model") -> None:
        return None

    def run_files(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        return {f"{model.name}.sql": script(model, self.statements(model))}


def run_view(spark: "SparkSession", manifest: "Manifest", model: "Model") -> "Result":
    return timed(model, lambda result: execute(spark, model.kind.statements(model), {}))
