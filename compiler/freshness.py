"""``mvflow source freshness``: how long ago each source last received data, judged by its
``freshness`` (dbt's ``warn_after`` / ``error_after``: ``{count: 12, period: hour}``).

The newest time is ``max(loaded_at_field)``, or for an mvflow source without one the newest
value of its first ``position`` column (positions grow with every change). Results go to the
terminal and to ``target/sources.json``; an ``error`` exits 1, as in dbt.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .sources import Source

PERIODS = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass
class Freshness:
    source: str
    status: str  # pass | warn | error | runtime error | no column
    max_loaded_at: str | None = None
    snapshotted_at: str | None = None
    age_seconds: float | None = None
    message: str = ""


def loaded_at(source: "Source") -> str | None:
    """The column telling when a row arrived: dbt's ``loaded_at_field``, else the first position column."""
    return source.loaded_at_field or (source.position[0] if source.position else None)


def freshness_query(source: "Source") -> str | None:
    column = loaded_at(source)
    if column is None:
        return None
    return f"SELECT max({column}) AS max_loaded_at, current_timestamp() AS snapshotted_at FROM {source.id}"


def threshold(rule: Any) -> float | None:
    """Seconds of ``{count: 12, period: hour}`` (None when absent).

    >>> threshold({"count": 12, "period": "hour"}), threshold(None)
    (43200, None)
    """
    if not isinstance(rule, Mapping) or rule.get("count") is None:
        return None
    return int(rule["count"]) * PERIODS[str(rule.get("period", "hour")).rstrip("s")]


def verdict(age_seconds: float, freshness: Mapping[str, Any] | None) -> str:
    """dbt's rule: ``error`` past ``error_after``, else ``warn`` past ``warn_after``, else ``pass``.

    >>> rule = {"warn_after": {"count": 1, "period": "hour"}, "error_after": {"count": 1, "period": "day"}}
    >>> verdict(60, rule), verdict(7200, rule), verdict(200000, rule), verdict(10**9, None)
    ('pass', 'warn', 'error', 'pass')
    """
    rule = freshness or {}
    error, warn = threshold(rule.get("error_after")), threshold(rule.get("warn_after"))
    if error is not None and age_seconds > error:
        return "error"
    if warn is not None and age_seconds > warn:
        return "warn"
    return "pass"


def check(spark: "SparkSession", source: "Source") -> Freshness:
    query = freshness_query(source)
    if query is None:
        return Freshness(source.id, "no column", message="no loaded_at_field and no position column: nothing tells when rows arrived")
    try:
        row = spark.sql(query).collect()[0]
    except Exception as exc:  # noqa: BLE001 - reported per source
        from .failures import describe

        return Freshness(source.id, "runtime error", message=describe(exc))
    newest, now = row["max_loaded_at"], row["snapshotted_at"]
    if newest is None:
        return Freshness(source.id, "error", snapshotted_at=_iso(now), message="the table has no rows")
    if not isinstance(newest, datetime):
        newest = datetime.combine(newest, datetime.min.time())  # a date column
    age = (_utc(now) - _utc(newest)).total_seconds()
    return Freshness(source.id, verdict(age, source.freshness), _iso(newest), _iso(now), round(age, 3))


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def line(result: Freshness) -> str:
    age = f"{result.age_seconds / 3600:,.1f} h old (newest {result.max_loaded_at})" if result.age_seconds is not None else ""
    return f"{result.status.upper():<5} {result.source:<40} {age}{' — ' + result.message if result.message else ''}"


def to_json(results: list[Freshness]) -> str:
    return json.dumps({"results": [asdict(r) for r in results]}, indent=2, sort_keys=True) + "\n"
