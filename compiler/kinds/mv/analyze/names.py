"""Phase 2, names: every table of a part is a known input with a key, every column is qualified by
an alias of the part and names a column of that input, and a join condition reads only the tables
joined before it.

>>> from compiler.parse import parse_select
>>> from compiler.kinds.mv.analyze.report import Report
>>> from compiler.kinds.mv.inputs import Input
>>> report = Report("mv", "models/mv.sql", 0)
>>> found = resolve(report, {"d.o": Input("d.o", "d.o", "position", ("id",), ("id", "x"))},
...                 parse_select("SELECT o.id, o.y FROM d.o AS o", "models/mv.sql"))
>>> found["order"], [p.code for p in report.problems]
(['o'], ['mv-unknown-column'])
"""

from __future__ import annotations

from sqlglot import exp

from ....parse import table_name
from ..inputs import Input
from ..shape import SUGGEST_TABLE
from .report import Report


def resolve(report: Report, catalog: dict[str, Input], select: exp.Select) -> dict | None:
    """``{"aliases": {alias: Input}, "order": [alias, …]}`` of one part (main source first), its
    columns qualified in place; None when a table is not a usable input."""
    main = select.args.get("from_") or select.args.get("from")
    if main is None or not isinstance(main.this, exp.Table):
        report.problem(select, "mv-subquery", "an mv reads FROM a table (its main source)", SUGGEST_TABLE)
        return None
    tables = [main.this] + [j.this for j in select.args.get("joins") or []]
    aliases: dict[str, Input] = {}
    order: list[str] = []
    for table in tables:
        alias = table.alias_or_name.lower()
        if alias in aliases:
            report.problem(table, "mv-unknown-alias", f"alias '{alias}' is used twice", "give every table its own alias")
        source = _input(report, catalog, table)
        if source is not None:
            aliases[alias] = source
            order.append(alias)
    if len(order) != len(tables):
        return None
    _qualify(report, select, order)
    _check_columns(report, select, aliases, order)
    return {"aliases": aliases, "order": order}


def _input(report: Report, catalog: dict[str, Input], table: exp.Table) -> Input | None:
    name = table_name(table)
    found = catalog.get(name)
    if found is None:
        report.problem(table, "mv-unmappable-input", f"{name} is not a declared source or a model",
                       "declare it in lineage/*.yml (with its primary key and change mode) and use source()")
        return None
    if found.mode is None:
        report.problem(table, "mv-unmappable-input", f"changes of {name} cannot be mapped to MV keys: {found.why}",
                       found.fix or "read its sources directly, or make it a 'table' with a unique_key or an 'mv'")
        return None
    if not found.key:
        report.problem(table, "mv-no-key", f"input {name} has no primary key",
                       "declare primary_key for a source; for a model or seed, unique_key in its config or a column "
                       "with both unique and not_null tests (on it, or on a view that selects it whole: no WHERE)")
        return None
    return found


def _qualify(report: Report, select: exp.Select, order: list[str]) -> None:
    for column in select.find_all(exp.Column):
        if column.is_star:
            continue
        if not column.table:
            if len(order) == 1:
                column.set("table", exp.to_identifier(order[0]))
            else:
                report.problem(column, "mv-unqualified-column", f"column '{column.name}' is not qualified",
                               f"write alias.{column.name} (aliases: {', '.join(order)})")


def _check_columns(report: Report, select: exp.Select, aliases: dict[str, Input], order: list[str]) -> None:
    for column in select.find_all(exp.Column):
        alias = column.table.lower()
        if not alias or column.is_star:
            continue
        if alias not in aliases:
            report.problem(column, "mv-unknown-alias", f"unknown alias '{alias}' in {column.sql(dialect='spark')}",
                           f"aliases in this SELECT: {', '.join(order)}")
            continue
        known = aliases[alias].columns
        if known is not None and column.name.lower() not in {c.lower() for c in known}:
            report.problem(column, "mv-unknown-column", f"{aliases[alias].relation} has no column '{column.name}'",
                           "columns: " + ", ".join(known))
    for position, join in enumerate(select.args.get("joins") or [], start=1):
        visible = set(order[: position + 1])
        for column in join.args["on"].find_all(exp.Column):
            alias = column.table.lower()
            if alias in aliases and alias not in visible:
                report.problem(column, "mv-unknown-alias", f"join of '{order[position]}' refers to '{alias}', joined later",
                               "a join condition may use only the tables joined before it")
