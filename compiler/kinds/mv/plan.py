"""MV models: the shape of an ``mv`` SELECT and everything mvflow derives from it (pure).

An ``mv`` is ``SELECT … FROM main m [INNER|LEFT] JOIN x ON … [WHERE …]``, or several such
parts combined with ``UNION ALL`` (each with its own main source, and either a constant
discriminator column in the key or a key computed one-to-one from the part's main key, e.g.
``100000000 + m.id``, whose ranges the parts keep apart). A join that binds the joined input's
whole primary key, or an alternate unique key the source declares (to columns of inputs joined
before it, or to literals), gives each main row at most one match; the MV's unique key is then
the main source's primary key (per part), possibly computed from main key columns. A join that
binds neither is one-to-many: the key gains that input's primary key (the MV's *grain*), while
the unit of refresh stays the main key (every row of an affected main key is replaced).

``mv_plan`` validates the SELECT in phases (shape → names → keys; a phase with errors stops
the next) and derives, as sqlglot ASTs printed with the Spark dialect:

- per input, its **key query**: changed keys of the input → affected main keys. Inputs
  joined by key walk the join tree back to the main source (a *forward* query over the
  current sources) and/or look the MV itself up by **hidden key columns**
  (``_mvflow_k_<alias>_<col>``) holding, for every MV row, the key each join looked for at
  the last refresh: that finds rows whose old state matters (a re-pointed join column, a
  deleted intermediate or dictionary row, a row that stopped passing WHERE). When an input's
  join columns already give the main key, the changed keys *are* the affected keys (direct
  foreign-key shortcut). An input joined only by literals affects every key.
- the **refresh query**: the MV SELECT (plus hidden columns) restricted to affected keys;
- the **state query**: the MV's current rows from its base table and delta table;
- the **change queries** per input change mode.

Run-time names: key sets live in Spark temporary views named by ``view_name`` (the runtime
creates them); physical tables are bound through ``IDENTIFIER(:param)`` markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable

from sqlglot import exp

from ...errors import CompileError, Problem
from ...parse import pretty, table_name
from . import MvKind

if TYPE_CHECKING:
    from ...compile import Manifest, Model

HIDDEN_PREFIX = "_mvflow_"
SLOTS = ("a", "b")  # blue/green: a build or compaction fills the slot the view does not read
BATCH = "mvflow_batch"  # partition column: the Hive metastore filter parser rejects a leading _
DELETED = "_mvflow_deleted"
FOUND = "_mvflow_found"
SIDE = "_mvflow_side"  # which of two versions a row of a content diff comes from
RANK = "_mvflow_rank"

#: stable problem codes, in the order of the phases that report them
CODES = (
    "mv-set-operation", "mv-aggregate", "mv-distinct", "mv-window", "mv-subquery", "mv-order-limit", "mv-star",
    "mv-join-kind", "mv-join-condition",
    "mv-unknown-alias", "mv-unqualified-column", "mv-unknown-column", "mv-unmappable-input", "mv-no-key",
    "mv-join-not-unique", "mv-key-not-derivable", "mv-union-discriminator",
)
_SUGGEST_TABLE = "an mv is refreshed by key from joins only: use materialized='table' for this query"


# -- the plan ----------------------------------------------------------------------------
@dataclass(frozen=True)
class InputInfo:
    """One table the MV reads (a source or a model), whatever aliases it has."""

    id: str  # source id (db.name) or model name
    relation: str  # the name in the SQL
    mode: str  # position | changes | cdf | dictionary | table | mv (compiler.kinds.mv.change_modes runs each)
    key: tuple[str, ...]
    used_columns: tuple[str, ...]  # key first, then the columns the MV reads, sorted
    position: tuple[str, ...] = ()  # position columns (position / changes modes)
    feed: str | None = None  # change feed table (changes mode)
    table_format: str = ""  # a model input's format; "" for a source (known only when the run looks)
    origin: str = ""  # where a source is declared (``lineage/x.yml:12``), for run-time errors

    @property
    def slug(self) -> str:
        return self.id.replace(".", "_")


@dataclass(frozen=True)
class Link:
    """One joined alias: how it hangs off the aliases before it."""

    alias: str
    input: str
    side: str  # inner | left
    on: exp.Expression
    parents: tuple[str, ...]
    bound: tuple[tuple[str, exp.Column], ...]  # key column → the parent column it must equal
    literals: tuple[tuple[str, exp.Expression], ...]  # key column → literal it must equal
    line: int
    key: tuple[str, ...] = ()  # the input's primary key
    via: tuple[str, ...] = ()  # the alternate unique key the join binds instead of the primary key
    many: bool = False  # binds no unique key: one main row may match several rows (the MV's grain grows)

    @property
    def constant(self) -> bool:
        """Joined only by literals: one row for every MV row."""
        return not self.bound

    @property
    def own_key(self) -> bool:
        """Whether the MV keeps the joined row's own primary key rather than the value the join
        looked for: joined by an alternate unique key, or one-to-many."""
        return bool(self.via) or self.many

    @property
    def stored(self) -> tuple[tuple[str, exp.Expression], ...]:
        """Per key column of the input, what the MV's hidden column keeps of it: the value the
        join looked for (the parent's column), or the joined row's own primary key (NULL when
        nothing matched; ``own_key``), so a change of that row is found by its primary key,
        which is what the input's changes are."""
        if self.own_key:
            return tuple((k, exp.column(k, self.alias)) for k in self.key)
        return self.bound


@dataclass(frozen=True)
class Part:
    """One SELECT of the MV (the only one unless UNION ALL)."""

    index: int
    select: exp.Select
    main_alias: str
    main_input: str
    main_key: tuple[str, ...]
    links: tuple[Link, ...]
    key_exprs: tuple[exp.Expression, ...]  # per MV key column, over the main alias
    main_key_columns: tuple[str, ...]  # per main key column, the MV column (visible or hidden) holding it
    hidden: tuple[tuple[str, exp.Expression], ...]  # hidden columns this part fills
    # How the MV rows of this part are told from the other parts': (column, constant) is a literal
    # discriminator; (column, None) is the part's own hidden main key column, set only in its rows.
    discriminator: tuple[str, exp.Expression | None] | None = None
    grain: tuple[str, ...] = ()  # MV key columns holding the primary keys of one-to-many joined tables
    # GROUP BY: the aggregating SELECT (``select`` is then its row-level members SELECT) and, per
    # group column of the MV, the expression it groups by
    grouped: exp.Select | None = None
    groups: tuple[tuple[str, exp.Expression], ...] = ()

    def rows_condition(self, alias: str) -> exp.Expression | None:
        """The condition on MV rows (as ``alias``) that selects this part's rows (None: one part)."""
        if self.discriminator is None:
            return None
        column, value = self.discriminator
        if value is None:
            return exp.not_(exp.column(column, alias).is_(exp.null()))
        return exp.column(column, alias).eq(value.copy())

    def link(self, alias: str) -> Link:
        return next(link for link in self.links if link.alias == alias)

    def descendants(self, alias: str) -> set[str]:
        """Aliases whose join depends on ``alias``, directly or not."""
        found: set[str] = set()
        frontier = {alias}
        while frontier:
            frontier = {l.alias for l in self.links if set(l.parents) & frontier} - found
            found |= frontier
        return found

    def ancestors(self, alias: str) -> list[str]:
        """Aliases ``alias``'s join depends on, in join order (main first)."""
        needed: set[str] = set()
        frontier = set(self.link(alias).parents)
        while frontier:
            needed |= frontier
            frontier = {p for a in frontier if a != self.main_alias for p in self.link(a).parents} - needed
        return [a for a in [self.main_alias, *(l.alias for l in self.links)] if a in needed]


@dataclass(frozen=True)
class MvPlan:
    """Everything mvflow knows about one MV; the SQL comes from the functions below."""

    name: str
    relation: str
    path: str
    key: tuple[str, ...]
    columns: tuple[str, ...]
    hidden: tuple[str, ...]
    parts: tuple[Part, ...]
    inputs: dict[str, InputInfo]
    warnings: tuple[Problem, ...] = ()
    table_format: str = "parquet"  # delta: a plain Delta table updated by MERGE; parquet: base + delta + view
    cluster_by: tuple[str, ...] = ()  # delta: the table's liquid clustering columns
    consumers: tuple[str, ...] = ()  # the MVs of the project that read this one (they read its published keys)

    @property
    def all_columns(self) -> tuple[str, ...]:
        return self.columns + self.hidden

    @property
    def grain(self) -> tuple[str, ...]:
        """The key columns one-to-many joins add to the main key (empty: one MV row per main row)."""
        return self.parts[0].grain if len(self.parts) == 1 else ()

    @property
    def grouped(self) -> Part | None:
        """The part of a GROUP BY MV (it has one): the stored table holds a *member* row per main
        row (its group values, main key and hidden keys; aggregates NULL) and a row per group
        (main key NULL), which readers see."""
        return self.parts[0] if self.parts and self.parts[0].grouped is not None else None

    @property
    def visible_key(self) -> tuple[str, ...]:
        """The key of the rows readers see: the GROUP BY columns, or the MV's key."""
        return tuple(name for name, _ in self.grouped.groups) if self.grouped else self.key

    @property
    def readable(self) -> tuple[str, ...]:
        """The columns readers see: the SELECT's, plus the hidden ones of the key (its grain)."""
        return self.columns + tuple(k for k in self.visible_key if k not in self.columns)

    @property
    def table(self) -> str:
        """The stored Delta table: under the model's name, except for a GROUP BY MV, whose member
        rows readers must not see (a view under the model's name shows the groups)."""
        return self.table_name("rows") if self.grouped else self.relation

    def topic(self, input_id: str | None = None) -> str:
        """State-store topic of the MV (its lease and batch) or of one of its inputs."""
        return self.name if input_id is None else f"{self.name}:{input_id}"

    def view_name(self, what: str) -> str:
        """Name of a run-time temporary view of this MV (``changed_<input>``, ``affected_p0``…)."""
        return f"mvflow_{self.name}_{what}"

    def table_name(self, what: str) -> str:
        """Physical helper table of this MV (``base_a``, ``delta_a``, ``changes``, ``snap_<input>``)."""
        return f"{self.relation}__mvflow_{what}"


# -- entry point -------------------------------------------------------------------------
def mv_plan(model: "Model", manifest: "Manifest") -> MvPlan:
    """Validate an ``mv`` model and derive its plan; every problem of the failing phase is raised.

    >>> from compiler.kinds.mv.plan import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))})
    >>> plan.key, plan.hidden
    (('id',), ('_mvflow_k_c_id',))
    """
    return manifest.derived("mv_plan", model, lambda: replace(_Analyzer(
        model.name, model.relation, model.path, _line_offset(model), model.ast, _catalog(manifest, model),
        tuple(getattr(model.kind, "unique_key", ()) or ()), model.table_format).plan(),
        cluster_by=tuple(getattr(model.kind, "cluster_by", ()) or ()), consumers=mv_consumers(manifest, model.name)))


def mv_consumers(manifest: "Manifest", name: str) -> tuple[str, ...]:
    """What reads the keys model ``name`` publishes: the ``mv`` models that read it, and its
    batch-scoped data tests (``test:<name>``)."""
    tests = [f"test:{t.name}" for t in manifest.tests.values() if t.attached_to == name and t.config.scope == "batch"]
    return tuple(sorted(m.name for m in manifest.models.values()
                        if isinstance(m.kind, MvKind) and name in m.depends_on_models)) + tuple(sorted(tests))


def plan_from_sql(sql: str, inputs: dict[str, tuple], unique_key: tuple[str, ...] = (),
                  name: str = "mv", columns: dict[str, tuple[str, ...]] | None = None,
                  table_format: str = "parquet", cluster_by: tuple[str, ...] = ()) -> MvPlan:
    """A plan from bare SQL and ``{table: (mode, key[, alternate unique keys])}`` (tests, docs examples)."""
    from ...parse import parse_select

    catalog = {t: _Input(t, t, None if mode in ("view", "fact") else mode, tuple(key), (columns or {}).get(t),
                         position=("v",) if mode in ("position", "changes") else (BATCH,) if mode == "mv" else (),
                         feed=f"{t}_changes" if mode == "changes" else f"{t}__mvflow_changes" if mode == "mv" else None,
                         why=f"{t} is a {mode}", unique=tuple(tuple(u) for u in (unique[0] if unique else ())))
               for t, (mode, key, *unique) in inputs.items()}
    return replace(_Analyzer(name, f"db.{name}", f"models/{name}.sql", 0, parse_select(sql, f"models/{name}.sql"),
                             catalog, tuple(unique_key), table_format).plan(), cluster_by=tuple(cluster_by))


@dataclass(frozen=True)
class _Input:
    id: str
    relation: str
    mode: str | None  # None: cannot be mapped (a view, a fact, an undeclared table)
    key: tuple[str, ...]
    columns: tuple[str, ...] | None
    position: tuple[str, ...] = ()
    feed: str | None = None
    why: str = ""
    table_format: str = ""
    origin: str = ""
    unique: tuple[tuple[str, ...], ...] = ()  # alternate unique keys (a source's ``unique:``)


def _catalog(manifest: "Manifest", model: "Model") -> dict[str, _Input]:
    """Every table the MV reads, by relation name (only those: a project has many)."""
    reads = {name for name, _ in model.tables_read} or None  # None: not known, take everything
    catalog: dict[str, _Input] = {}
    for source in manifest.sources.values():
        if reads is not None and source.id.lower() not in reads:
            continue
        columns = tuple(c.name for c in source.columns) or None
        plain = source.change_mode == "none"  # a dbt source: read in full, its changes unseen
        catalog[source.id.lower()] = _Input(
            source.id, source.id.lower(), None if plain else source.change_mode, tuple(source.primary_key), columns,
            position=tuple(source.changes.position if source.changes else source.position),
            feed=source.changes.table if source.changes else None, origin=f"{source.path}:{source.line}",
            unique=source.unique, why=f"source {source.id} ({source.path}:{source.line}) declares no primary key and "
                                      "change mode: declare it in lineage/*.yml" if plain else "")
    for other in manifest.models.values():
        if other.name == model.name or (reads is not None and other.relation not in reads):
            continue
        kind = other.kind.name
        mode = kind if kind in ("table", "mv") else None
        key = tuple(getattr(other.kind, "unique_key", ()) or ())
        why = "" if mode else f"model '{other.name}' is a {kind}: mvflow cannot see which of its rows change"
        upstream = _mv_plan_of(other, manifest) if kind == "mv" and other.name in model.depends_on_models else None
        if upstream is not None:  # upstream only: the DAG ends the recursion
            key = upstream.key  # it has the grain of one-to-many joins
            if upstream.grouped:
                mode, why = None, f"model '{other.name}' is a GROUP BY mv: its changed groups are not published yet"
        columns = tuple(other.columns) if other.columns else None
        if columns and kind == "mv":  # readers see the hidden columns of a grain too
            columns += tuple(k for k in key if k not in columns)
        catalog[other.relation] = _Input(other.name, other.relation, mode, key, columns,
                                         position=(BATCH,) if kind == "mv" else (),
                                         feed=f"{other.relation}__mvflow_changes" if kind == "mv" else None, why=why,
                                         table_format=getattr(other, "table_format", "") or "")
    return catalog


def _mv_plan_of(other: "Model", manifest: "Manifest") -> MvPlan | None:
    try:
        return mv_plan(other, manifest)
    except CompileError:
        return None


def _line_offset(model: "Model") -> int:
    """Lines the rendered SQL lost at its top (a leading ``config()`` line renders empty and is stripped)."""
    rendered = model.sql.splitlines()
    at = next((i for i, line in enumerate(rendered) if line.strip()), None)
    if at is None:
        return 0
    for number, line in enumerate(model.raw_sql.splitlines()):
        if line.strip() == rendered[at].strip():
            return number - at
    return 0


# -- analysis ----------------------------------------------------------------------------
class _Analyzer:
    """Runs the validation phases over one MV SELECT; ``plan()`` raises or returns the plan."""

    def __init__(self, name: str, relation: str, path: str, offset: int, ast: exp.Query,
                 catalog: dict[str, _Input], unique_key: tuple[str, ...], table_format: str = "parquet"):
        self.name, self.relation, self.path, self.offset = name, relation, path, offset
        self.table_format = table_format
        self.ast = ast.copy()
        self.catalog = catalog
        self.unique_key = unique_key
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.groups: tuple[tuple[str, exp.Expression], ...] | None = None  # a GROUP BY MV's groups

    def problem(self, node: exp.Expression | None, code: str, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(f"mv '{self.name}': {message}", self.path, self._line(node), hint=hint, code=code))

    def _line(self, node: exp.Expression | None) -> int | None:
        """The first line sqlglot recorded inside ``node``, else inside its parent (DISTINCT records none)."""
        while node is not None:
            for item in node.walk():
                line = item.meta.get("line") if isinstance(item, exp.Expression) else None
                if line:
                    return int(line) + self.offset
            node = node.parent
        return None

    def _stop_if_any(self) -> None:
        if self.problems:
            raise CompileError(sorted(self.problems, key=lambda p: (p.line or 0, p.code)))

    def plan(self) -> MvPlan:
        selects = self._phase_shape()
        self._stop_if_any()
        resolved = [self._phase_names(index, select) for index, select in enumerate(selects)]
        self._stop_if_any()
        grouped = selects[0] if len(selects) == 1 and _aggregates(selects[0]) else None
        if grouped is not None:
            selects = [self._members(grouped, resolved[0])]
            self._stop_if_any()
        parts, key, columns = self._phase_keys(selects, resolved)
        self._stop_if_any()
        if grouped is not None:
            parts[0] = replace(parts[0], grouped=grouped, groups=self.groups)
            key = tuple(dict.fromkeys(key + tuple(name for name, _ in self.groups)))
            columns = _output_names(grouped)
        return self._assemble(parts, key, columns)

    # phase 1: shape ----------------------------------------------------------------------
    def _phase_shape(self) -> list[exp.Select]:
        if self.ast.args.get("with_") or self.ast.args.get("with"):
            self.problem(self.ast, "mv-subquery", "WITH (common table expressions) is not supported in an mv", _SUGGEST_TABLE)
        selects = self._union_parts(self.ast)
        for select in selects:
            self._check_select_shape(select, alone=len(selects) == 1)
        return selects

    def _union_parts(self, query: exp.Expression) -> list[exp.Select]:
        if isinstance(query, exp.Union) and not query.args.get("distinct"):
            return self._union_parts(query.left) + self._union_parts(query.right)
        if isinstance(query, exp.SetOperation):
            self.problem(query, "mv-set-operation", f"{query.key.upper()} is not supported in an mv",
                         "combine parts with UNION ALL, each with a constant discriminator column in the key")
            return []
        if isinstance(query, exp.Subquery):
            return self._union_parts(query.this)
        if not isinstance(query, exp.Select):
            self.problem(query, "mv-subquery", "an mv is a SELECT or a UNION ALL of SELECTs", _SUGGEST_TABLE)
            return []
        return [query]

    def _check_select_shape(self, select: exp.Select, alone: bool) -> None:
        checks = (
            (not alone and _aggregates(select), "mv-aggregate",
             "aggregates (GROUP BY, HAVING, aggregate functions) are not supported in a UNION ALL part of an mv"),
            (select.args.get("distinct"), "mv-distinct", "SELECT DISTINCT is not supported in an mv"),
            (select.find(exp.Window) or select.args.get("qualify"), "mv-window", "window functions are not supported in an mv"),
            (next((s for s in select.find_all(exp.Subquery, exp.Exists) if s is not select), None)
             or next((s for s in select.find_all(exp.Select) if s is not select), None),
             "mv-subquery", "subqueries are not supported in an mv"),
            (select.args.get("order") or select.args.get("limit") or select.args.get("offset"), "mv-order-limit",
             "ORDER BY / LIMIT are not supported in an mv"),
            (select.args.get("laterals"), "mv-subquery", "LATERAL VIEW is not supported in an mv"),
        )
        for node, code, message in checks:
            if node:
                self.problem(node if isinstance(node, exp.Expression) else select, code, message, _SUGGEST_TABLE)
        for projection in select.expressions:
            if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star):
                self.problem(projection, "mv-star", "SELECT * is not supported in an mv",
                             "list the columns: mvflow derives the key and the hidden columns from them")
        for join in select.args.get("joins") or []:
            self._check_join_shape(join)

    def _check_join_shape(self, join: exp.Join) -> None:
        side, kind = join.args.get("side"), join.args.get("kind")
        what = " ".join(p for p in (join.args.get("method"), side, kind) if p) or "JOIN"
        if join.args.get("method") or side not in (None, "LEFT") or kind not in (None, "INNER", "OUTER") \
                or (kind == "OUTER" and side != "LEFT"):
            self.problem(join, "mv-join-kind", f"{what} JOIN is not supported in an mv",
                         "use [INNER] JOIN or LEFT JOIN with ON conditions; the main (leftmost) table gives the key")
            return
        if join.args.get("using") or not join.args.get("on"):
            self.problem(join, "mv-join-kind", "a join without ON conditions is not supported in an mv",
                         "write ON x.col = y.col AND …")
            return
        if not isinstance(join.this, exp.Table):
            self.problem(join, "mv-subquery", "joining a subquery is not supported in an mv", _SUGGEST_TABLE)
            return
        for conjunct in _conjuncts(join.args["on"]):
            if not _is_equality(conjunct):
                self.problem(conjunct, "mv-join-condition", f"join condition '{conjunct.sql(dialect='spark')}' is not an equality",
                             "a join condition is an AND of column = column or column = literal; move other filters to WHERE")

    # GROUP BY -----------------------------------------------------------------------------
    def _members(self, select: exp.Select, info: dict) -> exp.Select:
        """A GROUP BY MV's row-level SELECT, its *members*: per main row, its main key (hidden
        ``_mvflow_m_<col>``) and the values it is grouped by, under the group columns' names.
        Records the groups (output column, expression) in ``self.groups``."""
        group = select.args.get("group")
        outputs, names = [_unalias(e) for e in select.expressions], _output_names(select)
        how = "GROUP BY the selected columns that key the MV's rows, e.g. SELECT o.shop_id, count(*) AS n … GROUP BY o.shop_id"
        if group is None or not group.expressions or any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets", "all")):
            self.problem(group or select, "mv-aggregate", "an mv aggregates by GROUP BY of plain expressions only "
                         "(not without GROUP BY, nor ROLLUP, CUBE, GROUPING SETS or GROUP BY ALL)", how)
            return select
        found: dict[int, exp.Expression] = {}
        for expression in group.expressions:
            ordinal = expression.is_int and 0 < int(expression.name) <= len(outputs)
            at = int(expression.name) - 1 if ordinal else next((i for i, o in enumerate(outputs) if o == expression), None)
            if at is None:
                self.problem(expression, "mv-aggregate", f"GROUP BY {expression.sql(dialect='spark')} is not a selected "
                             "column: the MV's rows are keyed by their group columns", how)
            elif outputs[at].find(exp.AggFunc):
                self.problem(expression, "mv-aggregate", f"GROUP BY column '{names[at]}' is an aggregate", how)
            else:
                found[at] = outputs[at]
        for at, output in enumerate(outputs):
            if at not in found and not output.find(exp.AggFunc):
                self.problem(select.expressions[at], "mv-aggregate",
                             f"column '{names[at]}' is neither in GROUP BY nor an aggregate", how)
        self.groups = tuple((names[at], found[at]) for at in sorted(found))
        if self.unique_key and {k.lower() for k in self.unique_key} != {name for name, _ in self.groups}:
            self.problem(select, "mv-key-not-derivable", f"unique_key ({', '.join(self.unique_key)}) differs from the "
                         f"GROUP BY columns ({', '.join(name for name, _ in self.groups)}), which key a GROUP BY mv",
                         "leave unique_key out, or name the GROUP BY columns")
        main = info["order"][0]
        members = select.copy()
        members.set("group", None)
        members.set("having", None)
        keys = [exp.alias_(exp.column(k.lower(), main), f"{HIDDEN_PREFIX}m_{k.lower()}") for k in info["aliases"][main].key]
        members.set("expressions", keys + [exp.alias_(expr.copy(), name) for name, expr in self.groups])
        return members

    # phase 2: names ----------------------------------------------------------------------
    def _phase_names(self, index: int, select: exp.Select) -> dict | None:
        main = select.args.get("from_") or select.args.get("from")
        if main is None or not isinstance(main.this, exp.Table):
            self.problem(select, "mv-subquery", "an mv reads FROM a table (its main source)", _SUGGEST_TABLE)
            return None
        tables = [main.this] + [j.this for j in select.args.get("joins") or []]
        aliases: dict[str, _Input] = {}
        order: list[str] = []
        for table in tables:
            alias = table.alias_or_name.lower()
            if alias in aliases:
                self.problem(table, "mv-unknown-alias", f"alias '{alias}' is used twice", "give every table its own alias")
            source = self._input(table)
            if source is not None:
                aliases[alias] = source
                order.append(alias)
        if len(order) != len(tables):
            return None
        self._qualify(select, order)
        self._check_columns(select, aliases, order)
        return {"aliases": aliases, "order": order}

    def _input(self, table: exp.Table) -> _Input | None:
        name = table_name(table)
        found = self.catalog.get(name)
        if found is None:
            self.problem(table, "mv-unmappable-input", f"{name} is not a declared source or a model",
                         "declare it in lineage/*.yml (with its primary key and change mode) and use source()")
            return None
        if found.mode is None:
            self.problem(table, "mv-unmappable-input", f"changes of {name} cannot be mapped to MV keys: {found.why}",
                         "read its sources directly, or make it a 'table' with a unique_key or an 'mv'")
            return None
        if not found.key:
            self.problem(table, "mv-no-key", f"input {name} has no primary key",
                         "declare primary_key for a source, or unique_key in the model's config")
            return None
        return found

    def _qualify(self, select: exp.Select, order: list[str]) -> None:
        for column in select.find_all(exp.Column):
            if column.is_star:
                continue
            if not column.table:
                if len(order) == 1:
                    column.set("table", exp.to_identifier(order[0]))
                else:
                    self.problem(column, "mv-unqualified-column", f"column '{column.name}' is not qualified",
                                 f"write alias.{column.name} (aliases: {', '.join(order)})")

    def _check_columns(self, select: exp.Select, aliases: dict[str, _Input], order: list[str]) -> None:
        for column in select.find_all(exp.Column):
            alias = column.table.lower()
            if not alias or column.is_star:
                continue
            if alias not in aliases:
                self.problem(column, "mv-unknown-alias", f"unknown alias '{alias}' in {column.sql(dialect='spark')}",
                             f"aliases in this SELECT: {', '.join(order)}")
                continue
            known = aliases[alias].columns
            if known is not None and column.name.lower() not in {c.lower() for c in known}:
                self.problem(column, "mv-unknown-column", f"{aliases[alias].relation} has no column '{column.name}'",
                             "columns: " + ", ".join(known))
        for position, join in enumerate(select.args.get("joins") or [], start=1):
            visible = set(order[: position + 1])
            for column in join.args["on"].find_all(exp.Column):
                alias = column.table.lower()
                if alias in aliases and alias not in visible:
                    self.problem(column, "mv-unknown-alias", f"join of '{order[position]}' refers to '{alias}', joined later",
                                 "a join condition may use only the tables joined before it")

    # phase 3: keys -----------------------------------------------------------------------
    def _phase_keys(self, selects: list[exp.Select], resolved: list[dict]):
        links = [self._links(select, info) for select, info in zip(selects, resolved)]
        columns = _output_names(selects[0])
        key_positions = self._key_positions(selects, resolved)
        if key_positions is None:
            return [], (), columns
        key = tuple(columns[i] for i in key_positions)
        parts = []
        for index, (select, info) in enumerate(zip(selects, resolved)):
            part = self._part(index, select, info, links[index], key_positions, columns, len(selects))
            if part is not None:
                parts.append(part)
        if len(parts) > 1 and len(parts) == len(selects):
            self._check_discriminator(parts, key_positions)
        if parts and parts[0].grain:
            key = tuple(k for k in key if k not in parts[0].grain) + parts[0].grain
        return parts, key, columns

    def _check_many(self, links: list[Link], parts: int) -> None:
        """One-to-many joins widen the MV's key; UNION ALL parts must share one key, so not there."""
        for link in links:
            if link.many and parts > 1:
                self.problem(link.on, "mv-join-not-unique",
                             f"the join of {link.input} AS {link.alias} does not bind its primary key "
                             f"({', '.join(link.key)}) nor a declared unique key: one main row could match several "
                             "rows, which a UNION ALL part cannot hold (its parts share one key)",
                             f"join on the whole key ({', '.join(link.key)}), declare the columns it binds as unique "
                             "on the source ('unique: [[col, ...]]') if they are, or make the part an mv of its own")

    def _grain(self, select: exp.Select, links: list[Link], columns: list[str]) -> tuple[str, ...]:
        """Per primary key column of each one-to-many joined table, the MV column that holds it:
        the selected column, else the link's hidden key column (which keeps the joined row's key)."""
        names = []
        for link in links:
            for k in link.key if link.many else ():
                selected = next((columns[i] for i, e in enumerate(select.expressions) if _is_column_of(e, link.alias, k)), None)
                names.append(selected or f"{HIDDEN_PREFIX}k_{link.alias}_{k}")
        return tuple(names)

    def _links(self, select: exp.Select, info: dict) -> list[Link]:
        links = []
        for join, alias in zip(select.args.get("joins") or [], info["order"][1:]):
            links.append(self._link(join, alias, info["aliases"][alias]))
        return links

    def _link(self, join: exp.Join, alias: str, source: _Input) -> Link:
        bound: dict[str, exp.Column] = {}
        literals: dict[str, exp.Expression] = {}
        parents: set[str] = set()
        for conjunct in _conjuncts(join.args["on"]):
            left, right = conjunct.this, conjunct.expression
            mine, other = (left, right) if _alias_of(left) == alias else (right, left)
            if _alias_of(mine) != alias:
                parents |= {_alias_of(c) for c in conjunct.find_all(exp.Column)}
                continue
            if isinstance(other, exp.Column):
                if _alias_of(other) == alias:
                    self.problem(conjunct, "mv-join-condition", f"'{conjunct.sql(dialect='spark')}' compares '{alias}' with itself",
                                 "a join condition links the joined table to a table joined before it")
                    continue
                parents.add(_alias_of(other))
                bound.setdefault(mine.name.lower(), other)
            else:
                literals.setdefault(mine.name.lower(), other)

        def binds(columns: tuple[str, ...]) -> bool:
            return all(k.lower() in bound or k.lower() in literals for k in columns)

        primary = tuple(k.lower() for k in source.key)
        via: tuple[str, ...] = ()  # an alternate unique key the join binds instead of the primary key
        many = False  # no unique key bound: the MV's grain gains the joined table's primary key
        if not binds(source.key):
            via = next((tuple(k.lower() for k in u) for u in source.unique if binds(u)), ())
            many = not via
        # a one-to-many join keeps every column it binds (they say which rows it matches)
        key = via or (tuple(sorted({*bound, *literals})) if many else primary)
        side = "left" if join.args.get("side") == "LEFT" else "inner"
        return Link(alias, source.id, side, join.args["on"], tuple(sorted(parents)),
                    tuple((k, bound[k]) for k in key if k in bound),
                    tuple((k, literals[k]) for k in key if k not in bound and k in literals),
                    self._line(join) or 0, primary, via, many)

    def _key_positions(self, selects: list[exp.Select], resolved: list[dict]) -> list[int] | None:
        columns = _output_names(selects[0])
        if self.unique_key and self.groups is None:
            missing = [k for k in self.unique_key if k.lower() not in columns]
            if missing:
                self.problem(selects[0], "mv-key-not-derivable", f"unique_key column(s) {', '.join(missing)} are not selected",
                             "unique_key names output columns of the SELECT")
                return None
            return [columns.index(k.lower()) for k in self.unique_key]
        positions: list[int] = []
        if len(selects) > 1:
            disc = _discriminator_position(selects)
            if disc is None:
                self.problem(selects[1], "mv-union-discriminator",
                             "UNION ALL parts need a constant column with a different value in each part, or a "
                             "unique_key computed from each part's main key into its own range",
                             "add e.g. 'offer' AS kind to the first part and 'promo' AS kind to the second, or select "
                             "e.g. 100000000 + m.id AS id in one part, 200000000 + m.id AS id in the other and set unique_key='id'")
                return None
            positions.append(disc)
        select, info = selects[0], resolved[0]
        main_alias = info["order"][0]
        for key_column in info["aliases"][main_alias].key:
            found = next((i for i, e in enumerate(select.expressions) if _is_column_of(e, main_alias, key_column)), None)
            if found is None:
                self.problem(select, "mv-key-not-derivable",
                             f"the main source's key column {main_alias}.{key_column} is not selected",
                             f"select {main_alias}.{key_column}, or set unique_key to columns computed from the main key")
                return None
            positions.append(found)
        return positions

    def _part(self, index, select, info, links, key_positions, columns, parts) -> Part | None:
        main_alias = info["order"][0]
        main = info["aliases"][main_alias]
        main_key = tuple(k.lower() for k in main.key)
        self._check_many(links, parts)
        grain = self._grain(select, links, columns)
        key_exprs = []
        covered: set[str] = set()
        for position in key_positions:
            if columns[position] in grain:
                continue
            expr = _unalias(select.expressions[position])
            refs = list(expr.find_all(exp.Column))
            bad = [c for c in refs if _alias_of(c) != main_alias or c.name.lower() not in main_key]
            if bad or (not refs and not _is_literal(expr)):
                self.problem(select.expressions[position], "mv-key-not-derivable",
                             f"key column '{columns[position]}' = {expr.sql(dialect='spark')} is not computed from the main key "
                             f"({', '.join(f'{main_alias}.{k}' for k in main_key)})",
                             "a key column is a main key column, an expression of main key columns only, or a constant")
                return None
            if refs and not _one_to_one(expr):
                self.problem(select.expressions[position], "mv-key-not-derivable",
                             f"key column '{columns[position]}' = {expr.sql(dialect='spark')} is not one-to-one with the "
                             "main key: two main rows could get the same MV key",
                             "compute the key with casts, concatenation and adding or multiplying constants only")
                return None
            covered |= {c.name.lower() for c in refs}
            key_exprs.append(expr)
        if not covered >= set(main_key):
            self.problem(select, "mv-key-not-derivable",
                         f"the MV key does not include main key column(s) {', '.join(sorted(set(main_key) - covered))}",
                         "the MV key must identify one main row: use every main key column")
            return None
        prefix = f"{HIDDEN_PREFIX}k{index if parts > 1 else ''}_"
        hidden = [(f"{prefix}{link.alias}_{k}", col) for link in links for k, col in link.stored]
        literal = next((p for p in key_positions if _is_literal(_unalias(select.expressions[p]))), None) if parts > 1 else None
        own_columns = parts > 1 and literal is None  # the part's rows are told apart by its own main key columns
        main_cols = []
        for k in main_key:
            found = None if own_columns else \
                next((columns[i] for i, e in enumerate(select.expressions) if _is_column_of(e, main_alias, k)), None)
            if found is None:
                found = f"{HIDDEN_PREFIX}m{index if parts > 1 else ''}_{k}"
                hidden.append((found, exp.column(k, main_alias)))
            main_cols.append(found)
        discriminator = None
        if literal is not None:
            discriminator = (columns[literal], _unalias(select.expressions[literal]))
        elif own_columns:
            discriminator = (main_cols[0], None)
        return Part(index, select, main_alias, main.id, main_key, tuple(links), tuple(key_exprs), tuple(main_cols),
                    tuple(hidden), discriminator, grain)

    def _check_discriminator(self, parts: list[Part], key_positions: list[int]) -> None:
        """Parts without a constant discriminator in the key must compute their keys differently
        (into their own ranges): parts that compute them alike would give one key to two rows."""
        if any(_distinct_literals([p.select for p in parts], position) for position in key_positions):
            return
        seen: dict[str, Part] = {}
        for part in parts:
            shape = ", ".join(_key_shape(e) for e in part.key_exprs)
            if shape in seen:
                self.problem(part.select, "mv-union-discriminator",
                             f"UNION ALL parts {seen[shape].index} and {part.index} compute the key the same way ({shape}): "
                             "a key could belong to a row of each",
                             "add a constant column with a different value in each part (e.g. 'offer' AS kind) to "
                             "unique_key, or map each part's key into its own range (e.g. 100000000 + m.id)")
                return
            seen[shape] = part

    def _assemble(self, parts: list[Part], key: tuple[str, ...], columns: list[str]) -> MvPlan:
        hidden = tuple(name for part in parts for name, _ in part.hidden)
        if parts and parts[0].grouped is not None:  # the members' main key is hidden too
            hidden = parts[0].main_key_columns + hidden
        used: dict[str, set[str]] = {}
        for part in parts:
            aliases = {part.main_alias: part.main_input, **{l.alias: l.input for l in part.links}}
            selects = [part.select] + ([part.grouped] if part.grouped is not None else [])
            for column in (c for select in selects for c in select.find_all(exp.Column)):
                if column.table.lower() in aliases:
                    used.setdefault(aliases[column.table.lower()], set()).add(column.name.lower())
            for alias, input_id in aliases.items():
                used.setdefault(input_id, set())
                if alias != part.main_alias and part.link(alias).constant:
                    self.warnings.append(Problem(
                        f"mv '{self.name}': {alias} is joined only by literals: any change of it refreshes every row",
                        self.path, part.link(alias).line, hint="fine for a small constant table; otherwise join it by key",
                        code="mv-literal-join"))
        by_id = {i.id: i for i in self.catalog.values()}
        inputs = {}
        for input_id in sorted(used):
            source = by_id[input_id]
            key_cols = tuple(k.lower() for k in source.key)
            inputs[input_id] = InputInfo(input_id, source.relation, source.mode, key_cols,
                                         key_cols + tuple(sorted(used[input_id] - set(key_cols))),
                                         source.position, source.feed, source.table_format, source.origin)
        return MvPlan(self.name, self.relation, self.path, key, tuple(columns), hidden, tuple(parts), inputs,
                      tuple(self.warnings), self.table_format)


