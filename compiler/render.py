"""Rendering: a model's Jinja text → SQL, with ``ref``, ``source``, ``config``, ``var``,
``env_var``, ``this`` and the project's macros.

A model is rendered twice from one compiled template: first to collect its ``config()``,
``ref()`` and ``source()`` calls (names are not known yet), then, once every model's relation
is known, to produce the final SQL with fully qualified table names.
"""

from __future__ import annotations

import ast
import difflib
import re
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import jinja2
from jinja2.loaders import split_template_path

from .errors import CompileError, Problem, ProjectError
from .files import MAX_MODEL_BYTES, read_text
from .dbt.context import ReturningMacro, TargetContext, dbt_globals
from .dbt.macros import INSTALL_HINT, Namespace, library_code, library_files
from .dbt.docs import load_docs
from .project import Project, Target, env_var
from .sandbox import UNSAFE_HINT, Sandbox, SecurityError, TooLarge


@dataclass(frozen=True)
class Call:
    """A ``ref('x')`` or ``source('db', 'x')`` call at a template line."""

    name: str
    line: int
    package: str | None = None  # ref('package', 'x'): the package named ("" the project itself)


@dataclass
class Rendered:
    sql: str
    config: dict[str, Any] = field(default_factory=dict)
    config_lines: dict[str, int] = field(default_factory=dict)
    refs: list[Call] = field(default_factory=list)
    sources: list[Call] = field(default_factory=list)
    warned: list[tuple[str, int]] = field(default_factory=list)  # exceptions.warn(): (message, line)
    logged: list[tuple[str, int]] = field(default_factory=list)  # log(message, info=True): (message, line)


class _RenderFailure(Exception):
    """Raised inside a template by mvflow's own functions (carries the template line)."""

    def __init__(self, message: str, hint: str, code: str):
        super().__init__(message)
        self.hint = hint
        self.code = code


Resolver = Callable[[str, int], str]
BUILTIN_TESTS = Path(__file__).parent / "data_tests" / "generic.sql"
#: a test argument evaluated as an expression (dbt's rule): ``to: ref('customers')``
_LOOKS_LIKE_CALL = re.compile(r"^\s*(env_var|ref|var|source|doc)\s*\(.+\)\s*$", re.S)


