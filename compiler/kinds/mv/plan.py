"""MV models: the shape of an ``mv`` SELECT, validated and analysed into an ``MvPlan`` (pure).

An ``mv`` is ``SELECT … FROM main m [INNER|LEFT] JOIN x ON … [WHERE …]``, or several such
parts combined with ``UNION ALL`` (each with its own main source, and either a constant
discriminator column in the key or a key computed one-to-one from the part's main key, e.g.
``100000000 + m.id``, whose ranges the parts keep apart). A join that binds the joined input's
whole primary key, or an alternate unique key the source declares (to columns of inputs joined
before it, or to literals), gives each main row at most one match; the MV's unique key is then
the main source's primary key (per part), possibly computed from main key columns. A join that
binds neither is one-to-many: the key gains that input's primary key (the MV's *grain*), while
the unit of refresh stays the main key (every row of an affected main key is replaced). Window
functions partition by a column of the main table: the affected main keys then grow to every key
of the partitions they were in or are in now (``Part.partitions``).

``mv_plan`` validates the SELECT in phases (shape → names → keys; a phase with errors stops
the next) into the plan from which ``queries`` builds, as sqlglot ASTs, and ``derive`` prints
with the Spark dialect (the texts under ``target/run/<mv>/``). Before it, ``lift`` (at compile)
makes each aggregate joined back an mv of its own and ``normalize`` flattens views, CTEs and
``*``; the shape phase is ``shape``, the inputs and their keys ``inputs``.

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

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sqlglot import exp

from ...errors import CompileError, Problem
from ...parse import table_name, table_references
from . import MvKind
from ...publish.spec import publish_problems
from .inputs import BATCH, Input, catalog, mv_consumers, relations
from .normalize import Relations, normalize
from .normalize.scope import conjuncts
from .shape import SUGGEST_TABLE, aggregates, check_shape, is_equality, is_literal

if TYPE_CHECKING:
    from ...manifest import Manifest, Model

HIDDEN_PREFIX = "_mvflow_"
SLOTS = ("a", "b")  # blue/green: a build or compaction fills the slot the view does not read
DELETED = "_mvflow_deleted"
FOUND = "_mvflow_found"
WAS = "_mvflow_was"  # a GROUP BY MV's batch row: its key was stored before (groups added and removed are counted)
SIDE = "_mvflow_side"  # which of two versions a row of a content diff comes from
RANK = "_mvflow_rank"

#: stable problem codes, in the order of the phases that report them
CODES = (
    "mv-set-operation", "mv-aggregate", "mv-distinct", "mv-window", "mv-subquery", "mv-order-limit", "mv-star",
    "mv-join-kind", "mv-join-condition",
    "mv-unknown-alias", "mv-unqualified-column", "mv-unknown-column", "mv-unmappable-input", "mv-no-key",
    "mv-join-not-unique", "mv-key-not-derivable", "mv-key-not-unique", "mv-union-discriminator", "mv-where-unmatched",
)


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
    key_from: str = ""  # where its key was declared, in words (``mvflow explain``)
    in_slots: bool = False  # a parquet table or seed: its files are in two slot tables behind a view

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
    # Window functions: per column of the main table that every window partitions by, the MV column
    # (visible or hidden) holding it. A change recomputes every row of the partitions it touches.
    partitions: tuple[tuple[str, exp.Expression], ...] = ()

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
    views: tuple[str, ...] = ()  # the views its SELECT reads, expanded into it (their sources are its inputs)
    lifted: tuple[str, ...] = ()  # the mvs its aggregates joined back became (lift.py): it reads them

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
        """The key of the rows readers see (they see the SELECT's columns only): the GROUP BY
        columns, or the MV's key; none when the SELECT leaves out a column of the key (the grain of
        a one-to-many join): readers' rows are then a multiset, which ``verify`` compares as one."""
        return self.published_key if set(self.published_key) <= set(self.columns) else ()

    @property
    def published_key(self) -> tuple[str, ...]:
        """The key of what each batch publishes for the MVs that read this one: readers' key (a
        GROUP BY MV's groups), the MV's key otherwise."""
        return tuple(name for name, _ in self.grouped.groups) if self.grouped else self.key

    @property
    def table(self) -> str:
        """The stored Delta table: under the model's name, except when it holds what readers must not
        see (hidden key columns; a GROUP BY MV's member rows): then it is a table beside it, read
        through a view of the SELECT's columns (of a GROUP BY MV, its group rows) under the model's name."""
        return self.table_name("rows") if self.hidden else self.relation

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
    def plan() -> MvPlan:
        views: list[str] = []
        query = normalize(model.mv_query or model.ast, relations(manifest, model), views)
        reads = {name for name, _ in table_references(query)}
        written = manifest.models[model.owner] if model.owner else model  # a lifted mv's lines are its owner's
        inputs = catalog(manifest, model, reads, lambda other: _mv_plan_of(other, manifest))
        return replace(_Analyzer(model.name, model.relation, model.path, _line_offset(written), query, inputs,
                                 tuple(getattr(model.kind, "unique_key", ()) or ()),
                                 model.table_format).plan(),
                       cluster_by=tuple(getattr(model.kind, "cluster_by", ()) or ()),
                       consumers=mv_consumers(manifest, model.name), views=tuple(sorted(views)),
                       lifted=tuple(sorted(m.name for m in manifest.models.values() if m.owner == model.name)))

    return manifest.derived("mv_plan", model, plan)


