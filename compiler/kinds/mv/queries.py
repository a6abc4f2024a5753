"""The SQL an MV's plan derives (pure): sqlglot ASTs over its inputs, its stored rows and the key
sets of a batch — the full and the refresh query, each input's key query (changed keys →
affected main keys), the change queries per change mode, the stored state, the MERGE.
``compiler.kinds.mv.derive`` prints them as the texts written under ``target/run/<mv>/``."""

from __future__ import annotations

from typing import Iterable

from sqlglot import exp

from .inputs import BATCH
from .normalize.scope import conjuncts
from .plan import DELETED, FOUND, HIDDEN_PREFIX, RANK, SIDE, WAS, InputInfo, Link, MvPlan, Part, alias_of, unalias


def identifier_table(param: str, alias: str) -> exp.Table:
    """``IDENTIFIER(:param) AS alias``: a physical table named at run time (blue/green slot)."""
    return exp.Table(this=exp.Anonymous(this="IDENTIFIER", expressions=[exp.Placeholder(this=param)]),
                     alias=exp.TableAlias(this=exp.to_identifier(alias)))


def aliased_table(name: str, alias: str) -> exp.Table:
    return exp.to_table(name).as_(alias)


def _in(columns: list[exp.Expression], query: exp.Select) -> exp.Expression:
    if len(columns) == 1:
        return columns[0].isin(query=query)
    return exp.Tuple(expressions=columns).isin(query=query.subquery())


def _and(conditions: Iterable[exp.Expression]) -> exp.Expression | None:
    items = [c for c in conditions if c is not None]
    return exp.and_(*items) if items else None


def _where(select: exp.Select, conditions: Iterable[exp.Expression]) -> exp.Select:
    condition = _and(conditions)
    return select.where(condition, copy=False) if condition is not None else select


def _union(queries: list[exp.Query], distinct: bool) -> exp.Query:
    result = queries[0]
    for query in queries[1:]:
        result = exp.union(result, query, distinct=distinct)
    return result


def _part_select(plan: MvPlan, part: Part, extra: Iterable[exp.Expression] = ()) -> exp.Select:
    """The part's SELECT with every hidden column (NULL where another part fills it); of a GROUP BY
    MV, its member rows: every column of the table, the aggregates NULL."""
    select = part.select.copy()
    if part.grouped is not None:
        given = {**{e.alias_or_name.lower(): unalias(e) for e in select.expressions}, **dict(part.hidden)}
        values = [exp.alias_(given[c].copy() if c in given else exp.Null(), c) for c in plan.all_columns]
        return select.select(*values, *extra, append=False, copy=False)
    mine = dict(part.hidden)
    for name in plan.hidden:
        value = mine[name].copy() if name in mine else exp.Null()
        select.select(exp.alias_(value, name), copy=False)
    for item in extra:
        select.select(item, copy=False)
    return select


def _group_select(plan: MvPlan, part: Part, extra: Iterable[exp.Expression] = ()) -> exp.Select:
    """A GROUP BY MV's group rows: its SELECT, the hidden columns NULL."""
    select = part.grouped.copy()
    return select.select(*[exp.alias_(exp.Null(), name) for name in plan.hidden], *extra, copy=False)


def group_rows(plan: MvPlan, alias: str) -> exp.Expression:
    """The condition on stored rows (as ``alias``) of a GROUP BY MV's group rows."""
    return exp.column(plan.grouped.main_key_columns[0], alias).is_(exp.null())


def _in_groups(values: list[exp.Expression], names: list[str], groups: exp.Expression) -> exp.Exists:
    """Whether ``values`` are one of the groups (``groups``, aliased ``g``, with columns ``names``),
    compared by ``<=>``: a NULL group value is a group too."""
    on = _and(exp.NullSafeEQ(this=exp.column(n, "g"), expression=v) for n, v in zip(names, values))
    return exp.Exists(this=exp.select(exp.Literal.number(1)).from_(groups).where(on))


def _stored_groups(plan: MvPlan) -> exp.Select:
    """The groups the stored members of the affected main keys were in (their old groups)."""
    return _stored_of_affected(plan, [name for name, _ in plan.grouped.groups], "m")


def _stored_of_affected(plan: MvPlan, columns: list[str] | tuple[str, ...], alias: str) -> exp.Select:
    """``columns`` of the stored rows of the affected main keys (one part: a grain or GROUP BY MV has one)."""
    part = plan.parts[0]
    affected = exp.select(*part.main_key).from_(plan.view_name("affected_p0"))
    return (exp.select(*[exp.column(c, alias) for c in columns]).from_(aliased_table(plan.view_name("stored"), alias))
            .where(_in([exp.column(c, alias) for c in part.main_key_columns], affected)))


