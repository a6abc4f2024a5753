"""What every model kind is: its config as a frozen dataclass (``config(materialized=..., ...)``)
and the hooks the rest of mvflow asks instead of comparing kind names.

A kind answers, for one of its models:

- ``runner(options)``: how ``mvflow run`` runs it (``compiler.run.run_models`` calls it);
- ``run_files(manifest, model)``: what ``compile`` writes under ``target/run/`` (the text that runs);
- ``expected(manifest, model, store)``: what ``mvflow verify`` compares its stored rows with;
- ``derived_sql(manifest, model)``: the queries derived for it, shown in ``manifest.json`` and the docs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, ClassVar

if TYPE_CHECKING:
    from datetime import datetime

    from pyspark.sql import SparkSession

    from ..manifest import Manifest, Model
    from ..run import Result, RunOptions
    from ..state import StateStore
    from ..verify import Expected

#: Config keys every kind accepts (besides its own fields).
COMMON_KEYS = frozenset({"materialized", "schema", "database", "alias", "tags", "description", "enabled", "before", "after",
                         "table_format", "full_refresh"})

ModelRunner = Callable[["SparkSession", "Manifest", "Model"], "Result"]


class KindError(ValueError):
    """An invalid kind or kind option; the caller adds file and line."""

    def __init__(self, message: str, hint: str, code: str, key: str = "materialized"):
        super().__init__(message)
        self.hint = hint
        self.code = code
        self.key = key  # the config key at fault, so the caller can point at its line
        self.errors: list[KindError] = [self]  # every problem of the config, this one first


@dataclass(frozen=True)
class ModelKind:
    name: ClassVar[str]
    #: fields whose change alters the data (a breaking change for incremental kinds)
    breaking: ClassVar[tuple[str, ...]] = ()
    #: fields that change how or when it runs, not what it produces (the catalog leaves them out)
    operational: ClassVar[tuple[str, ...]] = ()
    #: what a breaking change (``compiler.catalog``) does to it: ``run`` (it is rebuilt at every run
    #: anyway), ``rebuild`` (a full refresh, never old and new rows mixed) or ``refuse`` (its history
    #: may not be recomputable: the user decides)
    on_breaking: ClassVar[str] = "run"
    #: it produces a table or view of its own (the catalog records its versions)
    produces: ClassVar[bool] = True
    #: its run files are a folder ``target/run/<model>/`` (else one file ``target/run/<model>.sql``)
    run_folder: ClassVar[bool] = False
    #: integer fields for which 0 is a valid value (others must be positive)
    zero_ok: ClassVar[frozenset[str]] = frozenset()
    #: fields inherited from the kind it extends that it does not take as config
    not_config: ClassVar[frozenset[str]] = frozenset()

    @property
    def is_incremental(self) -> bool:
        return False

    @property
    def verifiable(self) -> bool:
        """``mvflow verify`` compares its rows with ``expected``."""
        return self.is_incremental

    def to_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"name": self.name, **{k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in values.items()}}

    @classmethod
    def check_config(cls, values: dict[str, Any]) -> list[KindError]:
        """Problems across the config's coerced ``values`` (field → value) that no single value shows."""
        return []

    def output_columns(self, select_columns: list[str] | None) -> list[str] | None:
        """The columns the model's table or view holds, given its SELECT's (None: unknown); a
        SELECT the kind cannot store raises KindError."""
        return select_columns

    def runner(self, options: "RunOptions") -> ModelRunner:
        raise NotImplementedError

    def run_files(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        """What ``compile`` writes under ``target/run/``, file name → text: with ``run_folder`` the
        files of ``<model>/`` (files no longer written are removed), else the one ``<model>.sql``."""
        return {}

    def expected(self, manifest: "Manifest", model: "Model", store: "StateStore | None") -> "Expected | None":
        """What the model's stored rows must equal (None: the kind has nothing to verify)."""
        return None

    def derived_sql(self, manifest: "Manifest", model: "Model") -> dict[str, str] | None:
        return None

    def next_run(self, manifest: "Manifest", model: "Model", store: "StateStore", now: "datetime") -> tuple[str, str]:
        """What the next ``mvflow run`` does to the model when its definition is unchanged (``mvflow
        plan``, no Spark): an action word and why."""
        return "run", f"a {self.name} runs at every run"

    def watched(self, model: "Model") -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """What a reader of the model watches to know it did not change (``compiler.kinds.unchanged``):
        the tables holding its rows and the state-store topics that move when they change; None
        for a view of its inputs (a view, an ephemeral model), whose readers watch those."""
        return (model.relation,), ()

    def output_types(self, spark: "SparkSession", model: "Model") -> dict[str, str] | None:
        """Column → Spark type of what the model produces, from Spark's analysis of its SELECT (no
        job runs); None when Spark cannot analyse it now (e.g. an input is missing)."""
        try:
            return {f.name: f.dataType.simpleString() for f in spark.sql(model.select_sql).schema.fields}
        except Exception:  # noqa: BLE001 - the model's own run reports what is wrong
            return None
