"""A declared test → the SELECT of its failing rows, with real table names.

A generic test is its macro (``test_<name>``) called with ``model`` (the tested relation, or
``(SELECT * FROM it WHERE <where>)`` with a ``where`` config), ``column_name`` and its arguments;
a singular test is its file rendered like a model. Their configs merge as dbt's do: the test's
own ``config()`` < the project's ``tests:`` defaults < the YAML entry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Collection, Mapping

from ..errors import CompileError, Problem, ProblemList, did_you_mean
from ..parse import parse_select
from ..paths import MAX_NAME, name_problem
from ..render import Node
from . import scope
from .declare import TestConfig, TestDeclaration, declared_tests, test_config
from .execute import TEST_KIND, TestKind
from .unit import unit_tests

if TYPE_CHECKING:
    from ..manifest import Manifest, Model
    from ..project import Project
    from ..render import Renderer, Rendered
    from ..sources import Source
    from ..yamlfile import LineDict


@dataclass
class DataTest:
    """A compiled test, runnable like a model (``kind``, ``relation``, ``path``)."""

    declaration: TestDeclaration
    config: TestConfig
    sql: str  # the SELECT of the failing rows
    depends_on: tuple[str, ...]  # models and seeds it reads; a generic test's tested model first
    sources: tuple[str, ...] = ()
    raw_sql: str = ""  # what the user wrote (a singular test's file), where run-time errors are looked up
    kind: ClassVar[TestKind] = TEST_KIND
    ast: ClassVar[None] = None

    @property
    def name(self) -> str:
        return self.declaration.name

    @property
    def path(self) -> str:
        return self.declaration.path

    @property
    def relation(self) -> str:
        """Where ``store_failures`` keeps the failing rows."""
        return f"{self.config.schema}.{self.config.alias or self.name}".lower()

    @property
    def declared_line(self) -> int | None:
        """Where a run-time error of a generic test points: its line in the YAML."""
        return None if self.declaration.is_singular else self.declaration.line

    @property
    def depends_on_sources(self) -> list[str]:
        return list(self.sources)

    @property
    def target_stem(self) -> str:
        """Its files under ``target/compiled/`` and ``target/run/``: named after the test, or after its
        alias when the name is too long for a file name (dbt's long test names: the short one, with an md5)."""
        return f"tests/{self.config.alias if len(self.name) > MAX_NAME and self.config.alias else self.name}"

    @property
    def attached_to(self) -> str | None:
        """The model whose descendants wait for this test in ``mvflow build`` (None: singular)."""
        return self.declaration.attached_to


def place_scopes(manifest: "Manifest") -> None:
    """Write the batch predicate into batch-scoped tests, now that the models' plans can be made."""
    for test in manifest.tests.values():
        if test.config.scope == "batch":
            model = manifest.models[test.attached_to]
            try:
                test.sql = test.sql.replace(scope.PLACEHOLDER, scope.predicate(manifest, model))
            except CompileError as exc:
                raise CompileError([replace(p, path=test.path, line=test.declaration.line) for p in exc.problems]) from exc


def compile_tests(project: "Project", renderer: "Renderer", models: Mapping[str, "Model"], sources: Mapping[str, "Source"],
                  docs: Mapping[str, "LineDict"], templates: Mapping[str, Any] | None = None,
                  set_aside: Collection[str] = frozenset()) -> dict[str, DataTest]:
    """Every enabled test of the project (a dbt project's unit tests too: ``unit.py``, which render
    the models' ``templates``), but those of models ``set_aside`` by a narrowed compile; problems
    are raised together."""
    problems = ProblemList()
    declared = [declared_tests(entry, entry.path, name) for name, entry in docs.items() if name in models]
    declared += [declared_tests(s.tests, s.path, s.id, tuple(s.ref_name.split(".", 1)))
                 for s in sources.values() if s.tests is not None and s.ref_name]
    declarations: list[TestDeclaration] = [test for found, _ in declared for test in found]
    for problem in (p for _, bad in declared for p in bad):
        problems.add(problem)
    tests: dict[str, DataTest] = {}
    compiler = _Compiler(project, renderer, models, sources, set_aside)
    for declaration in declarations:
        compiler.add(tests, compiler.generic(declaration), problems)
    for path in project.singular_test_files():
        compiler.add(tests, compiler.singular(path), problems)
    if project.dialect == "dbt" and templates is not None:
        found, bad = unit_tests(project, renderer, models, sources, templates, set_aside)
        for test in found:
            compiler.add(tests, test, problems)
        for problem in bad:
            problems.add(problem)
    problems.raise_if_any()
    return dict(sorted(tests.items()))


@dataclass
class _Compiler:
    project: "Project"
    renderer: "Renderer"
    models: Mapping[str, "Model"]
    sources: Mapping[str, "Source"]
    set_aside: Collection[str] = frozenset()

    def add(self, tests: dict[str, DataTest], outcome: "DataTest | list[Problem] | None", problems: ProblemList) -> None:
        if isinstance(outcome, list):
            for problem in outcome:
                problems.add(problem)
            return
        if outcome is None:
            return
        stem = outcome.target_stem.removeprefix("tests/")
        bad_name = name_problem(stem, "test name" if stem == outcome.name else "test alias", outcome.path,
                                outcome.declaration.line, hint="rename the file with letters, digits and _ only"
                                if outcome.declaration.is_singular else "give the test a name of letters, digits and _ "
                                "only: '- not_null: {name: not_null_orders_id}'")
        if bad_name:
            problems.add(bad_name)
            return
        other = tests.get(outcome.name)
        if other is not None:
            problems.add(Problem(f"two tests are named '{outcome.name}' (also {other.path}:{other.declaration.line})",
                                 outcome.path, outcome.declaration.line, code="duplicate-test",
                                 hint="give one of them its own name: '- unique: {name: my_name}'"))
            return
        if outcome.name in self.models:
            problems.add(Problem(f"test '{outcome.name}' has the name of a model", outcome.path, outcome.declaration.line,
                                 code="duplicate-test", hint="give the test another name"))
            return
        tests[outcome.name] = outcome

    def generic(self, declaration: TestDeclaration) -> "DataTest | list[Problem] | None":
        where = (declaration.path, declaration.line)
        namespace, _, test = declaration.test_type.rpartition(".")
        macros = self.renderer.namespaces.get(namespace) if namespace else self.renderer.env.globals
        macro = f"test_{test}"
        if macros is None or macro not in macros:
            known = sorted(n[len("test_"):] for n in macros or () if n.startswith("test_"))
            hint = (f"no package '{namespace}' is installed: list it in packages.yml and run `mvflow deps`"
                    if macros is None else did_you_mean(test, known) or "tests here: " + ", ".join(known))
            return [Problem(f"unknown test '{declaration.test_type}'", *where, code="unknown-test", hint=hint)]
        target = self._relation(declaration.attached_to)
        settings = {**self._defaults(declaration.path), **declaration.config}
        config, problems = test_config(settings, *where)
        if problems:
            return problems
        if not config.enabled:
            return None
        if config.scope == "batch":
            kind = self.models[declaration.attached_to].kind.name if declaration.attached_to in self.models else "source"
            if kind not in scope.KINDS:
                return [Problem(f"test '{declaration.name}': scope: batch needs an mv or fact model, "
                                f"'{declaration.attached_to}' is a {kind}", *where, code="bad-test",
                                hint="remove scope: batch (tests read the whole table by default)")]
            target = scope.scoped(target)
        tested = f"(SELECT * FROM {target} WHERE {config.where}) AS mvflow_where" if config.where else target
        kwargs = {"model": tested, **({"column_name": declaration.column} if declaration.column else {}), **declaration.kwargs}
        try:
            rendered = self.renderer.call_macro(macros[macro], kwargs, this=target, resolve_ref=self._ref, resolve_source=self._source,
                                                globals_={"should_store_failures": lambda: config.store_failures})
        except CompileError as exc:
            return [Problem(f"test '{declaration.name}': {p.message} (at {p.path}:{p.line})" if p.path else
                            f"test '{declaration.name}': {p.message}", *where, hint=p.hint, code=p.code) for p in exc.problems]
        if rendered.config:  # config() inside the test's macro: defaults below the YAML's
            config, problems = test_config({**rendered.config, **settings}, *where)
            if problems:
                return problems
        return self._test(declaration, config, rendered, first=declaration.attached_to)

    def singular(self, path) -> "DataTest | list[Problem] | None":
        display = self.project.relative(path)
        declaration = TestDeclaration(path.stem, "singular", display, 1)
        try:
            rendered = self.renderer.render(self.renderer.template(path), this=path.stem, resolve_ref=self._ref,
                                            resolve_source=self._source)
        except CompileError as exc:
            return exc.problems
        config, problems = test_config({**self._defaults(display), **rendered.config}, display, 1)
        if problems:
            return problems
        if not config.enabled:
            return None
        try:  # one SELECT of the rows that fail: a DROP TABLE would run as it is
            parse_select(rendered.sql, display, "singular test")
        except CompileError as exc:
            return exc.problems
        return self._test(declaration, config, rendered, raw_sql=path.read_text(encoding="utf-8"))

    def _defaults(self, path: str) -> dict[str, Any]:
        """The project's ``tests:`` defaults for a test declared in ``path`` (folders as for models)."""
        roots = (*self.project.model_paths, *self.project.test_paths, *self.project.seed_paths)
        root = next((r.rstrip("/") for r in roots if path.startswith(r.rstrip("/") + "/")), None)
        under = path[len(root) + 1:] if root else path
        found = self.project.defaults_with_lines(under, "tests").items()
        if self.project.dialect != "dbt":
            return {key: value for key, (value, _) in found}
        return {key: self.renderer.render_value(value, (self.project.settings_file, line)) for key, (value, line) in found}

    def _test(self, declaration: TestDeclaration, config: TestConfig, rendered: "Rendered", first: str | None = None,
              raw_sql: str = "") -> "DataTest | list[Problem] | None":
        if any(call.name in self.set_aside for call in rendered.refs):
            return None
        problems = [self._unknown(call, declaration) for call in rendered.refs if call.name not in self.models]
        problems += [self._unknown(call, declaration, source=True) for call in rendered.sources if call.name not in self.sources]
        if problems:
            return problems
        if self.project.dialect == "dbt":  # dbt's audit schema: <target schema>_dbt_test__audit
            custom = config.schema if config.schema != TestConfig.schema else "dbt_test__audit"
            node = Node(declaration.name, "test", self.project.name, declaration.path, config={"schema": custom})
            config = replace(config, schema=self.renderer.schema_name(custom, self.renderer.env.globals["target"].schema, node))
        reads = ([first] if first in self.models else []) + [c.name for c in rendered.refs]
        sources = ([first] if first in self.sources else []) + [c.name for c in rendered.sources]
        return DataTest(declaration, config, rendered.sql.strip() + "\n", tuple(dict.fromkeys(reads)),
                        tuple(dict.fromkeys(sources)), raw_sql or rendered.sql)

    def _unknown(self, call, declaration: TestDeclaration, source: bool = False) -> Problem:
        line = call.line if declaration.is_singular else declaration.line
        if source:
            db, _, table = call.name.partition(".")
            return Problem(f"test '{declaration.name}': source('{db}', '{table}'): no such source", declaration.path, line,
                           code="unknown-source", hint="declare it in lineage/*.yml")
        return Problem(f"test '{declaration.name}': ref('{call.name}'): no such model or seed", declaration.path, line,
                       code="unknown-ref", hint=did_you_mean(call.name, self.models) or "check the name")

    def _relation(self, name: str | None) -> str:
        if name in self.models:
            return self.models[name].relation
        return self.sources[name].id if name in self.sources else str(name)

    def _ref(self, name: str, line: int) -> str:
        return self.models[name].relation if name in self.models else name

    def _source(self, database: str, table: str, line: int) -> str:
        return f"{database}.{table}"