def full_query(plan: MvPlan) -> exp.Query:
    """The MV SELECT with its hidden key columns: what a full build writes.

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))})
    >>> print(full_query(plan).sql(dialect="spark"))
    SELECT o.id, c.name, o.cid AS _mvflow_k_c_id FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid
    """
    groups = [_group_select(plan, plan.grouped)] if plan.grouped else []
    return _union([_part_select(plan, part) for part in plan.parts] + groups, distinct=False)


def refresh_query(plan: MvPlan) -> exp.Query:
    """The MV SELECT restricted to the affected main keys of each part (views ``affected_p<i>``).

    A GROUP BY MV recomputes the member rows of the affected main keys and every group they were
    in (stored) or are in now (recomputed).

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.shop_id, count(*) AS n FROM d.o AS o GROUP BY o.shop_id",
    ...                      {"d.o": ("position", ("id",))})
    >>> print(refresh_query(plan).sql(dialect="spark"))
    WITH mvflow_members AS (SELECT o.shop_id AS shop_id, NULL AS n, o.id AS _mvflow_m_id, TRUE AS _mvflow_found FROM d.o AS o WHERE o.id IN (SELECT id FROM mvflow_mv_affected_p0)), mvflow_groups AS (SELECT m.shop_id FROM mvflow_mv_stored AS m WHERE m._mvflow_m_id IN (SELECT id FROM mvflow_mv_affected_p0) UNION SELECT shop_id FROM mvflow_members) SELECT * FROM mvflow_members UNION ALL SELECT o.shop_id, COUNT(*) AS n, NULL AS _mvflow_m_id, TRUE AS _mvflow_found FROM d.o AS o WHERE EXISTS(SELECT 1 FROM mvflow_groups AS g WHERE g.shop_id IS NOT DISTINCT FROM o.shop_id) GROUP BY o.shop_id
    """
    queries = []
    for part in plan.parts:
        select = _part_select(plan, part, [exp.alias_(exp.true(), FOUND)])
        keys = exp.select(*part.main_key).from_(plan.view_name(f"affected_p{part.index}"))
        _where(select, [_in([exp.column(k, part.main_alias) for k in part.main_key], keys)])
        queries.append(select)
    if not plan.grouped:
        return _union(queries, distinct=False)
    part, names = plan.grouped, [name for name, _ in plan.grouped.groups]
    groups = exp.union(_stored_groups(plan), exp.select(*names).from_("mvflow_members"), distinct=True)
    rows = _group_select(plan, part, [exp.alias_(exp.true(), FOUND)])
    _where(rows, [_in_groups([e.copy() for _, e in part.groups], names, aliased_table("mvflow_groups", "g"))])
    both = exp.union(exp.select("*").from_("mvflow_members"), rows, distinct=False)
    return both.with_("mvflow_members", as_=queries[0]).with_("mvflow_groups", as_=groups)


def _changed(plan: MvPlan, link: Link | None, input_id: str, columns: list[exp.Expression]) -> exp.Select:
    """Changed keys of an input, filtered by the literals the join binds its key to."""
    select = exp.select(*columns).from_(aliased_table(plan.view_name(f"changed_{plan.inputs[input_id].slug}"), "c"))
    # (a join by an alternate unique key binds literals to columns the changed keys do not hold)
    literals = [exp.column(k, "c").eq(value.copy()) for k, value in (link.literals if link and not link.own_key else ())]
    return _where(select, literals)


def _where_over(part: Part, aliases: set[str]) -> list[exp.Expression]:
    """The part's WHERE conjuncts that read only ``aliases``."""
    where = part.select.args.get("where")
    if where is None:
        return []
    return [c.copy() for c in conjuncts(where.this) if {alias_of(col) for col in c.find_all(exp.Column)} <= aliases]


def _walk_back(part: Part, aliases: list[str], as_joined: bool = False) -> exp.Select:
    """FROM the main source joined to the given aliases (in join order) with their ON conditions:
    INNER joins, or each as the model joins it with ``as_joined``."""
    select = exp.select(*[exp.alias_(exp.column(k, part.main_alias), k) for k in part.main_key]).from_(_main_table(part))
    joins = {j.this.alias_or_name.lower(): j for j in part.select.args.get("joins") or []}
    for alias in aliases:
        if alias != part.main_alias:
            side = part.link(alias).side if as_joined else "inner"
            select.join(joins[alias].this.copy(), on=joins[alias].args["on"].copy(), join_type=side, copy=False)
    return select


def _main_table(part: Part) -> exp.Table:
    """The part's main table, as its FROM names it (a copy)."""
    return (part.select.args.get("from_") or part.select.args.get("from")).this.copy()


def _needs_forward(part: Part, link: Link) -> bool:
    """Whether a change of ``link`` can add MV rows the MV does not hold now (INNER joins, WHERE)."""
    if link.own_key:  # the MV keeps the joined row's own key, so a row that starts to match is seen only here
        return True
    subtree = {link.alias} | part.descendants(link.alias)
    where = part.select.args.get("where")
    in_where = {alias_of(c) for c in where.find_all(exp.Column)} if where is not None else set()
    return any(part.link(a).side == "inner" for a in subtree) or bool(subtree & in_where)


