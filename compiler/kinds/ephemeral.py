"""The ``ephemeral`` kind (dbt's): no table or view; the models that ``ref()`` it read its SELECT
as a CTE named ``__dbt__cte__<name>`` (``compile.py`` inlines it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from .base import ModelKind, ModelRunner

if TYPE_CHECKING:
    from ..manifest import Model
    from ..run import RunOptions

CTE_PREFIX = "__dbt__cte__"


@dataclass(frozen=True)
class EphemeralKind(ModelKind):
    name: ClassVar[str] = "ephemeral"
    produces: ClassVar[bool] = False

    def runner(self, options: "RunOptions") -> ModelRunner:
        from ..run import Result

        return lambda spark, manifest, model: Result(model.name, self.name, "success", message="ephemeral: nothing to build")

    def watched(self, model: "Model") -> None:
        return None


def cte_name(model_name: str) -> str:
    return f"{CTE_PREFIX}{model_name}"
