"""Parsing rendered SQL with sqlglot (Spark dialect): one SELECT per model.

Everything here is pure: SQL text in, sqlglot ASTs and names out.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, SqlglotError, TokenError
from sqlglot.optimizer.qualify import qualify
from sqlglot.tokens import TokenType

from .depth import nesting_problem, too_deep
from .errors import CompileError, Problem, snippet

DIALECT = "spark"


def parse_select(sql: str, path: str, what: str = "model") -> exp.Query:
    """Parse one model's rendered SQL (or a singular data test's: ``what``); anything but exactly one
    query is a CompileError.

    >>> parse_select("select a from t", "m.sql").sql()
    'SELECT a FROM t'
    >>> parse_select("drop table t", "tests/t.sql", "singular test")
    Traceback (most recent call last):
    ...
    compiler.errors.CompileError: tests/t.sql:1: [not-a-select] a singular test is a SELECT, found DROP — write the test as a SELECT of the rows that fail: mvflow counts them, and a test never changes data
    """
    too_deep_here = nesting_problem(sql, path, DIALECT)
    if too_deep_here is not None:
        raise CompileError(too_deep_here)
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except RecursionError:
        raise CompileError(too_deep(path)) from None
    except TokenError as exc:
        raise _token_error(exc, sql, path) from exc
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line, col = first.get("line"), first.get("col")
        description = _describe(first.get("description", str(exc)).split("\n")[0])
        raise CompileError(
            Problem(
                f"SQL syntax error in the rendered SQL: {description}",
                path, line, col,
                hint="fix the SQL near this line (the snippet shows the SQL after Jinja rendering)",
                code="sql-syntax",
                snippet=snippet(sql, line, col) if line else None,
            )
        ) from exc
    if not statements:
        raise CompileError(Problem(f"the {what} holds no SQL", path, 1, hint="write one SELECT", code="not-one-select"))
    if len(statements) > 1:
        starts = _statement_lines(sql)
        raise CompileError(
            Problem(f"a {what} holds exactly one SELECT, found {len(statements)} statements (the second starts here)",
                    path, starts[1] if len(starts) > 1 else 1,
                    hint=_SELECT_HINTS.get(what, _SELECT_HINTS["model"])[0], code="not-one-select")
        )
    statement = statements[0]
    if not isinstance(statement, exp.Query):
        starts = _statement_lines(sql)
        raise CompileError(
            Problem(f"a {what} is a SELECT, found {statement.key.upper()}", path, starts[0] if starts else 1,
                    hint=_SELECT_HINTS.get(what, _SELECT_HINTS["model"])[1], code="not-a-select")
        )
    return statement


#: what to do with a file that is not one SELECT: (more than one statement, not a SELECT)
_SELECT_HINTS = {
    "model": ("move other statements to before/after hooks or to another model",
              "write the model as a SELECT; mvflow writes the DDL/DML itself"),
    "singular test": ("keep one SELECT of the rows that fail", "write the test as a SELECT of the rows that fail: mvflow "
                      "counts them, and a test never changes data"),
}


def _describe(description: str) -> str:
    """sqlglot's parse error text, without Python class and token reprs.

    >>> _describe("Required keyword: 'this' missing for <class 'sqlglot.expressions.query.Where'>")
    'incomplete WHERE: something is missing after it'
    >>> _describe("Expected table name but got <Token token_type: TokenType.SENTINEL, text: SENTINEL, line: 1>")
    'Expected table name but got the end of the SQL'
    """
    missing = re.match(r"Required keyword: '\w+' missing for <class '[\w.]*\.(\w+)'>", description)
    if missing:
        return f"incomplete {missing.group(1).upper()}: something is missing after it"
    description = re.sub(r"<Token token_type: TokenType\.SENTINEL[^>]*>", "the end of the SQL", description)
    return re.sub(r"<Token token_type: [^,]*, text: ([^,]*),[^>]*>", r"'\1'", description)


def _token_error(exc: TokenError, sql: str, path: str) -> CompileError:
    """An unterminated quote or comment: sqlglot's cause names the offset where it starts."""
    # the tokenizer's own error is the cause (pure Python) or only the context (sqlglotc)
    match = re.search(r"Missing (\S+) from \d+:(\d+)", str(exc.__cause__ or exc.__context__ or ""))
    opened, offset = (match.group(1), int(match.group(2))) if match else ("/*", sql.rfind("/*"))
    if not match and (offset < 0 or "*/" in sql[offset:]):
        opened, offset = "", -1
    line = col = None
    if offset >= 0:
        line = sql.count("\n", 0, offset) + 1
        col = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    what = f"{opened} opened here is never closed" if opened else "cannot split the SQL into tokens"
    return CompileError(
        Problem(f"SQL syntax error in the rendered SQL: {what}", path, line, col,
                hint="close the quote, backtick or comment", code="sql-syntax",
                snippet=snippet(sql, line, col) if line else None)
    )


