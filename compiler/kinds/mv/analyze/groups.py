"""A GROUP BY MV's *members*: its row-level SELECT, whose rows (one per main row) are refreshed by
key like any MV's, and from which the batch recomputes the groups they belong to.

>>> from compiler.parse import parse_select, pretty
>>> from compiler.kinds.mv.analyze.report import Report
>>> from compiler.kinds.mv.inputs import Input
>>> select = parse_select("SELECT o.shop_id, count(*) AS n FROM d.o AS o GROUP BY o.shop_id", "models/mv.sql")
>>> rows, groups = members(Report("mv", "models/mv.sql", 0), select, {"order": ["o"],
...     "aliases": {"o": Input("d.o", "d.o", "position", ("id",), None)}}, ())
>>> pretty(rows).split(), [name for name, _ in groups]
(['SELECT', 'o.id', 'AS', '_mvflow_m_id,', 'o.shop_id', 'AS', 'shop_id', 'FROM', 'd.o', 'AS', 'o'], ['shop_id'])
"""

from __future__ import annotations

from sqlglot import exp

from ..plan import HIDDEN_PREFIX, output_names, unalias
from ..shape import is_literal
from .report import Report

Groups = tuple[tuple[str, exp.Expression], ...]  # (output column, expression) per GROUP BY column


def members(report: Report, select: exp.Select, info: dict, unique_key: tuple[str, ...]) -> tuple[exp.Select, Groups]:
    """Per main row, its main key (hidden ``_mvflow_m_<col>``) and the values it is grouped by, under
    the group columns' names; and the groups."""
    group = select.args.get("group")
    outputs, names = [unalias(e) for e in select.expressions], output_names(select)
    how = "GROUP BY the selected columns that key the MV's rows, e.g. SELECT o.shop_id, count(*) AS n … GROUP BY o.shop_id"
    if group is None or not group.expressions or any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets", "all")) \
            or any(isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions):
        report.problem(group or select, "mv-aggregate", "an mv aggregates by GROUP BY of plain expressions only "
                       "(not without GROUP BY, nor ROLLUP, CUBE, GROUPING SETS or GROUP BY ALL)", how)
        return select, ()
    found: dict[int, exp.Expression] = {}
    for expression in group.expressions:
        ordinal = expression.is_int and 0 < int(expression.name) <= len(outputs)
        at = int(expression.name) - 1 if ordinal else next((i for i, o in enumerate(outputs) if o == expression), None)
        if at is None:
            report.problem(expression, "mv-aggregate", f"GROUP BY {expression.sql(dialect='spark')} is not a selected "
                           "column: the MV's rows are keyed by their group columns", how)
        elif outputs[at].find(exp.AggFunc):
            report.problem(expression, "mv-aggregate", f"GROUP BY column '{names[at]}' is an aggregate", how)
        else:
            found[at] = outputs[at]
    for at, output in enumerate(outputs):
        if at not in found and not output.find(exp.AggFunc) and not is_literal(output):  # a constant: the same in every group
            report.problem(select.expressions[at], "mv-aggregate",
                           f"column '{names[at]}' is neither in GROUP BY nor an aggregate", how)
    groups = tuple((names[at], found[at]) for at in sorted(found))
    if unique_key and {k.lower() for k in unique_key} != {name for name, _ in groups}:
        report.problem(select, "mv-key-not-derivable", f"unique_key ({', '.join(unique_key)}) differs from the "
                       f"GROUP BY columns ({', '.join(name for name, _ in groups)}), which key a GROUP BY mv",
                       "leave unique_key out, or name the GROUP BY columns")
    main = info["order"][0]
    rows = select.copy()
    rows.set("group", None)
    rows.set("having", None)
    keys = [exp.alias_(exp.column(k.lower(), main), f"{HIDDEN_PREFIX}m_{k.lower()}") for k in info["aliases"][main].key]
    rows.set("expressions", keys + [exp.alias_(expr.copy(), name) for name, expr in groups])
    return rows, groups