# -- small AST helpers -------------------------------------------------------------------
def _aggregates(select: exp.Select) -> bool:
    return bool(select.args.get("group") or select.args.get("having") or select.find(exp.AggFunc))


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    if isinstance(condition, exp.Paren):
        return _conjuncts(condition.this)
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    return [condition]


def _is_literal(node: exp.Expression) -> bool:
    if isinstance(node, exp.Neg):
        return _is_literal(node.this)
    if isinstance(node, exp.Cast):
        return _is_literal(node.this)
    return isinstance(node, (exp.Literal, exp.Boolean))


def _is_equality(node: exp.Expression) -> bool:
    if not isinstance(node, exp.EQ):
        return False
    sides = (node.this, node.expression)
    columns = [s for s in sides if isinstance(s, exp.Column)]
    return len(columns) == 2 or (len(columns) == 1 and any(_is_literal(s) for s in sides))


def _alias_of(node: exp.Expression) -> str:
    return node.table.lower() if isinstance(node, exp.Column) else ""


def _unalias(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node


def _is_column_of(node: exp.Expression, alias: str, column: str) -> bool:
    node = _unalias(node)
    return isinstance(node, exp.Column) and _alias_of(node) == alias and node.name.lower() == column.lower()


def _output_names(select: exp.Select) -> list[str]:
    return [e.alias_or_name.lower() for e in select.expressions]


def _distinct_literals(selects: list[exp.Select], position: int) -> bool:
    values = []
    for select in selects:
        if position >= len(select.expressions):
            return False
        node = _unalias(select.expressions[position])
        if not _is_literal(node):
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
    if isinstance(node, (exp.Column, exp.Literal)) or _is_literal(node):
        return True
    if isinstance(node, (exp.Paren, exp.Cast, exp.Neg)):
        return _one_to_one(node.this)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        sides = [node.this, node.expression]
        constant = [side for side in sides if _is_literal(side)]
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


# -- derived SQL -------------------------------------------------------------------------
def _identifier_table(param: str, alias: str) -> exp.Table:
    """``IDENTIFIER(:param) AS alias``: a physical table named at run time (blue/green slot)."""
    return exp.Table(this=exp.Anonymous(this="IDENTIFIER", expressions=[exp.Placeholder(this=param)]),
                     alias=exp.TableAlias(this=exp.to_identifier(alias)))


def _table(name: str, alias: str) -> exp.Table:
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
        given = {**{e.alias_or_name.lower(): _unalias(e) for e in select.expressions}, **dict(part.hidden)}
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


def _group_rows(plan: MvPlan, alias: str) -> exp.Expression:
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
    return (exp.select(*[exp.column(c, alias) for c in columns]).from_(_table(plan.view_name("stored"), alias))
            .where(_in([exp.column(c, alias) for c in part.main_key_columns], affected)))


def full_query(plan: MvPlan) -> exp.Query:
    """The MV SELECT with its hidden key columns: what a full build writes.

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
    _where(rows, [_in_groups([e.copy() for _, e in part.groups], names, _table("mvflow_groups", "g"))])
    both = exp.union(exp.select("*").from_("mvflow_members"), rows, distinct=False)
    return both.with_("mvflow_members", as_=queries[0]).with_("mvflow_groups", as_=groups)


def _changed(plan: MvPlan, link: Link | None, input_id: str, columns: list[exp.Expression]) -> exp.Select:
    """Changed keys of an input, filtered by the literals the join binds its key to."""
    select = exp.select(*columns).from_(_table(plan.view_name(f"changed_{plan.inputs[input_id].slug}"), "c"))
    # (a join by an alternate unique key binds literals to columns the changed keys do not hold)
    literals = [exp.column(k, "c").eq(value.copy()) for k, value in (link.literals if link and not link.own_key else ())]
    return _where(select, literals)


def _where_over(part: Part, aliases: set[str]) -> list[exp.Expression]:
    """The part's WHERE conjuncts that read only ``aliases``."""
    where = part.select.args.get("where")
    if where is None:
        return []
    return [c.copy() for c in _conjuncts(where.this) if {_alias_of(col) for col in c.find_all(exp.Column)} <= aliases]


def _walk_back(part: Part, aliases: list[str], as_joined: bool = False) -> exp.Select:
    """FROM the main source joined to the given aliases (in join order) with their ON conditions:
    INNER joins, or each as the model joins it with ``as_joined``."""
    main = part.select.args.get("from_") or part.select.args.get("from")
    select = exp.select(*[exp.alias_(exp.column(k, part.main_alias), k) for k in part.main_key]).from_(main.this.copy())
    joins = {j.this.alias_or_name.lower(): j for j in part.select.args.get("joins") or []}
    for alias in aliases:
        if alias != part.main_alias:
            side = part.link(alias).side if as_joined else "inner"
            select.join(joins[alias].this.copy(), on=joins[alias].args["on"].copy(), join_type=side, copy=False)
    return select


def _needs_forward(part: Part, link: Link) -> bool:
    """Whether a change of ``link`` can add MV rows the MV does not hold now (INNER joins, WHERE)."""
    if link.own_key:  # the MV keeps the joined row's own key, so a row that starts to match is seen only here
        return True
    subtree = {link.alias} | part.descendants(link.alias)
    where = part.select.args.get("where")
    in_where = {_alias_of(c) for c in where.find_all(exp.Column)} if where is not None else set()
    return any(part.link(a).side == "inner" for a in subtree) or bool(subtree & in_where)


def _shortcut(part: Part, link: Link) -> dict[str, str] | None:
    """Main key column → the input's key column, when the join binds the main key directly."""
    if link.own_key:  # the changed keys are the input's primary key, not the bound columns
        return None
    direct = {col.name.lower(): k for k, col in link.bound if _alias_of(col) == part.main_alias}
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
    select = select.from_(_table(plan.view_name("stored"), "s"))
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
    return _where(select, [exp.or_(*conditions), *_where_over(part, {part.main_alias, *aliases})])


def lookup_query(plan: MvPlan, part: Part) -> exp.Select | None:
    """Affected main keys of ``part`` found in the stored MV rows, for every looked-up input at
    once: one scan of the MV, whichever inputs changed (an input that did not has an empty
    changed-keys view, which Spark drops from the plan).

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
        queries.append(exp.select(*columns).from_(_table(plan.view_name(f"affected_p{part.index}"), part.main_alias)))
    return _union(queries, distinct=True) if len(queries) > 1 else queries[0].distinct(copy=False)


def chunk_query(plan: MvPlan, part: Part) -> exp.Select:
    """The affected main keys of ``part`` whose MV key falls in chunk ``:chunk`` of ``:chunks``
    (a chunked refresh, ``compiler.kinds.mv.strategy``): the MV keys split by a hash of their values.

    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))})
    >>> print(chunk_query(plan, plan.parts[0]).sql(dialect="spark"))
    SELECT * FROM mvflow_mv_affected_all_p0 AS o WHERE PMOD(HASH(o.id), :chunks) = :chunk
    """
    hashed = exp.func("pmod", exp.func("hash", *[e.copy() for e in part.key_exprs]), exp.Placeholder(this="chunks"))
    return (exp.select("*").from_(_table(plan.view_name(f"affected_all_p{part.index}"), part.main_alias))
            .where(hashed.eq(exp.Placeholder(this="chunk"))))


def delta_query(plan: MvPlan, batch: bool = True) -> exp.Select:
    """One delta row per affected key: the recomputed row, or a tombstone when it is gone (with
    the batch number for parquet's delta partition; a Delta MERGE's source has none).

    With a grain (one-to-many joins), the keys a batch replaces are the stored rows of the
    affected main keys, which the recomputed rows may outnumber or fall short of: a full join.

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
    keys = _replaced_keys(plan).subquery("a") if grain else _table(plan.view_name("keys"), "a")
    return (exp.select(*columns, deleted, *number).from_(keys)
            .join(_table(plan.view_name("rows"), "r"), on=on, join_type="full outer" if grain else "left"))


