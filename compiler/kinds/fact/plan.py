"""Compile-time plan of a ``fact`` model: the step SELECT and the bounds queries.

A fact is built in steps over a position range ``(last, next]`` of its **main source**: the
first table in FROM (or ``config(source=...)``), followed through views to the declared
source whose ``position`` columns order its rows (e.g. ``(ts, order_id)``). Everything here
is pure: the queries are sqlglot ASTs printed as Spark SQL with named parameter markers
(``:last_ts``, ``:next_order_id``, ``:upto``, ``:step``; ``{step}`` in a partition spec, see
``_ParquetWrite``), bound by ``steps.py`` at run time,
so ``target/run/<model>/step.sql`` is exactly what runs.

How a step's write is made idempotent depends on the model's ``table_format``:

- parquet: the table is partitioned by a hidden step id ``mvflow_step`` (a hash of the step's
  ``next``). Each step is written with ``INSERT OVERWRITE ... PARTITION (mvflow_step = {step})``
  on a table whose overwrite mode is ``static``: a re-run of a crashed step replaces exactly what
  the crashed try wrote, even when the re-run writes no rows.
- delta: no hidden column. Each step is one ``INSERT INTO ... REPLACE WHERE <(last, next] on the
  fact's own position columns> SELECT ...``: one Delta commit that deletes whatever the table
  holds in the step's range (what a crashed try committed) and adds the step's rows; Delta checks
  that every written row is in the range. The fact must output its main source's position
  columns unchanged. Delta's writer transaction ids (``txnAppId``/``txnVersion``) were the
  alternative; they are not used: from SQL they are session settings, shared by the models a
  ``--threads`` run steps at the same time, and a redo would *skip* the crashed try's commit
  instead of replacing it, keeping rows whose source row has since moved to a later position.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from ...manifest import Manifest, Model
from ...errors import CompileError, Problem
from ...parse import pretty, table_name
from ...table_format import DELTA, using
from ..view import ViewKind

STEP_COLUMN = "mvflow_step"  # no leading "_": the Hive metastore's partition filter parser rejects it
_TIME_TYPES = ("timestamp", "date")


@dataclass(frozen=True)
class Dependency:
    """One table a step waits for: a source (``freshness_sql`` gives its newest time) or a
    fact/mv model (its committed offsets in the state store)."""

    name: str
    kind: str  # source | fact | mv
    via: str = ""  # the view/table model in depends_on that led here
    freshness_sql: str | None = None

    def label(self) -> str:
        return f"{self.name} (via {self.via})" if self.via else self.name


@dataclass(frozen=True)
class FactPlan:
    topic: str
    relation: str
    path: str
    source: str  # the main source id
    position: tuple[str, ...]  # its position columns
    types: tuple[str | None, ...]  # their declared types
    maxstep: int
    delay_seconds: int
    depends_on: tuple[Dependency, ...]
    step: str  # the model's SELECT restricted to (last, next]
    create: tuple[str, ...]  # the schema and the table, on the first step
    insert: str
    insert_observed: str  # the same write from the step's rows as a DataFrame, ``{rows}`` (see steps.py)
    next_sql: str  # the first maxstep ready rows after last: how many, the first, the last (= next)
    range_sql: str  # rows, first and newest position in (last, upto): why nothing is ready, how far behind
    audit_sql: str  # once per run: source rows at or before last, and with a NULL position
    count_sql: str  # source rows in (last, next]: a redo's, or a step's whose top-N may have cut ties at next
    freshness_sql: str | None  # the newest time of every source in depends_on, one column each
    stats_sql: str | None  # rows and null counts of a written step (None: columns unknown)
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    table_format: str = "parquet"
    written_columns: tuple[str, ...] = ()  # delta: the fact's own position columns, the step's range is on
    written: str = ""  # delta: where a step's rows are in the table ((last, next] on written_columns)
    drop: str = ""  # --full-refresh: the table goes first (on Delta only when it is not a Delta table)

    @property
    def is_delta(self) -> bool:
        return self.table_format == DELTA

    def markers(self, prefix: str) -> list[str]:
        return [f"{prefix}_{c}" for c in self.position]


def fact(manifest: Manifest, model: Model) -> FactPlan:
    """Plan the steps of a fact model; a model mvflow cannot step raises CompileError.

    >>> plan = fact(*_demo("orders_enriched"))
    >>> plan.source, plan.position, plan.maxstep
    ('stage.orders', ('ts', 'order_id'), 50000)
    >>> print(plan.step.split("WHERE")[1].strip().splitlines()[0])
    (
    """
    kind = model.kind
    table, alias = _main_table(manifest, model)
    source, columns = _follow(manifest, model, table_name(table))
    types = tuple(_column_type(source, c) for c in source.position)
    mapped = [exp.column(columns[c], alias) for c in source.position]
    step = model.ast.copy()
    _leftmost(step).where(_in_range(mapped, source.position, types), copy=False)
    depends = _dependencies(manifest, model, (*kind.depends_on, *source.depends_on))
    _check_waits(manifest, model, depends)
    write = _DeltaWrite(model, alias, columns, source, types) if model.table_format == DELTA else _ParquetWrite(model)
    return FactPlan(
        topic=model.name,
        relation=model.relation,
        path=model.path,
        source=source.id,
        position=source.position,
        types=types,
        maxstep=kind.maxstep,
        delay_seconds=max(kind.delay_seconds, source.delay_seconds),
        depends_on=depends,
        step=pretty(step),
        create=(f"CREATE DATABASE IF NOT EXISTS {model.schema}", write.create()),
        insert=f"{write.into}\n{pretty(step)}",
        insert_observed=f"{write.into}\nSELECT * FROM {{rows}}",
        next_sql=pretty(_next_query(source.id, source.position, types, kind.maxstep)),
        range_sql=pretty(_range_query(source.id, source.position, types)),
        audit_sql=pretty(_audit_query(source.id, source.position, types)),
        count_sql=pretty(_count_query(source.id, source.position, types)),
        freshness_sql=freshness_query(depends),
        stats_sql=stats_query(model.relation, model.columns, write.written) if model.columns else None,
        before=_hooks(model.config.get("before")),
        after=_hooks(model.config.get("after")),
        table_format=model.table_format,
        written_columns=write.columns,
        written=write.written.sql(dialect="spark") if write.written is not None else "",
        drop=f"DROP TABLE IF EXISTS {model.relation}",
    )


def step_id(next_position: tuple) -> str:
    """The hidden partition value of the step ending at ``next``: the same for every try.

    A string, not a number: the Hive metastore cannot filter partitions on numeric keys.

    >>> step_id(("2024-05-01 10:00:00", 7)) == step_id(("2024-05-01 10:00:00", 7))
    True
    """
    return hashlib.sha256(repr(tuple(next_position)).encode()).hexdigest()[:16]


def stats_query(relation: str, columns: list[str] | tuple[str, ...], written: exp.Expression | str = "") -> str:
    """Rows and null counts per output column of one written step (``written``: where the
    step's rows are; default its ``mvflow_step`` partition).

    >>> print(stats_query("m.f", ["a"]))
    SELECT
      COUNT(*) AS `rows`,
      COUNT_IF(`a` IS NULL) AS `a`
    FROM m.f
    WHERE
      mvflow_step = :step
    """
    nulls = [exp.alias_(exp.func("COUNT_IF", exp.column(c, quoted=True).is_(exp.null())), exp.to_identifier(c, quoted=True))
             for c in columns if c != STEP_COLUMN]
    query = exp.select(exp.alias_(exp.func("COUNT", exp.Star()), exp.to_identifier("rows", quoted=True)), *nulls)
    if isinstance(written, str):
        written = sqlglot.parse_one(written, dialect="spark") if written else None
    where = written.copy() if written is not None else exp.column(STEP_COLUMN).eq(exp.Placeholder(this="step"))
    return pretty(query.from_(relation).where(where))


def step_script(plan: FactPlan) -> str:
    """``target/run/<model>/step.sql``: the statements of one step, in order."""
    lines = [
        f"-- mvflow fact step: {plan.topic} from {plan.path}",
        f"-- reads {plan.source} over (last, next] of ({', '.join(plan.position)})",
        f"-- :{', :'.join(plan.markers('last'))} = the committed position (NULL on the first step)",
        f"-- :{', :'.join(plan.markers('next'))} = the planned position (offsets.next)",
    ]
    if plan.is_delta:
        lines.append(f"-- table format delta: the step replaces the table's rows in (last, next] of its own "
                     f"({', '.join(plan.written_columns)}) in one commit")
        create = "create the schema and the fact table on the first step; --full-refresh replaces it with an empty one at once"
        drop = "--full-refresh of a table that is not a Delta table (a parquet fact before): dropped first"
    else:
        lines.append(f"-- {{step}} = the step's {STEP_COLUMN} partition, the same for every try of the step "
                     "(a quoted literal; :step in the stats query)")
        create, drop = "create the schema and the fact table on the first step", "--full-refresh: the table is dropped first"
    for purpose, sql in [(drop, plan.drop), (create, plan.create[0]), ("", plan.create[1]),
                         *[("before hook", h) for h in plan.before],
                         ("write the step: replaces whatever an earlier try of this step wrote", plan.insert),
                         *[("after hook", h) for h in plan.after]]:
        lines += ["", f"-- {purpose}"] if purpose else [""]
        lines.append(sql.rstrip() + ";")
    if plan.stats_sql:
        lines += ["", "-- step log: rows and null counts of the written step, observed while it is written (Spark's",
                  "-- observed metrics on the SELECT above); read back with this query when not delivered or",
                  "-- when after hooks ran", plan.stats_sql + ";"]
    return "\n".join(lines) + "\n"


def bounds_script(plan: FactPlan) -> str:
    """``target/run/<model>/bounds.sql``: how a step's ``next`` is chosen."""
    lines = [
        f"-- mvflow fact bounds: {plan.topic} from {plan.path}",
        f"-- :upto = min(now - delay {plan.delay_seconds}s, freshness of "
        + (", ".join(d.label() for d in plan.depends_on) or "nothing else") + ")",
        "",
        f"-- next = the last of the first {plan.maxstep} rows ready after last (a bounded top-N, not a full sort)",
        plan.next_sql + ";",
        "",
        "-- when no row is ready: the first row after last at any time (:upto = 9999-12-31), to say what it waits for",
        plan.range_sql + ";",
        "",
        "-- once per run: source rows at or before last (more than the steps counted: late rows, not loaded)",
        "-- and with a NULL in the position (never loaded); said in the run, the state and the step log",
        plan.audit_sql + ";",
        "",
        f"-- the source rows of (last, next] for the step log: a redo's, or a step of {plan.maxstep} rows (ties at next)",
        plan.count_sql + ";",
    ]
    if plan.freshness_sql:
        labels = ", ".join(d.label() for d in plan.depends_on if d.freshness_sql)
        lines += ["", f"-- freshness of {labels}: once per run, again when it is what holds the steps back",
                  plan.freshness_sql + ";"]
    for dep in plan.depends_on:
        if not dep.freshness_sql:
            lines += ["", f"-- freshness of {dep.label()}: its committed position in the state store"]
    return "\n".join(lines) + "\n"


NEW_COLUMNS = "{new_columns}"  # filled in at run time: Spark takes no parameter marker in a column list


def add_columns_script(relation: str) -> str:
    """``target/run/<model>/add_columns.sql`` (``on_schema_change='append_new_columns'``).

    >>> print(add_columns_script("out.ev"), end="")
    -- on_schema_change='append_new_columns': when the catalog finds columns appended to the SELECT
    -- (mvflow plan says 'add cols'), they are added to the table before the next step; rows already
    -- written keep NULL in them. {new_columns} = each new column with the type Spark gives it in the SELECT
    ALTER TABLE out.ev ADD COLUMNS ({new_columns});
    """
    return ("-- on_schema_change='append_new_columns': when the catalog finds columns appended to the SELECT\n"
            "-- (mvflow plan says 'add cols'), they are added to the table before the next step; rows already\n"
            f"-- written keep NULL in them. {NEW_COLUMNS} = each new column with the type Spark gives it in the SELECT\n"
            f"{add_columns_statement(relation)};\n")


def add_columns_statement(relation: str, new_columns: str = NEW_COLUMNS) -> str:
    return f"ALTER TABLE {relation} ADD COLUMNS ({new_columns})"


# -- the main source -------------------------------------------------------------------------
def _main_table(manifest: Manifest, model: Model) -> tuple[exp.Table, str]:
    select = _leftmost(model.ast)
    if select is not model.ast and not isinstance(model.ast, exp.Select):
        _fail(model, "a fact model is one SELECT; UNION and other set operations cannot be stepped yet",
              "build the union in a view over separate facts", "fact-shape")
    from_ = select.args.get("from_")
    candidates = [from_.this] if from_ else []
    candidates += [j.this for j in select.args.get("joins") or [] if not j.side and j.kind.upper() in ("", "INNER")]
    tables = [t for t in candidates if isinstance(t, exp.Table)]
    wanted = getattr(model.kind, "source", None)
    if wanted:
        relation = manifest.relation_of(wanted).lower()
        tables = [t for t in tables if table_name(t) == relation]
        if not tables:
            _fail(model, f"config(source='{wanted}'): {relation} is not in the FROM or an inner JOIN of the model",
                  "name the table the steps follow: the one in FROM", "fact-source", "source")
    elif not tables:
        _fail(model, "a fact model must read a table in its FROM (not a subquery or CTE) to step over",
              "read the main source directly or set config(source='db.table')", "fact-source")
    return tables[0], tables[0].alias_or_name


def _follow(manifest: Manifest, model: Model, relation: str, seen: tuple[str, ...] = ()):
    """The declared source behind ``relation`` and the names its position columns have there."""
    if relation in manifest.sources:
        source = manifest.sources[relation]
        if not source.position:
            _fail(model, f"the main source {relation} of a fact has no position columns (it is a {source.change_mode} source)",
                  "a fact steps over a source declared with 'position: [time, id]'; set config(source=...) to another table",
                  "fact-source", "source")
        return source, {c: c for c in source.position}
    view = next((m for m in manifest.models.values() if m.relation == relation), None)
    if view is None or view.name in seen:
        _fail(model, f"the main table {relation} of a fact is not a declared source", "declare it in lineage/*.yml "
              "with its position columns and read it with source()", "fact-source", "source")
    if not isinstance(view.kind, ViewKind):
        _fail(model, f"the main table of a fact is the {view.kind.name} model '{view.name}': only sources and views over them can be stepped",
              "read the source (or a view over it) in FROM, or set config(source=...)", "fact-source", "source")
    inner, inner_alias = _main_table(manifest, view)
    source, inner_columns = _follow(manifest, model, table_name(inner), (*seen, view.name))
    outputs = _pass_through(view, inner_alias)
    missing = [c for c in source.position if inner_columns[c] not in outputs]
    if missing:
        _fail(model, f"position column{'s' if len(missing) > 1 else ''} {', '.join(missing)} of {source.id} "
              f"do{'es' if len(missing) == 1 else ''} not pass through the view '{view.name}' ({view.path})",
              f"select {', '.join(inner_alias + '.' + inner_columns[c] for c in missing)} unchanged in {view.name}",
              "fact-position")
    return source, {c: outputs[inner_columns[c]] for c in source.position}


def _pass_through(view: Model, alias: str) -> dict[str, str]:
    """Columns of the view's main table that its SELECT outputs unchanged: input → output name."""
    found: dict[str, str] = {}
    for projection in _leftmost(view.ast).expressions:
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(inner, exp.Star) or (isinstance(inner, exp.Column) and inner.is_star and inner.table in ("", alias)):
            return _AllColumns()
        if isinstance(inner, exp.Column) and inner.table in ("", alias):
            found.setdefault(inner.name, projection.alias_or_name)
    return found


class _AllColumns(dict):
    """``SELECT *``: every column passes through under its own name."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> str:
        return key


def _column_type(source, column: str) -> str | None:
    return (source.column_types() or {}).get(column)


# -- the queries -----------------------------------------------------------------------------
def _marker(name: str, type_: str | None) -> exp.Expression:
    marker = exp.Placeholder(this=name)
    return exp.cast(marker, exp.DataType.build(type_, dialect="spark")) if type_ else marker


def _after(columns: list[exp.Expression], markers: list[exp.Expression]) -> exp.Expression:
    """Lexicographic ``(c1, c2, ...) > (m1, m2, ...)``."""
    head = columns[0].copy().__gt__(markers[0].copy())
    if len(columns) == 1:
        return head
    return exp.or_(head, exp.and_(columns[0].copy().eq(markers[0].copy()), _after(columns[1:], markers[1:])))


def _at_most(columns: list[exp.Expression], markers: list[exp.Expression]) -> exp.Expression:
    """Lexicographic ``(c1, c2, ...) <= (m1, m2, ...)``."""
    if len(columns) == 1:
        return columns[0].copy() <= markers[0].copy()
    head = columns[0].copy() < markers[0].copy()
    return exp.or_(head, exp.and_(columns[0].copy().eq(markers[0].copy()), _at_most(columns[1:], markers[1:])))


def _placed(columns: list[exp.Expression]) -> exp.Expression:
    """A row a step can place: no NULL in its position (the others are counted, never loaded)."""
    return exp.and_(*[exp.not_(c.copy().is_(exp.null())) for c in columns])


def _since_last(columns: list[exp.Expression], position: tuple[str, ...], types) -> exp.Expression:
    last = [_marker(f"last_{c}", t) for c, t in zip(position, types)]
    return exp.and_(_placed(columns), exp.paren(exp.or_(last[0].copy().is_(exp.null()), _after(columns, last))))


def _in_range(columns: list[exp.Expression], position: tuple[str, ...], types) -> exp.Expression:
    """``(last, next]`` on the main table's position columns; no lower bound while last is NULL."""
    upper = _at_most(columns, [_marker(f"next_{c}", t) for c, t in zip(position, types)])
    return exp.and_(_since_last(columns, position, types), exp.paren(upper))


def _ready(position: tuple[str, ...], types) -> exp.Expression:
    columns = [exp.column(c) for c in position]
    condition = _since_last(columns, position, types)
    time_type = types[0]
    if time_type is None or time_type.lower().startswith(_TIME_TYPES):
        condition = exp.and_(condition, columns[0] < _marker("upto", time_type or "timestamp"))
    return condition


def _as_text(name: str, type_: str | None, table: str | None = None) -> exp.Expression:
    """Positions leave Spark as JSON-friendly values: times as strings in the session zone."""
    column = exp.column(name, table)
    if type_ is None or type_.lower().startswith(_TIME_TYPES):
        return exp.alias_(exp.cast(column, "string"), name)
    return exp.alias_(column, name)


def _bounds(rows: exp.Select, position: tuple[str, ...], types, bounds: tuple[str, ...]) -> exp.Select:
    """Count of ``rows`` and their lowest/highest position, as ``rows``, ``lo_<col>``, ``hi_<col>``."""
    struct = lambda: exp.func("STRUCT", *[exp.column(c) for c in position])  # noqa: E731
    aggregates = {"lo": "MIN", "hi": "MAX"}
    inner = rows.select(exp.alias_(exp.func("COUNT", exp.Star()), exp.to_identifier("rows", quoted=True)),
                        *[exp.alias_(exp.func(aggregates[b], struct()), b) for b in bounds], copy=False)
    outputs = [exp.column("rows", quoted=True)]
    for bound in bounds:
        outputs += [exp.alias_(_as_text(c, t, bound).this, f"{bound}_{c}") for c, t in zip(position, types)]
    return exp.select(*outputs).from_(inner.subquery("r"))


def _range_query(relation: str, position: tuple[str, ...], types) -> exp.Select:
    return _bounds(exp.select().from_(relation).where(_ready(position, types)), position, types, ("lo", "hi"))


def _audit_query(relation: str, position: tuple[str, ...], types) -> exp.Select:
    """One scan of the source per run, for what steps cannot see: rows at or before ``last`` (more
    of them than the steps counted: late rows, which arrived after their range was loaded) and
    rows with a NULL in the position (never loaded).

    >>> for count in _audit_query("s.ev", ("id",), (None,)).expressions:
    ...     print(count.sql(dialect="spark"))
    COUNT_IF(NOT id IS NULL AND (id <= :last_id)) AS at_or_before_last
    COUNT_IF(id IS NULL) AS null_position
    """
    columns = [exp.column(c) for c in position]
    last = _at_most(columns, [_marker(f"last_{c}", t) for c, t in zip(position, types)])
    counts = {"at_or_before_last": exp.and_(_placed(columns), exp.paren(last)),
              "null_position": exp.or_(*[c.copy().is_(exp.null()) for c in columns])}
    return exp.select(*[exp.alias_(exp.func("COUNT_IF", c), n) for n, c in counts.items()]).from_(relation)


def _count_query(relation: str, position: tuple[str, ...], types) -> exp.Select:
    columns = [exp.column(c) for c in position]
    return (exp.select(exp.alias_(exp.func("COUNT", exp.Star()), exp.to_identifier("rows", quoted=True)))
            .from_(relation).where(_in_range(columns, position, types)))


def _next_query(relation: str, position: tuple[str, ...], types, maxstep: int) -> exp.Select:
    """One query for the step's bounds: the first ``maxstep`` ready rows after last (a top-N,
    not a full sort); the last of them is ``next``, whether the backlog is bigger or not."""
    first = (exp.select(*[exp.column(c) for c in position]).from_(relation).where(_ready(position, types))
             .order_by(*[exp.column(c) for c in position]).limit(maxstep))
    return _bounds(exp.select().from_(first.subquery("ready_rows")), position, types, ("lo", "hi"))


class _ParquetWrite:
    """A step overwrites its hidden ``mvflow_step`` partition (static overwrite mode)."""

    columns: tuple[str, ...] = ()
    written = None  # the stats query's default: the step's partition

    def __init__(self, model: Model):
        self.model = model
        # Spark's parser takes no parameter marker in a partition spec (with Delta's SQL extension the
        # markers are bound after parsing): PySpark renders ``{step}`` as a quoted literal instead.
        self.into = f"INSERT OVERWRITE TABLE {model.relation} PARTITION ({STEP_COLUMN} = {{step}})"

    def create(self) -> str:
        model = self.model
        body = exp.select(exp.Star(), exp.alias_(exp.cast(exp.null(), "string"), STEP_COLUMN)).from_(
            model.ast.copy().subquery("q")).where(exp.false())
        partition = ", ".join((STEP_COLUMN, *model.kind.partition_by))
        return (f"CREATE TABLE IF NOT EXISTS {model.relation}\nUSING parquet\nPARTITIONED BY ({partition})\n"
                f"OPTIONS ('partitionOverwriteMode' = 'static')\nAS\n{pretty(body)}")


class _DeltaWrite:
    """A step replaces the rows of its range on the fact's own position columns, in one Delta commit."""

    def __init__(self, model: Model, alias: str, columns: dict[str, str], source, types):
        outputs = _pass_through(model, alias)
        missing = [c for c in source.position if columns[c] not in outputs]
        if missing:
            _fail(model, f"on Delta a step replaces its range by the fact's own position columns, and "
                  f"{', '.join(missing)} of {source.id} {'is' if len(missing) == 1 else 'are'} not in its output",
                  f"select {', '.join(alias + '.' + columns[c] for c in missing)} unchanged in the fact "
                  "(or set config(table_format='parquet'))", "fact-position", "table_format")
        self.model = model
        self.columns = tuple(outputs[columns[c]] for c in source.position)
        self.written = _in_range([exp.column(c) for c in self.columns], source.position, types)
        condition = "\n".join("  " + line for line in pretty(self.written).splitlines())
        self.into = f"INSERT INTO {model.relation} REPLACE WHERE\n{condition}"

    def create(self) -> str:
        model = self.model
        body = exp.select(exp.Star()).from_(model.ast.copy().subquery("q")).where(exp.false())
        partition = f"\nPARTITIONED BY ({', '.join(model.kind.partition_by)})" if model.kind.partition_by else ""
        return f"CREATE OR REPLACE TABLE {model.relation}\n{using(DELTA)}{partition}\nAS\n{pretty(body)}"


# -- dependencies ----------------------------------------------------------------------------
def _dependencies(manifest: Manifest, model: Model, names) -> tuple[Dependency, ...]:
    found: dict[str, Dependency] = {}
    for name in names:
        for dep in _resolve(manifest, model, name, via="", seen=()):
            found.setdefault(dep.name, dep)
    return tuple(found.values())


def _resolve(manifest: Manifest, model: Model, name: str, via: str, seen: tuple[str, ...]) -> list[Dependency]:
    if name in manifest.sources:
        source = manifest.sources[name]
        return [Dependency(name, "source", via, _freshness_sql(source))] if _freshness_sql(source) else []
    other = manifest.models.get(name)
    if other is None:
        _fail(model, f"depends_on names '{name}', which is neither a source nor a model",
              "list sources as database.table and models by name", "unknown-dependency", "depends_on")
    if other.kind.is_incremental:  # a fact or an mv: its own offsets say how fresh it is
        return [Dependency(name, other.kind.name, via)]
    if name in seen:
        return []
    # a view or table is as fresh as what it reads
    upstream = [*other.depends_on_sources, *other.depends_on_models]
    return [d for up in upstream for d in _resolve(manifest, model, up, via or name, (*seen, name))]


def _check_waits(manifest: Manifest, model: Model, depends: tuple[Dependency, ...]) -> None:
    """A fact whose steps wait (``depends_on``, its own or its main source's) for a fact that waits for
    it, directly or through others: no step of either could ever run. The shortest such cycle fails."""
    todo = [(d.name, (model.name, d.name)) for d in depends if d.kind == "fact"]
    seen: set[str] = set()
    while todo:
        name, chain = todo.pop(0)
        if name == model.name:
            cycle = (f"in a cycle: {' --> '.join(chain)} (each waits for the next to catch up)" if len(chain) > 2 else
                     "for themselves (depends_on leads back to the fact)")
            _fail(model, f"depends_on makes its steps wait {cycle}, so no step could ever run",
                  "remove the depends_on entry that closes the cycle", "depends-on-cycle", "depends_on")
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += [(other, (*chain, other)) for other in _waits_for(manifest, manifest.models[name])]
        except CompileError:  # that fact cannot be planned: its own problem is reported at it
            continue


def _waits_for(manifest: Manifest, model: Model) -> tuple[str, ...]:
    """The facts whose committed offsets the steps of fact ``model`` wait for."""
    def waits() -> tuple[str, ...]:
        table, _ = _main_table(manifest, model)
        source, _ = _follow(manifest, model, table_name(table))
        return tuple(d.name for d in _dependencies(manifest, model, (*model.kind.depends_on, *source.depends_on))
                     if d.kind == "fact")

    return manifest.derived("fact-waits", model, waits)


def _freshness_sql(source) -> str | None:
    """Newest natural time of a source: its position's time column (or its change feed's)."""
    if source.position:
        table, column, type_ = source.id, source.position[0], _column_type(source, source.position[0])
    elif source.changes:
        table, column, type_ = source.changes.table, source.changes.position[0], None
    else:
        return None  # a dictionary or a Change Data Feed source has no time column: it never holds a step back
    if type_ is not None and not type_.lower().startswith(_TIME_TYPES):
        return None
    return pretty(exp.select(exp.alias_(exp.cast(exp.func("MAX", exp.column(column)), "string"), "newest")).from_(table))


def freshness_query(dependencies) -> str | None:
    """One query for the newest time of every source dependency, a column each in their order
    (one job per source, run side by side, one round trip); None when no source is among them.

    >>> deps = [Dependency("s.a", "source", freshness_sql="SELECT MAX(t) AS newest FROM s.a"),
    ...         Dependency("m", "mv"), Dependency("s.b", "source", freshness_sql="SELECT MAX(u) AS newest FROM s.b")]
    >>> print(freshness_query(deps))
    SELECT
      (
        SELECT
          MAX(t) AS newest
        FROM s.a
      ) AS newest_0,
      (
        SELECT
          MAX(u) AS newest
        FROM s.b
      ) AS newest_1
    """
    queries = [d.freshness_sql for d in dependencies if d.freshness_sql]
    if len(queries) <= 1:
        return queries[0] if queries else None
    columns = [exp.alias_(sqlglot.parse_one(q, dialect="spark").subquery(), f"newest_{i}") for i, q in enumerate(queries)]
    return pretty(exp.select(*columns))


# -- helpers ---------------------------------------------------------------------------------
def _leftmost(query: exp.Expression) -> exp.Select:
    while isinstance(query, (exp.SetOperation, exp.Subquery)):
        query = query.left if isinstance(query, exp.SetOperation) else query.this
    return query  # type: ignore[return-value]


def _hooks(value: object) -> tuple[str, ...]:
    if not value:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)  # type: ignore[arg-type]


def _fail(model: Model, message: str, hint: str, code: str, key: str | None = None) -> None:
    line = model.config_lines.get(key, 1) if key else 1
    raise CompileError(Problem(f"fact model '{model.name}': {message}", model.path, line, hint=hint, code=code))


def _demo(name: str):
    """The demo project's manifest and one model (for doctests)."""
    from pathlib import Path

    from ...compile import compile_project
    from ...project import load_project

    manifest = compile_project(load_project(Path(__file__).resolve().parents[3]))
    return manifest, manifest.models[name]
