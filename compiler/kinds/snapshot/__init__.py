"""The ``snapshot`` kind (dbt's): a type-2 history of the model's SELECT on Delta. Each run
compares the SELECT's rows with the current versions kept (``dbt_valid_to`` null) by
``unique_key``; a changed row closes its current version (``dbt_valid_to``) and opens a new one,
in one ``MERGE`` on ``dbt_scd_id``. dbt's columns, strategies and statements, so that a dbt
project's snapshot table is the same row for row:

===============  ==============================================================================
``timestamp``    a row changed when its ``updated_at`` is later than its current version's
                 ``dbt_valid_from``; versions are stamped with ``updated_at``
``check``        a row changed when one of ``check_cols`` (``all``: every column) differs from its
                 current version (nulls compared as values); stamped with the run's time
                 (``updated_at`` when given)
===============  ==============================================================================

``hard_deletes``: a key gone from the SELECT is ``ignore``\\ d (the default), ``invalidate``\\ d
(its current version closed at the run's time) or closed with a ``new_record`` marking it deleted
(``dbt_is_deleted``). A column added to the SELECT is added to the table first (older versions
hold null); with the ``check`` strategy every current row then counts as changed (dbt's rule).

The SQL (``sql.py``) is written here rather than read from dbt's macros: it must run without dbt
installed, and its text is what ``target/run/<snapshot>.sql`` shows. A snapshot's history cannot
be recomputed from its SELECT, so ``--full-refresh`` leaves it as it is (as dbt does). Where the
SELECT reads one Delta table with a Change Data Feed, a run restages only the keys the feed names
(``changes.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ...table_format import DELTA, commit_time, delta_version, describe_table, logged_version, provider_of
from ..base import KindError, ModelKind, ModelRunner
from ..statements import Statement, execute, script, timed, wrapped
from .changes import change_feed_on, keyed_source, seen, watched
from .sql import IS_DELETED, SCD_ID, UPDATED_AT, VALID_FROM, VALID_TO, build_select, keys_view, merge, staging_select, staging_view

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ...manifest import Manifest, Model
    from ...run import Result, RunOptions
    from ...state import StateStore

STRATEGIES = ("timestamp", "check")
HARD_DELETES = ("ignore", "invalidate", "new_record")
#: staging columns that are not the snapshot table's
_STAGING_ONLY = ("dbt_change_type", "dbt_unique_key")
#: the changed keys are read in a query of their own and kept (checkpointed) as a view: Spark reads a
#: table's changes (``table_changes``) as the table itself in a query that also reads the table
KEEP_KEYS = "the keys the change feed names, read once and kept (checkpointed) as the view"


@dataclass(frozen=True)
class SnapshotKind(ModelKind):
    name: ClassVar[str] = "snapshot"
    strategy: str = ""
    unique_key: tuple[str, ...] = ()
    updated_at: str = ""
    check_cols: tuple[str, ...] = ()  # ("all",): every column of the SELECT
    hard_deletes: str = ""
    invalidate_hard_deletes: bool = False  # dbt's older name for hard_deletes='invalidate'
    dbt_valid_to_current: str = ""  # what dbt_valid_to holds in current versions (null by default)
    target_schema: str = ""  # dbt's older config: the schema itself, no generate_schema_name

    @classmethod
    def check_config(cls, values: dict[str, Any]) -> list[KindError]:
        errors = []
        strategy = values.get("strategy")
        if strategy not in STRATEGIES:
            errors.append(KindError(f"a snapshot needs strategy 'timestamp' or 'check', got {strategy!r}" if strategy else
                                    "a snapshot needs a strategy", "e.g. config(strategy='timestamp', updated_at='updated_at')",
                                    "bad-config", "strategy"))
        if not values.get("unique_key"):
            errors.append(KindError("a snapshot needs a unique_key", "e.g. config(unique_key='id') or unique_key=['a', 'b']",
                                    "bad-config", "strategy"))  # said where its config is
        if strategy == "timestamp" and not values.get("updated_at"):
            errors.append(KindError("the timestamp strategy needs updated_at", "e.g. config(updated_at='updated_at'): the "
                                    "column that says when the row last changed", "bad-config", "strategy"))
        if strategy == "check" and not values.get("check_cols"):
            errors.append(KindError("the check strategy needs check_cols", "e.g. config(check_cols=['status']) or check_cols='all'",
                                    "bad-config", "strategy"))
        if values.get("hard_deletes") and values["hard_deletes"] not in HARD_DELETES:
            errors.append(KindError(f"invalid hard_deletes {values['hard_deletes']!r}", "valid values: " + ", ".join(HARD_DELETES),
                                    "bad-config", "hard_deletes"))
        if values.get("hard_deletes") and values.get("invalidate_hard_deletes"):
            errors.append(KindError("set hard_deletes or invalidate_hard_deletes, not both", "write hard_deletes='invalidate'",
                                    "bad-config", "invalidate_hard_deletes"))
        return errors

    @property
    def deletes(self) -> str:
        """What a key gone from the SELECT does: ignore, invalidate or new_record (dbt's rule)."""
        return "invalidate" if self.invalidate_hard_deletes else self.hard_deletes or "ignore"

    @property
    def meta_columns(self) -> tuple[str, ...]:
        return (SCD_ID, UPDATED_AT, VALID_FROM, VALID_TO) + ((IS_DELETED,) if self.deletes == "new_record" else ())

    def output_columns(self, select_columns: list[str] | None) -> list[str] | None:
        if select_columns is None:
            return None
        taken = [c for c in select_columns if c.lower() in self.meta_columns]
        if taken:
            raise KindError(f"the snapshot's SELECT has column {taken[0]}, which the snapshot adds itself",
                            "rename the column", "bad-columns")
        return [*select_columns, *self.meta_columns]

    def next_run(self, manifest, model, store, now) -> tuple[str, str]:
        return "snapshot", f"rows changed since the last run ({self.strategy}) close their version and open a new one"

    def runner(self, options: "RunOptions") -> ModelRunner:
        from ...state import open_state_store

        return lambda spark, manifest, model: run_snapshot(
            spark, model, options.store or open_state_store(manifest.project.target(manifest.target).state))

    def run_files(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        columns = model.columns[:-len(self.meta_columns)] if model.columns else ["<the SELECT's columns>"]
        table_columns = [*columns, *self.meta_columns]
        first = script(model, self.first_build(model), ["the first build: when the table does not exist"])
        texts = [first, script(model, self.later(model, columns, table_columns), [
            "later runs: the changed rows staged, then one MERGE on dbt_scd_id; a column the SELECT gained is added to the "
            "table first (ALTER TABLE … ADD COLUMNS)"])]
        source = keyed_source(model.select_sql, self.unique_key)
        if source is not None:
            texts.append(script(model, self.later(model, columns, table_columns, source.changed_keys(self.unique_key)), [
                f"later runs when {source.table} has its Delta Change Data Feed on and it reaches back to the version the "
                "last run read: only the keys it changed since (:from_version..:to_version)"]))
        return {f"{model.name}.sql": texts[0] + "".join("\n" + text.split("\n", 1)[1] for text in texts[1:])}

    def first_build(self, model: "Model") -> list[Statement]:
        return wrapped(model, [Statement("build the table: one current version per row of the SELECT",
                                         f"CREATE TABLE {model.relation}\nUSING delta\nAS\n{build_select(self, model.select_sql)}")])

    def later(self, model: "Model", query_columns: list[str], table_columns: list[str],
              changed_keys: str | None = None) -> list[Statement]:
        """The statements of a later run; with ``changed_keys`` (a query, ``changes.py``) for those keys only."""
        staging, keys = staging_view(model), keys_view(model) if changed_keys else None
        return wrapped(model, [
            *([Statement(f"{KEEP_KEYS} {keys}", changed_keys)] if keys else []),
            Statement("stage the changes: new versions (insert), closed versions (update, delete)",
                      f"CREATE OR REPLACE TEMPORARY VIEW {staging} AS\n"
                      f"{staging_select(self, model.select_sql, model.relation, query_columns, table_columns, keys)}"),
            Statement("close the changed current versions and insert the new ones", merge(self, model.relation, staging)),
            Statement("drop the staged changes", f"DROP VIEW IF EXISTS {staging}"),
            *([Statement("drop the keys", f"DROP VIEW IF EXISTS {keys}")] if keys else []),
        ])


def run_snapshot(spark: "SparkSession", model: "Model", store: "StateStore") -> "Result":
    def build(result: "Result") -> None:
        kind: SnapshotKind = model.kind  # type: ignore[assignment]
        source = keyed_source(model.select_sql, kind.unique_key)
        feed = source if source is not None and change_feed_on(describe_table(spark, source.table)) else None
        # before reading: later changes are read next time (with the commit's time, where the JVM is there)
        version, committed_at = (logged_version(spark, feed.table) or (delta_version(spark, feed.table), None)) \
            if feed else (None, None)
        provider = provider_of(describe_table(spark, model.relation))
        if provider is None:
            execute(spark, kind.first_build(model), {})
            result.rows = spark.table(model.relation).count()
            result.message = f"first build: {result.rows} versions"
        elif provider != DELTA:
            raise RuntimeError(f"{model.relation} is not a Delta table ({provider}): a snapshot keeps its history by "
                               "MERGE — rename or drop the old table, then run the snapshot again")
        else:
            last = _last_read(spark, store.get_watch(model.name), feed.table, model.select_sql) if feed else None
            if last is not None and last == version:
                result.message = f"nothing changed: {feed.table} is still at version {version}"
                return
            if last is not None and last < version:
                try:
                    _take(spark, model, result, feed.changed_keys(kind.unique_key, (last + 1, version)))
                    result.message += f" (the keys {feed.table}'s change feed names in versions {last + 1}..{version})"
                except Exception as exc:  # noqa: BLE001 - e.g. the feed does not reach back (vacuumed, turned on later)
                    from ...run import _spark_message

                    _take(spark, model, result)
                    result.message += f" (whole SELECT: reading {feed.table}'s change feed from version {last + 1} failed: " \
                                      f"{_spark_message(exc)})"
            else:
                _take(spark, model, result)
        if feed is not None:
            store.put_watch(model.name, watched(feed.table, version, model.select_sql, committed_at))

    return timed(model, build)


def _last_read(spark: "SparkSession", watch: str | None, table: str, select_sql: str) -> int | None:
    """The version of ``table`` the last run read, if the table's log still has that commit (a table
    dropped and created again has another commit at that version, or none: read it whole)."""
    kept = seen(watch, table, select_sql)
    if kept is None or (kept[1] is not None and commit_time(spark, table, kept[0]) != kept[1]):
        return None
    return kept[0]


def _take(spark: "SparkSession", model: "Model", result: "Result", changed_keys: str | None = None) -> None:
    """Stage the run's changes and merge them (one Delta commit)."""
    from ...failures import running_statement

    kind: SnapshotKind = model.kind  # type: ignore[assignment]
    query_columns = spark.sql(model.select_sql).columns  # Spark's analysis only: no job
    table_columns = spark.table(model.relation).columns
    for statement in kind.later(model, query_columns, table_columns, changed_keys):
        if statement.purpose.startswith(KEEP_KEYS):
            running_statement(statement.sql, statement.purpose)
            spark.sql(statement.sql).localCheckpoint().createOrReplaceTempView(keys_view(model))
            continue
        if not statement.sql.startswith("MERGE"):
            execute(spark, [statement], {})
            continue
        _add_columns(spark, model, table_columns)
        running_statement(statement.sql, statement.purpose)
        counts = spark.sql(statement.sql).collect()[0].asDict()  # Delta's MERGE metrics
        result.rows = int(counts.get("num_affected_rows") or 0)
        result.message = f"{counts.get('num_inserted_rows', 0)} new versions, {counts.get('num_updated_rows', 0)} closed"


def _add_columns(spark: "SparkSession", model: "Model", table_columns: list[str]) -> None:
    """Columns the staged changes hold and the table not yet (the SELECT gained them): added, null in
    older versions (dbt's ``create_columns``)."""
    from ...failures import running_statement

    stored = {c.lower() for c in table_columns}
    schema = spark.table(staging_view(model)).schema
    added = [f for f in schema.fields if f.name.lower() not in stored and not f.name.lower().startswith(_STAGING_ONLY)]
    if added:
        sql = f"ALTER TABLE {model.relation} ADD COLUMNS ({', '.join(f'{f.name} {f.dataType.simpleString()}' for f in added)})"
        running_statement(sql, "add the columns the SELECT gained")
        spark.sql(sql)