def _shortcut(part: Part, link: Link) -> dict[str, str] | None:
    """Main key column → the input's key column, when the join binds the main key directly."""
    if link.own_key:  # the changed keys are the input's primary key, not the bound columns
        return None
    direct = {col.name.lower(): k for k, col in link.bound if alias_of(col) == part.main_alias}
    return {m: direct[m] for m in part.main_key} if all(m in direct for m in part.main_key) else None


def _alias_key_queries(plan: MvPlan, part: Part, link: Link) -> list[tuple[str, exp.Select | None]]:
    """(method, query) pairs mapping changed keys of one joined alias to affected main keys; no
    query where ``lookup_query`` or ``walk_query`` finds the keys for every input at once."""
    if link.constant:
        ancestors = part.ancestors(link.alias)
        select = _walk_back(part, ancestors)
        exists = exp.Exists(this=_changed(plan, link, link.input, [exp.Literal.number(1)]))
        return [("every key (joined by literals only)", _where(select, [exists, *_where_over(part, {part.main_alias, *ancestors})]))]
    shortcut = _shortcut(part, link)
    if shortcut is not None:
        columns = [exp.alias_(exp.column(shortcut[m], "c"), m) for m in part.main_key]
        return [("direct: the join columns are the main key", _changed(plan, link, link.input, columns))]
    found: list[tuple[str, exp.Select | None]] = [("old state: MV rows whose hidden key columns match", None)]
    if _needs_forward(part, link):
        found.append(("new state: walk the joins back to the main source", None))
    return found


def _stored_select(plan: MvPlan, part: Part) -> exp.Select:
    """The part's main keys FROM the stored MV rows (of the part, when a discriminator tells them apart)."""
    select = exp.select(*[exp.alias_(exp.column(c, "s"), k) for k, c in zip(part.main_key, part.main_key_columns)])
    select = select.from_(aliased_table(plan.view_name("stored"), "s"))
    mine = part.rows_condition("s")
    return select.where(mine, copy=False) if mine is not None else select


def _stored_condition(plan: MvPlan, part: Part, link: Link) -> exp.Expression:
    """Stored rows whose hidden key columns for ``link`` hold one of its changed keys."""
    prefix = f"{HIDDEN_PREFIX}k{part.index if len(plan.parts) > 1 else ''}_{link.alias}_"
    hidden = [exp.column(f"{prefix}{k}", "s") for k, _ in link.stored]
    return _in(hidden, _changed(plan, link, link.input, [exp.column(k, "c") for k, _ in link.stored]))


def _looked_up(part: Part) -> list[Link]:
    """The links whose changes are found in the stored MV rows (by their hidden key columns)."""
    return [link for link in part.links if not link.constant and _shortcut(part, link) is None]


def _walked(part: Part) -> list[Link]:
    """The looked-up links whose changes can also add rows: walked back from in the new state."""
    return [link for link in _looked_up(part) if _needs_forward(part, link)]


def lookup_inputs(part: Part) -> set[str]:
    """The inputs whose changed keys ``lookup_query`` reads for ``part``."""
    return {link.input for link in _looked_up(part)}


def walk_inputs(part: Part) -> set[str]:
    """The inputs whose changed keys ``walk_query`` reads for ``part`` (some of ``lookup_inputs``)."""
    return {link.input for link in _walked(part)}


def walk_query(plan: MvPlan, part: Part) -> exp.Select | None:
    """Main keys whose row in the new state joins a changed key of a walked input, for every
    walked input at once (one scan of the main source): the main source joined, as the model
    joins them, to the inputs' ancestors, with the WHERE conjuncts over those. A row of the MV
    joins the same ancestor rows, so every such key is found.

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, w.name FROM d.o AS o JOIN d.s AS s ON s.id = o.sid "
    ...                      "JOIN d.w AS w ON w.id = s.wid WHERE o.live",
    ...                      {"d.o": ("position", ("id",)), "d.s": ("position", ("id",)), "d.w": ("changes", ("id",))})
    >>> print(walk_query(plan, plan.parts[0]).sql(dialect="spark"))
    SELECT o.id AS id FROM d.o AS o INNER JOIN d.s AS s ON s.id = o.sid WHERE (o.sid IN (SELECT c.id FROM mvflow_mv_changed_d_s AS c) OR s.wid IN (SELECT c.id FROM mvflow_mv_changed_d_w AS c)) AND o.live
    """
    links = _walked(part)
    if not links:
        return None
    aliases = {a for link in links for a in [*part.ancestors(link.alias), *([link.alias] if link.own_key else [])]}
    order = [a for a in [part.main_alias, *(l.alias for l in part.links)] if a in aliases]
    # a join by a unique key is walked from the joined rows themselves (the changes are their primary keys)
    conditions = [_in([col.copy() for _, col in link.stored],
                      _changed(plan, link, link.input, [exp.column(k, "c") for k, _ in link.stored])) for link in links]
    select = _walk_back(part, order, as_joined=True)
    # not the WHERE over a row walked from by its own key: a row that starts to match may make
    # WHERE false (``t.id IS NULL``), and its main key must be found to drop its MV row
    own = {link.alias for link in links if link.own_key}
    return _where(select, [exp.or_(*conditions), *_where_over(part, {part.main_alias, *aliases} - own)])


