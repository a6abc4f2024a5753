"""A ``table`` or ``view`` model under which nothing moved is not built again, and Spark is not
started for it (issue 32's P4b: a run costs what changed).

After building such a model, a run records a watch (``compiler.watch``) of what its SELECT reads:
the physical tables under it, through the project's views and ephemeral models down to each
model's own storage (``ModelKind.watched``: a parquet table's two slots, a Delta table's folder),
the topics of the MVs, facts and numerators it reads, a hash of the statements that build it, and
its own tables as the build left them (dropped outside mvflow: built again).
The next run compares them first: all as recorded, the model is up to date and its runner returns
without Spark. It is built as before when something cannot be watched (a table outside this
machine's file system, a source that is a view of another tool), when its SELECT depends on the
clock or on chance (``current_date()``, ``rand()`` …: ``volatile``), when it has hooks, with
``--full-refresh``, and with ``run --no-file-check``. dbt's ``incremental`` models are not
skipped: a later run's SELECT reads the model's own table, and running it with no input moved is
not a no-op in general (an ``append`` without an ``is_incremental()`` filter appends again).

    >>> import sqlglot
    >>> volatile(sqlglot.parse_one("select id, current_date() as d from t")), volatile(sqlglot.parse_one("select 1"))
    (True, False)
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from sqlglot import exp

from .. import watch
from ..state import open_state_store
from .statements import script

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..manifest import Manifest, Model
    from ..run import Result, RunOptions
    from ..state import StateStore
    from .base import ModelRunner

#: functions whose value is not decided by the rows read (Spark's names, lower case)
_VOLATILE_FUNCTIONS = {"now", "current_date", "current_timestamp", "current_time", "localtimestamp", "curdate",
                       "unix_timestamp", "rand", "random", "randn", "uuid", "shuffle", "input_file_name",
                       "monotonically_increasing_id", "spark_partition_id", "current_user", "session_user"}
_VOLATILE_EXPRESSIONS = (exp.CurrentDate, exp.CurrentTimestamp, exp.CurrentTime, exp.Rand, exp.Randn, exp.Uuid)
UP_TO_DATE = "up to date (no input moved since its last build)"


def volatile(query: exp.Expression | None) -> bool:
    """Whether the SELECT's rows may change with no input changing (the clock, chance); a SELECT
    that was not parsed counts as volatile."""
    if query is None:
        return True
    if any(query.find_all(*_VOLATILE_EXPRESSIONS)):
        return True
    return any((f.name if isinstance(f, exp.Anonymous) else f.sql_name()).lower() in _VOLATILE_FUNCTIONS
               for f in query.find_all(exp.Func))


def spec(manifest: "Manifest", model: "Model") -> watch.Spec | None:
    """What the model's build depends on, or None when that cannot be watched, or when the model has
    hooks (dbt's pre- and post-hooks run at every run: what they do is not the model's rows)."""
    tables: set[str] = set()
    topics: set[str] = set()
    if model.config.get("before") or model.config.get("after") or not _reads(manifest, model, tables, topics):
        return None
    built = script(model, model.kind.statements(model))
    own = model.kind.watched(model)
    return watch.Spec(model.name, watch.sql_hash(built, model.table_format), tuple(sorted(tables)), tuple(sorted(topics)),
                      offset=False, own=own[0] if own else ())


def _reads(manifest: "Manifest", model: "Model", tables: set[str], topics: set[str]) -> bool:
    """Add what ``model``'s SELECT reads to ``tables`` and ``topics``, through the project's views;
    False when its rows (or a view's it reads) may change with nothing moving."""
    if volatile(model.ast):
        return False
    makers = {m.relation: m for m in manifest.models.values()}
    for relation, _ in model.tables_read:
        maker = makers.get(relation.lower())
        if maker is None:  # a source, or a table of another tool
            tables.add(relation)
            continue
        watched = maker.kind.watched(maker)
        if watched is None:  # a view or an ephemeral model: what it reads
            if not _reads(manifest, maker, tables, topics):
                return False
            continue
        tables.update(watched[0])
        topics.update(watched[1])
    return True


def up_to_date(store: "StateStore", found: watch.Spec | None, now: datetime) -> bool:
    return found is not None and watch.is_idle(store, found, now) is not None


def next_run(manifest: "Manifest", model: "Model", store: "StateStore", now: datetime, otherwise: tuple[str, str]) -> tuple[str, str]:
    """``mvflow plan``'s words for a table or view: nothing when no input moved, else ``otherwise``."""
    return ("nothing", UP_TO_DATE) if up_to_date(store, spec(manifest, model), now) else otherwise


def build_stamp(store: "StateStore", manifest: "Manifest", model: "Model") -> str | None:
    """What tells the model's last build from the others, without Spark: its definition and its own
    tables' files as the run's watch recorded them after that build (a publish of a table records
    it); None when the model is not watched (each run builds it)."""
    found = spec(manifest, model)
    recorded = watch.Watch.parse(store.get_watch(found.topic)) if found is not None else None
    if recorded is None or recorded.sql != found.sql:
        return None
    return watch.sql_hash(recorded.sql, *(recorded.tables.get(relation, ["", "missing"])[1] for relation in found.own))


def skipping(build: "ModelRunner", options: "RunOptions") -> "ModelRunner":
    """``build`` (a table's or view's runner), skipped when nothing moved since the build the watch
    recorded; after a build, the watch of what it read before it started."""

    def run(spark: "SparkSession", manifest: "Manifest", model: "Model") -> "Result":
        from ..run import Result

        found = spec(manifest, model)
        store = state_store(options, manifest) if found is not None else None
        if store is not None and options.file_check and not options.full_refresh \
                and up_to_date(store, found, datetime.now(timezone.utc)):
            return Result(model.name, model.kind.name, "success", message=UP_TO_DATE)
        observed = watch.observe(spark, store, found) if store is not None else None
        result = build(spark, manifest, model)
        if observed is not None and result.status == "success":
            watch.record(spark, store, found, observed)
        return result

    return run


def state_store(options: "RunOptions", manifest: "Manifest") -> "StateStore":
    return options.store or open_state_store(manifest.project.target(manifest.target).state)
