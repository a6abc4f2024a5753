"""What each join of a part binds (``Link``): the joined input's primary key or a unique key it
declares (at most one match per row), or neither (one-to-many: the MV's grain gains its key).

>>> from compiler.parse import parse_select
>>> from compiler.kinds.mv.analyze.report import Report
>>> from compiler.kinds.mv.inputs import Input
>>> select = parse_select("SELECT o.id FROM d.o AS o JOIN d.c AS c ON c.id = o.cid", "models/mv.sql")
>>> info = {"order": ["o", "c"], "aliases": {"o": Input("d.o", "d.o", "position", ("id",), None),
...                                          "c": Input("d.c", "d.c", "dictionary", ("id",), None)}}
>>> [(l.alias, l.key, l.many) for l in links(Report("mv", "models/mv.sql", 0), select, info)]
[('c', ('id',), False)]
"""

from __future__ import annotations

from sqlglot import exp

from ..inputs import Input
from ..normalize.scope import conjuncts
from ..plan import HIDDEN_PREFIX, Link, alias_of, is_column_of
from ..shape import is_equality
from .report import Report


def links(report: Report, select: exp.Select, info: dict) -> list[Link]:
    """The ``Link`` of every join of ``select``, in join order."""
    return [link(report, join, alias, info["aliases"][alias])
            for join, alias in zip(select.args.get("joins") or [], info["order"][1:])]


def link(report: Report, join: exp.Join, alias: str, source: Input) -> Link:
    """What the join of ``source`` AS ``alias`` binds: its columns equal to earlier tables' columns
    or to literals, the tables it depends on, and the key that gives at most one match."""
    bound: dict[str, exp.Column] = {}
    literals: dict[str, exp.Expression] = {}
    parents: set[str] = set()
    for conjunct in conjuncts(join.args["on"]):
        if not is_equality(conjunct):  # a filter on the joined rows: it binds nothing
            continue
        left, right = conjunct.this, conjunct.expression
        mine, other = (left, right) if alias_of(left) == alias else (right, left)
        if alias_of(mine) != alias:
            parents |= {alias_of(c) for c in conjunct.find_all(exp.Column)}
            continue
        if isinstance(other, exp.Column):
            if alias_of(other) == alias:
                report.problem(conjunct, "mv-join-condition", f"'{conjunct.sql(dialect='spark')}' compares '{alias}' with itself",
                               "a join condition links the joined table to a table joined before it")
                continue
            parents.add(alias_of(other))
            bound.setdefault(mine.name.lower(), other)
        else:
            literals.setdefault(mine.name.lower(), other)

    def binds(columns: tuple[str, ...]) -> bool:
        return all(k.lower() in bound or k.lower() in literals for k in columns)

    primary = tuple(k.lower() for k in source.key)
    via: tuple[str, ...] = ()  # an alternate unique key the join binds instead of the primary key
    many = False  # no unique key bound: the MV's grain gains the joined table's primary key
    if not binds(source.key):
        via = next((tuple(k.lower() for k in u) for u in source.unique if binds(u)), ())
        many = not via
    # a one-to-many join keeps every column it binds (they say which rows it matches)
    key = via or (tuple(sorted({*bound, *literals})) if many else primary)
    side = "left" if join.args.get("side") == "LEFT" else "inner"
    return Link(alias, source.id, side, join.args["on"], tuple(sorted(parents)),
                tuple((k, bound[k]) for k in key if k in bound),
                tuple((k, literals[k]) for k in key if k not in bound and k in literals),
                report.line(join) or 0, primary, via, many)


def grain(select: exp.Select, links: list[Link], columns: list[str]) -> tuple[str, ...]:
    """Per primary key column of each one-to-many joined table, the MV column that holds it:
    the selected column, else the link's hidden key column (which keeps the joined row's key)."""
    names = []
    for link in links:
        for k in link.key if link.many else ():
            selected = next((columns[i] for i, e in enumerate(select.expressions) if is_column_of(e, link.alias, k)), None)
            names.append(selected or f"{HIDDEN_PREFIX}k_{link.alias}_{k}")
    return tuple(names)