def lookup_query(plan: MvPlan, part: Part) -> exp.Select | None:
    """Affected main keys of ``part`` found in the stored MV rows, for every looked-up input at
    once: one scan of the MV, whichever inputs changed (an input that did not has an empty
    changed-keys view, which Spark drops from the plan).

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, s.name, c.name AS cat FROM d.o AS o JOIN d.s AS s ON s.id = o.sid "
    ...                      "LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.s": ("position", ("id",)), "d.c": ("dictionary", ("id",))})
    >>> print(lookup_query(plan, plan.parts[0]).sql(dialect="spark"))
    SELECT s.id AS id FROM mvflow_mv_stored AS s WHERE s._mvflow_k_s_id IN (SELECT c.id FROM mvflow_mv_changed_d_s AS c) OR s._mvflow_k_c_id IN (SELECT c.id FROM mvflow_mv_changed_d_c AS c)
    """
    conditions = [_stored_condition(plan, part, link) for link in _looked_up(part)]
    if not conditions:
        return None
    return _stored_select(plan, part).where(exp.or_(*conditions), copy=False)


def key_query_methods(plan: MvPlan, input_id: str, part: Part) -> list[tuple[str, str, exp.Select | None]]:
    """(alias, method, query) for every way a change of ``input_id`` reaches ``part``'s main keys
    (no query for the ways ``lookup_query`` and ``walk_query`` cover)."""
    found = []
    if part.main_input == input_id:
        columns = [exp.column(k, "c") for k in part.main_key]
        found.append((part.main_alias, "the main source: changed keys are the keys", _changed(plan, None, input_id, columns)))
    for link in part.links:
        if link.input == input_id:
            found += [(link.alias, method, query) for method, query in _alias_key_queries(plan, part, link)]
    return found


def key_query(plan: MvPlan, input_id: str, part: Part) -> exp.Query | None:
    """Affected main keys of ``part`` from the changed keys of ``input_id``, besides those
    ``lookup_query`` and ``walk_query`` find for every input at once; None if there are no others.

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, p.price FROM d.o AS o LEFT JOIN d.p AS p ON p.oid = o.id",
    ...                      {"d.o": ("position", ("id",)), "d.p": ("changes", ("oid",))})
    >>> print(key_query(plan, "d.p", plan.parts[0]).sql(dialect="spark"))
    SELECT c.oid AS id FROM mvflow_mv_changed_d_p AS c
    """
    queries = [query for _, _, query in key_query_methods(plan, input_id, part) if query is not None]
    return _union(queries, distinct=True) if queries else None


def affected_keys_query(plan: MvPlan) -> exp.Query:
    """MV keys of the affected main keys of every part (view ``keys``; with a grain, the part of
    the key computed from the main key: the unit of refresh)."""
    queries = []
    for part in plan.parts:
        columns = [exp.alias_(e.copy(), k) for e, k in zip(part.key_exprs, plan.key)]
        queries.append(exp.select(*columns).from_(aliased_table(plan.view_name(f"affected_p{part.index}"), part.main_alias)))
    return _union(queries, distinct=True) if len(queries) > 1 else queries[0].distinct(copy=False)


def partitions_query(plan: MvPlan, part: Part) -> exp.Query:
    """The affected main keys of a part with windows (view ``affected_p<i>``) and every main key of
    the partitions they were in (stored) or are in now: a window's values over a partition change
    with any of its rows, so the partition is recomputed whole.

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, row_number() OVER (PARTITION BY o.shop_id ORDER BY o.id) AS n FROM d.o AS o",
    ...                      {"d.o": ("position", ("id",))})
    >>> print(partitions_query(plan, plan.parts[0]).sql(dialect="spark"))
    WITH mvflow_partitions AS (SELECT s._mvflow_w_shop_id FROM mvflow_mv_stored AS s WHERE s.id IN (SELECT id FROM mvflow_mv_affected_p0) UNION SELECT o.shop_id AS _mvflow_w_shop_id FROM d.o AS o WHERE o.id IN (SELECT id FROM mvflow_mv_affected_p0)) SELECT id FROM mvflow_mv_affected_p0 UNION SELECT s.id AS id FROM mvflow_mv_stored AS s WHERE EXISTS(SELECT 1 FROM mvflow_partitions AS g WHERE g._mvflow_w_shop_id IS NOT DISTINCT FROM s._mvflow_w_shop_id) UNION SELECT o.id FROM d.o AS o WHERE EXISTS(SELECT 1 FROM mvflow_partitions AS g WHERE g._mvflow_w_shop_id IS NOT DISTINCT FROM o.shop_id)
    """
    names = [name for name, _ in part.partitions]
    affected = exp.select(*part.main_key).from_(plan.view_name(f"affected_p{part.index}"))
    now = exp.select(*[exp.alias_(e.copy(), n) for n, e in part.partitions]).from_(_main_table(part)).where(
        _in([exp.column(k, part.main_alias) for k in part.main_key], affected.copy()))
    partitions = exp.union(_stored_of_affected(plan, names, "s"), now, distinct=True)
    touched = aliased_table("mvflow_partitions", "g")
    stored = exp.select(*[exp.alias_(exp.column(c, "s"), k) for c, k in zip(part.main_key_columns, part.main_key)]).from_(
        aliased_table(plan.view_name("stored"), "s")).where(_in_groups([exp.column(n, "s") for n in names], names, touched))
    current = exp.select(*[exp.column(k, part.main_alias) for k in part.main_key]).from_(_main_table(part)).where(
        _in_groups([e.copy() for _, e in part.partitions], names, touched.copy()))
    return _union([affected, stored, current], distinct=True).with_("mvflow_partitions", as_=partitions)


