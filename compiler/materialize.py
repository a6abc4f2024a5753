"""What ``mvflow run`` executes for a model: its statement sequence, per kind.

Pure: the statements are text with named parameter markers (``:build_table``) bound at run
time, so the text written to ``target/run/`` is exactly the text executed.

``table`` is built blue/green: two physical slots ``<name>__mvflow_a`` / ``__mvflow_b`` and a
view under the model's name. A build fills the slot the view does not read, then replaces the
view: readers see the old rows or the new rows, never a half-built or missing table (dbt-spark
drops and recreates). The previous slot stays until the next build, so queries that started
before the swap finish on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .compile import Model
from .kinds import TableKind, ViewKind

SLOTS = ("a", "b")


@dataclass(frozen=True)
class Statement:
    purpose: str
    sql: str
    slot: str | None = None  # run only when this slot is the one being built


def slot_table(relation: str, slot: str) -> str:
    """Physical table of one blue/green slot.

    >>> slot_table("marts.shop_stats", "a")
    'marts.shop_stats__mvflow_a'
    """
    return f"{relation}__mvflow_{slot}"


def statements(model: Model) -> list[Statement] | None:
    """The run statements of a model, or None when its kind has no run support here."""
    create_schema = Statement("make sure the schema exists", f"CREATE DATABASE IF NOT EXISTS {model.schema}")
    hooks_before = [Statement("before hook", sql) for sql in _hooks(model.config.get("before"))]
    hooks_after = [Statement("after hook", sql) for sql in _hooks(model.config.get("after"))]
    select = model.select_sql
    if isinstance(model.kind, ViewKind):
        body = [Statement("replace the view", f"CREATE OR REPLACE VIEW {model.relation} AS\n{select}")]
    elif isinstance(model.kind, TableKind):
        partition = f"\nPARTITIONED BY ({', '.join(model.kind.partition_by)})" if model.kind.partition_by else ""
        body = [
            Statement("clear the idle slot (:build_table is the slot the view does not read now)",
                      "DROP TABLE IF EXISTS IDENTIFIER(:build_table)"),
            Statement("build the new version in the idle slot",
                      f"CREATE TABLE IDENTIFIER(:build_table)\nUSING parquet{partition}\nAS\n{select}"),
            # A view's text holds no parameter markers: one swap statement per slot, by name.
            *(Statement(f"swap: point the model's view at the new slot (atomic in the metastore), when building slot {slot}",
                        f"CREATE OR REPLACE VIEW {model.relation} AS\nSELECT * FROM {slot_table(model.relation, slot)}", slot)
              for slot in SLOTS),
        ]
    else:
        return None
    return [create_schema, *hooks_before, *body, *hooks_after]


def _hooks(value: object) -> list[str]:
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]  # type: ignore[list-item]


def script(model: Model, items: list[Statement]) -> str:
    """The reviewable text of a statement sequence (``target/run/<model>.sql``)."""
    lines = [f"-- mvflow run: {model.name} ({model.kind.name}) from {model.path}"]
    if isinstance(model.kind, TableKind):
        slots = " or ".join(slot_table(model.relation, s) for s in SLOTS)
        lines.append(f"-- :build_table = the slot {model.relation} does not read now ({slots})")
    for item in items:
        lines += ["", f"-- {item.purpose}", item.sql.rstrip() + ";"]
    return "\n".join(lines) + "\n"
