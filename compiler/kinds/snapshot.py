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

The SQL is written here rather than read from dbt's macros: it must run without dbt installed,
and its text is what ``target/run/<snapshot>.sql`` shows. A snapshot's history cannot be
recomputed from its SELECT, so ``--full-refresh`` leaves it as it is (as dbt does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..table_format import DELTA, describe_table, provider_of
from .base import KindError, ModelKind, ModelRunner
from .statements import Statement, execute, script, timed, wrapped

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..manifest import Manifest, Model
    from ..run import Result, RunOptions

STRATEGIES = ("timestamp", "check")
HARD_DELETES = ("ignore", "invalidate", "new_record")
SCD_ID, UPDATED_AT, VALID_FROM, VALID_TO, IS_DELETED = "dbt_scd_id", "dbt_updated_at", "dbt_valid_from", "dbt_valid_to", "dbt_is_deleted"
NOW = "current_timestamp()"  # dbt-spark's snapshot_get_time()
#: staging columns that are not the snapshot table's
_STAGING_ONLY = ("dbt_change_type", "dbt_unique_key")


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
        return lambda spark, manifest, model: run_snapshot(spark, model)

    def run_files(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        columns = model.columns[:-len(self.meta_columns)] if model.columns else ["<the SELECT's columns>"]
        first = script(model, self.first_build(model), ["the first build: when the table does not exist"])
        later = script(model, self.later(model, columns, [*columns, *self.meta_columns]), [
            "later runs: the changed rows staged, then one MERGE on dbt_scd_id; a column the SELECT gained is added to the "
            "table first (ALTER TABLE … ADD COLUMNS)"])
        return {f"{model.name}.sql": first + "\n" + later.split("\n", 1)[1]}

    def first_build(self, model: "Model") -> list[Statement]:
        return wrapped(model, [Statement("build the table: one current version per row of the SELECT",
                                         f"CREATE TABLE {model.relation}\nUSING delta\nAS\n{build_select(self, model.select_sql)}")])

    def later(self, model: "Model", query_columns: list[str], table_columns: list[str]) -> list[Statement]:
        staging = staging_view(model)
        return wrapped(model, [
            Statement("stage the changes: new versions (insert), closed versions (update, delete)",
                      f"CREATE OR REPLACE TEMPORARY VIEW {staging} AS\n"
                      f"{staging_select(self, model.select_sql, model.relation, query_columns, table_columns)}"),
            Statement("close the changed current versions and insert the new ones", merge(self, model.relation, staging)),
            Statement("drop the staged changes", f"DROP VIEW IF EXISTS {staging}"),
        ])


def staging_view(model: "Model") -> str:
    return f"{model.relation.replace('.', '__')}__mvflow_snapshot"


def _hash(args: list[str]) -> str:
    """dbt-spark's ``snapshot_hash_arguments``.

    >>> _hash(["id", "updated_at"])
    "md5(coalesce(cast(id as string), '') || '|' || coalesce(cast(updated_at as string), ''))"
    """
    return "md5(" + " || '|' || ".join(f"coalesce(cast({arg} as string), '')" for arg in args) + ")"


def _updated_at(kind: SnapshotKind) -> str:
    return kind.updated_at if kind.strategy == "timestamp" or kind.updated_at else NOW


def _valid_to_current(kind: SnapshotKind) -> str:
    """dbt's ``get_dbt_valid_to_current``: null (or ``dbt_valid_to_current``) of ``updated_at``'s type."""
    updated = _updated_at(kind)
    return f"coalesce(nullif({updated}, {updated}), {kind.dbt_valid_to_current or 'null'}) AS {VALID_TO}"


def _is_current(column: str, kind: SnapshotKind) -> str:
    if kind.dbt_valid_to_current:
        return f"({column} = {kind.dbt_valid_to_current} OR {column} IS NULL)"
    return f"{column} IS NULL"


def build_select(kind: SnapshotKind, sql: str) -> str:
    """The first build's SELECT (dbt's ``build_snapshot_table``).

    >>> print(build_select(SnapshotKind(strategy="timestamp", unique_key=("id",), updated_at="at"), "SELECT 1 AS id, now() AS at"))
    SELECT *,
      md5(coalesce(cast(id as string), '') || '|' || coalesce(cast(at as string), '')) AS dbt_scd_id,
      at AS dbt_updated_at,
      at AS dbt_valid_from,
      coalesce(nullif(at, at), null) AS dbt_valid_to
    FROM (
      SELECT 1 AS id, now() AS at
    ) AS sbq
    """
    updated = _updated_at(kind)
    deleted = f",\n  'False' AS {IS_DELETED}" if kind.deletes == "new_record" else ""
    return (f"SELECT *,\n  {_hash([*kind.unique_key, updated])} AS {SCD_ID},\n  {updated} AS {UPDATED_AT},\n"
            f"  {updated} AS {VALID_FROM},\n  {_valid_to_current(kind)}{deleted}\nFROM (\n{_indented(sql)}\n) AS sbq")


def _row_changed(kind: SnapshotKind, query_columns: list[str], table_columns: list[str]) -> str:
    if kind.strategy == "timestamp":
        return f"(snapshotted_data.{VALID_FROM} < source_data.{kind.updated_at})"
    checked = query_columns if kind.check_cols == ("all",) else list(kind.check_cols)
    stored = {c.lower() for c in table_columns}
    if any(c.lower() not in stored for c in checked):  # a column added: every row changed (dbt's rule)
        return "(TRUE)"
    return "(" + " OR ".join(f"snapshotted_data.{c} != source_data.{c} OR ((snapshotted_data.{c} IS NULL) AND NOT "
                             f"(source_data.{c} IS NULL)) OR ((NOT snapshotted_data.{c} IS NULL) AND (source_data.{c} IS NULL))"
                             for c in checked) + ")"


def staging_select(kind: SnapshotKind, sql: str, relation: str, query_columns: list[str], table_columns: list[str]) -> str:
    """The changes of one run (dbt's ``snapshot_staging_table``): ``insert`` rows are new versions,
    ``update`` and ``delete`` rows close the version of their ``dbt_scd_id``."""
    keys = kind.unique_key
    key_fields = ", ".join(f"{key} AS dbt_unique_key_{i}" for i, key in enumerate(keys, 1))
    join_on = " AND ".join(f"snapshotted_data.dbt_unique_key_{i} = source_data.dbt_unique_key_{i}" for i in range(1, len(keys) + 1))
    updated = _updated_at(kind)
    changed = _row_changed(kind, query_columns, table_columns)
    new_record = kind.deletes == "new_record"
    was_deleted = f" OR snapshotted_data.{IS_DELETED} = 'True'" if new_record else ""
    stored_deleted = f", snapshotted_data.{IS_DELETED}" if new_record else ""
    not_deleted = f", 'False' AS {IS_DELETED}" if new_record else ""
    ctes = [
        ("snapshot_query", _indented(sql)),
        ("snapshotted_data", f"  SELECT *, {key_fields}\n  FROM {relation}\n  WHERE {_is_current(VALID_TO, kind)}"),
        ("insertions_source_data", f"  SELECT *, {key_fields},\n    {updated} AS {UPDATED_AT},\n    {updated} AS {VALID_FROM},\n"
                                   f"    {_valid_to_current(kind)},\n    {_hash([*keys, updated])} AS {SCD_ID}\n  FROM snapshot_query"),
        ("updates_source_data", f"  SELECT *, {key_fields},\n    {updated} AS {UPDATED_AT},\n    {updated} AS {VALID_FROM},\n"
                                f"    {updated} AS {VALID_TO}\n  FROM snapshot_query"),
    ]
    if kind.deletes != "ignore":
        ctes.append(("deletes_source_data", f"  SELECT *, {key_fields}\n  FROM snapshot_query"))
    ctes += [
        ("insertions", f"  SELECT 'insert' AS dbt_change_type, source_data.*{not_deleted}\n"
                       f"  FROM insertions_source_data AS source_data\n  LEFT OUTER JOIN snapshotted_data ON {join_on}\n"
                       f"  WHERE snapshotted_data.dbt_unique_key_1 IS NULL\n     OR (snapshotted_data.dbt_unique_key_1 IS NOT NULL "
                       f"AND ({changed}{was_deleted}))"),
        ("updates", f"  SELECT 'update' AS dbt_change_type, source_data.*, snapshotted_data.{SCD_ID}{stored_deleted}\n"
                    f"  FROM updates_source_data AS source_data\n  JOIN snapshotted_data ON {join_on}\n"
                    f"  WHERE ({changed}{was_deleted})"),
    ]
    parts = ["insertions", "updates"]
    if kind.deletes != "ignore":
        still_deleted = (f"\n    AND NOT (snapshotted_data.{IS_DELETED} = 'True' AND {_is_current('snapshotted_data.' + VALID_TO, kind)})"
                         if new_record else "")
        ctes.append(("deletes", f"  SELECT 'delete' AS dbt_change_type, source_data.*,\n    {NOW} AS {VALID_FROM},\n"
                                f"    {NOW} AS {UPDATED_AT},\n    {NOW} AS {VALID_TO},\n    snapshotted_data.{SCD_ID}{stored_deleted}\n"
                                f"  FROM snapshotted_data\n  LEFT JOIN deletes_source_data AS source_data ON {join_on}\n"
                                f"  WHERE source_data.dbt_unique_key_1 IS NULL{still_deleted}"))
        parts.append("deletes")
    if new_record:
        stored = {c.lower() for c in table_columns}
        carried = ",\n".join(f"    {'snapshotted_data' if c.lower() in stored else 'source_data'}.{c}" for c in query_columns)
        unique = "".join(f",\n    snapshotted_data.dbt_unique_key_{i} AS dbt_unique_key_{i}" for i in range(1, len(keys) + 1))
        ctes.append(("deletion_records", f"  SELECT 'insert' AS dbt_change_type,\n{carried}{unique},\n    {NOW} AS {VALID_FROM},\n"
                                         f"    {NOW} AS {UPDATED_AT},\n    snapshotted_data.{VALID_TO} AS {VALID_TO},\n"
                                         f"    {_hash([SCD_ID, NOW])} AS {SCD_ID},\n    'True' AS {IS_DELETED}\n"
                                         f"  FROM snapshotted_data\n  LEFT JOIN deletes_source_data AS source_data ON {join_on}\n"
                                         f"  WHERE source_data.dbt_unique_key_1 IS NULL{still_deleted}"))
        parts.append("deletion_records")
    with_ = ",\n".join(f"{name} AS (\n{body}\n)" for name, body in ctes)
    return f"WITH {with_}\n" + "\nUNION ALL\n".join(f"SELECT * FROM {part}" for part in parts)


def merge(kind: SnapshotKind, relation: str, staging: str) -> str:
    """dbt-spark's ``snapshot_merge_sql``: close the versions staged as update/delete, insert the new ones."""
    return (f"MERGE INTO {relation} AS dest\nUSING {staging} AS staged\nON staged.{SCD_ID} = dest.{SCD_ID}\n"
            f"WHEN MATCHED AND {_is_current('dest.' + VALID_TO, kind)} AND staged.dbt_change_type IN ('update', 'delete')\n"
            f"  THEN UPDATE SET {VALID_TO} = staged.{VALID_TO}\n"
            f"WHEN NOT MATCHED AND staged.dbt_change_type = 'insert'\n  THEN INSERT *")


def _indented(sql: str) -> str:
    return "\n".join("  " + line if line else line for line in sql.strip().splitlines())


def run_snapshot(spark: "SparkSession", model: "Model") -> "Result":
    from ..failures import running_statement

    def build(result: "Result") -> None:
        kind: SnapshotKind = model.kind  # type: ignore[assignment]
        provider = provider_of(describe_table(spark, model.relation))
        if provider is None:
            execute(spark, kind.first_build(model), {})
            result.rows = spark.table(model.relation).count()
            result.message = f"first build: {result.rows} versions"
            return
        if provider != DELTA:
            raise RuntimeError(f"{model.relation} is not a Delta table ({provider}): a snapshot keeps its history by "
                               "MERGE — rename or drop the old table, then run the snapshot again")
        query_columns = spark.sql(model.select_sql).columns  # Spark's analysis only: no job
        table_columns = spark.table(model.relation).columns
        for statement in kind.later(model, query_columns, table_columns):
            if statement.sql.startswith("MERGE"):
                _add_columns(spark, model, table_columns)
                running_statement(statement.sql, statement.purpose)
                counts = spark.sql(statement.sql).collect()[0].asDict()  # Delta's MERGE metrics
                result.rows = int(counts.get("num_affected_rows") or 0)
                result.message = f"{counts.get('num_inserted_rows', 0)} new versions, {counts.get('num_updated_rows', 0)} closed"
            else:
                execute(spark, [statement], {})

    return timed(model, build)


def _add_columns(spark: "SparkSession", model: "Model", table_columns: list[str]) -> None:
    """Columns the staged changes hold and the table not yet (the SELECT gained them): added, null in
    older versions (dbt's ``create_columns``)."""
    from ..failures import running_statement

    stored = {c.lower() for c in table_columns}
    schema = spark.table(staging_view(model)).schema
    added = [f for f in schema.fields if f.name.lower() not in stored and not f.name.lower().startswith(_STAGING_ONLY)]
    if added:
        sql = f"ALTER TABLE {model.relation} ADD COLUMNS ({', '.join(f'{f.name} {f.dataType.simpleString()}' for f in added)})"
        running_statement(sql, "add the columns the SELECT gained")
        spark.sql(sql)