def chunk_query(plan: MvPlan, part: Part) -> exp.Select:
    """The affected main keys of ``part`` whose MV key falls in chunk ``:chunk`` of ``:chunks``
    (a chunked refresh, ``compiler.kinds.mv.strategy``): the MV keys split by a hash of their values.

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))})
    >>> print(chunk_query(plan, plan.parts[0]).sql(dialect="spark"))
    SELECT * FROM mvflow_mv_affected_all_p0 AS o WHERE PMOD(HASH(o.id), :chunks) = :chunk
    """
    affected = plan.view_name(f"affected_all_p{part.index}")
    # a windowed part's chunk holds whole partitions (as they are now: a key's old partition is a changed one too)
    values = [e for _, e in part.partitions] or part.key_exprs
    in_chunk = exp.func("pmod", exp.func("hash", *[e.copy() for e in values]), exp.Placeholder(this="chunks")).eq(
        exp.Placeholder(this="chunk"))
    if part.partitions:
        on = _and(exp.column(k, "k").eq(exp.column(k, part.main_alias)) for k in part.main_key)
        return (exp.select(*[exp.column(k, "k") for k in part.main_key]).from_(aliased_table(affected, "k"))
                .join(_main_table(part), on=on, join_type="left").where(in_chunk))
    return exp.select("*").from_(aliased_table(affected, part.main_alias)).where(in_chunk)


def delta_query(plan: MvPlan, batch: bool = True, counted: bool = False) -> exp.Select:
    """One delta row per affected key: the recomputed row, or a tombstone when it is gone (with
    the batch number for parquet's delta partition; a Delta MERGE's source has none).

    With a grain (one-to-many joins), the keys a batch replaces are the stored rows of the
    affected main keys, which the recomputed rows may outnumber or fall short of: a full join.

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, n.text FROM d.o AS o LEFT JOIN d.n AS n ON n.oid = o.id",
    ...                      {"d.o": ("position", ("id",)), "d.n": ("position", ("id",))})
    >>> print(delta_query(plan, batch=False).sql(dialect="spark"))
    SELECT COALESCE(r.id, a.id) AS id, r.text, COALESCE(r._mvflow_k_n_id, a._mvflow_k_n_id) AS _mvflow_k_n_id, r._mvflow_found IS NULL AS _mvflow_deleted FROM (SELECT DISTINCT s.id, s._mvflow_k_n_id FROM mvflow_mv_stored AS s WHERE s.id IN (SELECT id FROM mvflow_mv_affected_p0)) AS a FULL OUTER JOIN mvflow_mv_rows AS r ON a.id IS NOT DISTINCT FROM r.id AND a._mvflow_k_n_id IS NOT DISTINCT FROM r._mvflow_k_n_id
    """
    grain = bool(plan.grain) or plan.grouped is not None
    if grain:
        columns = [exp.alias_(exp.func("coalesce", exp.column(c, "r"), exp.column(c, "a")), c) if c in plan.key
                   else exp.column(c, "r") for c in plan.all_columns]
    else:
        columns = [exp.column(c, "a" if c in plan.key else "r") for c in plan.all_columns]
    deleted = exp.alias_(exp.column(FOUND, "r").is_(exp.null()), DELETED)
    number = [exp.alias_(exp.cast(exp.Placeholder(this="batch"), "BIGINT"), BATCH)] if batch else []
    on = _and(exp.NullSafeEQ(this=exp.column(k, "a"), expression=exp.column(k, "r")) for k in plan.key)
    keys = _replaced_keys(plan).subquery("a") if grain else aliased_table(plan.view_name("keys"), "a")
    if counted:  # whether each key was stored: the runner counts the groups a batch adds and removes
        keys = exp.select("*", exp.alias_(exp.true(), WAS)).from_(keys.this.subquery("k")).subquery("a")
        number.append(exp.alias_(exp.func("coalesce", exp.column(WAS, "a"), exp.false()), WAS))
    return (exp.select(*columns, deleted, *number).from_(keys)
            .join(aliased_table(plan.view_name("rows"), "r"), on=on, join_type="full outer" if grain else "left"))


