"""What ``mvflow run`` executes for a model: its statement sequence, per kind.

Pure: the statements are text with named parameter markers (``:build_table``) bound at run
time, so the text written to ``target/run/`` is exactly the text executed.

A ``table`` in the parquet format is built blue/green: two physical slots ``<name>__mvflow_a`` /
``__mvflow_b`` and a view under the model's name. A build fills the slot the view does not read,
then replaces the view: readers see the old rows or the new rows, never a half-built or missing
table (dbt-spark drops and recreates). The previous slot stays until the next build, so queries
that started before the swap finish on it.

In the delta format the model's name is the table itself, rebuilt by one ``CREATE OR REPLACE
TABLE … AS SELECT``: one Delta commit, so readers see the old rows or the new ones, and queries
that started before it finish on the old version's files.

Switching formats: a statement with a ``layout`` runs only when the name holds that layout now
(``view``: the parquet layout's view, or a former view model; ``delta``: a Delta table). Neither
Delta nor a view can replace the other in place, so the old one is dropped right before the new
one is made: readers miss the name for that moment, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from .compile import Model
from .kinds import TableKind, ViewKind
from .table_format import DELTA, VIEW, using

SLOTS = ("a", "b")
_LAYOUT_WORDS = {VIEW: "a view", DELTA: "a Delta table"}


@dataclass(frozen=True)
class Statement:
    purpose: str
    sql: str
    slot: str | None = None  # run only when this slot is the one being built
    layout: str | None = None  # run only when the model's name holds this now (``table_format.table_provider``)


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
    elif isinstance(model.kind, TableKind) and model.table_format == DELTA:
        body = [
            Statement("switching from the parquet layout: drop the view over its slots", f"DROP VIEW IF EXISTS {model.relation}",
                      layout=VIEW),
            Statement("build the new version and replace the table in one Delta commit (readers see the old rows or the new)",
                      f"CREATE OR REPLACE TABLE {model.relation}\n{using(DELTA, cluster_by=model.kind.cluster_by)}"
                      f"{_partitioned(model)}\nAS\n{select}"),
            *([Statement("cluster the new version's files by cluster_by (CREATE … CLUSTER BY writes them unclustered)",
                         f"OPTIMIZE {model.relation}")] if model.kind.cluster_by else []),
            *(Statement(f"switching from the parquet layout: drop its slot {slot}",
                        f"DROP TABLE IF EXISTS {slot_table(model.relation, slot)}", layout=VIEW) for slot in SLOTS),
        ]
    elif isinstance(model.kind, TableKind):
        body = [
            Statement("clear the idle slot (:build_table is the slot the view does not read now)",
                      "DROP TABLE IF EXISTS IDENTIFIER(:build_table)"),
            Statement("build the new version in the idle slot",
                      f"CREATE TABLE IDENTIFIER(:build_table)\nUSING parquet{_partitioned(model)}\nAS\n{select}"),
            Statement("switching from the delta layout: drop the Delta table, which a view cannot replace",
                      f"DROP TABLE IF EXISTS {model.relation}", layout=DELTA),
            # A view's text holds no parameter markers: one swap statement per slot, by name.
            *(Statement(f"swap: point the model's view at the new slot (atomic in the metastore), when building slot {slot}",
                        f"CREATE OR REPLACE VIEW {model.relation} AS\nSELECT * FROM {slot_table(model.relation, slot)}", slot)
              for slot in SLOTS),
        ]
    else:
        return None
    return [create_schema, *hooks_before, *body, *hooks_after]


def _partitioned(model: Model) -> str:
    return f"\nPARTITIONED BY ({', '.join(model.kind.partition_by)})" if model.kind.partition_by else ""


def _hooks(value: object) -> list[str]:
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]  # type: ignore[list-item]


def script(model: Model, items: list[Statement]) -> str:
    """The reviewable text of a statement sequence (``target/run/<model>.sql``)."""
    lines = [f"-- mvflow run: {model.name} ({model.kind.name}) from {model.path}"]
    if isinstance(model.kind, TableKind) and model.table_format == DELTA:
        lines.append(f"-- table format delta: {model.relation} is a Delta table")
    elif isinstance(model.kind, TableKind):
        slots = " or ".join(slot_table(model.relation, s) for s in SLOTS)
        lines.append(f"-- table format parquet: {model.relation} is a view over the slot built last")
        lines.append(f"-- :build_table = the slot {model.relation} does not read now ({slots})")
    for item in items:
        when = f" (only when {model.relation} is {_LAYOUT_WORDS[item.layout]} now)" if item.layout else ""
        lines += ["", f"-- {item.purpose}{when}", item.sql.rstrip() + ";"]
    return "\n".join(lines) + "\n"
