"""Rule: ``SELECT DISTINCT`` becomes a ``GROUP BY`` of every selected expression (one row per
distinct combination either way; both take NULLs as equal), which the analysis refreshes by group.

>>> from compiler.parse import parse_select, pretty
>>> print(pretty(distinct_as_group_by(parse_select("select distinct o.shop_id, upper(o.city) as city from raw.o as o", "m"))))
SELECT
  o.shop_id,
  UPPER(o.city) AS city
FROM raw.o AS o
GROUP BY
  o.shop_id,
  UPPER(o.city)
"""

from __future__ import annotations

from sqlglot import exp

from .scope import star, unalias


def distinct_as_group_by(select: exp.Select) -> exp.Select:
    """``select`` with a plain DISTINCT turned into a GROUP BY, in place (returned for chaining)."""
    distinct = select.args.get("distinct")
    if distinct is None or distinct.args.get("on") or select.args.get("group") or any(star(e) for e in select.expressions):
        return select
    if select.find(exp.AggFunc, exp.Window):
        return select
    select.set("distinct", None)
    select.set("group", exp.Group(expressions=[unalias(e).copy() for e in select.expressions]))
    return select
