"""Column-level lineage: for every model output column, the model and source columns it comes from.

Pure: a Manifest in, a Lineage out (no Spark, no state, no clock). Each model is qualified once
against the known schemas (source columns from ``lineage/*.yml``, output columns of upstream
models), its per-column *direct* parents are read from sqlglot scopes, and transitive lineage
is composed through the DAG from those edges (memoized), never by re-parsing upstream SQL.

Every edge says how the value travels: ``copy`` (the column as is), ``expression`` (computed
from it) or ``aggregate`` (through an aggregate function). Besides output columns, each model
records the input columns it *uses* anywhere (select, join, where, group by): for an MV this
is what decides whether a change of a dictionary column is relevant. Where a schema is
unknown the lineage says so instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, build_scope
from sqlglot.schema import MappingSchema

from .cache import cache_key, read_tables
from .depth import too_deep
from .errors import CompileError, Problem, ProblemList, SelectionError, did_you_mean, find_line
from .graph import model_id, node_name, source_id
from .parse import DIALECT, table_name
from .spark_types import spark_type, spelled

if TYPE_CHECKING:
    from .manifest import Manifest

COPY, EXPRESSION, AGGREGATE = "copy", "expression", "aggregate"
_RANK = {COPY: 0, EXPRESSION: 1, AGGREGATE: 2}
LINEAGE_VERSION = 1


@dataclass(frozen=True, order=True)
class ColumnRef:
    """One column of a graph node (``model.x``, ``source.db.t``, or ``table.db.t`` if undeclared)."""

    node: str
    column: str

    def __str__(self) -> str:
        return f"{node_name(self.node)}.{self.column}"


@dataclass(frozen=True, order=True)
class Edge:
    """``ref`` feeds a column by ``transform`` (copy | expression | aggregate)."""

    ref: ColumnRef
    transform: str

    def to_dict(self) -> dict[str, str]:
        return {"node": self.ref.node, "column": self.ref.column, "transform": self.transform}


@dataclass
class ModelLineage:
    """What one model's query reads: direct parents per output column, and every input column used."""

    columns: dict[str, tuple[Edge, ...]]
    uses: dict[str, tuple[str, ...]]
    types: dict[str, str | None] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)  # column (or "*") → why its lineage is unknown
    missing: tuple[tuple[str, str], ...] = ()  # (column as written, source node) not among the source's declared columns

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": {c: [e.to_dict() for e in edges] for c, edges in self.columns.items()},
            "types": dict(self.types),
            "uses": {node: list(cols) for node, cols in sorted(self.uses.items())},
            "unknown": dict(sorted(self.unknown.items())),
        }


