"""Parsing rendered SQL with sqlglot (Spark dialect): one SELECT per model.

Everything here is pure: SQL text in, sqlglot ASTs and names out.
"""

from __future__ import annotations

from typing import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify

from .errors import CompileError, Problem, snippet

DIALECT = "spark"


def parse_select(sql: str, path: str) -> exp.Query:
    """Parse one model's rendered SQL; anything but exactly one query is a CompileError.

    >>> parse_select("select a from t", "m.sql").sql()
    'SELECT a FROM t'
    """
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line, col = first.get("line"), first.get("col")
        description = first.get("description", str(exc)).split("\n")[0]
        raise CompileError(
            Problem(
                f"SQL syntax error in the rendered SQL: {description}",
                path, line, col,
                hint="fix the SQL near this line (line numbers are of the rendered SQL, see target/compiled/)",
                code="sql-syntax",
                snippet=snippet(sql, line, col) if line else None,
            )
        ) from exc
    if len(statements) != 1:
        raise CompileError(
            Problem(f"a model holds exactly one SELECT, found {len(statements)} statements", path, 1,
                    hint="move other statements to before/after hooks or to another model", code="not-one-select")
        )
    statement = statements[0]
    if not isinstance(statement, exp.Query):
        raise CompileError(
            Problem(f"a model is a SELECT, found {statement.key.upper()}", path, 1,
                    hint="write the model as a SELECT; mvflow writes the DDL/DML itself", code="not-a-select")
        )
    return statement


def table_name(table: exp.Table) -> str:
    """``db.name`` of a table node (no catalog), lower-cased as Spark's catalog does."""
    return ".".join(part for part in (table.db, table.name) if part).lower()


def table_references(query: exp.Query) -> list[tuple[str, int]]:
    """Physical tables a query reads (not its CTEs), in order of appearance, with their lines.

    >>> table_references(parse_select("with c as (select * from a.x) select * from c join b.y", "m"))
    [('a.x', 1), ('b.y', 1)]
    """
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    seen: dict[str, tuple[int, int]] = {}
    for table in query.find_all(exp.Table):
        name = table_name(table)
        if not name or (not table.db and name in ctes):
            continue
        meta = table.this.meta if isinstance(table.this, exp.Expression) else {}
        where = (meta.get("line", 1), meta.get("start", 0))
        seen[name] = min(seen.get(name, where), where)
    return [(name, where[0]) for name, where in sorted(seen.items(), key=lambda item: item[1])]


def output_columns(query: exp.Query, schema: Mapping[str, Mapping[str, Mapping[str, str]]]) -> list[str] | None:
    """Output column names of a query; ``*`` is expanded when the schema knows the tables.

    Returns None when a ``*`` cannot be expanded.

    >>> output_columns(parse_select("select a, b + 1 as c from t", "m"), {})
    ['a', 'c']
    >>> output_columns(parse_select("select * from d.t", "m"), {"d": {"t": {"x": "int"}}})
    ['x']
    """
    select = _leftmost_select(query)
    if not any(isinstance(p, exp.Star) or (isinstance(p, exp.Column) and p.is_star) for p in select.expressions):
        return [p.alias_or_name for p in select.expressions]
    try:
        qualified = qualify(
            query.copy(), schema=dict(schema) or None, dialect=DIALECT, validate_qualify_columns=False,
            identify=False, quote_identifiers=False,
        )
    except (OptimizeError, SqlglotError, KeyError, ValueError):
        return None
    names = [p.alias_or_name for p in _leftmost_select(qualified).expressions]
    return None if "*" in names else names


def _leftmost_select(query: exp.Query) -> exp.Select:
    while isinstance(query, exp.SetOperation):
        query = query.left
    while isinstance(query, exp.Subquery):
        query = query.this
    return query  # type: ignore[return-value]


def pretty(query: exp.Expression) -> str:
    """Stable, readable Spark SQL for reviewers."""
    return query.sql(dialect=DIALECT, pretty=True)
