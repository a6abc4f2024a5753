"""A model's dbt config as mvflow's: dbt's names for hooks and the table format, its
materializations, and the settings mvflow does not apply (one warning line each)."""

from __future__ import annotations

from typing import Any

from ..kinds import config_keys

#: hooks: their Jinja is rendered when they run (``{{ this }}``), not with the config
HOOKS = {"pre-hook", "pre_hook", "post-hook", "post_hook"}
#: dbt config name → mvflow's
RENAMED = {"pre-hook": "before", "pre_hook": "before", "post-hook": "after", "post_hook": "after", "file_format": "table_format"}
#: dbt settings that change nothing mvflow writes (documentation, access control metadata)
SILENT = {"meta", "docs", "persist_docs", "access", "group", "database", "quoting", "labels", "contract", "grants",
          "event_time", "description", "target_database"}
#: dbt settings whose default mvflow follows: another value is said once per model
DEFAULTS = {"on_schema_change": "ignore", "incremental_predicates": None}
#: dbt settings mvflow does not apply, said once per model
UNSUPPORTED = {"clustered_by", "buckets", "location_root", "tblproperties", "options", "merge_update_columns",
               "merge_exclude_columns", "copy_grants", "snapshot_meta_column_names"}
MATERIALIZATIONS = {"view", "table", "incremental", "ephemeral", "seed", "snapshot"}
TABLE_FORMATS = {"delta", "parquet"}


def translate(config: dict[str, Any], origin: dict[str, tuple[str, int]]) -> tuple[dict[str, Any], list[tuple[str, str, int]]]:
    """mvflow's config from a dbt model's, and (message, path, line) warnings for what is ignored.

    >>> translate({"materialized": "table", "post-hook": ["select 1"], "file_format": "delta", "meta": {}, "buckets": 4},
    ...           {"buckets": ("dbt_project.yml", 9)})
    ({'materialized': 'table', 'after': ['select 1'], 'table_format': 'delta'}, [("dbt config 'buckets' is not supported by mvflow: ignored", 'dbt_project.yml', 9)])
    >>> translate({"materialized": "view", "sql_header": "set x = 1"}, {})[1][0][0]
    "dbt config 'sql_header' is not read by mvflow: ignored"
    >>> translate({"on_schema_change": "ignore"}, {})[1], translate({"on_schema_change": "fail"}, {})[1][0][0]
    ([], "dbt config on_schema_change='fail' is not supported by mvflow: it behaves as on_schema_change='ignore'")
    """
    result: dict[str, Any] = {}
    warnings = []
    for key, value in config.items():
        where = origin.get(key, ("", 0))
        if key in SILENT:
            continue
        if key in DEFAULTS:
            if value != DEFAULTS[key]:
                warnings.append((f"dbt config {key}={value!r} is not supported by mvflow: it behaves as "
                                 f"{key}={DEFAULTS[key]!r}", *where))
            continue
        if key in UNSUPPORTED:
            warnings.append((f"dbt config '{key}' is not supported by mvflow: ignored", *where))
            continue
        if key == "file_format" and str(value).lower() not in TABLE_FORMATS:
            warnings.append((f"file_format '{value}' is not supported by mvflow: the table is parquet", *where))
            continue
        name = RENAMED.get(key, key)
        if name in ("before", "after"):
            value = _hook_list(result.get(name)) + _hook_list(value)
        result[name] = value
    accepted = config_keys(str(result.get("materialized", "view")))
    for key in sorted(set(result) - (accepted or set(result))):  # an unknown kind is create_kind's error to say
        warnings.append((f"dbt config '{key}' is not read by mvflow: ignored", *origin.get(key, ("", 0))))
        del result[key]
    return result, warnings


def _hook_list(value: Any) -> list[str]:
    """dbt hooks: a statement, a list of them, or {sql: ..., transaction: ...} items."""
    if not value:
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    return [str(item.get("sql", "")) if isinstance(item, dict) else str(item) for item in items]
