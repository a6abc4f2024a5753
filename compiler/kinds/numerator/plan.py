"""Compile-time plan of a ``numerator`` model: the statements a generation runs, as Spark SQL with
named parameter markers (``target/run/<model>/generation.sql`` is the text that runs).

Tables (``<relation>`` is the model's ``schema.name``):

- ``<relation>__mvflow_input_<build>``: the generation's distinct key tuples with their shard
  (parquet, dropped once the generation is published);
- ``<relation>__mvflow_state_<build>``: one state, in the model's table format: every key the state
  numbers, ``shard_id``, ``doc_id``, ``last_seen`` (the generation it was last present in) and
  ``present``;
- ``<relation>``: a view of the present keys of the published state (the one statement whose text
  is completed at run time: Spark takes no parameter marker in a view's query, so the build's
  number is written in by PySpark's formatter, as a fact step's partition is).

``<build>`` is the fencing token of the lease the generation is built under, so two writers (a
stale one still running and the one that took its lease over) never write the same table, and the
view is only pointed at a state the state store committed. Pure: no Spark, no state store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from ...parse import pretty
from ...table_format import readable_view, using
from ..statements import Statement, hooks
from .decisions import Settings
from .version import Scheme

if TYPE_CHECKING:
    from ...manifest import Model

SHARD, DOC, LAST_SEEN, PRESENT = "shard_id", "doc_id", "last_seen", "present"
RESERVED = (SHARD, DOC, LAST_SEEN, PRESENT)
_BUILD = re.compile(r"__mvflow_(state|input)_(\d+)$")


@dataclass(frozen=True)
class NumeratorPlan:
    topic: str
    relation: str
    path: str
    key: tuple[str, ...]  # in config order: new keys are numbered in this order
    output: tuple[str, ...]  # the view's columns: the SELECT's key columns, shard_id, doc_id
    settings: Settings
    table_format: str
    create_schema: str
    drop: str  # one table, ``:table``
    input: str
    counts: str
    first: str
    append: str
    rebuild: str
    check: str
    publish: str
    builds: str  # the schema's tables of this model's builds
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


def numerator(model: "Model") -> NumeratorPlan:
    """Plan the generations of a numerator model.

    >>> plan = numerator(_model("SELECT shop_id, offer_id FROM s.offers", key=("shop_id", "offer_id"), shards=4))
    >>> print(plan.input)
    CREATE TABLE IDENTIFIER(:input_table)
    USING parquet
    AS
    SELECT DISTINCT
      q.shop_id,
      q.offer_id,
      CAST(PMOD(XXHASH64(0, q.shop_id, q.offer_id), 4) AS INT) AS shard_id
    FROM (
      SELECT
        shop_id,
        offer_id
      FROM s.offers
    ) AS q
    >>> print(plan.publish)
    CREATE OR REPLACE VIEW m.ids AS
    SELECT
      shop_id,
      offer_id,
      shard_id,
      doc_id
    FROM m.ids__mvflow_state_{build}
    WHERE
      present
    """
    kind = model.kind
    key = tuple(kind.key)
    scheme = Scheme(kind.sharding_scheme, kind.shards, key)
    settings = Settings(kind.state_type, scheme, kind.ttl_generations, kind.max_holes)
    output = tuple(model.columns or kind.output_columns(None))  # compile gave the stored columns
    schema = model.relation.split(".")[0]
    alias = model.relation.split(".", 1)[1]
    state_using = using(model.table_format)
    return NumeratorPlan(
        topic=model.name,
        relation=model.relation,
        path=model.path,
        key=key,
        output=output,
        settings=settings,
        table_format=model.table_format,
        create_schema=f"CREATE DATABASE IF NOT EXISTS {schema}",
        drop="DROP TABLE IF EXISTS IDENTIFIER(:table)",
        input=_create("input_table", "USING parquet", _input(model, scheme)),
        counts=pretty(_counts(key, settings.ttl_generations)),
        first=_create("state_table", state_using, _renumbered(key, previous=False)),
        append=_create("state_table", state_using, _appended(key, settings.ttl_generations)),
        rebuild=_create("state_table", state_using, _renumbered(key, previous=True)),
        check=pretty(_check(key, scheme.shards)),
        publish=_publish(model.relation, output),
        builds=f"SHOW TABLES IN {schema} LIKE '{alias}__mvflow_*'",
        before=tuple(hooks(model.config.get("before"))),
        after=tuple(hooks(model.config.get("after"))),
    )


def state_table(relation: str, build: int) -> str:
    """
    >>> state_table("marts.offer_ids", 7)
    'marts.offer_ids__mvflow_state_7'
    """
    return f"{relation}__mvflow_state_{build}"


def input_table(relation: str, build: int) -> str:
    return f"{relation}__mvflow_input_{build}"


def build_of(table: str) -> tuple[str, int] | None:
    """Which table of which build ``table`` (a name ``SHOW TABLES`` lists) is; None: not a build's.

    >>> build_of("offer_ids__mvflow_state_12"), build_of("offer_ids__mvflow_input_3"), build_of("offer_ids")
    (('state', 12), ('input', 3), None)
    """
    found = _BUILD.search(table)
    return (found.group(1), int(found.group(2))) if found else None


def generation_script(plan: NumeratorPlan, model: "Model") -> str:
    """``target/run/<model>/generation.sql``: every statement a generation may run, in order."""
    from ..statements import script

    s = plan.settings
    notes = [
        f"key ({', '.join(plan.key)}); sharding scheme {s.scheme.number}: {s.scheme.shards} shards; "
        f"ttl_generations {s.ttl_generations}; max_holes {s.max_holes:g}; state type {s.state_type}",
        ":input_table, :state_table = this build's tables (<relation>__mvflow_input_<token>, __mvflow_state_<token>:"
        " <token> is the fencing token of the lease on topic '" + plan.topic + "')",
        ":previous_table = the published state's table; :generation = G of the version being built; {build} = the "
        "token (an integer, written in by PySpark's formatter: Spark takes no parameter marker in a view's query)",
        "the state store's offsets row of topic '" + plan.topic + "': next = the version being built, last = the published one",
    ]
    items = [
        Statement("make sure the schema exists", plan.create_schema),
        *(Statement("before hook", h) for h in plan.before),
        Statement(":table = a table to drop: this build's own before it is (re)created, the input once the generation "
                  "is done, builds no one reads (the last statement lists them)", plan.drop),
        Statement("snapshot the input: every distinct key tuple with its shard", plan.input),
        Statement("same scheme, a published state: per shard, the input against it (what the generation changes)",
                  plan.counts),
        Statement("no state yet: number each shard's keys 0..n-1 in key order", plan.first),
        Statement("a generation: present keys keep their ids; new keys take expired ids, then ids after the shard's top",
                  plan.append),
        Statement("a rebuild (--rebuild-state, holes > max_holes) or a new scheme: renumber the present keys densely "
                  "per shard in the order of their old ids, new keys after them", plan.rebuild),
        Statement("check the new state before committing it: one row per key, unique (shard_id, doc_id)", plan.check),
        Statement("after the commit (the fenced copy of next to last): point the view at the committed state "
                  "({build} = its token; again with last's token if a newer commit came meanwhile)", plan.publish),
        Statement("the view readable by a Spark without Delta Lake", readable_view(model.relation)),
        *(Statement("after hook", h) for h in plan.after),
        Statement("this model's builds: those older than this one, but the published state and its predecessor, "
                  "are dropped (:table)", plan.builds),
    ]
    return script(model, items, notes)


# -- the queries -------------------------------------------------------------------------------
def shard_expression(scheme: Scheme, alias: str | None = None) -> exp.Expression:
    """The shard of a key under ``scheme``.

    >>> shard_expression(Scheme(1, 8, ("a", "b")), "q").sql(dialect="spark")
    'CAST(PMOD(XXHASH64(1, q.a, q.b), 8) AS INT)'
    """
    hashed = exp.func("XXHASH64", exp.Literal.number(scheme.number), *_columns(scheme.key, alias))
    return exp.cast(exp.func("PMOD", hashed, exp.Literal.number(scheme.shards)), "int")


def _input(model: "Model", scheme: Scheme) -> exp.Select:
    return (exp.select(*_columns(scheme.key, "q"), exp.alias_(shard_expression(scheme, "q"), SHARD))
            .distinct().from_(model.ast.copy().subquery("q")))


def _counts(key: tuple[str, ...], ttl: int) -> exp.Select:
    """Per shard: the input (``i``) against the published state (``p``), see ``decisions.ShardCounts``."""
    def missing(alias: str) -> exp.Expression:
        return exp.column(SHARD, alias).is_(exp.null())

    present = exp.column(PRESENT, "p")
    shard = exp.func("COALESCE", exp.column(SHARD, "i"), exp.column(SHARD, "p"))
    counts = [("new_keys", missing("p")), ("returned", exp.and_(exp.not_(missing("i")), exp.not_(present))),
              ("gone", exp.and_(missing("i"), present)), ("expired", exp.and_(missing("i"), _expired("p", ttl))),
              ("absent", missing("i"))]
    query = (exp.select(exp.alias_(shard, SHARD), *[exp.alias_(exp.func("COUNT_IF", c), n) for n, c in counts],
                        exp.alias_(exp.func("COUNT", exp.column(SHARD, "p")), "ids"),
                        exp.alias_(exp.func("MAX", exp.column(DOC, "p")), "top"))
             .from_(exp.to_table("input").as_("i"))
             .join(exp.to_table("previous").as_("p"), on=_same_key(key, "i", "p"), join_type="full outer")
             .group_by(shard.copy()).order_by(SHARD))
    return _with_inputs(query, key)


def _appended(key: tuple[str, ...], ttl: int) -> exp.Select:
    """The next generation: ``known`` = the state's keys, present or not; ``fresh`` = new keys
    numbered per shard in key order; ``free`` = expired ids numbered per shard, lowest first;
    ``tops`` = each shard's top id and free id count. The n-th new key of a shard takes the n-th
    free id, or ``top + n - free``; expired keys whose id was taken leave the state."""
    generation = _generation()
    present = exp.column(SHARD, "i").is_(exp.null()).not_()
    known = (exp.select(*_columns(key, "p"), exp.column(SHARD, "p"), exp.column(DOC, "p"),
                        exp.alias_(exp.If(this=present, true=generation, false=exp.column(LAST_SEEN, "p")), LAST_SEEN),
                        exp.alias_(present.copy(), PRESENT))
             .from_(exp.to_table("previous").as_("p"))
             .join(exp.to_table("input").as_("i"), on=_same_key(key, "p", "i"), join_type="left"))
    fresh = (exp.select(*_columns(key, "i"), exp.column(SHARD, "i"),
                        exp.alias_(_row_number(exp.column(SHARD, "i"), _columns(key, "i")), "n"))
             .from_(exp.to_table("input").as_("i"))
             .join(exp.to_table("previous").as_("p"), on=_same_key(key, "i", "p"), join_type="left anti"))
    is_free = exp.and_(exp.not_(exp.column(PRESENT)), _expired(None, ttl))
    free = (exp.select(SHARD, DOC, exp.alias_(_row_number(exp.column(SHARD), [exp.column(DOC)]), "n"))
            .from_("known").where(is_free))
    tops = (exp.select(SHARD, exp.alias_(exp.func("MAX", exp.column(DOC)), "top"),
                       exp.alias_(exp.func("COUNT_IF", is_free.copy()), "free"))
            .from_("known").group_by(SHARD))
    after_top = exp.Sub(this=exp.Add(this=exp.func("COALESCE", exp.column("top", "t"), exp.Literal.number(-1)),
                                     expression=exp.column("n", "f")),
                        expression=exp.func("COALESCE", exp.column("free", "t"), exp.Literal.number(0)))
    assigned = (exp.select(*_columns(key, "f"), exp.column(SHARD, "f"),
                           exp.alias_(exp.cast(exp.func("COALESCE", exp.column(DOC, "r"), after_top), "bigint"), DOC))
                .from_(exp.to_table("fresh").as_("f"))
                .join(exp.to_table("free").as_("r"), on=exp.and_(_same("r", "f", SHARD), _same("r", "f", "n")), join_type="left")
                .join(exp.to_table("tops").as_("t"), on=_same("t", "f", SHARD), join_type="left"))
    kept = (exp.select(*_columns(key, "k"), *_columns((SHARD, DOC, LAST_SEEN, PRESENT), "k"))
            .from_(exp.to_table("known").as_("k"))
            .join(exp.to_table("assigned").as_("a"), on=exp.and_(_same("a", "k", SHARD), _same("a", "k", DOC)),
                  join_type="left anti"))
    numbered = exp.select(*_columns(key), SHARD, DOC, exp.alias_(generation.copy(), LAST_SEEN),
                          exp.alias_(exp.true(), PRESENT)).from_("assigned")
    query = exp.union(kept, numbered, distinct=False)
    for name, cte in (("known", known), ("fresh", fresh), ("free", free), ("tops", tops), ("assigned", assigned)):
        query = query.with_(name, as_=cte)
    return _with_inputs(query, key)


def _renumbered(key: tuple[str, ...], previous: bool) -> exp.Select:
    """Present keys numbered ``0..n-1`` per (new) shard: by their old (shard, id) when ``previous``
    (keys new to the state after them), then by key."""
    order = [exp.Ordered(this=exp.column(c, "p"), nulls_first=False) for c in (SHARD, DOC)] if previous else []
    doc_id = exp.Sub(this=_row_number(exp.column(SHARD, "i"), [*order, *_columns(key, "i")]), expression=exp.Literal.number(1))
    query = (exp.select(*_columns(key, "i"), exp.column(SHARD, "i"), exp.alias_(exp.cast(doc_id, "bigint"), DOC),
                        exp.alias_(_generation(), LAST_SEEN), exp.alias_(exp.true(), PRESENT))
             .from_(exp.to_table("input").as_("i")))
    if previous:
        query = query.join(exp.to_table("previous").as_("p"), on=_same_key(key, "i", "p"), join_type="left")
    return _with_inputs(query, key, previous)


def _check(key: tuple[str, ...], shards: int) -> exp.Select:
    """The new state's invariants, in one row: ids, present keys, input keys, keys numbered twice,
    ids given twice, shards or ids out of range, shards whose ids are not ``0..n-1``."""
    def scalar(query: exp.Select, name: str) -> exp.Expression:
        return exp.alias_(exp.select(exp.func("COUNT", exp.Star())).from_(query.subquery("d")).subquery(), name)

    def twice(columns) -> exp.Select:
        return exp.select(*columns).from_(_named("state_table")).group_by(*columns).having("COUNT(*) > 1")

    shard, doc = exp.column(SHARD), exp.column(DOC)
    out_of_range = exp.or_(shard.is_(exp.null()), doc.is_(exp.null()), shard < 0, shard >= shards, doc < 0)
    sparse = (exp.select(SHARD).from_(_named("state_table")).group_by(SHARD)
              .having(exp.NEQ(this=exp.func("MAX", doc.copy()), expression=exp.Sub(
                  this=exp.func("COUNT", exp.Star()), expression=exp.Literal.number(1)))))
    return exp.select(
        exp.alias_(exp.func("COUNT", exp.Star()), "ids"),
        exp.alias_(exp.func("COUNT_IF", exp.column(PRESENT)), PRESENT),
        exp.alias_(exp.select(exp.func("COUNT", exp.Star())).from_(_named("input_table")).subquery(), "input_keys"),
        scalar(twice(_columns(key)), "keys_twice"),
        scalar(twice([exp.column(SHARD), exp.column(DOC)]), "ids_twice"),
        exp.alias_(exp.func("COUNT_IF", out_of_range), "out_of_range"),
        scalar(sparse, "sparse_shards"),
    ).from_(_named("state_table"))


def _publish(relation: str, output: tuple[str, ...]) -> str:
    """The view over the present keys of build ``{build}``: Spark refuses parameter markers in a
    view's query, so PySpark's formatter writes the build number (an int) in ``{build}``."""
    schema, alias = relation.split(".", 1)
    query = exp.select(*output).from_(exp.table_(f"{alias}__mvflow_state_BUILD", db=schema)).where(PRESENT)
    return f"CREATE OR REPLACE VIEW {relation} AS\n" + pretty(query).replace("__mvflow_state_BUILD", "__mvflow_state_{build}")


# -- helpers -----------------------------------------------------------------------------------
def _create(marker: str, clause: str, query: exp.Select) -> str:
    return f"CREATE TABLE IDENTIFIER(:{marker})\n{clause}\nAS\n{pretty(query)}"


def _with_inputs(query: exp.Query, key: tuple[str, ...], previous: bool = True) -> exp.Query:
    """``query`` reading the CTEs ``input`` (this build's input table) and ``previous`` (the published state)."""
    ctes = [("input", exp.select(*_columns(key), SHARD).from_(_named("input_table")))]
    if previous:
        ctes.append(("previous", exp.select(*_columns(key), SHARD, DOC, LAST_SEEN, PRESENT).from_(_named("previous_table"))))
    existing = query.args.get("with_")
    query = query.copy()
    query.set("with_", None)
    for name, cte in ctes:
        query = query.with_(name, as_=cte)
    for cte in existing.expressions if existing else ():
        query = query.with_(cte.alias, as_=cte.this)
    return query


def _named(marker: str) -> exp.Table:
    """``IDENTIFIER(:marker)``: a table whose name is bound at run time."""
    return exp.Table(this=exp.Anonymous(this="IDENTIFIER", expressions=[exp.Placeholder(this=marker)]))


def _generation() -> exp.Expression:
    return exp.cast(exp.Placeholder(this="generation"), "int")


def _expired(alias: str | None, ttl: int) -> exp.Expression:
    """``last_seen < :generation - ttl`` (``decisions.expired``)."""
    return exp.column(LAST_SEEN, alias) < exp.Sub(this=_generation(), expression=exp.Literal.number(ttl))


def _row_number(partition: exp.Expression, order: list[exp.Expression]) -> exp.Window:
    return exp.Window(this=exp.RowNumber(), partition_by=[partition], order=exp.Order(expressions=order))


def _columns(names, alias: str | None = None) -> list[exp.Column]:
    return [exp.column(n, alias) for n in names]


def _same(a: str, b: str, column: str) -> exp.Expression:
    return exp.column(column, a).eq(exp.column(column, b))


def _same_key(key: tuple[str, ...], a: str, b: str) -> exp.Expression:
    """Key columns equal, NULL equal to NULL."""
    return exp.and_(*[exp.NullSafeEQ(this=exp.column(k, a), expression=exp.column(k, b)) for k in key])


def _model(select: str, **config):
    """A stand-in model for doctests."""
    from types import SimpleNamespace

    from ...parse import parse_select
    from . import NumeratorKind

    ast = parse_select(select, "m.sql")
    kind = NumeratorKind(**config)
    return SimpleNamespace(name="ids", path="m.sql", relation="m.ids", kind=kind, ast=ast, table_format="parquet", config={},
                           columns=kind.output_columns([e.alias_or_name for e in ast.expressions]))