class Renderer:
    """Renders the models of one project. Not thread-safe: one render at a time."""

    def __init__(self, project: Project, bytecode_cache: jinja2.BytecodeCache | None = None, target: Target | None = None):
        self.project = project
        self.env = Sandbox(
            loader=_ProjectLoader(project.root),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=False,
            autoescape=False,
            bytecode_cache=bytecode_cache,
            extensions=["jinja2.ext.do"],
            limit=MAX_MODEL_BYTES,  # what a model, macro or string renders to, and any value it builds
        )
        self.incremental = False  # what is_incremental() answers in this render (an incremental model's second render)
        self.source_names: dict[str, str] = {}  # source('a', 'b') → the source's id, where they differ (dbt sources)
        self._current: Rendered | None = None
        self._resolve_ref: Resolver | None = None
        self._resolve_source: Callable[[str, str, int], str] | None = None
        self._this = ""
        self._model: str | None = None  # template name of the model being rendered
        self._scope: str | None = None  # the file whose strings are rendered (``scope``): a package's sees its vars
        self.env.globals.update(
            ref=self._ref,
            source=self._source,
            config=self._config,
            var=self._var,
            env_var=_env_var,
            this=_This(self),
            target=TargetContext.of(target, project),
            is_incremental=lambda: self.incremental,
            doc=load_docs(project),
        )
        self.namespaces: dict[str, dict[str, Any]] = {}  # a dbt project: package name → its macros (dispatch's search)
        if project.dialect == "dbt":
            self.env.macro_class = ReturningMacro
            self.env.globals.update(dbt_globals(self.env, project.flags, self._dispatch_search, self._warn, self._log))
            library = self._load_library()
            self.env.globals.update(library, dbt=Namespace("dbt", library, INSTALL_HINT))
            self.namespaces["dbt"] = library
            self._load_packages()
        self.macros = self._load_macros()
        self.namespaces[project.name] = self.macros

    # -- the functions models call -------------------------------------------------------
    def _ref(self, name: str, *extra: str) -> str:
        package = None
        if len(extra) == 1 and isinstance(name, str) and self.project.dialect == "dbt":  # dbt's ref('package', 'model')
            package, name = name, extra[0]
            known = [self.project.name, *(p.name for p in self.project.packages)]
            if package not in known:
                raise _RenderFailure(f"ref('{package}', '{name}'): no package '{package}' is installed",
                                     f"name one of {', '.join(known)}, or write ref('{name}')", "bad-ref")
        if len(extra) > (self.project.dialect == "dbt") or not isinstance(name, str):
            raise _RenderFailure("ref() takes one model name", "write {{ ref('model_name') }}", "bad-ref")
        line = _template_line(self._model)
        assert self._current is not None
        self._current.refs.append(Call(name, line, None if package is None else "" if package == self.project.name else package))
        return self._resolve_ref(name, line) if self._resolve_ref else name

    def _source(self, database: str, name: str | None = None) -> str:
        if name is None:
            raise _RenderFailure("source() takes a database and a table name", "write {{ source('stage', 'offers') }}", "bad-source")
        line = _template_line(self._model)
        assert self._current is not None
        self._current.sources.append(Call(self.source_names.get(f"{database}.{name}", f"{database}.{name}"), line))
        return self._resolve_source(database, name, line) if self._resolve_source else f"{database}.{name}"

    def _config(self, *args: Any, **kwargs: Any) -> str:
        if args:
            raise _RenderFailure("config() takes only named options", "write {{ config(materialized='table') }}", "bad-config")
        assert self._current is not None
        line = _template_line(self._model)
        for key, value in kwargs.items():
            if key in self._current.config and self._current.config[key] != value:  # dbt: the last call wins, silently
                raise _RenderFailure(f"config() sets {key}={value!r} here, and {key}={self._current.config[key]!r} at line "
                                     f"{self._current.config_lines[key]}", f"set {key} once: in one config() call", "bad-config")
            self._current.config[key] = value
            self._current.config_lines[key] = line
        return ""

    def _warn(self, message: Any, node: Any = None) -> str:
        """dbt's ``exceptions.warn``: a compile warning at the calling line of the model."""
        if self._current is not None:
            self._current.warned.append((str(message), _template_line(self._model)))
        return ""

    def _log(self, message: Any, info: bool = False) -> str:
        """dbt's ``log``: with ``info=True`` a line at compile (dbt prints it on the console; without,
        dbt writes it to its log file only, which mvflow does not keep)."""
        if info and self._current is not None:
            self._current.logged.append((str(message), _template_line(self._model)))
        return ""

    def _var(self, name: str, default: Any = None) -> Any:
        layers = self.project.var_layers(self._model or self._scope)
        found = next((layer for layer in layers if name in layer), None)
        if found is not None:
            return found[name]
        if default is not None:
            return default
        close = difflib.get_close_matches(name, [n for layer in layers for n in layer], n=1)
        raise _RenderFailure(
            f"var '{name}' is not defined",
            (f"did you mean '{close[0]}'? Or " if close else "")
            + f"add it under 'vars:' in {self.project.settings_file} or pass a default: var('name', default)",
            "undefined-var",
        )

    # -- rendering ----------------------------------------------------------------------
    def template(self, path: Path) -> jinja2.Template:
        display = self.project.relative(path)
        try:
            return self.env.get_template(display)
        except jinja2.TemplateSyntaxError as exc:
            raise CompileError(
                Problem(f"Jinja syntax error: {exc.message}", display, exc.lineno,
                        hint="check the {{ }} / {% %} tags near this line", code="jinja-syntax")
            ) from exc
        except SecurityError as exc:  # the file is a link out of the project (the loader's check)
            raise CompileError(Problem(f"unsafe template: {exc}", display, 1, hint=UNSAFE_HINT, code="unsafe-template")) from exc

    def render(
        self,
        template: jinja2.Template,
        this: str,
        resolve_ref: Resolver | None = None,
        resolve_source: Callable[[str, str, int], str] | None = None,
    ) -> Rendered:
        """Render one model. Without resolvers, ref/source return placeholder names."""
        with self._rendering(template.name, this, resolve_ref, resolve_source) as result:
            result.sql = template.render()  # stopped as soon as it passes MAX_MODEL_BYTES (sandbox.py)
        return result

    @contextmanager
    def scope(self, display: str) -> Iterator[None]:
        """Render strings as the file ``display`` does: a package's file sees its package's vars."""
        saved, self._scope = self._scope, display
        try:
            yield
        finally:
            self._scope = saved

    def render_value(self, value: Any, where: tuple[str, int], display: str | None = None) -> Any:
        """A dbt_project.yml config value with Jinja, rendered to a value as dbt renders it (its
        native mode): ``"{{ var('x', false) }}"`` is ``False``, ``"{{ 3 }}"`` is ``3``; lists and
        mappings item by item.

        >>> import tempfile; from compiler.project import Project
        >>> r = Renderer(Project(Path(tempfile.mkdtemp()), "p", "1", (), (), (), "target", {"on": True}, {}, {}, "local"))
        >>> r.render_value(["{{ var('on') }}", "{{ 1 + 2 }}", "x {{ 'y' }}", {"k": "{{ none }}"}], ("p.yml", 1))
        [True, 3, 'x y', {'k': None}]
        """
        if display is not None:
            with self.scope(display):
                return self.render_value(value, where)
        if isinstance(value, str) and ("{{" in value or "{%" in value):
            text = self.render_string(value, where=where)
            try:
                return ast.literal_eval(text.strip())
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return text
        if isinstance(value, list):
            return [self.render_value(item, where) for item in value]
        if isinstance(value, dict):
            return {key: self.render_value(item, where) for key, item in value.items()}
        return value

    def render_string(self, text: str, this: str = "", where: tuple[str, int] | None = None) -> str:
        """A config value or description with Jinja (a hook's ``{{ this }}``, ``{{ doc('x') }}``);
        errors point at ``where`` (file, line) when given."""
        if "{" not in text:
            return text
        try:
            with self._rendering(None, this, None, None):
                return self.env.from_string(text).render()
        except CompileError as exc:
            if where is None:
                raise
            raise CompileError([replace(p, path=where[0], line=where[1]) if not p.path else p for p in exc.problems]) from exc

    def schema_name(self, custom: str | None, default: str, node: "Node | None" = None) -> str:
        """A node's schema: the project's ``generate_schema_name`` macro when it has one (given the
        node as dbt gives it), else dbt's rule in a dbt project (``<target schema>_<custom>``), else
        the custom schema."""
        macro = self.macros.get("generate_schema_name")
        if macro is not None:
            with self._rendering(None, "", None, None):
                return str(macro(custom, node or Node(""))).strip()
        if custom is None or str(custom).strip() == "":
            return default
        return f"{default}_{str(custom).strip()}" if self.project.dialect == "dbt" else str(custom).strip()

    def call_macro(self, macro: Any, kwargs: dict[str, Any], this: str, resolve_ref: Resolver,
                   resolve_source: Callable[[str, str, int], str], globals_: dict[str, Any] | None = None) -> Rendered:
        """Call ``macro`` (a generic test: ``test_unique``, or a package's) as a model would; string
        arguments that look like ``ref(...)``/``source(...)``/``var(...)`` calls are evaluated, other
        strings rendered as templates (as dbt does with a test's arguments)."""
        extra = globals_ or {}
        saved = {key: self.env.globals.get(key) for key in extra}
        self.env.globals.update(extra)
        try:
            with self._rendering(None, this, resolve_ref, resolve_source) as result:
                arguments = {key: self._argument(value) for key, value in kwargs.items()}
                result.sql = str(macro(**arguments))
        finally:
            for key, value in saved.items():
                if value is None:
                    self.env.globals.pop(key, None)
                else:
                    self.env.globals[key] = value
        return result

    def _argument(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self._argument(v) for v in value]
        if not isinstance(value, str) or "(" not in value and "{" not in value:
            return value
        text = "{{ " + value + " }}" if _LOOKS_LIKE_CALL.match(value) else value
        return self.env.from_string(text).render()

    @contextmanager
    def _rendering(self, template_name: str | None, this: str, resolve_ref: Resolver | None,
                   resolve_source: Callable[[str, str, int], str] | None) -> Iterator[Rendered]:
        """One render: the calls it makes are collected into the Rendered it yields; any failure is
        the user's, mapped to the template's file and line."""
        self._current = Rendered(sql="")
        self._resolve_ref, self._resolve_source, self._this = resolve_ref, resolve_source, this
        self._model = template_name
        package = self.project.package_of(template_name)
        own = self.namespaces.get(package.name, {}) if package else {}
        shadowed = self._shadow(own)
        try:
            yield self._current
        except CompileError:
            raise
        except Exception as exc:  # noqa: BLE001 - any template failure is the user's
            raise _template_error(exc, template_name, self.project.root) from exc
        finally:
            self._current, self._model = None, None
            for name in own:
                self.env.globals.pop(name, None)
            self.env.globals.update(shadowed)

    def _shadow(self, macros: Mapping[str, Any]) -> dict[str, Any]:
        """Put a package's macros over the project's while one of its files renders (dbt looks up a
        node's own package first, for the macros it calls too); the names they replace, to put back."""
        shadowed = {name: self.env.globals[name] for name in macros if name in self.env.globals}
        self.env.globals.update(macros)
        return shadowed

    def _load_library(self) -> dict[str, Any]:
        """dbt's macro library (``compiler.dbt.macros``), under the project's own macros."""
        macros: dict[str, Any] = {}
        for path in library_files():
            template = self.env.template_class.from_code(self.env, library_code(self.env, path), self.env.globals)
            module = template.make_module(vars=self.env.globals, shared=True)
            macros.update({name: getattr(module, name) for name in dir(module) if not name.startswith("_")})
        return macros

    def _load_packages(self) -> None:
        """The installed dbt packages (``compiler.dbt.packages``): each one's macros and generic
        tests under its name (``dbt_utils.star``), as dbt offers them to the project's models: a
        package's macro calls another by its name too (``dbt_utils.x``), but while one of the
        package's own files renders its macros are found by their names alone (``_rendering``)."""
        for package in self.project.packages:
            macros: dict[str, Any] = {}
            for path in package.macro_files():
                try:
                    module = self.template(path).make_module(vars=self.env.globals, shared=True)
                except CompileError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a package's template failure, at its file and line
                    raise _template_error(exc, self.project.relative(path), self.project.root) from exc
                macros.update({name: getattr(module, name) for name in dir(module) if not name.startswith("_")})
            self.namespaces[package.name] = macros
            self.env.globals[package.name] = Namespace(package.name, macros)

    def _dispatch_search(self, namespace: str | None) -> list[Mapping[str, Any]]:
        """Where ``adapter.dispatch(name, namespace)`` looks, in order (dbt's rule): the project's
        ``dispatch:`` search order for the namespace; else the project, then the package; else
        every name the templates see (the project's macros over dbt's library)."""
        order = self.project.dispatch.get(namespace or "")
        if order:
            return [self.namespaces[name] for name in order if name in self.namespaces]
        if namespace and namespace not in ("dbt", self.project.name) and namespace in self.namespaces:
            return [self.namespaces.get(self.project.name, {}), self.namespaces[namespace]]
        return [self.env.globals]

    def _load_macros(self) -> dict[str, Any]:
        """The project's macros (and generic tests) over the built-in generic tests, which a
        project may replace by defining its own."""
        builtin = self.env.from_string(_test_blocks_as_macros(BUILTIN_TESTS.read_text()))
        module = builtin.make_module(vars=self.env.globals, shared=True)
        self.env.globals.update({n: getattr(module, n) for n in dir(module) if n.startswith("test_")})
        macros: dict[str, Any] = {}
        where: dict[str, str] = {}
        problems = []
        for path in self.project.files("macros", (".sql", ".jinja")) + self.project.generic_test_files():
            display = self.project.relative(path)
            try:
                # the module reads names from env.globals itself (shared, not a copy), so a
                # macro can call macros of files loaded after its own
                template = self.template(path)
                module = template.make_module(vars=self.env.globals, shared=True)
            except CompileError as exc:
                problems += exc.problems
                continue
            except Exception as exc:  # noqa: BLE001
                problems += _template_error(exc, display, self.project.root).problems
                continue
            for name in sorted(n for n in dir(module) if not n.startswith("_")):
                line = _macro_line(template, getattr(module, name))
                if name in macros:
                    problems.append(Problem(f"macro '{name}' is defined twice (also at {where[name]})", display, line,
                                            hint="rename one of them", code="duplicate-macro"))
                macros[name] = getattr(module, name)
                where[name] = f"{display}:{line}" if line else display
        if problems:
            raise CompileError(problems)
        self.env.globals.update(macros)
        return macros


