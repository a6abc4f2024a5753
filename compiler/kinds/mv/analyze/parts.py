"""Phase 3, keys: the MV's key (``unique_key``, else the main source's key, with a UNION ALL's
discriminator), and per part the ``Part`` that refreshes it: its key computed one-to-one from the
main key, its hidden key columns, its grain (one-to-many joins) and its window partitions; with
the checks that keep a refresh by key exact (a WHERE that keeps unmatched rows, a stated key that
a join makes non-unique, UNION ALL parts that could share a key).

>>> from compiler.kinds.mv.analyze import plan_from_sql
>>> plan_from_sql("SELECT 100 + o.id AS id FROM d.o AS o", {"d.o": ("position", ("id",))}, ("id",)).parts[0].key_exprs[0].sql()
'100 + o.id'
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from ..normalize.scope import conjuncts
from ..plan import HIDDEN_PREFIX, Link, Part, alias_of, is_column_of, output_names, unalias
from ..shape import is_literal
from .groups import Groups
from .joins import grain, links
from .report import Report


def parts_and_key(report: Report, selects: list[exp.Select], resolved: list[dict], unique_key: tuple[str, ...],
                  groups: Groups | None) -> tuple[list[Part], tuple[str, ...], list[str]]:
    """The parts of the MV (one per UNION ALL branch), its key and its output columns."""
    joins = [links(report, select, info) for select, info in zip(selects, resolved)]
    columns = output_names(selects[0])
    key_positions = _key_positions(report, selects, resolved, unique_key, groups)
    if key_positions is None:
        return [], (), columns
    key = tuple(columns[i] for i in key_positions)
    parts = []
    for index, (select, info) in enumerate(zip(selects, resolved)):
        part = _part(report, index, select, info, joins[index], key_positions, columns, len(selects))
        if part is not None:
            parts.append(part)
    if len(parts) > 1 and len(parts) == len(selects):
        _check_discriminator(report, parts, key_positions)
    for part in parts:
        _check_where_keeps_unmatched(report, part)
    if len(parts) == 1 and parts[0].select.find(exp.Window):
        parts[0] = _windowed(report, parts[0], columns)
    if parts and parts[0].grain:
        if unique_key and groups is None:
            _check_stated_grain(report, parts[0], key, unique_key)
        key = tuple(k for k in key if k not in parts[0].grain) + parts[0].grain
    return parts, key, columns


def _key_positions(report: Report, selects: list[exp.Select], resolved: list[dict], unique_key: tuple[str, ...],
                   groups: Groups | None) -> list[int] | None:
    columns = output_names(selects[0])
    if unique_key and groups is None:
        missing = [k for k in unique_key if k.lower() not in columns]
        if missing:
            report.problem(selects[0], "mv-key-not-derivable", f"unique_key column(s) {', '.join(missing)} are not selected",
                           "unique_key names output columns of the SELECT")
            return None
        return [columns.index(k.lower()) for k in unique_key]
    positions: list[int] = []
    if len(selects) > 1:
        disc = _discriminator_position(selects)
        if disc is None:
            report.problem(selects[1], "mv-union-discriminator",
                           "UNION ALL parts need a constant column with a different value in each part, or a "
                           "unique_key computed from each part's main key into its own range",
                           "add e.g. 'offer' AS kind to the first part and 'promo' AS kind to the second, or select "
                           "e.g. 100000000 + m.id AS id in one part, 200000000 + m.id AS id in the other and set unique_key='id'")
            return None
        positions.append(disc)
    select, info = selects[0], resolved[0]
    main_alias = info["order"][0]
    for key_column in info["aliases"][main_alias].key:
        found = next((i for i, e in enumerate(select.expressions) if is_column_of(e, main_alias, key_column)), None)
        if found is None:
            report.problem(select, "mv-key-not-derivable",
                           f"the main source's key column {main_alias}.{key_column} is not selected",
                           f"select {main_alias}.{key_column}, or set unique_key to columns computed from the main key")
            return None
        positions.append(found)
    return positions


def _part(report: Report, index: int, select: exp.Select, info: dict, joins: list[Link], key_positions: list[int],
          columns: list[str], parts: int) -> Part | None:
    main_alias = info["order"][0]
    main = info["aliases"][main_alias]
    main_key = tuple(k.lower() for k in main.key)
    _check_many(report, joins, parts)
    part_grain = grain(select, joins, columns)
    key_exprs = []
    covered: set[str] = set()
    for position in key_positions:
        if columns[position] in part_grain:
            continue
        expr = unalias(select.expressions[position])
        refs = list(expr.find_all(exp.Column))
        bad = [c for c in refs if alias_of(c) != main_alias or c.name.lower() not in main_key]
        if bad or (not refs and not is_literal(expr)):
            report.problem(select.expressions[position], "mv-key-not-derivable",
                           f"key column '{columns[position]}' = {expr.sql(dialect='spark')} is not computed from the main key "
                           f"({', '.join(f'{main_alias}.{k}' for k in main_key)})",
                           "a key column is a main key column, an expression of main key columns only, or a constant")
            return None
        if refs and not _one_to_one(expr):
            report.problem(select.expressions[position], "mv-key-not-derivable",
                           f"key column '{columns[position]}' = {expr.sql(dialect='spark')} is not one-to-one with the "
                           "main key: two main rows could get the same MV key",
                           "compute the key with casts, concatenation and adding or multiplying constants only")
            return None
        covered |= {c.name.lower() for c in refs}
        key_exprs.append(expr)
    if not covered >= set(main_key):
        report.problem(select, "mv-key-not-derivable",
                       f"the MV key does not include main key column(s) {', '.join(sorted(set(main_key) - covered))}",
                       "the MV key must identify one main row: use every main key column")
        return None
    prefix = f"{HIDDEN_PREFIX}k{index if parts > 1 else ''}_"
    hidden = [(f"{prefix}{link.alias}_{k}", col) for link in joins for k, col in link.stored]
    literal = next((p for p in key_positions if is_literal(unalias(select.expressions[p]))), None) if parts > 1 else None
    own_columns = parts > 1 and literal is None  # the part's rows are told apart by its own main key columns
    main_cols = []
    for k in main_key:
        found = None if own_columns else \
            next((columns[i] for i, e in enumerate(select.expressions) if is_column_of(e, main_alias, k)), None)
        if found is None:
            found = f"{HIDDEN_PREFIX}m{index if parts > 1 else ''}_{k}"
            hidden.append((found, exp.column(k, main_alias)))
        main_cols.append(found)
    discriminator = None
    if literal is not None:
        discriminator = (columns[literal], unalias(select.expressions[literal]))
    elif own_columns:
        discriminator = (main_cols[0], None)
    return Part(index, select, main_alias, main.id, main_key, tuple(joins), tuple(key_exprs), tuple(main_cols),
                tuple(hidden), discriminator, part_grain)


def _check_many(report: Report, joins: list[Link], parts: int) -> None:
    """One-to-many joins widen the MV's key; UNION ALL parts must share one key, so not there."""
    for link in joins:
        if link.many and parts > 1:
            report.problem(link.on, "mv-join-not-unique",
                           f"the join of {link.input} AS {link.alias} does not bind its primary key "
                           f"({', '.join(link.key)}) nor a declared unique key: one main row could match several "
                           "rows, which a UNION ALL part cannot hold (its parts share one key)",
                           f"join on the whole key ({', '.join(link.key)}), declare the columns it binds as unique "
                           "on the source ('unique: [[col, ...]]') if they are, or make the part an mv of its own")


