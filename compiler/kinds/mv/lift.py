"""Aggregates joined back: an mv's derived table (an import CTE, a subquery) that aggregates and is
joined to other tables becomes an mv of its own (pure: ASTs in, ASTs out).

dbt's marts join aggregates back by key: ``customers LEFT JOIN customer_orders ON
customer_orders.customer_id = customers.customer_id``, where the CTE ``customer_orders`` groups
``orders`` by ``customer_id``. Such a derived table cannot be merged into its reader (its rows are
groups), but it is a GROUP BY mv by itself: refreshed by group, unique by its GROUP BY columns, and
publishing the groups each batch recomputes. So it is *lifted*: it becomes the mv
``<owner>__<alias>`` (an *owned* mv: compiled, selected and run with its owner, before it), and the
owner reads it in its place, as a table joined by its key, whose changes are the groups its batches
publish. A change of an order then reaches exactly one group, and through the join exactly the
customers of that group. ``SELECT DISTINCT`` derived tables are lifted alike (DISTINCT is a GROUP BY),
and so are joined views that aggregate (dbt's intermediate models), read directly or through an
import CTE: their mv is ``SELECT * FROM <view>`` (the view's SQL is expanded into it, and a change of
it rebuilds that mv).

The owner's table and its ``mvflow verify`` stay those of the SELECT as written; only its refresh
reads the lifted mvs. A derived table read as the only table of its SELECT is not lifted (``select
* from final`` becomes that query), nor one in WHERE (a semi-join; ``normalize.semijoins``).

>>> from compiler.parse import parse_select, pretty
>>> query, lifted = lift_aggregates("customers", parse_select(
...     "with co as (select customer_id, count(*) as n from db.orders group by customer_id) "
...     "select c.id, co.n from db.customers as c left join co on co.customer_id = c.id", "m.sql"), "db")
>>> print(pretty(query))
SELECT
  c.id,
  co.n
FROM db.customers AS c
LEFT JOIN db.customers__co AS co
  ON co.customer_id = c.id
>>> [(item.name, item.alias, item.query.sql()) for item in lifted]
[('customers__co', 'co', 'SELECT customer_id, COUNT(*) AS n FROM db.orders GROUP BY customer_id')]
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Callable

from sqlglot import exp

from ...errors import Problem
from ...manifest import Model
from ...parse import plain_columns, pretty, table_name, table_references
from ...render import Call
from . import MvKind
from .normalize.ctes import inline_ctes
from .normalize.scope import alias, sources

#: the owner's settings its lifted mvs share (not its key, clustering, hooks or alias: those are its table's)
_SHARED_CONFIG = ("materialized", "schema", "database", "table_format", "file_format", "strategy", "compact_threshold",
                  "compact_below_rows", "fanout_threshold", "min_interval_seconds", "chunk_keys", "full_refresh")


@dataclass(frozen=True)
class Lifted:
    """A derived table lifted out of an mv: the owned mv's name, the alias it was read by, its SELECT."""

    name: str
    alias: str
    query: exp.Query


def lift_aggregates(owner: str, query: exp.Query, schema: str,
                    views: Callable[[str], exp.Query | None] = lambda relation: None) -> tuple[exp.Query, list[Lifted]]:
    """``query`` reading each aggregate it joins from the table ``<schema>.<owner>__<alias>`` (a copy,
    its CTEs inlined), and the SELECTs of those mvs; ``query`` itself and [] when it joins none.
    ``views`` (relation → its SELECT if a view, else None): a joined view that aggregates (dbt's intermediate models), read
    directly or through an import CTE, is lifted as ``SELECT * FROM <view>``. One SELECT read twice
    (a CTE joined twice) is one mv."""
    inlined = inline_ctes(query.copy())
    lifted: dict[str, Lifted] = {}  # by the SQL of its SELECT
    for source in _joined_aggregates(inlined, views):
        select = source.this if isinstance(source, exp.Subquery) else exp.select("*").from_(exp.table_(
            source.name, source.db))
        text = select.sql()
        if text not in lifted:
            taken = {item.name for item in lifted.values()}
            lifted[text] = Lifted(_free(f"{owner}__{alias(source)}", taken), alias(source), select)
        source.replace(_table(schema, lifted[text].name, source))
    return (inlined, list(lifted.values())) if lifted else (query, [])


def _joined_aggregates(query: exp.Expression, views: Callable[[str], exp.Query | None]) -> list[exp.Expression]:
    """The tables and derived tables that aggregate and are joined (in a JOIN, or in a FROM followed
    by joins), outermost first; not those inside another."""
    found: list[exp.Expression] = []

    def visit(node: exp.Expression) -> None:
        for child in node.iter_expressions():
            if isinstance(child, (exp.Subquery, exp.Table)) and _joined(child) and _aggregates(child, views):
                found.append(child)
            else:
                visit(child)

    visit(query)
    return found