def _stored_grain_keys(plan: MvPlan) -> exp.Select:
    """The stored MV keys of the affected main keys."""
    return _stored_of_affected(plan, plan.key, "s").distinct()


def _replaced_keys(plan: MvPlan) -> exp.Query:
    """The stored keys a batch of a grain or GROUP BY MV replaces: the rows of the affected main
    keys and, of a GROUP BY MV, the rows of the groups they were in or are in now (a group that
    lost its members, or fails HAVING now, is gone from the recomputed rows)."""
    members = _stored_grain_keys(plan)
    if not plan.grouped:
        return members
    names = [name for name, _ in plan.grouped.groups]
    now = exp.select(*[exp.column(n, "r") for n in names]).from_(_table(plan.view_name("rows"), "r")).where(
        exp.not_(_group_rows(plan, "r")))
    touched = exp.union(_stored_groups(plan), now, distinct=True).subquery("g")
    groups = (exp.select(*[exp.column(k, "s") for k in plan.key]).from_(_table(plan.view_name("stored"), "s"))
              .where(exp.and_(_group_rows(plan, "s"), _in_groups([exp.column(n, "s") for n in names], names, touched))))
    return exp.union(members, groups, distinct=True)


def readable_query(plan: MvPlan) -> exp.Query:
    """What readers see of the MV (``mvflow verify`` compares a grain MV with it): the SELECT's
    columns, plus the hidden ones of the key."""
    return exp.select(*[exp.column(c, "q") for c in plan.readable]).from_(full_query(plan).subquery("q"))