@dataclass
class Lineage:
    """Lineage of a whole project: direct edges per model plus memoized transitive walks."""

    models: dict[str, ModelLineage]
    _up: dict[ColumnRef, tuple[Edge, ...]] = field(default_factory=dict, repr=False)
    _down: dict[ColumnRef, tuple[Edge, ...]] | None = field(default=None, repr=False)
    _entries: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)  # model_dict, once per model
    _leaves: dict[ColumnRef, tuple[Edge, ...]] = field(default_factory=dict, repr=False)

    def parents(self, ref: ColumnRef) -> tuple[Edge, ...]:
        """Direct parents of a column (empty for sources and unknown columns)."""
        model = self.models.get(node_name(ref.node)) if ref.node.startswith("model.") else None
        return model.columns.get(ref.column, ()) if model else ()

    def children(self, ref: ColumnRef) -> tuple[Edge, ...]:
        """Direct children of a column: the model columns computed from it."""
        if self._down is None:
            down: dict[ColumnRef, list[Edge]] = {}
            for name, model in self.models.items():
                for column, edges in model.columns.items():
                    for edge in edges:
                        down.setdefault(edge.ref, []).append(Edge(ColumnRef(model_id(name), column), edge.transform))
            self._down = {ref: tuple(sorted(set(edges))) for ref, edges in down.items()}
        return self._down.get(ref, ())

    def upstream(self, ref: ColumnRef) -> tuple[Edge, ...]:
        """Every column ``ref`` comes from, at any depth, with the composed transform."""
        for each in _first_the_parents(ref, self.parents, self._up):
            self._up[each] = _compose(self.parents(each), self.upstream)
        return self._up[ref]

    def downstream(self, ref: ColumnRef) -> tuple[Edge, ...]:
        """Every model column computed from ``ref``, at any depth."""
        return _walk(ref, self.children)

    def source_columns(self, ref: ColumnRef) -> tuple[Edge, ...]:
        """The leaves of ``upstream``: source (and undeclared table) columns only.

        Composed from the parents' leaves (memoized) rather than by filtering ``upstream``: the
        same edges, without carrying every intermediate model column through deep DAGs."""
        for each in _first_the_parents(ref, self.parents, self._leaves):
            self._leaves[each] = _compose(self.parents(each), self.source_columns, _is_leaf)
        return self._leaves[ref]

    def model_dict(self, name: str) -> dict[str, Any] | None:
        """One model's entry: direct edges, types, uses, unknowns and the source columns reached.
        Built once per model (lineage.json and manifest.json both hold it): do not modify it."""
        model = self.models.get(name)
        if model is None:
            return None
        if name not in self._entries:
            entry = model.to_dict()
            entry["sources"] = {
                column: [e.to_dict() for e in self.source_columns(ColumnRef(model_id(name), column))]
                for column in model.columns
            }
            self._entries[name] = entry
        return self._entries[name]

    def to_dict(self) -> dict[str, Any]:
        """``target/lineage.json``: every model's entry (see ``model_dict``)."""
        return {"lineage_version": LINEAGE_VERSION, "models": {name: self.model_dict(name) for name in self.models}}


def _first_the_parents(ref: ColumnRef, parents, done: Mapping[ColumnRef, Any]) -> list[ColumnRef]:
    """``ref`` and the columns it comes from that ``done`` lacks, each after its parents: composing them
    in this order recurses one level at a time, however long a chain of models is (a loop, not a
    recursion: 1,800 models in a row ran out of Python's stack).

    >>> graph = {"c": ["b"], "b": ["a"], "a": []}
    >>> _first_the_parents("c", lambda ref: [Edge(p, "identity") for p in graph[ref]], {"a": ()})
    ['b', 'c']
    """
    order: list[ColumnRef] = []
    seen: set[ColumnRef] = set()  # expanded (a column reached twice, or a cycle, is expanded once)
    stack: list[tuple[ColumnRef, bool]] = [(ref, False)]
    while stack:
        each, expanded = stack.pop()
        if expanded:
            order.append(each)
        elif each not in done and each not in seen:
            seen.add(each)
            stack.append((each, True))
            stack.extend((edge.ref, False) for edge in parents(each))
    return order


def _is_leaf(ref: ColumnRef) -> bool:
    return not ref.node.startswith("model.")


def _compose(parents: Iterable[Edge], upstream, keep=lambda ref: True) -> tuple[Edge, ...]:
    """``parents`` and, through each, what ``upstream`` gives for it; only the refs ``keep`` accepts."""
    best: dict[ColumnRef, str] = {}
    for edge in parents:
        own = (edge,) if keep(edge.ref) else ()
        for found in (*own, *(Edge(e.ref, _worse(edge.transform, e.transform)) for e in upstream(edge.ref))):
            known = best.get(found.ref)
            # Through several paths, report the most direct one.
            if known is None or _RANK[found.transform] < _RANK[known]:
                best[found.ref] = found.transform
    return tuple(sorted(Edge(ref, transform) for ref, transform in best.items()))


def _walk(ref: ColumnRef, step) -> tuple[Edge, ...]:
    seen: dict[ColumnRef, Edge] = {}
    stack = list(step(ref))
    while stack:
        edge = stack.pop()
        if edge.ref not in seen:
            seen[edge.ref] = edge
            stack.extend(step(edge.ref))
    return tuple(sorted(seen.values()))