def _macro_line(template: jinja2.Template, value: Any) -> int | None:
    """The line of ``template`` where the macro ``value`` is defined (None if it is not a macro)."""
    code = getattr(getattr(value, "_func", None), "__code__", None)
    return template.get_corresponding_lineno(code.co_firstlineno) if code is not None else None


@dataclass(frozen=True)
class Node:
    """What a ``generate_schema_name`` macro reads of the node, with dbt's field names: a model,
    seed or test (``node.resource_type``), its name, ``fqn``, file and config."""

    name: str
    resource_type: str = "model"
    package_name: str = ""
    original_file_path: str = ""
    path: str = ""  # under the model or seed folder
    fqn: tuple[str, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()

    @property
    def unique_id(self) -> str:
        return f"{self.resource_type}.{self.package_name}.{self.name}"

    @property
    def alias(self) -> str:
        return str(self.config.get("alias") or self.name)


class _ProjectLoader(jinja2.BaseLoader):
    """Templates by project-relative path, read with ``files.read_text``: not UTF-8 or too large
    is an error naming the file, and a byte-order mark does not shift line and column numbers."""

    def __init__(self, root: Path):
        self.root = root

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        path = self.root.joinpath(*split_template_path(template))  # no '..': TemplateNotFound
        if not path.resolve().is_relative_to(self.root):  # a symbolic link out of the project
            raise SecurityError(f"template '{template}' leads outside the project (to {path.resolve()})")
        if not path.is_file():
            raise jinja2.TemplateNotFound(template)
        try:
            text = read_text(path, template, MAX_MODEL_BYTES)
        except ProjectError as exc:
            raise CompileError(exc.problems) from exc
        mtime = path.stat().st_mtime
        return _snapshot_blocks_as_ifs(_test_blocks_as_macros(text)), str(path), lambda: path.is_file() and path.stat().st_mtime == mtime


def _test_blocks_as_macros(text: str) -> str:
    """dbt's ``{% test name(args) %}…{% endtest %}`` is the macro ``test_name``: rewritten in place
    (line numbers unchanged).

    >>> _test_blocks_as_macros("{%- test positive(model, column_name) -%} x {%- endtest %}")
    '{%- macro test_positive(model, column_name) -%} x {%- endmacro %}'
    """
    text = _TEST_BLOCK.sub(lambda m: f"{m.group(1)} macro test_{m.group(2)}(", text)
    return _END_TEST.sub(lambda m: f"{m.group(1)} endmacro {m.group(2)}%}}", text)


_TEST_BLOCK = re.compile(r"(\{%-?)\s*test\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_END_TEST = re.compile(r"(\{%-?)\s*endtest\s*(-?)%\}")


def snapshot_names(text: str) -> list[str]:
    """The names of dbt's ``{% snapshot name %}`` blocks in a file, in order.

    >>> snapshot_names("{% snapshot a %} select 1 {% endsnapshot %} {%- snapshot b -%} x {% endsnapshot %}")
    ['a', 'b']
    """
    return [m.group(2) for m in _SNAPSHOT_BLOCK.finditer(text)]


def _snapshot_blocks_as_ifs(text: str) -> str:
    """Each ``{% snapshot name %}…{% endsnapshot %}`` renders only when the snapshot rendered is
    ``name`` (``SnapshotBlock``): rewritten in place (line numbers unchanged).

    >>> _snapshot_blocks_as_ifs("{% snapshot orders %} select 1 {%- endsnapshot %}")
    "{% if mvflow_snapshot == 'orders' %} select 1 {%- endif %}"
    """
    text = _SNAPSHOT_BLOCK.sub(lambda m: f"{m.group(1)} if mvflow_snapshot == '{m.group(2)}' {m.group(3)}", text)
    return _END_SNAPSHOT.sub(lambda m: f"{m.group(1)} endif {m.group(2)}", text)


_SNAPSHOT_BLOCK = re.compile(r"(\{%-?)\s*snapshot\s+([A-Za-z_][A-Za-z0-9_]*)\s*(-?%\})")
_END_SNAPSHOT = re.compile(r"(\{%-?)\s*endsnapshot\s*(-?%\})")


@dataclass(frozen=True)
class SnapshotBlock:
    """One ``{% snapshot %}`` block of a file, rendered as a model's template is."""

    template: jinja2.Template
    snapshot: str

    @property
    def name(self) -> str | None:
        return self.template.name

    def render(self) -> str:
        return self.template.render(mvflow_snapshot=self.snapshot)


@dataclass(frozen=True)
class YamlSnapshot:
    """A YAML snapshot's ``select * from {{ relation }}``, named after its YAML file."""

    template: jinja2.Template
    name: str

    def render(self) -> str:
        return self.template.render()


class _This:
    """``{{ this }}``: the model's own relation."""

    def __init__(self, renderer: Renderer):
        self._renderer = renderer

    def __str__(self) -> str:
        return self._renderer._this

    __html__ = __str__

    @property
    def schema(self) -> str:
        return str(self).partition(".")[0]

    @property
    def name(self) -> str:
        return str(self).partition(".")[2]

    identifier = name


def _env_var(name: str, default: str | None = None) -> str:
    try:
        return env_var(name, default)
    except jinja2.UndefinedError as exc:
        raise _RenderFailure(str(exc), f"set {name} in the environment or give a default: env_var('{name}', 'default')",
                             "undefined-env-var") from exc


def _template_line(name: str | None = None) -> int:
    """The line in template ``name`` (else in the innermost template) that is running now (0 if none)."""
    frame = sys._getframe(1)
    innermost = 0
    while frame is not None:
        template = frame.f_globals.get("__jinja_template__")
        if template is not None:
            line = template.get_corresponding_lineno(frame.f_lineno)
            if name is None or template.name == name:
                return line
            innermost = innermost or line
        frame = frame.f_back
    return innermost


def _template_error(exc: Exception, name: str | None, root: Path) -> CompileError:
    """Map any exception raised while rendering to the template file and line.

    When the error is inside a macro, it is reported at the macro's line and the message
    says which line of ``name`` called it.
    """
    frames = [
        (_display(entry.filename, root), entry.lineno)
        for entry in traceback.extract_tb(exc.__traceback__)
        if entry.filename and entry.filename.endswith((".sql", ".jinja")) and entry.lineno
    ]
    outside = frames and Path(frames[-1][0]).is_absolute()  # in a macro of dbt's library: reported where the project calls it
    library = f" (in dbt's macro library, {Path(frames[-1][0]).name}:{frames[-1][1]})" if outside else ""
    frames = [frame for frame in frames if not Path(frame[0]).is_absolute()]
    path, line = frames[-1] if frames else (name, None)
    called = next((f"{p}:{n}" for p, n in frames if p == name), None) if path != name else None
    where = (f" (in a macro called from {called})" if called else "") + library
    if isinstance(exc, _RenderFailure):
        return CompileError(Problem(str(exc) + where, path, line, hint=exc.hint, code=exc.code))
    if isinstance(exc, TooLarge):
        return CompileError(Problem(f"{exc}{where}", path, exc.line or line or 1, hint=exc.hint, code="too-large"))
    if isinstance(exc, SecurityError):
        return CompileError(Problem(f"unsafe template: {exc}{where}", path, line, hint=UNSAFE_HINT, code="unsafe-template"))
    if isinstance(exc, jinja2.UndefinedError):
        hint = getattr(exc, "hint", "fix the spelling; project variables are read with var('name')")
        if not library_files() and not hasattr(exc, "hint"):
            hint += f"; a dbt macro (dateadd, type_string …): {INSTALL_HINT}"
        return CompileError(Problem(f"undefined in template: {exc.message}{where}", path, line, hint=hint, code="jinja-undefined"))
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return CompileError(Problem(f"Jinja syntax error: {exc.message}", exc.name or path, exc.lineno,
                                    hint="check the {{ }} / {% %} tags near this line", code="jinja-syntax"))
    return CompileError(Problem(f"error while rendering: {type(exc).__name__}: {exc}{where}", path, line,
                                hint="fix the Jinja expression on this line", code="jinja-error"))


def _display(filename: str, root: Path) -> str:
    """A template's file as a project-relative path when it is inside the project."""
    try:
        return Path(filename).resolve().relative_to(root).as_posix()
    except ValueError:
        return filename
