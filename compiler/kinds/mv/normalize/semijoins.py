"""Rule: a filter by a subquery over one table that binds one of its unique keys becomes a join
of that table, which the analysis refreshes like any join by key:

- ``x IN (SELECT t.k FROM t WHERE p)`` and ``EXISTS (SELECT … FROM t WHERE t.k = x AND p)`` an
  INNER JOIN ``ON t.k = x AND p`` (it adds no row: at most one ``t`` row has the key);
- ``NOT EXISTS (…)`` by ``t``'s primary key a LEFT JOIN with ``t.k IS NULL`` in WHERE;
- ``x NOT IN (SELECT t.k …)`` likewise, when neither side can be NULL: ``t.k`` is ``t``'s primary
  key and ``x`` a primary key column of the FROM table (a NULL on either side makes ``NOT IN``
  false or unknown where ``NOT EXISTS`` is true).

Any other ``NOT IN`` stays as it is, and so does a subquery that binds no unique key (several
matching rows), for the analysis to refuse.

>>> from compiler.parse import parse_select, pretty
>>> select = parse_select("select o.id from raw.o as o where o.status = 'live' "
...                       "and o.shop_id in (select s.id from raw.s as s where s.open) "
...                       "and not exists (select 1 from raw.b as b where b.offer_id = o.id)", "m")
>>> semijoins_as_joins(select, {"raw.o": (("id",),), "raw.s": (("id",),), "raw.b": (("offer_id",),)})
>>> print(pretty(select))
SELECT
  o.id
FROM raw.o AS o
JOIN raw.s AS s
  ON s.id = o.shop_id AND s.open
LEFT JOIN raw.b AS b
  ON b.offer_id = o.id
WHERE
  o.status = 'live' AND b.offer_id IS NULL
"""

from __future__ import annotations

from typing import Mapping

from sqlglot import exp

from ....parse import table_name
from .scope import alias, conjuncts, own_columns, sources

Keys = Mapping[str, tuple[tuple[str, ...], ...]]  # relation → its unique keys, the primary key first


def semijoins_as_joins(select: exp.Select, keys: Keys) -> None:
    """Turn the WHERE's semi- and anti-joins by a unique key into joins, in place."""
    where = select.args.get("where")
    if where is None:
        return
    kept: list[exp.Expression] = []
    for conjunct in conjuncts(where.this):
        found = _as_join(select, conjunct, keys)
        if found is None:
            kept.append(conjunct)
            continue
        join, missing = found
        select.append("joins", join)
        if missing is not None:
            kept.append(missing)
    select.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)


def _as_join(select: exp.Select, conjunct: exp.Expression, keys: Keys) -> tuple[exp.Join, exp.Expression | None] | None:
    """(the join, the WHERE condition an anti-join leaves) for one conjunct, or None."""
    anti = isinstance(conjunct, exp.Not) and isinstance(conjunct.this, (exp.Exists, exp.In))
    member = conjunct.this if anti else conjunct
    if isinstance(member, exp.In) and isinstance(member.args.get("query"), exp.Subquery):
        inner, outer = member.args["query"].this, member.this
        if not isinstance(outer, exp.Column) or not _one_table(inner) or len(inner.expressions) != 1:
            return None
        picked = inner.expressions[0].unalias()
        if not isinstance(picked, exp.Column) or (anti and not _never_null(select, outer, keys)):
            return None
        bound = {picked.name.lower(): picked.eq(outer.copy())}  # first: an anti-join tests it for NULL
        for column, equality in _correlations(inner).items():
            bound.setdefault(column, equality)
    elif isinstance(conjunct, exp.Exists) or anti:
        inner = (conjunct.this if anti else conjunct).this
        if not _one_table(inner):
            return None
        bound = _correlations(inner)
    else:
        return None
    table = sources(inner)[0]
    known = keys.get(table_name(table), ())
    # an anti-join keeps no MV row for an outer row whose match it excludes: only a join by the
    # primary key is found again by its value (a stored key of an alternate one is of the row)
    if not any(set(key) <= set(bound) for key in (known[:1] if anti else known)):
        return None
    _rename(inner, table, {alias(s) for s in sources(select)})
    where = inner.args.get("where")
    filters = [c for c in (conjuncts(where.this) if where else []) if not any(c is b for b in bound.values())]
    join = exp.Join(this=table, on=exp.and_(*bound.values(), *filters), side="LEFT" if anti else None)
    first_key = next(iter(bound))
    return join, exp.column(first_key, alias(table)).is_(exp.null()) if anti else None


def _never_null(select: exp.Select, column: exp.Column, keys: Keys) -> bool:
    """Whether ``column`` is a primary key column of ``select``'s FROM table (never NULL there)."""
    main = sources(select)[0] if sources(select) else None
    if not isinstance(main, exp.Table) or column.table.lower() != alias(main):
        return False
    primary = keys.get(table_name(main), ())[:1]
    return any(column.name.lower() in key for key in primary)


def _one_table(inner: exp.Expression) -> bool:
    """A SELECT of one table, filtered at most."""
    return isinstance(inner, exp.Select) and len(sources(inner)) == 1 and isinstance(sources(inner)[0], exp.Table) \
        and not any(inner.args.get(a) for a in ("joins", "group", "having", "distinct", "order", "limit", "with_"))


def _correlations(inner: exp.Select) -> dict[str, exp.Expression]:
    """Inner column → its equality with a column of the outer query or a literal, from the inner WHERE."""
    where, mine = inner.args.get("where"), alias(sources(inner)[0])
    found: dict[str, exp.Expression] = {}
    for conjunct in conjuncts(where.this) if where else []:
        if not isinstance(conjunct, exp.EQ):
            continue
        ours = [s for s in (conjunct.this, conjunct.expression) if isinstance(s, exp.Column) and s.table.lower() == mine]
        other = [s for s in (conjunct.this, conjunct.expression) if not any(s is o for o in ours)]
        if len(ours) == 1 and len(other) == 1 and (isinstance(other[0], (exp.Column, exp.Literal)) or other[0].is_number):
            found.setdefault(ours[0].name.lower(), conjunct)
    return found


def _rename(inner: exp.Select, table: exp.Table, taken: set[str]) -> None:
    """Give the subquery's table an alias the outer query does not use."""
    old = new = alias(table)
    while new in taken:
        new = f"{new}_"
    table.set("alias", exp.TableAlias(this=exp.to_identifier(new)))
    for column in own_columns(inner):
        if column.table.lower() == old:
            column.set("table", exp.to_identifier(new))