def _check_stated_grain(report: Report, part: Part, key: tuple[str, ...], unique_key: tuple[str, ...]) -> None:
    """A stated unique_key that a one-to-many join makes non-unique is an error, never widened
    silently: the key must name the joined rows' keys too (the grain), or the join be unique."""
    for link in part.links:
        if not link.many:
            continue
        link_grain = grain(part.select, [link], output_names(part.select))
        if set(link_grain) <= set(key):
            continue
        selected = [g for g in link_grain if not g.startswith(HIDDEN_PREFIX)]
        bound = sorted({k for k, _ in (*link.bound, *link.literals)})
        state = (f"add {', '.join(selected)} to unique_key" if len(selected) == len(link_grain) else
                 f"select {', '.join(f'{link.alias}.{k}' for k in link.key)} and add it to unique_key")
        report.problem(link.on, "mv-key-not-unique",
                       f"unique_key ({', '.join(unique_key)}) is not unique: the join of {link.input} AS {link.alias} "
                       f"binds neither its primary key ({', '.join(link.key)}) nor a declared unique key, so one "
                       f"{part.main_alias} row may match several {link.alias} rows",
                       f"declare the columns the join binds as unique on the source ('unique: [[{', '.join(bound)}]]') "
                       f"if they are, or state the grain: {state}")


