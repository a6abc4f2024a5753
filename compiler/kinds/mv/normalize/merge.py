"""Rule: a derived table that only renames, computes and filters columns of tables (joined or
not) is replaced by those tables: the outer query reads its expressions in place of its columns,
its WHERE joins the outer WHERE (the ON of a LEFT JOIN, where it filters the joined rows only),
its joins follow. Its tables take the derived table's alias (the first) or one made from it.

Merged only where the result is the same query: not a derived table that aggregates, is
DISTINCT, windows, orders, limits or nests queries; under a LEFT JOIN only when its own joins are
LEFT JOINs and, if it has any, it has no WHERE; under any join only when that join's ON reads
the derived table's first table (its later tables are joined after it).

>>> from compiler.parse import parse_select, pretty
>>> select = parse_select("select c.id, o.n from raw.c as c left join (select x.cid, x.amount * 2 as n "
...                       "from raw.o as x where x.amount > 0) as o on o.cid = c.id", "m")
>>> print(pretty(merge_derived_tables(select)))
SELECT
  c.id,
  o.amount * 2 AS n
FROM raw.c AS c
LEFT JOIN raw.o AS o
  ON o.cid = c.id AND o.amount > 0
"""

from __future__ import annotations

from sqlglot import exp

from .scope import alias, output_names, own_columns, sources, star, unalias

_PROJECTION_ONLY = ("with_", "group", "having", "distinct", "order", "limit", "offset", "qualify", "laterals", "pivots",
                    "windows", "joins", "where")


def merge_derived_tables(select: exp.Select) -> exp.Query:
    """Merge every mergeable derived table of ``select`` into it, in place; a SELECT that only
    projects the columns of one derived table (dbt's ``select * from final``) becomes that
    derived table's query, whatever it is (returned: the caller puts it in ``select``'s place)."""
    lifted = _lifted(select)
    if lifted is not None:
        return lifted
    for source in sources(select):
        if isinstance(source, exp.Subquery) and why_not_merged(select, source) is None:
            _merge(select, source)
    return select


def _lifted(select: exp.Select) -> exp.Query | None:
    """``SELECT a, b AS c FROM (<query>) AS x`` → ``<query>`` with those outputs, or None."""
    found = sources(select)
    if len(found) != 1 or not isinstance(found[0], exp.Subquery) or any(
            select.args.get(arg) for arg in _PROJECTION_ONLY):
        return None
    derived, inner, name = found[0], found[0].this, alias(found[0])
    if any(isinstance(n, (exp.Query, exp.AggFunc, exp.Window)) and n is not select and n is not derived
           for n in select.walk(prune=lambda n: n is derived)):
        return None
    columns = list(own_columns(select))
    if any(c.table.lower() != name for c in columns):
        return None
    if isinstance(inner, exp.SetOperation):  # only as it is: pushing columns into each side is not done
        names = tuple(e.alias_or_name.lower() for e in select.expressions)
        plain = all(isinstance(e, exp.Column) for e in select.expressions)
        return inner if plain and names == output_names(inner) else None
    if not isinstance(inner, exp.Select) or any(star(e) for e in inner.expressions):
        return None
    expressions = _outputs(inner)
    if any(c.name.lower() not in expressions for c in columns):
        return None
    if inner.args.get("distinct") and {c.name.lower() for c in columns} != set(expressions):
        return None  # DISTINCT over fewer columns would collapse rows the outer query keeps
    outputs = []
    for projection in select.expressions:
        value = projection.this if isinstance(projection, exp.Alias) else projection
        value = value.copy().transform(lambda n: _parenthesised(_at_line_of(n, expressions[n.name.lower()].copy()))
                                       if isinstance(n, exp.Column) else n)
        outputs.append(_unwrap(exp.alias_(value, projection.alias_or_name)))
    inner.set("expressions", outputs)
    return inner


