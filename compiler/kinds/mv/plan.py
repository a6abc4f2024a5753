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

``compiler.kinds.mv.analyze.mv_plan`` validates the SELECT in phases (shape → names → keys) into
the plan from which ``queries`` builds, as sqlglot ASTs, and ``derive`` prints with the Spark
dialect (the texts under ``target/run/<mv>/``).

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

from dataclasses import dataclass

from sqlglot import exp

from ...errors import Problem

HIDDEN_PREFIX = "_mvflow_"
SLOTS = ("a", "b")  # blue/green: a build or compaction fills the slot the view does not read
DELETED = "_mvflow_deleted"
FOUND = "_mvflow_found"
WAS = "_mvflow_was"  # a GROUP BY MV's batch row: its key was stored before (groups added and removed are counted)
SIDE = "_mvflow_side"  # which of two versions a row of a content diff comes from
RANK = "_mvflow_rank"

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


# -- small AST helpers -------------------------------------------------------------------
def alias_of(node: exp.Expression) -> str:
    return node.table.lower() if isinstance(node, exp.Column) else ""


def unalias(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node


def is_column_of(node: exp.Expression, alias: str, column: str) -> bool:
    node = unalias(node)
    return isinstance(node, exp.Column) and alias_of(node) == alias and node.name.lower() == column.lower()


def output_names(select: exp.Select) -> list[str]:
    return [e.alias_or_name.lower() for e in select.expressions]
