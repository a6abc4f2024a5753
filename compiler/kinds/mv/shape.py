"""Phase 1 of an mv's analysis (``plan``): the shape of its normalized SELECT — UNION ALL parts of
SELECTs, each FROM tables joined by [INNER] or LEFT JOIN on equalities, with no construct an mv
cannot refresh by key (a derived table left unmerged, a subquery in an expression, ORDER BY,
LIMIT, QUALIFY, DISTINCT or windows or aggregates in a UNION ALL part). Each problem is reported
with its node (for its line), a stable code and what to write instead (pure).

>>> from compiler.parse import parse_select
>>> found = []
>>> parts = check_shape(parse_select("SELECT o.id FROM d.o AS o RIGHT JOIN d.s AS s ON s.id = o.s_id "
...                                  "UNION ALL SELECT o.id FROM d.o AS o", "m"),
...                     lambda node, code, message, hint=None: found.append((code, message)))
>>> len(parts), found
(2, [('mv-join-kind', 'RIGHT JOIN is not supported in an mv')])
"""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

from .normalize.merge import why_not_merged
from .normalize.scope import conjuncts, sources

#: report(node, code, message, hint): one problem at the node's line
Report = Callable[..., None]
SUGGEST_TABLE = "an mv is refreshed by key from joins only: use materialized='table' for this query"


def check_shape(query: exp.Query, report: Report) -> list[exp.Select]:
    """Phase 1: the SELECTs of ``query`` (its UNION ALL parts), each checked for what an mv cannot hold."""
    if query.args.get("with_") or query.args.get("with"):
        report(query, "mv-subquery", "WITH (common table expressions) is not supported in an mv", SUGGEST_TABLE)
    selects = _union_parts(query, report)
    for select in selects:
        _check_select(select, len(selects) == 1, report)
    return selects


def _union_parts(query: exp.Expression, report: Report) -> list[exp.Select]:
    if isinstance(query, exp.Union) and not query.args.get("distinct"):
        return _union_parts(query.left, report) + _union_parts(query.right, report)
    if isinstance(query, exp.SetOperation):
        report(query, "mv-set-operation", f"{query.key.upper()} is not supported in an mv",
               "combine parts with UNION ALL, each with a constant discriminator column in the key")
        return []
    if isinstance(query, exp.Subquery):
        return _union_parts(query.this, report)
    if not isinstance(query, exp.Select):
        report(query, "mv-subquery", "an mv is a SELECT or a UNION ALL of SELECTs", SUGGEST_TABLE)
        return []
    return [query]


def _check_select(select: exp.Select, alone: bool, report: Report) -> None:
    derived = [s for s in sources(select) if isinstance(s, exp.Subquery)]
    for table in derived:
        why = why_not_merged(select, table) or "it could not be merged"
        hint = ("make the aggregate an mv of its own, or the model a 'table'" if "aggregat" in why else
                "write it as tables joined by keys, or make the model a 'table'")
        report(table.args.get("alias") or table, "mv-subquery",
               f"the derived table '{table.alias_or_name}' (a CTE, view or subquery) cannot be refreshed by key: {why}",
               hint)
    reported = {id(table) for table in derived}
    checks = (
        (not alone and aggregates(select), "mv-aggregate",
         "aggregates (GROUP BY, HAVING, aggregate functions) are not supported in a UNION ALL part of an mv"),
        (select.args.get("distinct"), "mv-distinct",
         "SELECT DISTINCT is not supported in a UNION ALL part of an mv, nor with window functions",
         "a part's rows are unique by its key already: leave DISTINCT out, or make the part an mv of its own"),
        (select.args.get("qualify"), "mv-window", "QUALIFY is not supported in an mv",
         "select the window's value as a column and filter readers' queries by it, or make the model a 'table'"),
        (not alone and select.find(exp.Window), "mv-window", "window functions are not supported in a UNION ALL part of an mv",
         "make the part an mv of its own"),
        (alone and aggregates(select) and select.find(exp.Window), "mv-window",
         "window functions are not supported in an mv that aggregates (GROUP BY)",
         "compute the window in an mv that reads this one, or make the model a 'table'"),
        (next((s for s in select.find_all(exp.Subquery, exp.Exists) if s is not select and id(s) not in reported), None)
         or next((s for s in select.find_all(exp.Select) if s is not select and id(s.parent) not in reported), None),
         "mv-subquery", "subqueries (IN, EXISTS, scalar) are not supported in an mv"),
        (select.args.get("order") or select.args.get("limit") or select.args.get("offset"), "mv-order-limit",
         "ORDER BY / LIMIT are not supported in an mv"),
        (select.args.get("laterals"), "mv-subquery", "LATERAL VIEW is not supported in an mv"),
    )
    for node, code, message, *hint in checks:
        if node:
            report(node if isinstance(node, exp.Expression) else select, code, message, *(hint or [SUGGEST_TABLE]))
    for projection in select.expressions:
        if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star):
            report(projection, "mv-star", "SELECT * over tables whose columns are not known is not supported "
                   "in an mv", "declare the source's columns in lineage/*.yml, or list the columns: mvflow "
                   "derives the key and the hidden columns from them")
    for join in select.args.get("joins") or []:
        _check_join(join, report)