def _worse(a: str, b: str) -> str:
    return a if _RANK[a] >= _RANK[b] else b


def lineage(manifest: Manifest) -> Lineage:
    """Column lineage of every model of a compiled project (models in DAG order)."""
    nodes = {s.id.lower(): source_id(s.id) for s in manifest.sources.values()}
    nodes.update({m.relation: model_id(m.name) for m in manifest.models.values()})
    tables = manifest.schema()
    schema = MappingSchema(tables, dialect=DIALECT)
    types: dict[ColumnRef, str | None] = {}
    node_types: dict[str, dict[str, str | None]] = {}  # the same types by node (cache keys)
    known: dict[str, list[str]] = {}  # node → its declared/inferred column names
    for source in manifest.sources.values():
        known[source_id(source.id)] = [c.name for c in source.columns]
        node_types[source_id(source.id)] = {c.name: _type_name(c.type) for c in source.columns}
        types.update({ColumnRef(source_id(source.id), c): t for c, t in node_types[source_id(source.id)].items()})
    index = manifest.table_index() if manifest.cache is not None else {}
    models: dict[str, ModelLineage] = {}
    problems = ProblemList()
    for name in manifest.order():
        model = manifest.models[name]
        if not model.parsed:
            continue
        try:
            if manifest.cache is None:
                result = model_lineage(model.ast, schema, nodes, known, types, model.columns)
            else:
                # everything the result depends on: the SQL, its output names, and what is known of what it reads
                reads = [[name_, found, nodes.get(name_), known.get(nodes.get(name_, "")),
                          node_types.get(nodes.get(name_, ""))]
                         for name_, found in read_tables((t for t, _ in model.tables_read), tables, index)]
                key = cache_key("lineage", model.sql, model.columns, reads)
                result = manifest.cache.get(key)
                if result is None:
                    result = model_lineage(model.ast, schema, nodes, known, types, model.columns)
                    manifest.cache.put(key, result)
        except RecursionError:
            problems.add(too_deep(model.path))
            continue
        models[name] = result
        for written, node in result.missing:
            problems.add(_missing_column(manifest, model, written, node, known[node]))
        known[model_id(name)] = list(result.columns) if model.columns is not None else []
        node_types[model_id(name)] = dict(result.types)
        types.update({ColumnRef(model_id(name), c): t for c, t in result.types.items()})
    problems.raise_if_any(CompileError)
    return Lineage(dict(sorted(models.items())))


def _missing_column(manifest: Manifest, model, written: str, node: str, declared: list[str]) -> Problem:
    source = manifest.sources[node_name(node)]
    column = written.rsplit(".", 1)[-1]
    close = did_you_mean(column, declared)
    return Problem(f"{written}: source {source.id} has no column '{column}'", model.path,
                   find_line(model.raw_sql, written) or 1, code="unknown-column",
                   hint=f"{close + ' ' if close else ''}(columns declared at {source.path}:{source.line}: {', '.join(declared)})")


def model_lineage(
    query: exp.Query,
    schema: MappingSchema | Mapping[str, Any],
    nodes: Mapping[str, str] | None = None,
    known: Mapping[str, list[str]] | None = None,
    types: Mapping[ColumnRef, str | None] | None = None,
    names: list[str] | None = None,
) -> ModelLineage:
    """Direct lineage of one query: each output column's parent columns, and the input columns used.

    ``nodes`` maps table names (``db.t``) to graph ids; ``known`` lists the columns of nodes whose
    schema is known; ``types`` gives parent column types; ``names`` the output column names.
    The caller's AST is not modified.

    >>> from sqlglot import parse_one
    >>> q = parse_one("select o.id, o.a + s.b as total from d.o as o join d.s as s on s.id = o.id")
    >>> result = model_lineage(q, {"d": {"o": {"id": "int", "a": "int"}, "s": {"id": "int", "b": "int"}}})
    >>> [str(e.ref) + " " + e.transform for e in result.columns["total"]]
    ['d.o.a expression', 'd.s.b expression']
    >>> result.uses
    {'table.d.o': ('a', 'id'), 'table.d.s': ('b', 'id')}
    """
    tracer = _Tracer(schema, nodes or {}, known, types or {})
    return tracer.run(query, names)


