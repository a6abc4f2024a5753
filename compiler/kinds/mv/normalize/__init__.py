"""Normalization: the SELECT a user writes → the flat SELECT an MV's analysis reads (pure).

dbt-style models read staging views through import CTEs (``with orders as (select * from
{{ ref('stg_orders') }})``), select ``*``, and wrap tables in derived tables that only rename,
compute and filter columns. Each rule rewrites one of those into the shape ``plan`` analyses
(tables joined by equalities) without changing the query's result, one rule per module:

1. ``ctes``:  a CTE reference → the CTE's SELECT, as a derived table;
2. ``views``: a view model's relation → the view's SELECT (normalized), as a derived table;
3. ``stars``: ``*`` and ``t.*`` → the columns they stand for; unqualified columns qualified;
4. ``semijoins``: ``IN`` / ``EXISTS`` / ``NOT EXISTS`` by a table's unique key → a join;
5. ``distinct``: ``SELECT DISTINCT`` → a ``GROUP BY`` of its columns;
6. ``merge``: a derived table that only renames, computes and filters columns → its tables.

Rules 3 to 6 run bottom-up, innermost SELECT first. What a rule cannot rewrite is left as it
is, for the analysis to refuse with its line and what to write instead.

>>> from compiler.parse import parse_select, pretty
>>> relations = Relations(columns={"raw.orders": ("id", "user_id", "status")},
...                       views={"db.stg_orders": parse_select(
...                           "select id as order_id, user_id as customer_id, status from raw.orders", "stg.sql")})
>>> print(pretty(normalize(parse_select(
...     "with orders as (select * from db.stg_orders where status <> 'returned') "
...     "select order_id, customer_id from orders", "m.sql"), relations)))
SELECT
  stg_orders.id AS order_id,
  stg_orders.user_id AS customer_id
FROM raw.orders AS stg_orders
WHERE
  stg_orders.status <> 'returned'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from sqlglot import exp

from .ctes import inline_ctes
from .distinct import distinct_as_group_by
from .merge import merge_derived_tables
from .scope import filters, sources
from .semijoins import Keys, semijoins_as_joins
from .stars import expand_stars, qualify_columns
from .views import expand_views


@dataclass(frozen=True)
class Relations:
    """What normalization knows of the tables a query names (``db.name``, lower case)."""

    columns: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)  # None: not known
    views: Mapping[str, exp.Query] = field(default_factory=dict)  # a view's SELECT as rendered
    keys: Keys = field(default_factory=dict)  # its unique keys, the primary key first


def normalize(query: exp.Query, relations: Relations, expanded: list[str] | None = None) -> exp.Query:
    """``query`` rewritten by every rule (a copy; ``query`` is left as it is); the relations of the
    views expanded, at any depth, are added to ``expanded``."""
    def view(relation: str, select: exp.Query) -> exp.Query:
        if expanded is not None and relation not in expanded:
            expanded.append(relation)
        return normalize(select, relations, expanded)

    return _flatten(expand_views(inline_ctes(query.copy()), view, relations.views), relations)


def _flatten(query: exp.Expression, relations: Relations, part: bool = False) -> exp.Expression:
    """``query`` with rules 3 to 6 applied bottom-up; returns what takes its place. A ``part`` of a
    set operation keeps its DISTINCT (a part cannot aggregate)."""
    if isinstance(query, exp.SetOperation):
        query.set("this", _flatten(query.left, relations, part=True))
        query.set("expression", _flatten(query.right, relations, part=True))
    elif isinstance(query, exp.Subquery):
        query.set("this", _flatten(query.this, relations, part))
    elif isinstance(query, exp.Select):
        for source in sources(query):
            if isinstance(source, exp.Subquery):
                _flatten(source, relations)
        for nested in filters(query):
            nested.set("this", _flatten(nested.this, relations))
        expand_stars(query, relations.columns)
        qualify_columns(query, relations.columns)
        semijoins_as_joins(query, relations.keys)
        merged = merge_derived_tables(query if part else distinct_as_group_by(query))
        if isinstance(merged, exp.Select):  # NOT IN needs its column's table: known once a derived FROM is merged
            semijoins_as_joins(merged, relations.keys)
        return merged
    return query