def merge_statement(plan: MvPlan) -> str:
    """A Delta MV's batch: one MERGE of the recomputed rows and tombstones of the affected keys
    (columns listed, so the tombstone flag is not written).

    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))}, table_format="delta")
    >>> print(merge_statement(plan).splitlines()[0])
    MERGE INTO db.mv AS t
    >>> print(*merge_statement(plan).splitlines()[-6:], sep=chr(10))
    ON t.id <=> s.id
    WHEN MATCHED AND s._mvflow_deleted THEN DELETE
    WHEN MATCHED THEN UPDATE SET t.name = s.name, t._mvflow_k_c_id = s._mvflow_k_c_id
    WHEN NOT MATCHED AND NOT s._mvflow_deleted THEN
      INSERT (id, name, _mvflow_k_c_id)
      VALUES (s.id, s.name, s._mvflow_k_c_id)
    """
    on = " AND ".join(f"t.{k} <=> s.{k}" for k in plan.key)
    others = [c for c in plan.all_columns if c not in plan.key]
    source = "\n".join("  " + line for line in pretty(delta_query(plan, batch=False)).splitlines())
    lines = [f"MERGE INTO {plan.table} AS t", f"USING (\n{source}\n) AS s", f"ON {on}",
             f"WHEN MATCHED AND s.{DELETED} THEN DELETE"]
    if others:
        lines.append("WHEN MATCHED THEN UPDATE SET " + ", ".join(f"t.{c} = s.{c}" for c in others))
    lines += [f"WHEN NOT MATCHED AND NOT s.{DELETED} THEN",
              f"  INSERT ({', '.join(plan.all_columns)})",
              f"  VALUES ({', '.join(f's.{c}' for c in plan.all_columns)})"]
    return "\n".join(lines)