def _check_join(join: exp.Join, report: Report) -> None:
    side, kind = join.args.get("side"), join.args.get("kind")
    what = " ".join(p for p in (join.args.get("method"), side, kind) if p) or "JOIN"
    if join.args.get("method") or side not in (None, "LEFT") or kind not in (None, "INNER", "OUTER") \
            or (kind == "OUTER" and side != "LEFT"):
        full = side == "FULL"
        report(join, "mv-join-kind", f"{what} JOIN is not supported in an mv" +
               (": its rows have no main table whose key they keep" if full else ""),
               "write the UNION ALL of a LEFT JOIN from each side, the second keeping its unmatched rows "
               "(WHERE a.id IS NULL), each part with its own constant kind column (e.g. 'a' AS side, 'b' AS "
               "side): rows are then keyed by (side, id)" if full else
               "use [INNER] JOIN or LEFT JOIN with ON conditions; the main (leftmost) table gives the key")
        return
    if join.args.get("using") or not join.args.get("on"):
        report(join, "mv-join-kind", "a join without ON conditions is not supported in an mv",
               "write ON x.col = y.col AND …")
        return
    if not isinstance(join.this, exp.Table):
        return  # a derived table: reported with its reason
    joined = join.this.alias_or_name.lower()
    for conjunct in conjuncts(join.args["on"]):
        if not is_equality(conjunct) and not filters(conjunct, joined):
            report(conjunct, "mv-join-condition", f"join condition '{conjunct.sql(dialect='spark')}' is not an equality",
                   "a join condition is an AND of column = column, column = literal and conditions on the "
                   "joined table's own columns; move other filters to WHERE")


# -- small AST helpers -------------------------------------------------------------------
def aggregates(select: exp.Select) -> bool:
    """GROUP BY, HAVING or an aggregate function (``sum(x) OVER (…)`` is a window, not an aggregate)."""
    return bool(select.args.get("group") or select.args.get("having") or any(
        not isinstance(agg.find_ancestor(exp.Window, exp.Select), exp.Window) for agg in select.find_all(exp.AggFunc)))


def is_literal(node: exp.Expression) -> bool:
    if isinstance(node, exp.Neg):
        return is_literal(node.this)
    if isinstance(node, exp.Cast):
        return is_literal(node.this)
    return isinstance(node, (exp.Literal, exp.Boolean))


def is_equality(node: exp.Expression) -> bool:
    if not isinstance(node, exp.EQ):
        return False
    sides = (node.this, node.expression)
    columns = [s for s in sides if isinstance(s, exp.Column)]
    return len(columns) == 2 or (len(columns) == 1 and any(is_literal(s) for s in sides))


def filters(node: exp.Expression, alias: str) -> bool:
    """Whether a join condition reads the joined table's columns only (a filter on its rows)."""
    return {c.table.lower() for c in node.find_all(exp.Column)} == {alias} and not node.find(exp.Query)
