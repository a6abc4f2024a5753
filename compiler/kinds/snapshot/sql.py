"""The statements of a snapshot, as dbt-spark writes them (its ``snapshot`` materialization and
dbt's ``snapshot_staging_table``): pure text from the kind's config and the columns of the
SELECT and of the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...manifest import Model
    from . import SnapshotKind

SCD_ID, UPDATED_AT, VALID_FROM, VALID_TO, IS_DELETED = "dbt_scd_id", "dbt_updated_at", "dbt_valid_from", "dbt_valid_to", "dbt_is_deleted"
NOW = "current_timestamp()"  # dbt-spark's snapshot_get_time()


def staging_view(model: "Model") -> str:
    return f"{model.relation.replace('.', '__')}__mvflow_snapshot"


def keys_view(model: "Model") -> str:
    return f"{staging_view(model)}_keys"


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

    >>> from compiler.kinds.snapshot import SnapshotKind
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


def staging_select(kind: SnapshotKind, sql: str, relation: str, query_columns: list[str], table_columns: list[str],
                   keys_view: str | None = None) -> str:
    """The changes of one run (dbt's ``snapshot_staging_table``): ``insert`` rows are new versions,
    ``update`` and ``delete`` rows close the version of their ``dbt_scd_id``. With ``keys_view``
    (a view of key tuples, ``changes.py``) only those keys are compared."""
    keys = kind.unique_key
    among = ""
    if keys_view:
        tuple_ = keys[0] if len(keys) == 1 else "(" + ", ".join(keys) + ")"
        among = f"{tuple_} IN (SELECT {', '.join(keys)} FROM {keys_view})"
        sql = f"SELECT * FROM (\n{_indented(sql)}\n) AS q\nWHERE {among}"
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
        ("snapshotted_data", f"  SELECT *, {key_fields}\n  FROM {relation}\n  WHERE {_is_current(VALID_TO, kind)}"
                             + (f"\n    AND {among}" if among else "")),
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


