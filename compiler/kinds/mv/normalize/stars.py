"""Rules: ``*`` and ``t.*`` become the columns they stand for, qualified; an unqualified column
is qualified by the one table that has it. Columns are known from declared source columns, seed
headers, upstream models' outputs and derived tables' SELECTs; a ``*`` over a table whose
columns are not known stays (the analysis refuses it and says what to declare).

>>> from compiler.parse import parse_select, pretty
>>> select = parse_select("select o.*, name from raw.o as o join raw.c as c on c.id = o.cid", "m")
>>> known = {"raw.o": ("id", "cid"), "raw.c": ("id", "name")}
>>> expand_stars(select, known); qualify_columns(select, known)
>>> print(pretty(select))
SELECT
  o.id,
  o.cid,
  c.name
FROM raw.o AS o
JOIN raw.c AS c
  ON c.id = o.cid
"""

from __future__ import annotations

from typing import Mapping

from sqlglot import exp

from .scope import alias, columns_of, own_columns, sources, star


def expand_stars(select: exp.Select, known: Mapping[str, tuple[str, ...] | None]) -> None:
    """Replace each ``*`` / ``t.*`` projection whose tables' columns are all known, in place."""
    if not any(star(e) for e in select.expressions):
        return
    read = [(alias(s), columns_of(s, known)) for s in sources(select)]
    expressions: list[exp.Expression] = []
    for projection in select.expressions:
        if not star(projection):
            expressions.append(projection)
            continue
        wanted = projection.table.lower() if isinstance(projection, exp.Column) else ""
        chosen = [(a, cols) for a, cols in read if not wanted or a == wanted]
        if not chosen or any(cols is None for _, cols in chosen) or projection.args.get("except") \
                or projection.args.get("replace"):
            expressions.append(projection)
            continue
        expressions += [exp.column(c, a, copy=False) for a, cols in chosen for c in cols]
    select.set("expressions", expressions)


def qualify_columns(select: exp.Select, known: Mapping[str, tuple[str, ...] | None]) -> None:
    """Qualify each unqualified column of the SELECT by the one table it can come from, in place."""
    read = [(alias(s), columns_of(s, known)) for s in sources(select)]
    if not read:
        return
    for column in own_columns(select):
        if column.table or column.is_star:
            continue
        name = column.name.lower()
        having = [a for a, cols in read if cols is None or name in cols]
        if len(having) == 1:  # (not a table's column: an output alias, as GROUP BY may name)
            column.set("table", exp.to_identifier(having[0]))