def stored_grain_keys(plan: MvPlan) -> exp.Select:
    """The stored MV keys of the affected main keys."""
    return _stored_of_affected(plan, plan.key, "s").distinct()


def touched_groups(plan: MvPlan) -> exp.Query:
    """The groups of a GROUP BY MV that a batch recomputed: those its affected members were in
    (stored) or are in now (the recomputed member rows)."""
    names = [name for name, _ in plan.grouped.groups]
    now = exp.select(*[exp.column(n, "r") for n in names]).from_(aliased_table(plan.view_name("rows"), "r")).where(
        exp.not_(group_rows(plan, "r")))
    return exp.union(_stored_groups(plan), now, distinct=True)


def _replaced_keys(plan: MvPlan) -> exp.Query:
    """The stored keys a batch of a grain or GROUP BY MV replaces: the rows of the affected main
    keys and, of a GROUP BY MV, the rows of the groups they were in or are in now (a group that
    lost its members, or fails HAVING now, is gone from the recomputed rows)."""
    members = stored_grain_keys(plan)
    if not plan.grouped:
        return members
    names = [name for name, _ in plan.grouped.groups]
    touched = touched_groups(plan).subquery("g")
    groups = (exp.select(*[exp.column(k, "s") for k in plan.key]).from_(aliased_table(plan.view_name("stored"), "s"))
              .where(exp.and_(group_rows(plan, "s"), _in_groups([exp.column(n, "s") for n in names], names, touched))))
    return exp.union(members, groups, distinct=True)


# What the MERGE's source is, in the statement itself (target/run/<mv>/merge.sql is what runs).
ROWS_COMMENT = "-- s: the rows of merge_rows.sql (the affected keys' rows recomputed, and tombstones), read as a DataFrame"


def merge_statement(plan: MvPlan) -> str:
    """A Delta MV's batch: one MERGE of the recomputed rows and tombstones of the affected keys
    (``delta_query``, passed in as the DataFrame ``{rows}``; columns listed, so the tombstone flag is
    not written).

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))}, table_format="delta")
    >>> print(*merge_statement(plan).splitlines()[:3], sep=chr(10))
    MERGE INTO db.mv__mvflow_rows AS t
    -- s: the rows of merge_rows.sql (the affected keys' rows recomputed, and tombstones), read as a DataFrame
    USING {rows} AS s
    >>> print(*merge_statement(plan).splitlines()[-6:], sep=chr(10))
    ON t.id <=> s.id
    WHEN MATCHED AND s._mvflow_deleted THEN DELETE
    WHEN MATCHED THEN UPDATE SET t.name = s.name, t._mvflow_k_c_id = s._mvflow_k_c_id
    WHEN NOT MATCHED AND NOT s._mvflow_deleted THEN
      INSERT (id, name, _mvflow_k_c_id)
      VALUES (s.id, s.name, s._mvflow_k_c_id)
    """
    def named(column: str, table: str | None = None) -> str:  # quoted where Spark needs it (`shop-info`)
        return exp.column(column, table).sql(dialect="spark")

    on = " AND ".join(f"{named(k, 't')} <=> {named(k, 's')}" for k in plan.key)
    others = [c for c in plan.all_columns if c not in plan.key]
    lines = [f"MERGE INTO {plan.table} AS t", ROWS_COMMENT, "USING {rows} AS s", f"ON {on}",
             f"WHEN MATCHED AND s.{DELETED} THEN DELETE"]
    if others:
        lines.append("WHEN MATCHED THEN UPDATE SET " + ", ".join(f"{named(c, 't')} = {named(c, 's')}" for c in others))
    lines += [f"WHEN NOT MATCHED AND NOT s.{DELETED} THEN",
              f"  INSERT ({', '.join(named(c) for c in plan.all_columns)})",
              f"  VALUES ({', '.join(named(c, 's') for c in plan.all_columns)})"]
    return "\n".join(lines)


