"""What an mv reads, and by which key: its inputs (``catalog``), what normalization knows of the
tables (``relations``), and who reads the keys an mv publishes (``mv_consumers``).

An input's key is, in order: a source's ``primary_key``; an upstream mv's published key; a table's
or seed's declared key (``compiler.declared_keys``); else the key declared on a staging view that
only renames the table's columns (``key_through_views``: dbt projects test ``unique`` and
``not_null`` on ``stg_customers.customer_id``, not on the seed it selects from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import networkx as nx
from sqlglot import exp

from ...declared_keys import DeclaredKey, declared_key
from ...graph import is_model, model_id, node_name
from ...parse import table_name
from ...table_format import DELTA
from . import MvKind
from .normalize import Relations, normalize
from .normalize.scope import sources, unalias

if TYPE_CHECKING:
    from ...manifest import Manifest, Model
    from .plan import MvPlan

BATCH = "mvflow_batch"  # an mv's batch number: its position (partition column: the Hive metastore filter parser rejects a leading _)
#: what a view that only renames columns has none of
_RESHAPING = ("joins", "where", "group", "having", "distinct", "order", "limit", "offset", "qualify", "windows",
              "laterals", "pivots", "with_")


def relations(manifest: "Manifest", model: "Model") -> Relations:
    """The views an MV's SELECT may read (expanded into it) and every table's known columns."""
    columns: dict[str, tuple[str, ...] | None] = {
        s.id.lower(): tuple(c.name for c in s.columns) or None for s in manifest.sources.values()}
    columns.update({m.relation: tuple(m.columns) if m.columns else None for m in manifest.models.values()})
    views = {m.relation: m.ast for m in manifest.models.values()
             if m.kind.name == "view" and m.name != model.name and m.ast is not None}
    keys = {s.id.lower(): tuple(tuple(k) for k in (s.primary_key, *s.unique) if k) for s in manifest.sources.values()}
    keys.update({m.relation: (declared.columns,) for m in manifest.models.values()
                 if m.kind.name in ("table", "seed", "incremental") and (declared := declared_key(manifest, m))})
    return Relations(columns, views, keys)


def mv_consumers(manifest: "Manifest", name: str) -> tuple[str, ...]:
    """What reads the keys model ``name`` publishes: the ``mv`` models that read it, its
    batch-scoped data tests (``test:<name>``) and its serving store (``publish:<store>``)."""
    tests = [f"test:{t.name}" for t in manifest.tests.values() if t.attached_to == name and t.config.scope == "batch"]
    spec = getattr(manifest.models[name].kind, "publish", None) if name in manifest.models else None
    return (tuple(sorted(m.name for m in manifest.models.values() if isinstance(m.kind, MvKind) and name in m.depends_on_models))
            + tuple(sorted(tests)) + ((f"publish:{spec.to}",) if spec else ()))


@dataclass(frozen=True)
class Input:
    """A table an mv reads: how its changes are seen (``mode``: None when they cannot be) and its key."""

    id: str
    relation: str
    mode: str | None  # None: cannot be mapped (a view, a fact, an undeclared table)
    key: tuple[str, ...]
    columns: tuple[str, ...] | None
    position: tuple[str, ...] = ()
    feed: str | None = None
    why: str = ""
    table_format: str = ""
    origin: str = ""
    unique: tuple[tuple[str, ...], ...] = ()  # alternate unique keys (a source's ``unique:``)
    fix: str = ""  # what to do when it cannot be mapped, if not the usual
    key_from: str = ""
    in_slots: bool = False


def catalog(manifest: "Manifest", model: "Model", reads: set[str],
            plan_of: Callable[["Model"], "MvPlan | None"]) -> dict[str, Input]:
    """Every table the MV reads (its views expanded), by relation name (only those: a project has
    many); ``plan_of``: an upstream mv's plan (None if it has none), whose published key it reads."""
    graph = manifest.graph
    upstream_models = {node_name(n) for n in nx.ancestors(graph, model_id(model.name)) if is_model(n)} \
        if graph is not None and model_id(model.name) in graph else set()
    catalog: dict[str, Input] = {}
    for source in manifest.sources.values():
        if source.id.lower() not in reads:
            continue
        columns = tuple(c.name for c in source.columns) or None
        plain = source.change_mode == "none"  # a dbt source: read in full, its changes unseen
        catalog[source.id.lower()] = Input(
            source.id, source.id.lower(), None if plain else source.change_mode, tuple(source.primary_key), columns,
            position=tuple(source.changes.position if source.changes else source.position),
            feed=source.changes.table if source.changes else None, origin=f"{source.path}:{source.line}",
            unique=source.unique, why=f"source {source.id} ({source.path}:{source.line}) declares no primary key and "
                                      "change mode: declare it in lineage/*.yml" if plain else "",
            key_from=f"primary_key at {source.path}:{source.line}")
    for other in manifest.models.values():
        if other.name == model.name or other.relation not in reads:
            continue
        kind = other.kind.name
        mode = {"table": "table", "seed": "table", "incremental": "table", "mv": "mv"}.get(kind)  # diffed like a table
        declared = declared_key(manifest, other) or key_through_views(manifest, other) if mode == "table" else None
        key, key_from = (declared.columns, declared.origin) if declared else ((), "")
        why = "" if mode else f"model '{other.name}' is a {kind}: mvflow cannot see which of its rows change"
        upstream = plan_of(other) if kind == "mv" and other.name in upstream_models else None
        if upstream is not None:  # upstream only (directly or through views): the DAG ends the recursion
            # its published key: with the grain of one-to-many joins, or a GROUP BY MV's groups
            key, key_from = upstream.published_key, f"mv '{other.name}' derives it"
        columns, fix = tuple(other.columns) if other.columns else None, ""
        if upstream is not None and mode and not upstream.visible_key:  # readers see its SELECT's columns only
            hidden = ", ".join(k for k in upstream.key if k not in upstream.columns)
            mode, why = None, (f"model '{other.name}' keys its rows by what its SELECT does not select ({hidden}, the "
                               "grain of a one-to-many join)")
            fix = f"select the joined table's key in '{other.name}' (e.g. t.id AS tag_id), or read its sources directly"
        catalog[other.relation] = Input(other.name, other.relation, mode, key, columns,
                                        position=(BATCH,) if kind == "mv" else (),
                                        feed=f"{other.relation}__mvflow_changes" if kind == "mv" else None, why=why,
                                        table_format=getattr(other, "table_format", "") or "", fix=fix,
                                        key_from=key_from, in_slots=kind in ("table", "seed") and other.table_format != DELTA)
    return catalog


