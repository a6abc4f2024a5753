"""Rule: a view model's relation becomes the view's SELECT (normalized first: its own CTEs, views
and stars) as a derived table under the name it was read by. Where the view's nodes point at
lines, they now point at the line that reads the view: that is the file the error names.

>>> from compiler.parse import parse_select, pretty
>>> views = {"db.v": parse_select("select id, upper(name) as name from raw.t", "v.sql")}
>>> print(pretty(expand_views(parse_select("select v.name from db.v", "m"), lambda name, q: q, views)))
SELECT
  v.name
FROM (
  SELECT
    id,
    UPPER(name) AS name
  FROM raw.t
) AS v
"""

from __future__ import annotations

from typing import Callable, Mapping

from sqlglot import exp

from ....parse import table_name
from .scope import derived_table


def expand_views(query: exp.Query, normalize: Callable[[str, exp.Query], exp.Query],
                 views: Mapping[str, exp.Query]) -> exp.Query:
    """``query`` with every view it reads replaced by its SELECT as ``normalize(relation, SELECT)``
    returns it, in place."""
    for table in list(query.find_all(exp.Table)):
        view = views.get(table_name(table))
        if view is None or not table.db:
            continue
        expanded = normalize(table_name(table), view)
        line = table.this.meta.get("line") if isinstance(table.this, exp.Expression) else None
        for node in expanded.walk():
            if "line" in node.meta:
                node.meta["line"] = line
        if query is table:
            return expanded
        table.replace(derived_table(expanded, table))
    return query