def state_query(plan: MvPlan, columns: tuple[str, ...] | None = None, slot: str | None = None) -> exp.Query:
    """The MV's rows: base rows without a newer delta version, plus the newest non-deleted delta rows.
    The tables are ``:base_table``/``:delta_table``, or those of ``slot`` by name (a view's text
    may hold no parameter markers). Given ``columns`` (what readers see), a GROUP BY MV's group rows only."""
    readers = columns is not None and plan.grouped is not None
    columns = columns or plan.all_columns

    def table(what: str, alias: str) -> exp.Table:
        return aliased_table(plan.table_name(f"{what}_{slot}"), alias) if slot else identifier_table(f"{what}_table", alias)

    delta = exp.select("*").from_(table("delta", "t"))
    rank = exp.Window(this=exp.RowNumber(), partition_by=[exp.column(k, "d") for k in plan.key],
                      order=exp.Order(expressions=[exp.Ordered(this=exp.column(BATCH, "d"), desc=True)]))
    ranked = exp.select("d.*", exp.alias_(rank, RANK)).from_(aliased_table("delta", "d"))
    latest = exp.select("*").from_(ranked.subquery("r")).where(exp.column(RANK, "r").eq(1))
    on = _and(exp.NullSafeEQ(this=exp.column(k, "b"), expression=exp.column(k, "d")) for k in plan.key)
    base = (exp.select(*[exp.column(c, "b") for c in columns]).from_(table("base", "b"))
            .join(aliased_table("delta", "d"), on=on, join_type="left anti"))
    newest = (exp.select(*[exp.column(c, "l") for c in columns]).from_(aliased_table("latest", "l"))
              .where(exp.Not(this=exp.column(DELETED, "l"))))
    if readers:
        base, newest = base.where(group_rows(plan, "b"), copy=False), newest.where(group_rows(plan, "l"), copy=False)
    return _union([base, newest], distinct=False).with_("delta", as_=delta).with_("latest", as_=latest)


def stored_version_query(plan: MvPlan) -> exp.Select:
    """A Delta MV's rows as they were at the last commit (what a redone batch must see): the
    runner reads that table version into the view ``before`` (Delta's parser takes no marker
    after ``VERSION AS OF``).

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))}, table_format="delta")
    >>> print(stored_version_query(plan).sql(dialect="spark"))
    SELECT b.id, b.name, b._mvflow_k_c_id FROM mvflow_mv_before AS b
    """
    return exp.select(*[exp.column(c, "b") for c in plan.all_columns]).from_(aliased_table(plan.view_name("before"), "b"))


def stored_query(plan: MvPlan) -> exp.Query:
    """Every stored version of the MV's rows before ``:batch`` (what a redone batch must see):
    base and delta rows alike, superseded ones and tombstones included.

    It holds every hidden key the MV holds now, and is read without the shuffle that finding
    the newest version needs. A key query over it may also find a key by a superseded version;
    refreshing that key recomputes its row from the sources, so the result is the same.

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))})
    >>> print(stored_query(plan).sql(dialect="spark"))
    SELECT b.id, b.name, b._mvflow_k_c_id FROM IDENTIFIER(:base_table) AS b UNION ALL SELECT d.id, d.name, d._mvflow_k_c_id FROM IDENTIFIER(:delta_table) AS d WHERE d.mvflow_batch < :batch
    """
    base = exp.select(*[exp.column(c, "b") for c in plan.all_columns]).from_(identifier_table("base_table", "b"))
    delta = (exp.select(*[exp.column(c, "d") for c in plan.all_columns]).from_(identifier_table("delta_table", "d"))
             .where(exp.column(BATCH, "d") < exp.Placeholder(this="batch")))
    return exp.union(base, delta, distinct=False)


def _position_after(columns: tuple[str, ...], alias: str, prefix: str, index: int = 0) -> exp.Expression:
    column, marker = exp.column(columns[index], alias), exp.Placeholder(this=f"{prefix}_{index}")
    if index == len(columns) - 1:
        return column > marker
    return exp.or_(column > marker, exp.and_(column.eq(marker.copy()), _position_after(columns, alias, prefix, index + 1)))


def _position_upto(columns: tuple[str, ...], alias: str, prefix: str, index: int = 0) -> exp.Expression:
    column, marker = exp.column(columns[index], alias), exp.Placeholder(this=f"{prefix}_{index}")
    if index == len(columns) - 1:
        return column <= marker
    return exp.or_(column < marker, exp.and_(column.eq(marker.copy()), _position_upto(columns, alias, prefix, index + 1)))


def change_query(plan: MvPlan, input_id: str) -> exp.Query:
    """Keys of ``input_id`` changed in ``(:last_*, :next_*]`` (positions; ``:from_start`` when the input
    was empty at the last commit), in the Change Data Feed's versions ``:first_version`` to
    ``:next_version`` (``cdf``), or between snapshots ``:last``/``:next``.

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, p.price FROM d.o AS o LEFT JOIN d.p AS p ON p.oid = o.id",
    ...                      {"d.o": ("position", ("id",)), "d.p": ("cdf", ("oid",))})
    >>> print(change_query(plan, "d.p").sql(dialect="spark"))
    SELECT DISTINCT t.oid FROM TABLE_CHANGES('d.p', :first_version, :next_version) AS t
    """
    info = plan.inputs[input_id]
    keys = [exp.column(k, "t") for k in info.key]
    if info.mode == "cdf":
        # Every change type (insert, update pre/post-image, delete) names a changed key.
        feed = exp.Anonymous(this="table_changes", expressions=[
            exp.Literal.string(info.relation), exp.Placeholder(this="first_version"), exp.Placeholder(this="next_version")])
        return exp.select(*keys).distinct().from_(exp.Table(this=feed, alias=exp.TableAlias(this=exp.to_identifier("t"))))
    if info.mode in ("position", "changes", "mv"):
        # a position or feed input is read through a view: its rows past ``last`` as the probe kept them
        table = plan.view_name(f"past_last_{info.slug}") if info.mode != "mv" else info.feed
        after = exp.or_(exp.Placeholder(this="from_start"), _position_after(info.position, "t", "last"))
        where = exp.and_(after, _position_upto(info.position, "t", "next"))
        return exp.select(*keys).distinct().from_(aliased_table(table, "t")).where(where)
    snapshot = plan.table_name(f"snap_{info.slug}")
    return _diff(info, lambda marker: exp.select(*info.used_columns).from_(snapshot)
                 .where(exp.column(BATCH).eq(exp.Placeholder(this=marker))))


