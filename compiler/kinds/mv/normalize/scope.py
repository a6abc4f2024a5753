"""What the rules share: the tables and derived tables one SELECT reads, and its own columns."""

from __future__ import annotations

from typing import Iterator, Mapping

from sqlglot import exp

from ....parse import table_name


def sources(select: exp.Select) -> list[exp.Expression]:
    """What the SELECT reads, FROM first, then each join's (tables and derived tables)."""
    main = select.args.get("from_")
    joins = [join.this for join in select.args.get("joins") or []]
    return ([main.this] if main is not None else []) + joins


def filters(select: exp.Select) -> list[exp.Expression]:
    """The subqueries of the SELECT's WHERE (``IN (SELECT …)`` and ``EXISTS``), outermost only."""
    where = select.args.get("where")
    if where is None:
        return []
    return [n for n in where.walk(prune=lambda n: isinstance(n, (exp.Subquery, exp.Exists)))
            if isinstance(n, (exp.Subquery, exp.Exists))]


def conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    """The ANDed parts of a condition, parentheses removed."""
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        return conjuncts(condition.this) + conjuncts(condition.expression)
    return [condition]


def alias(source: exp.Expression) -> str:
    return source.alias_or_name.lower()


def own_columns(select: exp.Select) -> Iterator[exp.Column]:
    """The columns of the SELECT itself, not of the queries nested in it."""
    for node in select.walk(prune=lambda n: n is not select and isinstance(n, (exp.Query, exp.Subquery))):
        if isinstance(node, exp.Column):
            yield node


def output_names(query: exp.Expression) -> tuple[str, ...] | None:
    """The column names a query returns (None while a ``*`` is left in it)."""
    while isinstance(query, (exp.SetOperation, exp.Subquery)):
        query = query.left if isinstance(query, exp.SetOperation) else query.this
    if not isinstance(query, exp.Select) or any(star(e) for e in query.expressions):
        return None
    return tuple(e.alias_or_name.lower() for e in query.expressions)


def columns_of(source: exp.Expression, known: Mapping[str, tuple[str, ...] | None]) -> tuple[str, ...] | None:
    """The columns a table or derived table gives (None: not known)."""
    if isinstance(source, exp.Subquery):
        return output_names(source.this)
    if isinstance(source, exp.Table):
        found = known.get(table_name(source))
        return tuple(c.lower() for c in found) if found is not None else None
    return None


def star(projection: exp.Expression) -> bool:
    return isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star)


def unalias(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node


def derived_table(query: exp.Query, table: exp.Table) -> exp.Subquery:
    """``query`` as a derived table in the place of ``table``: under its name, at its line."""
    name = exp.to_identifier(table.alias_or_name)
    name.meta.update(table.this.meta if isinstance(table.this, exp.Expression) else {})
    return exp.Subquery(this=query, alias=exp.TableAlias(this=name))