def key_through_views(manifest: "Manifest", table: "Model") -> DeclaredKey | None:
    """The key a view declares (unique and not_null tests, a constraint) on columns it selects as they
    are from ``table``, its only table, read whole (no WHERE, join or aggregate: one view row per
    row of the table), said of the table's columns; None when no such view declares one.

    >>> from compiler.parse import parse_select
    >>> _renamed(parse_select("select id as customer_id, upper(name) as name from raw.c", "v"), "raw.c")
    {'customer_id': 'id'}
    >>> _renamed(parse_select("select id as customer_id from raw.c where id > 0", "v"), "raw.c") is None
    True
    """
    return manifest.derived("key_through_views", table, lambda: _key_through_views(manifest, table))


def _key_through_views(manifest: "Manifest", table: "Model") -> DeclaredKey | None:
    for view in manifest.models.values():
        if view.kind.name != "view" or table.relation not in {t for t, _ in view.tables_read} or view.ast is None:
            continue
        key = declared_key(manifest, view)
        renamed = _renamed(normalize(view.ast, relations(manifest, view)), table.relation) if key else None
        if renamed is not None and all(column in renamed for column in key.columns):
            columns = tuple(renamed[column] for column in key.columns)
            selects = ", ".join(f"{table.name}.{c} as {k}" for c, k in zip(columns, key.columns))
            return DeclaredKey(columns, f"{key.origin} on the view {view.name}, which selects {selects}")
    return None


def _renamed(query: exp.Expression, relation: str) -> dict[str, str] | None:
    """Output name → column of ``relation`` for a SELECT reading that table whole, else None."""
    if not isinstance(query, exp.Select) or any(query.args.get(arg) for arg in _RESHAPING):
        return None
    found = sources(query)
    if len(found) != 1 or not isinstance(found[0], exp.Table) or table_name(found[0]) != relation:
        return None
    return {e.alias_or_name.lower(): unalias(e).name.lower() for e in query.expressions if isinstance(unalias(e), exp.Column)}