def version_diff_query(plan: MvPlan, input_id: str) -> exp.Query:
    """Keys of a diffed input stored as a Delta table whose used columns differ between the
    table as of the version the last batch saw and as of the one this batch reads: time travel,
    no snapshot copies. The runner registers the two versions as the views read here
    (``versionAsOf``: a parameter marker cannot stand in ``VERSION AS OF``).

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))})
    >>> print(version_diff_query(plan, "d.c").sql(dialect="spark"))
    SELECT DISTINCT t.id FROM (SELECT u.id, u.name FROM (SELECT id, name, 0 AS _mvflow_side FROM mvflow_mv_as_of_last_d_c UNION ALL SELECT id, name, 1 AS _mvflow_side FROM mvflow_mv_as_of_next_d_c) AS u GROUP BY u.id, u.name HAVING MIN(u._mvflow_side) = MAX(u._mvflow_side)) AS t
    """
    info = plan.inputs[input_id]
    return _diff(info, lambda which: exp.select(*info.used_columns).from_(plan.view_name(f"as_of_{which}_{info.slug}")))


def _diff(info: InputInfo, taken) -> exp.Query:
    """Keys whose used columns differ between ``taken("last")`` and ``taken("next")``, both ways:
    the rows found on one side only (as ``EXCEPT`` both ways would find them, but by grouping,
    so Spark runs no join, hence no broadcast job of its own)."""
    side = exp.column(SIDE, "u")

    def tagged(which: str, n: int) -> exp.Select:
        return taken(which).select(exp.alias_(exp.Literal.number(n), SIDE))

    used = [exp.column(c, "u") for c in info.used_columns]
    once = (exp.select(*used).from_(exp.union(tagged("last", 0), tagged("next", 1), distinct=False).subquery("u"))
            .group_by(*[c.copy() for c in used]).having(exp.func("min", side).eq(exp.func("max", side.copy()))))
    return exp.select(*[exp.column(k, "t") for k in info.key]).distinct().from_(once.subquery("t"))


def snapshot_query(plan: MvPlan, input_id: str) -> exp.Select:
    """The columns of a dictionary-like input the MV uses (its snapshot for batch ``:batch``)."""
    info = plan.inputs[input_id]
    batch = exp.alias_(exp.cast(exp.Placeholder(this="batch"), "BIGINT"), BATCH)
    return exp.select(*[exp.column(c, "t") for c in info.used_columns], batch).from_(aliased_table(info.relation, "t"))


def diffed(info: InputInfo) -> bool:
    """Inputs whose changes are found by diffing their contents (dictionaries and upstream tables):
    against a snapshot on parquet, by time travel on Delta."""
    return info.mode in ("dictionary", "table")


def mode_words(info: InputInfo) -> str:
    """An input's change mode as ``mvflow explain`` names it.

    >>> mode_words(InputInfo("d.c", "d.c", "dictionary", ("id",), ("id",), table_format="delta"))
    'dictionary, diffed by time travel between Delta versions'
    >>> mode_words(InputInfo("d.p", "d.p", "cdf", ("id",), ("id",)))
    "cdf, the Delta table's Change Data Feed between versions"
    """
    if diffed(info):
        ways = {("snapshots",): "diffed against a snapshot", ("versions",): "diffed by time travel between Delta versions"}
        how = ways.get(diff_ways(info), "diffed against a snapshot (parquet) or by time travel between versions (Delta)")
        return f"{info.mode}, {how}"
    return {"cdf": "cdf, the Delta table's Change Data Feed between versions",
            "changes": f"changes, feed {info.feed}"}.get(info.mode, info.mode)


def diff_ways(info: InputInfo) -> tuple[str, ...]:
    """How a diffed input may be diffed: ``snapshots`` (parquet), ``versions`` (Delta time travel).
    A model's format is known when compiling; a source's only when the run looks at its table,
    so both are derived for it."""
    if not diffed(info):
        return ()
    return {"delta": ("versions",), "parquet": ("snapshots",)}.get(info.table_format, ("snapshots", "versions"))