def state_query(plan: MvPlan, columns: tuple[str, ...] | None = None, slot: str | None = None) -> exp.Query:
    """The MV's rows: base rows without a newer delta version, plus the newest non-deleted delta rows.
    The tables are ``:base_table``/``:delta_table``, or those of ``slot`` by name (a view's text
    may hold no parameter markers). Given ``columns`` (what readers see), a GROUP BY MV's group rows only."""
    readers = columns is not None and plan.grouped is not None
    columns = columns or plan.all_columns

    def table(what: str, alias: str) -> exp.Table:
        return _table(plan.table_name(f"{what}_{slot}"), alias) if slot else _identifier_table(f"{what}_table", alias)

    delta = exp.select("*").from_(table("delta", "t"))
    rank = exp.Window(this=exp.RowNumber(), partition_by=[exp.column(k, "d") for k in plan.key],
                      order=exp.Order(expressions=[exp.Ordered(this=exp.column(BATCH, "d"), desc=True)]))
    ranked = exp.select("d.*", exp.alias_(rank, RANK)).from_(_table("delta", "d"))
    latest = exp.select("*").from_(ranked.subquery("r")).where(exp.column(RANK, "r").eq(1))
    on = _and(exp.NullSafeEQ(this=exp.column(k, "b"), expression=exp.column(k, "d")) for k in plan.key)
    base = (exp.select(*[exp.column(c, "b") for c in columns]).from_(table("base", "b"))
            .join(_table("delta", "d"), on=on, join_type="left anti"))
    newest = (exp.select(*[exp.column(c, "l") for c in columns]).from_(_table("latest", "l"))
              .where(exp.Not(this=exp.column(DELETED, "l"))))
    if readers:
        base, newest = base.where(_group_rows(plan, "b"), copy=False), newest.where(_group_rows(plan, "l"), copy=False)
    return _union([base, newest], distinct=False).with_("delta", as_=delta).with_("latest", as_=latest)


