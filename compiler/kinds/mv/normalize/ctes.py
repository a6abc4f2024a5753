"""Rule: a reference to a CTE becomes the CTE's SELECT as a derived table, under the name it was
referenced by; the WITH goes. A CTE read twice becomes two derived tables (each is analysed as
the tables it reads).

>>> from compiler.parse import parse_select, pretty
>>> print(pretty(inline_ctes(parse_select(
...     "with a as (select id from t), b as (select id from a) select b.id from b join a as x on x.id = b.id", "m"))))
SELECT
  b.id
FROM (
  SELECT
    id
  FROM (
    SELECT
      id
    FROM t
  ) AS a
) AS b
JOIN (
  SELECT
    id
  FROM t
) AS x
  ON x.id = b.id
"""

from __future__ import annotations

from sqlglot import exp

from .scope import derived_table


def inline_ctes(query: exp.Query, outer: dict[str, exp.Query] | None = None) -> exp.Query:
    """``query`` with every CTE it can see (its own, then ``outer``'s) inlined, in place."""
    scope = dict(outer or {})
    with_ = query.args.get("with_")
    if with_ is not None and not with_.args.get("recursive"):
        for cte in with_.expressions:
            scope[cte.alias_or_name.lower()] = inline_ctes(cte.this, scope)
        query.set("with_", None)
    for nested in _nested_queries(query):
        inline_ctes(nested, scope)
    for table in list(query.find_all(exp.Table)):
        name = table.name.lower()
        if not table.db and name in scope and _nearest_query(table) is query:
            table.replace(derived_table(scope[name].copy(), table))
    return query


def _nested_queries(query: exp.Query) -> list[exp.Query]:
    """The queries directly inside ``query`` (derived tables, subqueries in expressions, union sides)."""
    return [node for node in query.walk(prune=lambda n: n is not query and isinstance(n, exp.Query))
            if node is not query and isinstance(node, exp.Query)]


def _nearest_query(node: exp.Expression) -> exp.Expression | None:
    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Query):
        parent = parent.parent
    return parent