def why_not_merged(select: exp.Select, derived: exp.Subquery) -> str | None:
    """Why a derived table of ``select`` cannot be merged into it, in words (None: it can)."""
    inner = derived.this
    if not isinstance(inner, exp.Select):
        return "it is a set operation (UNION, INTERSECT, EXCEPT)"
    for what, args in (("aggregates (GROUP BY)", ("group", "having")), ("is DISTINCT", ("distinct",)),
                       ("orders or limits its rows", ("order", "limit", "offset")), ("uses windows", ("qualify", "windows")),
                       ("uses LATERAL VIEW or PIVOT", ("laterals", "pivots"))):
        if any(inner.args.get(arg) for arg in args):
            return f"it {what}"
    if inner.find(exp.Window):
        return "it uses window functions"
    if inner.find(exp.AggFunc):
        return "it aggregates"
    if any(n is not inner for n in inner.find_all(exp.Query)) or not all(isinstance(s, exp.Table) for s in sources(inner)):
        return "it reads a subquery"
    inner_joins = inner.args.get("joins") or []
    if any(star(e) for e in inner.expressions) and (len(inner.expressions) > 1 or inner_joins):
        return "it selects * from tables whose columns are not known (declare them, or list the columns)"
    if any(j.args.get("using") or not j.args.get("on") or j.args.get("method") for j in inner_joins):
        return "its joins are not JOIN … ON"
    name = alias(derived)
    expressions = _outputs(inner)
    missing = sorted({c.name.lower() for c in own_columns(select) if c.table.lower() == name} - set(expressions))
    if missing and not _identity(inner):
        return f"it has no column {', '.join(missing)}"
    join = derived.parent if isinstance(derived.parent, exp.Join) else None
    if join is None:
        return None
    side = join.args.get("side")
    if join.args.get("method") or join.args.get("using") or not join.args.get("on") or side not in (None, "LEFT") \
            or join.args.get("kind") not in (None, "INNER", "OUTER"):
        return "it is joined by other than [INNER] JOIN or LEFT JOIN … ON"
    if side == "LEFT" and any(j.args.get("side") != "LEFT" for j in inner_joins):
        return "it is LEFT JOINed and its own joins are INNER"
    if side == "LEFT" and inner_joins and inner.args.get("where"):
        return "it is LEFT JOINed and has joins and a WHERE"
    first = alias(sources(inner)[0])
    read = {c.table.lower() for on_column in join.args["on"].find_all(exp.Column) if on_column.table.lower() == name
            for c in expressions[on_column.name.lower()].find_all(exp.Column)} if inner_joins else set()
    if not read <= {first}:
        return f"the join reads a column of a table it joins to {first}"
    return None


def _merge(select: exp.Select, derived: exp.Subquery) -> None:
    inner, name = derived.this, alias(derived)
    _rename_tables(inner, name, {alias(s) for s in sources(select)} - {name})
    if not _identity(inner):  # (SELECT * FROM one table: its columns keep their names and their table's alias)
        _substitute(select, name, _outputs(inner))
    join = derived.parent if isinstance(derived.parent, exp.Join) else None
    where = inner.args.get("where")
    if where is not None and join is not None and join.args.get("side") == "LEFT":
        join.set("on", exp.and_(join.args["on"], where.this))
    elif where is not None:
        select.where(where.this, copy=False)
    joins = list(select.args.get("joins") or [])
    at = 0 if join is None else joins.index(join) + 1
    select.set("joins", joins[:at] + list(inner.args.get("joins") or []) + joins[at:])
    derived.replace(sources(inner)[0])


def _substitute(select: exp.Select, name: str, expressions: dict[str, exp.Expression]) -> None:
    """Read ``expressions`` in place of the columns of ``name``, keeping the output names."""
    select.set("expressions", [exp.alias_(p, p.name) if isinstance(p, exp.Column) and p.table.lower() == name else p
                               for p in select.expressions])
    for column in [c for c in own_columns(select) if c.table.lower() == name]:
        value = _at_line_of(column, expressions[column.name.lower()].copy())
        column.replace(value if isinstance(column.parent, exp.Alias) else _parenthesised(value))
    select.set("expressions", [_unwrap(e) for e in select.expressions])


def _rename_tables(inner: exp.Select, name: str, taken: set[str]) -> None:
    """The derived table's first table takes its alias; the others keep theirs unless taken."""
    renames: dict[str, str] = {}
    for index, table in enumerate(sources(inner)):
        old = alias(table)
        new = name if index == 0 else old
        while new in taken or (index and new == name):
            new = f"{name}_{new}"
        taken.add(new)
        renames[old] = new
        table.set("alias", exp.TableAlias(this=exp.to_identifier(new)))
    for column in own_columns(inner):
        if column.table.lower() in renames:
            column.set("table", exp.to_identifier(renames[column.table.lower()]))


def _outputs(inner: exp.Select) -> dict[str, exp.Expression]:
    """Output name → the expression computing it."""
    return {e.alias_or_name.lower(): unalias(e) for e in inner.expressions if not star(e)}


def _identity(inner: exp.Select) -> bool:
    """``SELECT * FROM t`` (perhaps filtered): every column of one table, whether known or not."""
    return len(inner.expressions) == 1 and star(inner.expressions[0]) and not inner.args.get("joins")


def _at_line_of(column: exp.Column, value: exp.Expression) -> exp.Expression:
    """``value`` (read in place of ``column``) said to be at the column's line: a problem found in it
    points where the query reads it, not into the view or CTE that computes it."""
    line = next((n.meta["line"] for n in column.walk() if isinstance(n, exp.Expression) and n.meta.get("line")), None)
    if line:
        value.meta["line"] = line
    return value


def _parenthesised(value: exp.Expression) -> exp.Expression:
    """``value`` as an operand: an operator's result in parentheses (``a + b`` read as ``x`` in ``x * 2``)."""
    atomic = isinstance(value, (exp.Column, exp.Literal, exp.Func, exp.Paren, exp.Null, exp.Boolean, exp.Window))
    return value if atomic else exp.Paren(this=value)


def _unwrap(projection: exp.Expression) -> exp.Expression:
    """``o.id AS id`` → ``o.id``."""
    if isinstance(projection, exp.Alias) and isinstance(projection.this, exp.Column) \
            and projection.this.name.lower() == projection.alias.lower():
        return projection.this
    return projection