def _windowed(report: Report, part: Part, columns: list[str]) -> Part:
    """A part with window functions, its partitions recorded: every window partitions by a column
    of the main table (the same for all), so a change maps to whole partitions, whose rows are then
    recomputed together. Not with one-to-many joins (a partition's rows are not main rows)."""
    windows = list(part.select.find_all(exp.Window))
    common: list[str] | None = None
    for window in windows:
        own = [c.name.lower() for c in window.args.get("partition_by") or []
               if isinstance(c, exp.Column) and alias_of(c) == part.main_alias]
        common = own if common is None else [c for c in common if c in own]
    hint = (f"partition every window by a column of the main table {part.main_alias} (e.g. PARTITION BY "
            f"{part.main_alias}.customer_id): a change then recomputes the rows of its partitions only")
    if not common:
        report.problem(windows[0], "mv-window", "window functions in an mv must all partition by a column of the "
                       f"main table ({part.main_alias}): without one, any change would recompute every row", hint)
        return part
    if part.grain:
        report.problem(windows[0], "mv-window", "window functions are not supported in an mv with a one-to-many join",
                       "compute the window in an mv that reads this one, or make the model a 'table'")
        return part
    hidden = list(part.hidden)
    partitions = []
    for name in dict.fromkeys(common):
        expression = exp.column(name, part.main_alias)
        selected = next((columns[i] for i, e in enumerate(part.select.expressions) if is_column_of(e, part.main_alias, name)), None)
        if selected is None:
            selected = f"{HIDDEN_PREFIX}w_{name}"
            hidden.append((selected, expression))
        partitions.append((selected, expression))
    return replace(part, hidden=tuple(hidden), partitions=tuple(partitions))


def _check_where_keeps_unmatched(report: Report, part: Part) -> None:
    """A WHERE that keeps the main rows a LEFT JOIN by the joined row's own key left unmatched
    (``t.id IS NULL``) is refused: when the row that excluded a main row is deleted, nothing
    stored says which main row it matched (the MV keeps no row for it, and the row is gone)."""
    where = part.select.args.get("where")
    for link in (l for l in part.links if l.side == "left" and l.own_key) if where is not None else ():
        nullable = {link.alias} | part.descendants(link.alias)
        for conjunct in conjuncts(where.this):
            if {alias_of(c) for c in conjunct.find_all(exp.Column)} & nullable and not _rejects_null(conjunct, nullable):
                how = f"by the unique key {', '.join(link.via)}" if link.via else "one-to-many"
                report.problem(conjunct, "mv-where-unmatched",
                               f"WHERE {conjunct.sql(dialect='spark')} keeps rows that {link.alias} (joined {how}) "
                               "does not match: when the row that excluded one is deleted, mvflow cannot find it again",
                               f"join {link.alias} by its primary key ({', '.join(link.key)}), e.g. through NOT EXISTS "
                               "by it, or make the model a 'table'")


def _check_discriminator(report: Report, parts: list[Part], key_positions: list[int]) -> None:
    """Parts without a constant discriminator in the key must compute their keys differently
    (into their own ranges): parts that compute them alike would give one key to two rows."""
    if any(_distinct_literals([p.select for p in parts], position) for position in key_positions):
        return
    seen: dict[str, Part] = {}
    for part in parts:
        shape = ", ".join(_key_shape(e) for e in part.key_exprs)
        if shape in seen:
            report.problem(part.select, "mv-union-discriminator",
                           f"UNION ALL parts {seen[shape].index} and {part.index} compute the key the same way ({shape}): "
                           "a key could belong to a row of each",
                           "add a constant column with a different value in each part (e.g. 'offer' AS kind) to "
                           "unique_key, or map each part's key into its own range (e.g. 100000000 + m.id)")
            return
        seen[shape] = part


