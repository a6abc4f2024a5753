"""The manifest: what compile produces and every later step reads — the models (and seeds) with
their rendered, parsed SQL, the sources, the data tests, a dbt project's exposures and the DAG (``compiler.compile`` builds it).

Nothing mutates a manifest after compile; values derived from it (an MV's plan) are cached on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import networkx as nx
from sqlglot import exp

from .cache import CompileCache, schema_index
from .graph import model_order
from .parse import parse_select, pretty
from .render import Call

if TYPE_CHECKING:
    from .data_tests import DataTest
    from .dbt.exposures import Exposure
    from .declared_keys import DeclaredKey
    from .errors import Problem
    from .kinds import Kind
    from .project import Project
    from .sources import Source

T = TypeVar("T")


@dataclass
class Model:
    name: str
    path: str  # project-relative file path
    kind: Kind
    config: dict[str, Any]
    config_lines: dict[str, int]
    schema: str
    relation: str
    tags: tuple[str, ...]
    description: str
    column_docs: dict[str, str]
    raw_sql: str
    checksum: str
    refs: list[Call] = field(default_factory=list)
    source_calls: list[Call] = field(default_factory=list)
    sql: str = ""
    columns: list[str] | None = None
    undeclared_tables: list[str] = field(default_factory=list)
    tables_read: list[tuple[str, int]] = field(default_factory=list)  # parse.table_references of the SELECT
    plain_columns: list[str] | None = None  # parse.plain_columns: output columns if the SELECT has no *
    column_doc_lines: dict[str, tuple[str, int]] = field(default_factory=dict)  # where each column is documented
    table_format: str = "parquet"  # delta | parquet: the target's, or the model's own config
    notes: list[Problem] = field(default_factory=list)  # warnings found while reading it (dbt settings not applied)
    meta: dict[str, Any] = field(default_factory=dict)  # dbt's meta (YAML and config): the docs site shows it
    column_meta: dict[str, dict[str, Any]] = field(default_factory=dict)  # dbt's meta of each documented column
    incremental_sql: str = ""  # an incremental model's SELECT with is_incremental() true (kinds/incremental.py)
    constraint_key: DeclaredKey | None = None  # dbt's constraints: primary_key in its YAML (declared_keys.py)
    owner: str = ""  # an mv lifted out of the mv ``owner`` (kinds/mv/lift.py): selected and run with it
    package: str = ""  # the installed dbt package whose file it is ("": the project's own)
    mv_query: exp.Query | None = field(default=None, repr=False, compare=False)  # an mv's SELECT reading its lifted mvs
    _ast: exp.Query | None = field(default=None, init=False, repr=False, compare=False)
    _parse_later: bool = field(default=False, init=False, repr=False, compare=False)
    _printed: tuple[exp.Query | None, str] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def ast(self) -> exp.Query | None:
        """The parsed SELECT. A model whose rendered SQL an earlier compile parsed (see cache.py)
        is parsed only when something asks for its tree."""
        if self._ast is None and self._parse_later:
            self._ast = parse_select(self.sql, self.path)
            if self._printed is not None and self._printed[0] is None:
                self._printed = (self._ast, self._printed[1])
        return self._ast

    @ast.setter
    def ast(self, value: exp.Query | None) -> None:
        self._ast, self._parse_later = value, False

    @property
    def parsed(self) -> bool:
        """Whether the SQL parsed (without parsing it now)."""
        return self._ast is not None or self._parse_later

    def parsed_before(self, printed: str) -> None:
        """The rendered SQL parsed in an earlier compile and printed as ``printed``: parse lazily."""
        self._ast, self._parse_later, self._printed = None, True, (None, printed)

    @property
    def select_sql(self) -> str:
        """The compiled SELECT as written to target/ and run, printed once per AST (printing
        copies the whole tree: it was most of compile's time). Nothing mutates ``ast`` after
        compile; derived queries work on copies."""
        if self._printed is None or self._printed[0] is not self._ast:
            self._printed = (self.ast, pretty(self.ast))
        return self._printed[1]

    @property
    def depends_on_models(self) -> list[str]:
        return sorted({c.name for c in self.refs})

    @property
    def depends_on_sources(self) -> list[str]:
        return sorted({c.name for c in self.source_calls})


@dataclass
class Manifest:
    project: Project
    target: str
    database: str
    sources: dict[str, Source]
    models: dict[str, Model]
    graph: nx.DiGraph
    warnings: list[Problem] = field(default_factory=list)
    cache: CompileCache | None = field(default=None, repr=False, compare=False)
    tests: dict[str, DataTest] = field(default_factory=dict)  # data tests by name
    exposures: list[Exposure] = field(default_factory=list)  # a dbt project's (dbt/exposures.py): docs only
    hooks: dict[str, list[str]] = field(default_factory=dict)  # on-run-start / on-run-end statements, rendered
    _derived: dict[tuple[str, str], tuple[Any, Any]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def derived(self, what: str, model: Model, compute: Callable[[], T]) -> T:
        """``compute()`` once per model (and AST) for values derived from the compiled manifest, e.g.
        an MV's plan: compile checks, ``target/`` files and ``manifest.json`` all read it. Nothing
        mutates a manifest after compile; a model given a new AST is derived again."""
        key = (what, model.name)
        hit = self._derived.get(key)
        if hit is None or hit[0] is not model.ast:
            hit = self._derived[key] = (model.ast, compute())
        return hit[1]

    def node(self, name: str) -> "Model | DataTest":
        """A model (or seed) or a data test by name: what ``mvflow build`` runs."""
        return self.models[name] if name in self.models else self.tests[name]

    def order(self) -> list[str]:
        return model_order(self.graph)

    def relation_of(self, name: str) -> str:
        """The table/view name a ref or source resolves to."""
        return self.models[name].relation if name in self.models else name

    def table_index(self) -> dict[str, list[tuple[str, str]]]:
        """Names a query may read a source or model by → its (db, table) in ``schema()`` (cache keys)."""
        tables: dict[str, dict[str, None]] = {}
        for source in self.sources.values():
            tables.setdefault(source.database, {})[source.name] = None
        for model in self.models.values():
            db, _, table = model.relation.partition(".")
            tables.setdefault(db, {})[table] = None
        return schema_index(tables)

    def schema(self) -> dict[str, dict[str, dict[str, str]]]:
        """sqlglot schema (db → table → column → type) of everything whose columns are known."""
        schema: dict[str, dict[str, dict[str, str]]] = {}
        for source in self.sources.values():
            if source.column_types():
                schema.setdefault(source.database, {})[source.name] = source.column_types()
        for model in self.models.values():
            if model.columns:
                db, _, table = model.relation.partition(".")
                schema.setdefault(db, {})[table] = {c: "string" for c in model.columns}
        return schema