def _aggregates(source: exp.Expression, views: Callable[[str], exp.Query | None]) -> bool:
    """A derived table or a view whose rows are groups: it aggregates (GROUP BY, or SELECT DISTINCT),
    or selects * from one table that does (``with final as (… group by …) select * from final``)."""
    if isinstance(source, exp.Table):
        view = views(table_name(source)) if source.db else None
        return view is not None and _aggregates(exp.Subquery(this=inline_ctes(view.copy())), views)
    query = source.this if isinstance(source, exp.Subquery) else None
    if not isinstance(query, exp.Select):
        return False
    if query.args.get("group") or query.args.get("distinct"):
        return True
    read = sources(query)
    return len(read) == 1 and len(query.expressions) == 1 and isinstance(query.expressions[0], exp.Star) \
        and not any(query.args.get(arg) for arg in ("joins", "where", "having", "qualify", "order", "limit")) \
        and _aggregates(read[0], views)


def _joined(source: exp.Expression) -> bool:
    parent = source.parent
    return isinstance(parent, exp.Join) or (isinstance(parent, exp.From) and bool(parent.parent.args.get("joins")))


def _free(name: str, taken: set[str]) -> str:
    candidate, number = name, 2
    while candidate in taken:
        candidate, number = f"{name}_{number}", number + 1
    return candidate


def _table(schema: str, name: str, source: exp.Expression) -> exp.Table:
    """The lifted mv's table, under the alias ``source`` was read by and at its line."""
    table = exp.Table(this=exp.to_identifier(name), db=exp.to_identifier(schema))
    named = source.args["alias"].this if source.args.get("alias") else source.this
    table.this.meta.update(named.meta)
    table.set("alias", exp.TableAlias(this=exp.to_identifier(alias(source))))
    return table


def lift_models(models: dict[str, Model], taken: set[str]) -> list[Problem]:
    """Lift the joined aggregates of every mv of ``models`` (and of the mvs lifted, in turn) into
    mvs owned by it, added to ``models``; the owner's ``mv_query`` reads them. ``taken``: the
    relations sources and models already name. Returns the problems (a name already taken)."""
    problems: list[Problem] = []
    todo = [m for m in models.values() if isinstance(m.kind, MvKind) and m.ast is not None]
    views = {m.relation: m for m in models.values() if m.kind.name == "view"}  # parsed when read (cache.py)
    while todo:
        owner = todo.pop(0)
        query, lifted = lift_aggregates(owner.name, owner.ast, owner.schema,
                                        lambda relation: views[relation].ast if relation in views else None)
        clash = [item for item in lifted if item.name in models or f"{owner.schema}.{item.name}".lower() in taken]
        for item in clash:
            problems.append(Problem(
                f"mv '{owner.name}': its aggregate '{item.alias}' becomes the mv '{item.name}', a name already taken",
                owner.path, 1, hint=f"rename the CTE or subquery '{item.alias}', or the model named {item.name}",
                code="mv-lift-name"))
        if not lifted or clash:
            continue
        owned = [_owned_model(owner, item, models) for item in lifted]
        reads = {name for name, _ in table_references(query)}
        moved = {c.name for model in owned for c in model.refs + model.source_calls}
        owner.mv_query = query  # it reads what it still reads itself, and its lifted mvs
        owner.refs = [c for c in owner.refs if c.name not in moved or _reads(models[c.name], reads)] + \
            [Call(model.name, model.refs[0].line if model.refs else 1) for model in owned]
        owner.source_calls = [c for c in owner.source_calls if c.name not in moved or c.name.lower() in reads]
        for model in owned:
            models[model.name] = model
            taken.add(model.relation)
        todo += owned
    return problems


def _reads(model: Model, relations: set[str]) -> bool:
    """Whether a query reading ``relations`` reads ``model`` (an ephemeral one is inlined: say yes)."""
    return model.kind.name == "ephemeral" or model.relation in relations


def _owned_model(owner: Model, item: Lifted, models: dict[str, Model]) -> Model:
    relation = f"{owner.schema}.{item.name}".lower()
    reads = {name for name, _ in table_references(item.query)}
    text = pretty(item.query)
    model = Model(
        name=item.name, path=owner.path, kind=replace(owner.kind, unique_key=(), cluster_by=()),
        config={key: value for key, value in owner.config.items() if key in _SHARED_CONFIG},
        config_lines={}, schema=owner.schema, relation=relation, tags=owner.tags,
        description=f"The aggregate '{item.alias}' of the mv {owner.name}, lifted into an mv of its own: refreshed "
                    f"by its groups before {owner.name}, which reads the groups it changes.",
        column_docs={}, raw_sql=owner.raw_sql, checksum=hashlib.sha256(text.encode()).hexdigest(),
        refs=[c for c in owner.refs if c.name in models and _reads(models[c.name], reads)],
        source_calls=[c for c in owner.source_calls if c.name.lower() in reads],
        sql=text + "\n", table_format=owner.table_format, owner=owner.name)
    model.ast = item.query
    model.tables_read, model.plain_columns = table_references(item.query), plain_columns(item.query)
    return model