def plan_from_sql(sql: str, inputs: dict[str, tuple], unique_key: tuple[str, ...] = (),
                  name: str = "mv", columns: dict[str, tuple[str, ...]] | None = None,
                  table_format: str = "parquet", cluster_by: tuple[str, ...] = (),
                  views: dict[str, str] | None = None) -> MvPlan:
    """A plan from bare SQL and ``{table: (mode, key[, alternate unique keys])}`` (tests, docs
    examples); ``views`` maps a view's relation to its SELECT."""
    from ...parse import parse_select

    known = {t: Input(t, t, None if mode in ("view", "fact") else mode, tuple(key), (columns or {}).get(t),
                      position=("v",) if mode in ("position", "changes") else (BATCH,) if mode == "mv" else (),
                      feed=f"{t}_changes" if mode == "changes" else f"{t}__mvflow_changes" if mode == "mv" else None,
                      why=f"{t} is a {mode}", unique=tuple(tuple(u) for u in (unique[0] if unique else ())))
             for t, (mode, key, *unique) in inputs.items()}
    tables = Relations({t: (columns or {}).get(t) for t in inputs},
                       {v: parse_select(text, f"models/{v}.sql") for v, text in (views or {}).items()},
                       {t: (tuple(key), *(unique[0] if unique else ())) for t, (mode, key, *unique) in inputs.items()})
    expanded: list[str] = []
    query = normalize(parse_select(sql, f"models/{name}.sql"), tables, expanded)
    return replace(_Analyzer(name, f"db.{name}", f"models/{name}.sql", 0, query, known, tuple(unique_key),
                             table_format).plan(), cluster_by=tuple(cluster_by), views=tuple(sorted(expanded)))


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
                 catalog: dict[str, Input], unique_key: tuple[str, ...], table_format: str = "parquet"):
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
        selects = check_shape(self.ast, self.problem)
        self._stop_if_any()
        resolved = [self._phase_names(index, select) for index, select in enumerate(selects)]
        self._stop_if_any()
        grouped = selects[0] if len(selects) == 1 and aggregates(selects[0]) else None
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

    # GROUP BY -----------------------------------------------------------------------------
    def _members(self, select: exp.Select, info: dict) -> exp.Select:
        """A GROUP BY MV's row-level SELECT, its *members*: per main row, its main key (hidden
        ``_mvflow_m_<col>``) and the values it is grouped by, under the group columns' names.
        Records the groups (output column, expression) in ``self.groups``."""
        group = select.args.get("group")
        outputs, names = [unalias(e) for e in select.expressions], _output_names(select)
        how = "GROUP BY the selected columns that key the MV's rows, e.g. SELECT o.shop_id, count(*) AS n … GROUP BY o.shop_id"
        if group is None or not group.expressions or any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets", "all")) \
                or any(isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions):
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
            if at not in found and not output.find(exp.AggFunc) and not is_literal(output):  # a constant: the same in every group
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
            self.problem(select, "mv-subquery", "an mv reads FROM a table (its main source)", SUGGEST_TABLE)
            return None
        tables = [main.this] + [j.this for j in select.args.get("joins") or []]
        aliases: dict[str, Input] = {}
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

    def _input(self, table: exp.Table) -> Input | None:
        name = table_name(table)
        found = self.catalog.get(name)
        if found is None:
            self.problem(table, "mv-unmappable-input", f"{name} is not a declared source or a model",
                         "declare it in lineage/*.yml (with its primary key and change mode) and use source()")
            return None
        if found.mode is None:
            self.problem(table, "mv-unmappable-input", f"changes of {name} cannot be mapped to MV keys: {found.why}",
                         found.fix or "read its sources directly, or make it a 'table' with a unique_key or an 'mv'")
            return None
        if not found.key:
            self.problem(table, "mv-no-key", f"input {name} has no primary key",
                         "declare primary_key for a source; for a model or seed, unique_key in its config or a column "
                         "with both unique and not_null tests (on it, or on a view that selects it whole: no WHERE)")
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

    def _check_columns(self, select: exp.Select, aliases: dict[str, Input], order: list[str]) -> None:
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
        for part in parts:
            self._check_where_keeps_unmatched(part)
        if len(parts) == 1 and parts[0].select.find(exp.Window):
            parts[0] = self._windowed(parts[0], columns)
        if parts and parts[0].grain:
            self._check_stated_grain(parts[0], key)
            key = tuple(k for k in key if k not in parts[0].grain) + parts[0].grain
        return parts, key, columns

    def _check_stated_grain(self, part: Part, key: tuple[str, ...]) -> None:
        """A stated unique_key that a one-to-many join makes non-unique is an error, never widened
        silently: the key must name the joined rows' keys too (the grain), or the join be unique."""
        if not self.unique_key or self.groups is not None:
            return
        for link in part.links:
            if not link.many:
                continue
            grain = self._grain(part.select, [link], _output_names(part.select))
            if set(grain) <= set(key):
                continue
            selected = [g for g in grain if not g.startswith(HIDDEN_PREFIX)]
            bound = sorted({k for k, _ in (*link.bound, *link.literals)})
            state = (f"add {', '.join(selected)} to unique_key" if len(selected) == len(grain) else
                     f"select {', '.join(f'{link.alias}.{k}' for k in link.key)} and add it to unique_key")
            self.problem(link.on, "mv-key-not-unique",
                         f"unique_key ({', '.join(self.unique_key)}) is not unique: the join of {link.input} AS {link.alias} "
                         f"binds neither its primary key ({', '.join(link.key)}) nor a declared unique key, so one "
                         f"{part.main_alias} row may match several {link.alias} rows",
                         f"declare the columns the join binds as unique on the source ('unique: [[{', '.join(bound)}]]') "
                         f"if they are, or state the grain: {state}")

    def _windowed(self, part: Part, columns: list[str]) -> Part:
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
            self.problem(windows[0], "mv-window", "window functions in an mv must all partition by a column of the "
                         f"main table ({part.main_alias}): without one, any change would recompute every row", hint)
            return part
        if part.grain:
            self.problem(windows[0], "mv-window", "window functions are not supported in an mv with a one-to-many join",
                         "compute the window in an mv that reads this one, or make the model a 'table'")
            return part
        hidden = list(part.hidden)
        partitions = []
        for name in dict.fromkeys(common):
            expression = exp.column(name, part.main_alias)
            selected = next((columns[i] for i, e in enumerate(part.select.expressions) if _is_column_of(e, part.main_alias, name)), None)
            if selected is None:
                selected = f"{HIDDEN_PREFIX}w_{name}"
                hidden.append((selected, expression))
            partitions.append((selected, expression))
        return replace(part, hidden=tuple(hidden), partitions=tuple(partitions))

    def _check_where_keeps_unmatched(self, part: Part) -> None:
        """A WHERE that keeps the main rows a LEFT JOIN by the joined row's own key left unmatched
        (``t.id IS NULL``) is refused: when the row that excluded a main row is deleted, nothing
        stored says which main row it matched (the MV keeps no row for it, and the row is gone)."""
        where = part.select.args.get("where")
        for link in (l for l in part.links if l.side == "left" and l.own_key) if where is not None else ():
            nullable = {link.alias} | part.descendants(link.alias)
            for conjunct in conjuncts(where.this):
                if {alias_of(c) for c in conjunct.find_all(exp.Column)} & nullable and not _rejects_null(conjunct, nullable):
                    how = f"by the unique key {', '.join(link.via)}" if link.via else "one-to-many"
                    self.problem(conjunct, "mv-where-unmatched",
                                 f"WHERE {conjunct.sql(dialect='spark')} keeps rows that {link.alias} (joined {how}) "
                                 "does not match: when the row that excluded one is deleted, mvflow cannot find it again",
                                 f"join {link.alias} by its primary key ({', '.join(link.key)}), e.g. through NOT EXISTS "
                                 "by it, or make the model a 'table'")

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

    def _link(self, join: exp.Join, alias: str, source: Input) -> Link:
        bound: dict[str, exp.Column] = {}
        literals: dict[str, exp.Expression] = {}
        parents: set[str] = set()
        for conjunct in conjuncts(join.args["on"]):
            if not is_equality(conjunct):  # a filter on the joined rows: it binds nothing
                continue
            left, right = conjunct.this, conjunct.expression
            mine, other = (left, right) if alias_of(left) == alias else (right, left)
            if alias_of(mine) != alias:
                parents |= {alias_of(c) for c in conjunct.find_all(exp.Column)}
                continue
            if isinstance(other, exp.Column):
                if alias_of(other) == alias:
                    self.problem(conjunct, "mv-join-condition", f"'{conjunct.sql(dialect='spark')}' compares '{alias}' with itself",
                                 "a join condition links the joined table to a table joined before it")
                    continue
                parents.add(alias_of(other))
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
            expr = unalias(select.expressions[position])
            refs = list(expr.find_all(exp.Column))
            bad = [c for c in refs if alias_of(c) != main_alias or c.name.lower() not in main_key]
            if bad or (not refs and not is_literal(expr)):
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
        literal = next((p for p in key_positions if is_literal(unalias(select.expressions[p]))), None) if parts > 1 else None
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
            discriminator = (columns[literal], unalias(select.expressions[literal]))
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
                                         source.position, source.feed, source.table_format, source.origin,
                                         source.key_from, source.in_slots)
        return MvPlan(self.name, self.relation, self.path, key, tuple(columns), hidden, tuple(parts), inputs,
                      tuple(self.warnings), self.table_format)


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