class _Tracer:
    def __init__(self, schema, nodes: Mapping[str, str], known, types):
        self.schema = schema
        self.nodes = nodes
        self.known = known
        self.types = types
        self.memo: dict[tuple[int, int], tuple[tuple[Edge, ...], str | None]] = {}
        self.type_memo: dict[tuple[int, int], str | None] = {}
        self.uses: dict[str, set[str]] = {}
        self.unknown: dict[str, str] = {}

    def run(self, query: exp.Query, names: list[str] | None) -> ModelLineage:
        try:
            qualified = qualify(query.copy(), schema=self.schema, dialect=DIALECT, validate_qualify_columns=False,
                                quote_identifiers=False, identify=False)
            root = build_scope(qualified)
        except (SqlglotError, KeyError, ValueError) as exc:
            missing = self._missing_columns(query) if str(exc).startswith("Unknown column") else ()
            return ModelLineage({}, {}, unknown={"*": f"the query could not be analysed: {str(exc).splitlines()[0]}"},
                                missing=missing)
        if root is None:
            return ModelLineage({}, {}, unknown={"*": "the query could not be analysed"})
        selects = _leftmost(root).expression.selects
        columns: dict[str, tuple[Edge, ...]] = {}
        types: dict[str, str | None] = {}
        for index, projection in enumerate(selects):
            name = names[index] if names and index < len(names) else projection.alias_or_name
            if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star):
                self.unknown["*"] = self._star_reason(_leftmost(root))
                continue
            edges, why = self._projection(root, index)
            columns[name] = edges
            types[name] = self._type(root, index)
            if why:
                self.unknown[name] = why
        for scope in root.traverse():
            self._collect_uses(scope)
        uses = {node: tuple(sorted(cols)) for node, cols in sorted(self.uses.items())}
        return ModelLineage(columns, uses, types, self.unknown)

    def _projection(self, scope: Scope, index: int) -> tuple[tuple[Edge, ...], str | None]:
        key = (id(scope), index)
        if key not in self.memo:
            self.memo[key] = self._trace_projection(scope, index)
        return self.memo[key]

    def _trace_projection(self, scope: Scope, index: int) -> tuple[tuple[Edge, ...], str | None]:
        if scope.set_operation_scopes:
            return self._merge(self._projection(s, index) for s in scope.set_operation_scopes)
        selects = scope.expression.selects if isinstance(scope.expression, exp.Query) else []
        if index >= len(selects):
            return (), "a set operation's branches have different numbers of columns"
        projection = selects[index]
        body = projection.unalias()
        transform = COPY if isinstance(body, exp.Column) else AGGREGATE if _has_aggregate(body) else EXPRESSION
        results = []
        for column in _own_columns(body):
            edges, why = self._column(scope, column)
            results.append((tuple(Edge(e.ref, _worse(transform, e.transform)) for e in edges), why))
        for subquery in (n for n in _own_nodes(body) if isinstance(n, exp.Subquery)):
            inner = next((s for s in scope.subquery_scopes if s.expression is subquery.this), None)
            if inner is not None and inner.expression.selects:
                edges, why = self._projection(inner, 0)
                results.append((tuple(Edge(e.ref, _worse(EXPRESSION, e.transform)) for e in edges), why))
        return self._merge(results)

    def _column(self, scope: Scope, column: exp.Column) -> tuple[tuple[Edge, ...], str | None]:
        if not column.table:
            return (), f"column {column.name} could not be resolved to a table{self._unknown_tables(scope)}"
        source = _find_source(scope, column.table)
        if isinstance(source, exp.Table):
            node = self._node(source)
            why = None if self._is_known(node) else f"table {node_name(node)} has no declared columns"
            return (Edge(ColumnRef(node, self._column_name(node, column.name)), COPY),), why
        if isinstance(source, Scope):
            names = _leftmost(source).expression.named_selects
            lowered = [n.lower() for n in names]
            if column.name.lower() in lowered:
                return self._projection(source, lowered.index(column.name.lower()))
            return (), f"column {column.name} is not an output of {column.table}"
        return (), f"column {column.table}.{column.name} comes from a table function mvflow does not trace"

    def _collect_uses(self, scope: Scope) -> None:
        for column in scope.columns:
            if not column.table:
                continue
            source = _find_source(scope, column.table)
            if isinstance(source, exp.Table):
                node = self._node(source)
                self.uses.setdefault(node, set()).add(self._column_name(node, column.name))
        for star in scope.stars:
            source = _find_source(scope, star.table) if isinstance(star, exp.Column) and star.table else None
            tables = [source] if isinstance(source, exp.Table) else [s for s in scope.sources.values() if isinstance(s, exp.Table)]
            for table in tables:
                self.uses.setdefault(self._node(table), set()).add("*")

    def _merge(self, results: Iterable[tuple[tuple[Edge, ...], str | None]]) -> tuple[tuple[Edge, ...], str | None]:
        best: dict[ColumnRef, str] = {}
        reasons: list[str] = []
        for edges, why in results:
            for edge in edges:
                if edge.ref not in best or _RANK[edge.transform] < _RANK[best[edge.ref]]:
                    best[edge.ref] = edge.transform
            if why and why not in reasons:
                reasons.append(why)
        return tuple(sorted(Edge(r, t) for r, t in best.items())), "; ".join(reasons) or None

    def _missing_columns(self, query: exp.Query) -> tuple[tuple[str, str], ...]:
        """Qualified columns (``s.x``) of declared sources that the source does not declare (what
        made qualify fail: it names only the first)."""
        root = build_scope(query.copy())
        missing = []
        for scope in root.traverse() if root is not None else ():
            for column in scope.columns:
                table = scope.sources.get(column.table)
                node = self._node(table) if isinstance(table, exp.Table) else ""
                declared = {c.lower() for c in (self.known or {}).get(node) or ()}
                if node.startswith("source.") and declared and column.name.lower() not in declared:
                    missing.append((f"{column.table}.{column.name}", node))
        return tuple(dict.fromkeys(missing))

    def _node(self, table: exp.Table) -> str:
        name = table_name(table)
        return self.nodes.get(name) or f"table.{name}"

    def _is_known(self, node: str) -> bool:
        if self.known is None:
            return True
        return bool(self.known.get(node))

    def _column_name(self, node: str, name: str) -> str:
        """The declared spelling of a column (qualify lower-cases unquoted identifiers)."""
        for declared in (self.known or {}).get(node) or ():
            if declared.lower() == name.lower():
                return declared
        return name

    def _type(self, scope: Scope, index: int) -> str | None:
        """Spark's type of the scope's ``index``-th output column, where certain (``spark_types``)."""
        key = (id(scope), index)
        if key not in self.type_memo:
            if scope.set_operation_scopes:
                found = {self._type(s, index) for s in scope.set_operation_scopes}
                self.type_memo[key] = found.pop() if len(found) == 1 else None
            else:
                selects = scope.expression.selects if isinstance(scope.expression, exp.Query) else []
                self.type_memo[key] = spark_type(selects[index].unalias(), lambda c: self._column_type(scope, c)) \
                    if index < len(selects) else None
        return self.type_memo[key]

    def _column_type(self, scope: Scope, column: exp.Column) -> str | None:
        source = _find_source(scope, column.table) if column.table else None
        if isinstance(source, exp.Table):
            node = self._node(source)
            return self.types.get(ColumnRef(node, self._column_name(node, column.name)))
        if isinstance(source, Scope):
            names = [n.lower() for n in _leftmost(source).expression.named_selects]
            return self._type(source, names.index(column.name.lower())) if column.name.lower() in names else None
        return None

    def _unknown_tables(self, scope: Scope) -> str:
        unknown = sorted(node_name(self._node(s)) for s in scope.sources.values()
                         if isinstance(s, exp.Table) and not self._is_known(self._node(s)))
        return f" (table {', '.join(unknown)} has no declared columns)" if unknown else ""

    def _star_reason(self, scope: Scope) -> str:
        unknown = self._unknown_tables(scope)
        return f"`*` cannot be expanded{unknown}" if unknown else "`*` cannot be expanded"