# -- small AST helpers -------------------------------------------------------------------
def _rejects_null(node: exp.Expression, aliases: set[str]) -> bool:
    """Whether a condition is not true when the columns of ``aliases`` are NULL (so it drops the
    rows their join did not match): a comparison of one of their columns, ``IS NOT NULL``, a
    boolean column; conservative (False when unsure).

    >>> from sqlglot import parse_one
    >>> [_rejects_null(parse_one(c, read="spark"), {"t"}) for c in ("t.x > 1", "t.id IS NULL", "COALESCE(t.x, 0) = 0",
    ...                                                               "t.ok", "t.a = 1 OR o.b = 2", "t.id IS NOT NULL")]
    [True, False, False, True, False, True]
    """
    node = node.unnest()
    if isinstance(node, exp.And):
        return _rejects_null(node.this, aliases) or _rejects_null(node.expression, aliases)
    if isinstance(node, exp.Or):
        return _rejects_null(node.this, aliases) and _rejects_null(node.expression, aliases)
    if isinstance(node, exp.Not) and isinstance(node.this, exp.Is):
        return _strict(node.this.this, aliases)
    if isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.In, exp.Between)):
        return _strict(node.this, aliases) or (isinstance(node, exp.Binary) and _strict(node.expression, aliases))
    return isinstance(node, exp.Column) and alias_of(node) in aliases


def _strict(node: exp.Expression, aliases: set[str]) -> bool:
    """Whether ``node`` is NULL when the columns of ``aliases`` are: one of their columns, through
    casts and arithmetic only."""
    node = node.unnest()
    if isinstance(node, exp.Column):
        return alias_of(node) in aliases
    if isinstance(node, (exp.Cast, exp.Neg)):
        return _strict(node.this, aliases)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        return _strict(node.this, aliases) or _strict(node.expression, aliases)
    return False


def _distinct_literals(selects: list[exp.Select], position: int) -> bool:
    values = []
    for select in selects:
        if position >= len(select.expressions):
            return False
        node = unalias(select.expressions[position])
        if not is_literal(node):
            return False
        values.append(node.sql(dialect="spark"))
    return len(set(values)) == len(values)


def _one_to_one(node: exp.Expression) -> bool:
    """Whether an expression of key columns gives different values for different keys: columns,
    casts, concatenation, and adding, subtracting or multiplying a non-zero constant.

    >>> from sqlglot import parse_one
    >>> [_one_to_one(parse_one(e, read="spark")) for e in ("100000000 + CAST(m.id AS BIGINT)", "CONCAT('o-', m.id)",
    ...                                                      "m.id % 10", "m.id * 0", "-m.id")]
    [True, True, False, False, True]
    """
    if isinstance(node, (exp.Column, exp.Literal)) or is_literal(node):
        return True
    if isinstance(node, (exp.Paren, exp.Cast, exp.Neg)):
        return _one_to_one(node.this)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        sides = [node.this, node.expression]
        constant = [side for side in sides if is_literal(side)]
        if len(constant) != 1 or (isinstance(node, exp.Mul) and constant[0].sql() in ("0", "0.0")):
            return False
        return all(_one_to_one(side) for side in sides)
    if isinstance(node, (exp.Concat, exp.DPipe)):
        return all(_one_to_one(e) for e in node.expressions or [node.this, node.expression])
    return False


def _key_shape(node: exp.Expression) -> str:
    """How a key expression computes, whatever columns it reads (to compare UNION ALL parts).

    >>> from sqlglot import parse_one
    >>> _key_shape(parse_one("o.id")) == _key_shape(parse_one("s.shop_id")), _key_shape(parse_one("100 + o.id"))
    (True, '100 + _')
    """
    return node.transform(lambda n: exp.column("_") if isinstance(n, exp.Column) else n).sql(dialect="spark")


def _discriminator_position(selects: list[exp.Select]) -> int | None:
    width = len(selects[0].expressions)
    return next((p for p in range(width) if _distinct_literals(selects, p)), None)

