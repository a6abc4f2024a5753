"""Kinds run as a fixed sequence of statements (``view``, ``table``): the sequence, its
reviewable script under ``target/run/<model>.sql`` and its execution.

Pure but for ``execute``: the statements are text with named parameter markers
(``:build_table``) bound at run time, so the text written to ``target/run/`` is exactly the
text executed.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

from ..table_format import DELTA, VIEW

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..manifest import Model
    from ..run import Result

_LAYOUT_WORDS = {VIEW: "a view", DELTA: "a Delta table"}


@dataclass(frozen=True)
class Statement:
    purpose: str
    sql: str
    slot: str | None = None  # run only when this slot is the one being built
    layout: str | None = None  # run only when the model's name holds this now (``table_format.table_provider``)


def wrapped(model: "Model", body: list[Statement]) -> list[Statement]:
    """``body`` after making sure the schema exists and between the model's ``before``/``after`` hooks."""
    create_schema = Statement("make sure the schema exists", f"CREATE DATABASE IF NOT EXISTS {model.schema}")
    before = [Statement("before hook", sql) for sql in hooks(model.config.get("before"))]
    after = [Statement("after hook", sql) for sql in hooks(model.config.get("after"))]
    return [create_schema, *before, *body, *after]


def hooks(value: object) -> list[str]:
    """A ``before``/``after`` config value as a list of statements."""
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]  # type: ignore[list-item]


def bound(sql: str, params: dict) -> dict | None:
    """The parameters whose markers ``sql`` holds (Spark refuses unused ones in some statements).

    >>> bound("SELECT * FROM IDENTIFIER(:state_table) WHERE g = :generation", {"state": 1, "state_table": "t", "generation": 2})
    {'state_table': 't', 'generation': 2}
    >>> bound("SELECT 1", {"a": 1}) is None
    True
    """
    return {k: v for k, v in params.items() if re.search(rf":{re.escape(k)}\b", sql)} or None


def script(model: "Model", items: list[Statement], notes: list[str] = ()) -> str:
    """The reviewable text of a statement sequence (``target/run/<model>.sql``)."""
    lines = [f"-- mvflow run: {model.name} ({model.kind.name}) from {model.path}", *(f"-- {n}" for n in notes)]
    for item in items:
        when = f" (only when {model.relation} is {_LAYOUT_WORDS[item.layout]} now)" if item.layout else ""
        lines += ["", f"-- {item.purpose}{when}", item.sql.rstrip() + ";"]
    return "\n".join(lines) + "\n"


def execute(spark: "SparkSession", items: list[Statement], params: dict[str, str], slot: str | None = None,
            layout: str | None = None) -> None:
    """Run the statements that apply to ``slot`` and ``layout``, binding ``params`` by name."""
    from ..failures import running_statement

    for item in items:
        if (item.slot is not None and item.slot != slot) or (item.layout is not None and item.layout != layout):
            continue
        running_statement(item.sql, item.purpose)
        spark.sql(item.sql, args=bound(item.sql, params))


def timed(model: "Model", work: Callable[["Result"], None]) -> "Result":
    """Run ``work`` on the model's result; a failure becomes an error result (one line)."""
    from ..run import Result, _spark_message

    started = time.monotonic()
    result = Result(model.name, model.kind.name, "success", started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    try:
        work(result)
    except Exception as exc:  # noqa: BLE001 - a failing model must not stop the others
        result.status = "error"
        result.message = _spark_message(exc)
    result.seconds = time.monotonic() - started
    return result