def _type_name(declared: str | None) -> str | None:
    """A declared type in Spark's spelling, so declared and inferred types compare equal."""
    return spelled(declared) or declared or None


def _leftmost(scope: Scope) -> Scope:
    while scope.set_operation_scopes:
        scope = scope.set_operation_scopes[0]
    return scope


def _find_source(scope: Scope | None, name: str):
    while scope is not None:
        if name in scope.sources:
            return scope.sources[name]
        scope = scope.parent
    return None


def _own_columns(expression: exp.Expression) -> list[exp.Column]:
    """Columns of an expression, not those inside its subqueries (they belong to other scopes)."""
    return [n for n in _own_nodes(expression) if isinstance(n, exp.Column)]


def _own_nodes(expression: exp.Expression):
    return expression.walk(prune=lambda n: isinstance(n, exp.Subquery))


def _has_aggregate(expression: exp.Expression) -> bool:
    return any(isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Window) for n in _own_nodes(expression))


def find_columns(manifest: Manifest, traced: Lineage, text: str) -> list[ColumnRef]:
    """The columns ``mvflow lineage`` asks about: ``model``, ``model.column``, ``db.source[.column]``."""
    models = {m: list(traced.models[m].columns) if m in traced.models else [] for m in manifest.models}
    sources = {s.id: [c.name for c in s.columns] for s in manifest.sources.values()}
    for names, node_of in ((models, model_id), (sources, source_id)):
        if text in names:
            return [ColumnRef(node_of(text), c) for c in names[text]]
        owner, _, column = text.rpartition(".")
        if owner in names:
            match = next((c for c in names[owner] if c.lower() == column.lower()), None)
            if match is None:
                raise SelectionError(Problem(f"{owner} has no column '{column}'", code="unknown-column",
                                             hint="known columns: " + (", ".join(names[owner]) or "none (its schema is unknown)")))
            return [ColumnRef(node_of(owner), match)]
    raise SelectionError(Problem(f"no model or source '{text}'", code="unknown-model",
                                 hint="write a model name, model.column, or database.source.column"))