def stored_version_query(plan: MvPlan) -> exp.Select:
    """A Delta MV's rows as they were at the last commit (what a redone batch must see): the
    runner reads that table version into the view ``before`` (Delta's parser takes no marker
    after ``VERSION AS OF``).

    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))}, table_format="delta")
    >>> print(stored_version_query(plan).sql(dialect="spark"))
    SELECT b.id, b.name, b._mvflow_k_c_id FROM mvflow_mv_before AS b
    """
    return exp.select(*[exp.column(c, "b") for c in plan.all_columns]).from_(_table(plan.view_name("before"), "b"))


def stored_query(plan: MvPlan) -> exp.Query:
    """Every stored version of the MV's rows before ``:batch`` (what a redone batch must see):
    base and delta rows alike, superseded ones and tombstones included.

    It holds every hidden key the MV holds now, and is read without the shuffle that finding
    the newest version needs. A key query over it may also find a key by a superseded version;
    refreshing that key recomputes its row from the sources, so the result is the same.

    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))})
    >>> print(stored_query(plan).sql(dialect="spark"))
    SELECT b.id, b.name, b._mvflow_k_c_id FROM IDENTIFIER(:base_table) AS b UNION ALL SELECT d.id, d.name, d._mvflow_k_c_id FROM IDENTIFIER(:delta_table) AS d WHERE d.mvflow_batch < :batch
    """
    base = exp.select(*[exp.column(c, "b") for c in plan.all_columns]).from_(_identifier_table("base_table", "b"))
    delta = (exp.select(*[exp.column(c, "d") for c in plan.all_columns]).from_(_identifier_table("delta_table", "d"))
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
        table = info.relation if info.mode == "position" else info.feed
        after = exp.or_(exp.Placeholder(this="from_start"), _position_after(info.position, "t", "last"))
        where = exp.and_(after, _position_upto(info.position, "t", "next"))
        return exp.select(*keys).distinct().from_(_table(table, "t")).where(where)
    snapshot = plan.table_name(f"snap_{info.slug}")
    return _diff(info, lambda marker: exp.select(*info.used_columns).from_(snapshot)
                 .where(exp.column(BATCH).eq(exp.Placeholder(this=marker))))


def version_diff_query(plan: MvPlan, input_id: str) -> exp.Query:
    """Keys of a diffed input stored as a Delta table whose used columns differ between the
    table as of the version the last batch saw and as of the one this batch reads: time travel,
    no snapshot copies. The runner registers the two versions as the views read here
    (``versionAsOf``: a parameter marker cannot stand in ``VERSION AS OF``).

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
    return exp.select(*[exp.column(c, "t") for c in info.used_columns], batch).from_(_table(info.relation, "t"))


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


# -- statements (text with named markers, as written to target/run/) ---------------------
@dataclass(frozen=True)
class Derived:
    """Every SQL text derived for one MV, by name (manifest ``derived``, ``mvflow explain``)."""

    queries: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> str:
        return self.queries[name]


def derived(manifest: "Manifest", model: "Model") -> Derived:
    """The MV's derived SQL, once per compiled manifest (its run files, manifest.json, the file
    check and the refresh all read it)."""
    return manifest.derived("mv_derived", model, lambda: derive(mv_plan(model, manifest)))


def derive(plan: MvPlan) -> Derived:
    """All derived SQL of an MV, deterministic and pretty (Spark dialect)."""
    q: dict[str, str] = {}
    q["create_schema"] = f"CREATE DATABASE IF NOT EXISTS {plan.relation.split('.')[0]}"
    q["full"] = pretty(full_query(plan))
    q["refresh"] = pretty(refresh_query(plan))
    for input_id, info in plan.inputs.items():
        if "versions" in diff_ways(info):
            q[f"versions:{input_id}"] = pretty(version_diff_query(plan, input_id))
        if "snapshots" in diff_ways(info) or not diffed(info):
            q[f"changes:{input_id}"] = pretty(change_query(plan, input_id))
        if "snapshots" in diff_ways(info):
            snapshot = plan.table_name(f"snap_{info.slug}")
            select = pretty(snapshot_query(plan, input_id))
            q[f"create_snapshot:{input_id}"] = (f"CREATE TABLE {snapshot}\nUSING parquet\nPARTITIONED BY ({BATCH})\nAS\n"
                                                f"{select}\nLIMIT 0")
            q[f"snapshot:{input_id}"] = f"INSERT OVERWRITE TABLE {snapshot} PARTITION ({BATCH})\n{select}"
            q[f"drop_snapshot:{input_id}"] = f"DROP TABLE IF EXISTS {snapshot}"
            # a partition spec takes a literal only: the runner binds the batch into the text (bind_literal)
            q[f"drop_snapshot_batch:{input_id}"] = f"ALTER TABLE {snapshot} DROP IF EXISTS PARTITION ({BATCH} = :batch)"
        for part in plan.parts:
            query = key_query(plan, input_id, part)
            if query is not None:
                q[f"key:{input_id}:p{part.index}"] = pretty(query)
    for part in plan.parts:
        for name, query in (("lookup", lookup_query(plan, part)), ("walk", walk_query(plan, part))):
            if query is not None:
                q[f"{name}:p{part.index}"] = pretty(query)
    delta = plan.table_format == "delta"
    q["stored"] = pretty(stored_version_query(plan) if delta else stored_query(plan))
    for part in plan.parts:
        q[f"chunk:p{part.index}"] = pretty(chunk_query(plan, part))
    q["keys"] = pretty(affected_keys_query(plan))
    q["drop_changes"] = f"DROP TABLE IF EXISTS {plan.table_name('changes')}"
    (_derive_delta if delta else _derive_parquet)(plan, q)
    return Derived(q)


def _derive_delta(plan: MvPlan, q: dict[str, str]) -> None:
    """A Delta MV: one table under the model's name, replaced by a build, merged into by a batch."""
    from ...table_format import DELTA_PROPERTIES, cluster_clause, using

    table = plan.table
    q["build"] = f"CREATE OR REPLACE TABLE {table}\n{using('delta', DELTA_PROPERTIES, plan.cluster_by)}\nAS\n{q['full']}"
    # a changed cluster_by: a metadata-only commit, then "optimize" clusters the files (rows stay)
    q["cluster_by"] = f"ALTER TABLE {table} {cluster_clause(plan.cluster_by)}"
    q["merge"] = merge_statement(plan)
    # Delta's parser takes a literal only here: the runner binds the version into the text (bind_literal).
    q["restore"] = f"RESTORE TABLE {table} TO VERSION AS OF :version"
    q["optimize"] = f"OPTIMIZE {table}"
    q["create_changes"] = _create_changes(plan, table)
    if plan.grouped:  # readers see the group rows through a view under the model's name
        groups = exp.select(*[exp.column(c, "t") for c in plan.readable]).from_(_table(table, "t"))
        q["reader_view"] = f"CREATE OR REPLACE VIEW {plan.relation} AS\n{pretty(groups.where(_group_rows(plan, 't')))}"
        q["drop_table"] = f"DROP TABLE IF EXISTS {plan.relation}"  # a plain Delta MV's table, when it was one
    if not plan.grouped:  # no MV may read a GROUP BY MV yet: nothing to publish to
        q["publish"] = _publish(plan)
    # the parquet format's storage, when a model switches to Delta
    q["drop_view"] = f"DROP VIEW IF EXISTS {plan.relation}"
    for slot in SLOTS:
        for what in ("base", "delta"):
            q[f"drop:{what}_{slot}"] = f"DROP TABLE IF EXISTS {plan.table_name(f'{what}_{slot}')}"