def _statement_lines(sql: str) -> list[int]:
    """The line where each statement of ``sql`` starts (its first token, comments skipped)."""
    lines, after_semicolon = [], True
    for token in sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql):
        if token.token_type == TokenType.SEMICOLON:
            after_semicolon = True
        elif after_semicolon:
            lines.append(token.line)
            after_semicolon = False
    return lines


@functools.lru_cache(maxsize=4096)
def is_reserved(name: str) -> bool:
    """Whether ``name`` cannot name a table unquoted (mvflow writes relations unquoted): a reserved
    word of SQL, which the parser reads as a keyword.

    >>> is_reserved("select"), is_reserved("FROM"), is_reserved("orders"), is_reserved("date")
    (True, True, False, False)
    """
    if name.upper() not in sqlglot.Dialect.get_or_raise(DIALECT).tokenizer_class.KEYWORDS:
        return False  # a plain word: always a name
    try:
        query = sqlglot.parse_one(f"SELECT 1 FROM d.{name} JOIN d.{name} AS x ON TRUE", read=DIALECT)
    except SqlglotError:
        return True
    return [t.name for t in query.find_all(exp.Table)] != [name, name]


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

    Returns None when a ``*`` cannot be expanded. An expression without an alias is named by
    its SQL text (Spark names it after the expression too, see ``unnamed_columns``).

    >>> output_columns(parse_select("select a, b + 1 as c, count(*) from t", "m"), {})
    ['a', 'c', 'COUNT(*)']
    >>> output_columns(parse_select("select *, upper(x) from d.t", "m"), {"d": {"t": {"x": "int"}}})
    ['x', 'UPPER(x)']
    >>> output_columns(parse_select("select * from d.unknown", "m"), {}) is None
    True
    """
    plain = plain_columns(query)
    if plain is not None:
        return plain
    try:
        read = read_schema((name for name, _ in table_references(query)), schema)
        qualified = qualify(
            query.copy(), schema=read or None, dialect=DIALECT, validate_qualify_columns=False,
            identify=False, quote_identifiers=False,
        )
    except (OptimizeError, SqlglotError, KeyError, ValueError):
        return None
    projections = _leftmost_select(qualified).expressions
    if any(_is_star(p) for p in projections):
        return None
    return [_column_name(p) for p in projections]


def plain_columns(query: exp.Query) -> list[str] | None:
    """Output column names of a query without ``*`` (they need no schema), else None.

    >>> plain_columns(parse_select("select a, b + 1 as c from t", "m")), plain_columns(parse_select("select * from t", "m"))
    (['a', 'c'], None)
    """
    select = _leftmost_select(query)
    if any(_is_star(p) for p in select.expressions):
        return None
    return [_column_name(p) for p in select.expressions]


def unnamed_columns(query: exp.Query) -> list[tuple[str, int]]:
    """Output expressions without an alias (other than plain columns), with their lines.

    >>> unnamed_columns(parse_select("select a,\\n  a + 1,\\n  b as c from t", "m"))
    [('a + 1', 2)]
    """
    found = []
    for projection in _leftmost_select(query).expressions:
        if not isinstance(projection, (exp.Alias, exp.Column, exp.Star)):
            line = next((n.meta["line"] for n in projection.walk() if "line" in n.meta), 1)
            found.append((projection.sql(dialect=DIALECT), line))
    return found


def column_line(query: exp.Query, name: str) -> int:
    """The line of the last output expression named ``name``, else of the last ``*`` (1 if none).

    >>> column_line(parse_select("select a,\\n  b,\\n  a + 1 as a from t", "m"), "a")
    3
    """
    lines = 1
    for projection in _leftmost_select(query).expressions:
        if _is_star(projection) or projection.alias_or_name.lower() == name.lower():
            lines = next((n.meta["line"] for n in projection.walk() if "line" in n.meta), lines)
    return lines


def _is_star(projection: exp.Expression) -> bool:
    return isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star)


def _column_name(projection: exp.Expression) -> str:
    if isinstance(projection, exp.Alias):
        # qualify() names unnamed expressions _col_<n>: name them by their text instead
        if re.fullmatch(r"_col_\d+", projection.alias):
            return _expression_name(projection.this)
        return projection.alias
    if isinstance(projection, exp.Column):
        return projection.alias_or_name
    return _expression_name(projection)


def _expression_name(expression: exp.Expression) -> str:
    """The text of an unnamed expression, columns without their table (as Spark names it)."""
    bare = expression.transform(lambda n: exp.column(n.name) if isinstance(n, exp.Column) and n.table else n)
    return bare.sql(dialect=DIALECT)


def read_schema(tables: Iterable[str], schema: Mapping[str, Mapping[str, Mapping[str, str]]]) -> dict:
    """The part of ``schema`` that a query reading ``tables`` (``table_references`` names) reads:
    sqlglot normalizes the whole schema it is given on every call, which made ``*`` expansion
    O(models²) on large projects.

    >>> read_schema(["d.t"], {"d": {"t": {"x": "int"}, "u": {"y": "int"}}})
    {'d': {'t': {'x': 'int'}}}
    """
    wanted = set(tables)
    found: dict[str, dict] = {}
    for db, db_tables in schema.items():
        for table, columns in db_tables.items():
            if f"{db}.{table}".lower() in wanted or table.lower() in wanted:
                found.setdefault(db, {})[table] = columns
    return found


def _leftmost_select(query: exp.Query) -> exp.Select:
    while isinstance(query, (exp.SetOperation, exp.Subquery)):
        query = query.left if isinstance(query, exp.SetOperation) else query.this
    return query  # type: ignore[return-value]


def pretty(query: exp.Expression) -> str:
    """Stable, readable Spark SQL for reviewers."""
    return query.sql(dialect=DIALECT, pretty=True)


def with_ctes(sql: str, ctes: list[tuple[str, str]], path: str) -> str:
    """``sql`` with CTEs ``(name, SELECT)`` placed before its own (an ephemeral model inlined).

    >>> print(with_ctes("with a as (select 1 as x) select * from a cross join e", [("e", "select 2 as y")], "m.sql"))
    WITH e AS (
      SELECT
        2 AS y
    ), a AS (
      SELECT
        1 AS x
    )
    SELECT
      *
    FROM a
    CROSS JOIN e
    """
    query = parse_select(sql, path)
    new = [exp.CTE(this=parse_select(text, path), alias=exp.TableAlias(this=exp.to_identifier(name))) for name, text in ctes]
    existing = query.args.get("with_")
    if existing is not None:
        existing.set("expressions", new + list(existing.expressions))
    else:
        query.set("with_", exp.With(expressions=new))
    return pretty(query)