def alias_of(node: exp.Expression) -> str:
    return node.table.lower() if isinstance(node, exp.Column) else ""


def unalias(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node


def _is_column_of(node: exp.Expression, alias: str, column: str) -> bool:
    node = unalias(node)
    return isinstance(node, exp.Column) and alias_of(node) == alias and node.name.lower() == column.lower()


def _output_names(select: exp.Select) -> list[str]:
    return [e.alias_or_name.lower() for e in select.expressions]


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


def check_mvs(manifest: "Manifest") -> list[Problem]:
    """Validate every ``mv`` model of a manifest (``mvflow compile`` fails on errors); returns warnings."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    failed: set[str] = set()
    def depth(model: "Model") -> int:  # lifted ones first, innermost first: their owners read them
        return 1 + depth(manifest.models[model.owner]) if model.owner else 0

    for model in sorted(manifest.models.values(), key=lambda m: -depth(m)):
        if not isinstance(model.kind, MvKind) or model.ast is None or model.name in failed:
            continue
        try:
            plan = mv_plan(model, manifest)
            warnings += plan.warnings
            if model.kind.publish is not None:
                problems += publish_problems(model, plan.visible_key, manifest.project.target(manifest.target))
        except CompileError as exc:
            if not model.owner:
                problems += exc.problems
                continue
            problems += [_lifted_problem(p, model) for p in exc.problems]
            failed.add(model.owner)  # the owner would fail for want of it: its error is this one
    if problems:
        raise CompileError(problems)
    return warnings


def _lifted_problem(problem: Problem, model: "Model") -> Problem:
    """A problem of a lifted mv, said as one of its owner's (the user wrote the owner)."""
    alias = model.name[len(model.owner) + 2:]
    return replace(problem, message=problem.message.replace(
        f"mv '{model.name}':", f"mv '{model.owner}': its aggregate '{alias}' (made the mv '{model.name}' to be refreshed by "
                               "its groups):", 1))