def _derive_parquet(plan: MvPlan, q: dict[str, str]) -> None:
    """A parquet MV: base slots a/b, a delta partitioned by batch, a merge-on-read view."""
    base, delta = "IDENTIFIER(:base_table)", "IDENTIFIER(:delta_table)"
    q["drop_base"] = f"DROP TABLE IF EXISTS {base}"
    q["drop_delta"] = f"DROP TABLE IF EXISTS {delta}"
    q["build_base"] = f"CREATE TABLE {base}\nUSING parquet\nAS\n{q['full']}"
    q["create_delta"] = (f"CREATE TABLE {delta}\nUSING parquet\nPARTITIONED BY ({BATCH})\nAS\n"
                         f"SELECT b.*, FALSE AS {DELETED}, CAST(0 AS BIGINT) AS {BATCH}\nFROM {base} AS b\nLIMIT 0")
    q["write_delta"] = f"INSERT OVERWRITE TABLE {delta} PARTITION ({BATCH})\n{pretty(delta_query(plan))}"
    # a batch of few keys as one file: readers open each delta file on every query
    one_file = delta_query(plan)
    one_file.set("hint", exp.Hint(expressions=[exp.Anonymous(this="COALESCE", expressions=[exp.Literal.number(1)])]))
    q["write_delta_small"] = f"INSERT OVERWRITE TABLE {delta} PARTITION ({BATCH})\n{pretty(one_file)}"
    q["create_changes"] = _create_changes(plan, base)
    if not plan.grouped:  # no MV may read a GROUP BY MV yet: nothing to publish to
        q["publish"] = _publish(plan)
    # the size of the delta, so that readers' plans broadcast a small one instead of shuffling the base
    q["delta_stats"] = f"ANALYZE TABLE {delta} COMPUTE STATISTICS NOSCAN"
    for slot in SLOTS:
        visible = pretty(state_query(plan, columns=plan.readable, slot=slot))
        q[f"view:{slot}"] = f"CREATE OR REPLACE VIEW {plan.relation} AS\n{visible}"
        # an empty delta (after a build or a compaction): readers read the base alone, no merge
        plain = exp.select(*[exp.column(c, "b") for c in plan.readable]).from_(_table(plan.table_name(f"base_{slot}"), "b"))
        plain = pretty(plain.where(_group_rows(plan, "b"), copy=False) if plan.grouped else plain)
        q[f"plain:{slot}"] = f"CREATE OR REPLACE VIEW {plan.relation} AS\n{plain}"
    q["state"] = pretty(state_query(plan))  # the current rows with their hidden keys, what a compaction keeps
    q["compact"] = f"CREATE TABLE {base}\nUSING parquet\nAS\nSELECT *\nFROM {plan.view_name('current')}"
    # the Delta format's table, when a model switches to parquet (its view takes the name)
    q["drop_table"] = f"DROP TABLE IF EXISTS {plan.relation}"