def lineage_tree(traced: Lineage, ref: ColumnRef, downstream: bool = False) -> list[str]:
    """Indented lines of a column's lineage; a column already shown is not expanded again.

    >>> from sqlglot import parse_one
    >>> m = model_lineage(parse_one("select t.a + 1 as b from d.t as t"), {"d": {"t": {"a": "int"}}})
    >>> print("\\n".join(lineage_tree(Lineage({"m": m}), ColumnRef("model.m", "b"))))
    m.b
      <- d.t.a (expression)
    """
    step, arrow = (traced.children, "->") if downstream else (traced.parents, "<-")
    lines = [str(ref)]
    why = traced.models[node_name(ref.node)].unknown.get(ref.column) if ref.node.startswith("model.") and node_name(ref.node) in traced.models else None
    if why and not downstream:
        lines.append(f"  ? unknown: {why}")
    seen: set[ColumnRef] = set()
    stack = [(edge, 1) for edge in reversed(step(ref))]
    while stack:
        edge, depth = stack.pop()
        again = edge.ref in seen and bool(step(edge.ref))
        lines.append(f"{'  ' * depth}{arrow} {edge.ref} ({edge.transform}){' (shown above)' if again else ''}")
        if edge.ref not in seen:
            seen.add(edge.ref)
            stack.extend((e, depth + 1) for e in reversed(step(edge.ref)))
    return lines