def bind_literal(text: str, name: str, value: int) -> str:
    """``text`` with the marker ``:name`` replaced by the integer ``value``, for the few statements
    whose grammar takes a literal only where a parameter is wanted (a partition spec, Delta's
    ``RESTORE``); an integer cannot inject anything.

    >>> bind_literal("RESTORE TABLE t TO VERSION AS OF :version", "version", 7)
    'RESTORE TABLE t TO VERSION AS OF 7'
    """
    return re.sub(rf":{name}\b", str(int(value)), text)


def _publish(plan: MvPlan) -> str:
    """The MV keys a batch replaced, for the MVs that read this one: the affected keys, or with a
    grain, the stored keys of the affected main keys and the recomputed ones."""
    batch = exp.alias_(exp.cast(exp.Placeholder(this="batch"), "BIGINT"), BATCH)
    keys: exp.Expression = exp.to_table(plan.view_name("keys"))
    if plan.grain:
        keys = exp.union(_stored_grain_keys(plan), exp.select(*plan.key).from_(plan.view_name("rows")),
                         distinct=True).subquery("k")
    select = pretty(exp.select(*plan.key, batch).from_(keys))
    return f"INSERT OVERWRITE TABLE {plan.table_name('changes')} PARTITION ({BATCH})\n{select}"


def _create_changes(plan: MvPlan, table: str) -> str:
    """The table publishing each batch's MV keys for stacked MVs (parquet, a partition per batch)."""
    return (f"CREATE TABLE IF NOT EXISTS {plan.table_name('changes')}\nUSING parquet\nPARTITIONED BY ({BATCH})\nAS\n"
            f"SELECT {', '.join(plan.key)}, CAST(0 AS BIGINT) AS {BATCH}\nFROM {table}\nLIMIT 0")


def input_paths(plan: MvPlan) -> dict[str, dict]:
    """Per input: its change mode, key, the columns the MV uses (what makes a change relevant)
    and, per part, the join path from the main source with how its changes reach main keys.

    >>> plan = plan_from_sql("SELECT o.id, s.name FROM d.o AS o JOIN d.s AS s ON s.id = o.sid",
    ...                      {"d.o": ("position", ("id",)), "d.s": ("position", ("id",))})
    >>> [(p["path"], p["method"]) for p in input_paths(plan)["d.s"]["paths"]][0]
    (['d.o AS o', 'd.s AS s'], 'old state: MV rows whose hidden key columns match')
    """
    result = {}
    for input_id, info in plan.inputs.items():
        paths = []
        for part in plan.parts:
            for alias, method, _ in key_query_methods(plan, input_id, part):
                chain = [part.main_alias] if alias == part.main_alias else [*part.ancestors(alias), alias]
                names = [f"{part.main_input if a == part.main_alias else part.link(a).input} AS {a}" for a in chain]
                paths.append({"part": part.index, "alias": alias, "path": names, "method": method})
        result[input_id] = {"mode": info.mode, "key": list(info.key), "uses": list(info.used_columns), "paths": paths}
    return result


def explain(plan: MvPlan, notes: Iterable[str] = ()) -> str:
    """A readable account of what mvflow derived for an MV (``mvflow explain``); ``notes`` are
    lines said after the key (the refresh strategy and its estimates, ``compiler.kinds.mv.strategy``)."""
    lines = [f"mv {plan.name} ({plan.relation}) from {plan.path}",
             f"  unique key: {', '.join(plan.key)}",
             *([f"  grain: one row per main key and per row of each one-to-many join ({', '.join(plan.grain)}); "
                "a refresh replaces every row of an affected main key"] if plan.grain else []),
             *([f"  grouped by: {', '.join(plan.visible_key)} (readers' key); the table also keeps a member row "
                f"per main row ({', '.join(plan.grouped.main_key_columns)}); a refresh recomputes the groups the "
                "members of the affected main keys were in or are in now"] if plan.grouped else []),
             f"  hidden key columns: {', '.join(plan.hidden) or '(none)'}", *notes]
    for part in plan.parts:
        mine = part.rows_condition("mv")
        disc = f", its rows: {mine.sql(dialect='spark')}" if mine is not None else ""
        lines.append(f"  part {part.index}: main {part.main_input} AS {part.main_alias} (key {', '.join(part.main_key)}){disc}")
        for link in part.links:
            how = ", ".join([f"{k} = {c.sql(dialect='spark')}" for k, c in link.bound] +
                            [f"{k} = {v.sql(dialect='spark')}" for k, v in link.literals])
            if link.many:
                lines.append(f"    {link.side} join {link.input} AS {link.alias} one-to-many on ({how}), "
                             f"its rows told apart by their key ({', '.join(link.key)})")
                continue
            how = f"unique key {', '.join(link.via)}: {how}" if link.via else how
            lines.append(f"    {link.side} join {link.input} AS {link.alias} on key ({how})")
    lines.append("  inputs:")
    for input_id, info in plan.inputs.items():
        lines.append(f"    {input_id}: {mode_words(info)}, key ({', '.join(info.key)}), uses {', '.join(info.used_columns)}")
        for part in plan.parts:
            for alias, method, _ in key_query_methods(plan, input_id, part):
                lines.append(f"      p{part.index} {alias}: {method}")
    derived = derive(plan)
    for name, sql in derived.queries.items():
        lines += ["", f"-- {name}", sql.rstrip() + ";"]
    for warning in plan.warnings:
        lines.append(f"warning: {warning.format()}")
    return "\n".join(lines) + "\n"


def check_mvs(manifest: "Manifest") -> list[Problem]:
    """Validate every ``mv`` model of a manifest (``mvflow compile`` fails on errors); returns warnings."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    for model in manifest.models.values():
        if not isinstance(model.kind, MvKind) or model.ast is None:
            continue
        try:
            warnings += mv_plan(model, manifest).warnings
        except CompileError as exc:
            problems += exc.problems
    if problems:
        raise CompileError(problems)
    return warnings
