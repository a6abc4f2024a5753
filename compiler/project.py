"""Project loading: project.yml, its targets, per-folder model defaults, and the project's files."""

from __future__ import annotations

import difflib
import functools
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import jinja2

from .errors import Problem, ProjectError, RunError
from .files import MAX_MODEL_BYTES
from .publish.stores import StoreSettings, store_problems
from .sandbox import UNSAFE_HINT, Sandbox, SecurityError, TooLarge
from .yamlfile import LineDict, check_keys, load_yaml

if TYPE_CHECKING:
    from .dbt.packages import Package

PROJECT_FILE = "project.yml"
_PROJECT_KEYS = {"name", "version", "paths", "vars", "models", "seeds", "snapshots", "tests", "data_tests", "targets",
                 "default_target", "state"}
_PATH_KEYS = {"models", "macros", "lineage", "target", "seeds", "tests", "snapshots"}
_TARGET_KEYS = {"spark", "state", "table_format", "metastore", "stores"}
TABLE_FORMATS = ("delta", "parquet")
_SPARK_KEYS = {"master", "remote", "app_name", "warehouse_dir", "metastore_dir", "database", "log_level", "conf"}
_STATE_KEYS = {"type", "path", "dsn"}
_METASTORE_KEYS = {"type", "dsn"}
METASTORE_TYPES = ("derby", "postgres")
_STATE_TABLE_KEYS = {"offsets_table", "step_log_table", "catalog_table"}

DEFAULT_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.session.timeZone": "UTC",
    # Parquet keeps no min/max statistics for INT96 (Spark's default) timestamps: position
    # ranges on a timestamp could not skip row groups written before the last commit.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Every batch plans the same few dozen statements again, and Spark's cache of their generated
    # classes (100 by default) evicted them within a batch: ~400 compiled per batch instead of ~126,
    # 21% more wall (bench/results/codegen_cache.md). Static: a Connect server keeps its own.
    "spark.sql.codegen.cache.maxEntries": "2000",
}


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[*]"
    app_name: str = "mvflow"
    warehouse_dir: Path | None = None
    metastore_dir: Path | None = None
    database: str = "default"
    log_level: str = "ERROR"
    conf: Mapping[str, str] = field(default_factory=dict)
    remote: str | None = None  # sc://host:port: a Spark Connect server instead of a driver in this process


@dataclass(frozen=True)
class StateSettings:
    type: str = "sqlite"
    path: Path | None = None
    dsn: str | None = None  # type postgres: postgresql://user@host:port/database
    offsets_table: str = "offsets"
    step_log_table: str = "step_log"
    catalog_table: str = "catalog"


@dataclass(frozen=True)
class MetastoreSettings:
    """Where the target's Hive metastore lives: ``derby`` (embedded, under ``spark.metastore_dir``: one
    process at a time) or ``postgres`` (``dsn``: one catalog that many processes share; compiler/metastore.py)."""
    type: str = "derby"
    dsn: str | None = None  # type postgres: postgresql://user@host:port/database


@dataclass(frozen=True)
class Target:
    name: str
    spark: SparkSettings
    state: StateSettings
    table_format: str = "parquet"  # how models store their tables (a model's config may override it)
    metastore: MetastoreSettings = field(default_factory=MetastoreSettings)
    stores: Mapping[str, StoreSettings] = field(default_factory=dict)  # serving stores MVs publish to (compiler.publish)


@dataclass(frozen=True)
class Project:
    root: Path
    name: str
    version: str
    model_paths: tuple[str, ...]
    macro_paths: tuple[str, ...]
    lineage_paths: tuple[str, ...]
    target_path: str
    vars: Mapping[str, Any]
    model_defaults: Mapping[str, Any]
    targets: Mapping[str, Target]
    default_target: str
    seed_paths: tuple[str, ...] = ("seeds",)  # seeds/**/*.csv
    seed_defaults: Mapping[str, Any] = field(default_factory=dict)  # the ``seeds:`` block, like ``models:``
    snapshot_paths: tuple[str, ...] = ("snapshots",)  # {% snapshot %} blocks (*.sql) and YAML snapshots
    snapshot_defaults: Mapping[str, Any] = field(default_factory=dict)  # the ``snapshots:`` block
    test_defaults: Mapping[str, Any] = field(default_factory=dict)  # the ``tests:`` (``data_tests:``) block
    test_paths: tuple[str, ...] = ("tests",)  # singular data tests; generic ones under <test path>/generic/
    dialect: str = "mvflow"  # "dbt": read from dbt_project.yml, named and configured as dbt does (compiler/dbt/)
    on_run_start: tuple[str, ...] = ()  # statements run before and after run/seed/test/build (dbt's hooks)
    on_run_end: tuple[str, ...] = ()
    docs_paths: tuple[str, ...] = ()  # more folders with {% docs %} blocks (*.md), besides the model folders
    flags: Mapping[str, Any] = field(default_factory=dict)  # dbt's behavior flags (dbt_project.yml ``flags:``)
    dispatch: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # dbt's ``dispatch:``: namespace → search order
    unusable_targets: Mapping[str, Problem] = field(default_factory=dict)  # a profile output mvflow cannot run
    packages: tuple["Package", ...] = ()  # a dbt project's installed packages, whose files it builds too
    cli_vars: Mapping[str, Any] = field(default_factory=dict)  # --vars: over every var, a package's too
    targets_line: int = 0  # line of 'targets:' in project.yml, for errors
    model_paths_line: int = 0  # line of 'paths: models:' (or of what holds it), for errors


    @property
    def settings_file(self) -> str:
        """The file that holds the project's settings: ``project.yml``, or a dbt project's ``dbt_project.yml``."""
        return "dbt_project.yml" if self.dialect == "dbt" else PROJECT_FILE
    @property
    def target_dir(self) -> Path:
        return self.root / self.target_path

    def target(self, name: str | None = None) -> Target:
        if name is not None and not name.strip():  # --target '': a script's unset variable, not the default
            raise ProjectError(Problem("--target is empty", "--target", code="unknown-target",
                                       hint=f"name a target ({', '.join(sorted(self.targets))}), or leave --target out "
                                            f"for the default target '{self.default_target}'"))
        name = name or self.default_target
        if name in self.unusable_targets:
            raise ProjectError(self.unusable_targets[name])
        if name not in self.targets:
            close = difflib.get_close_matches(name, list(self.targets), n=1)
            known = "targets defined: " + ", ".join(sorted(self.targets))
            raise ProjectError(
                Problem(
                    f"unknown target '{name}'",
                    PROJECT_FILE,
                    self.targets_line or None,
                    hint=(f"did you mean '{close[0]}'? " if close else "") + known,
                    code="unknown-target",
                )
            )
        return self.targets[name]

    def missing_model_paths(self) -> list[Problem]:
        """A model folder that does not exist: a typo in ``paths.models`` compiles nothing at all."""
        folders = sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        problems = []
        for folder in self.model_paths:
            if not (self.root / folder).is_dir():
                close = difflib.get_close_matches(folder, folders, n=1)
                hint = (f"did you mean '{close[0]}'? " if close else "") + "models are the .sql files under the " \
                    "folders paths.models names (default: models)"
                problems.append(Problem(f"paths.models: the project has no folder '{folder}'", PROJECT_FILE,
                                        self.model_paths_line or 1, hint=hint, code="no-models"))
        return problems

    def files(self, kind: str, suffixes: tuple[str, ...]) -> list[Path]:
        """Files under the model/macro/lineage paths, sorted, so that compile is deterministic. Symbolic
        links that stay inside the project are followed; what cannot be read is ``file_problems``'."""
        roots = {"models": self.model_paths + self._package_paths("models"), "macros": self.macro_paths,
                 "lineage": self.lineage_paths, "seeds": self.seed_paths + self._package_paths("seeds"),
                 "tests": self.test_paths, "docs": self.model_paths + self._package_paths("models") + self.docs_paths,
                 "snapshots": self.snapshot_paths}[kind]
        found: set[Path] = set()
        for root in roots:
            found.update(p for p in _walk(self.root, self.root / root)[0] if p.suffix in suffixes)
        return sorted(found)

    def file_problems(self) -> list[Problem]:
        """What ``files`` cannot read under the project's folders, which would silently leave out a model
        (or a macro, a source…): a broken symbolic link, a link leading out of the project, a named pipe
        or another special file named like a project file, a folder that cannot be read."""
        roots = dict.fromkeys(self.model_paths + self.macro_paths + self.lineage_paths + self.seed_paths + self.test_paths
                              + self.docs_paths + self.snapshot_paths + self._package_paths("models")
                              + self._package_paths("seeds"))
        problems: dict[Problem, None] = {}
        for root in roots:
            problems.update(dict.fromkeys(_walk(self.root, self.root / root)[1]))
        return list(problems)

    def _package_paths(self, kind: str) -> tuple[str, ...]:
        return tuple(path for package in self.packages for path in package.paths(kind))

    def package_of(self, display: str | None) -> "Package | None":
        """The installed package that holds the project-relative file ``display`` (None: the project's own)."""
        return next((p for p in self.packages if display and display.startswith(p.folder + "/")), None)

    def under_root(self, display: str) -> str:
        """A file's path under its model, seed or snapshot folder: ``models/staging/x.sql`` →
        ``staging/x.sql`` (a package's too: ``dbt_packages/p/models/x.sql`` → ``x.sql``)."""
        roots = self.model_paths + self.seed_paths + self.snapshot_paths + self._package_paths("models") \
            + self._package_paths("seeds")
        root = max((r.rstrip("/") for r in roots if display.startswith(r.rstrip("/") + "/")), key=len, default="")
        return display[len(root) + 1:] if root else display

    def var_layers(self, display: str | None = None) -> list[Mapping[str, Any]]:
        """Where ``var()`` looks, first to last, in the file ``display`` (a package's file sees its
        package's vars under the project's: ``Package.var_layers``); ``--vars`` first."""
        package = self.package_of(display)
        scoped = self.vars.get(self.name)
        own = [scoped if isinstance(scoped, Mapping) else {}, self.vars]
        return [self.cli_vars, *(package.var_layers(self.vars) if package else own)]

    def config_defaults(self, display: str, block: str = "models") -> dict[str, tuple[Any, tuple[str, int]]]:
        """``defaults_with_lines`` of the file ``display``, each value with where it is set (file,
        line): a package's file is configured by its package's block, then by the project's block
        under the package's name (which wins, as in dbt)."""
        package = self.package_of(display)
        layers = package.defaults.get(block, ()) if package else ((self._block(block), self.settings_file),)
        result: dict[str, tuple[Any, tuple[str, int]]] = {}
        for node, file in layers:
            for key, (value, line) in _folder_defaults(node, self.under_root(display), result).items():
                result[key] = (value, (file, line))
        return result

    def generic_test_files(self) -> list[Path]:
        """``<test path>/generic/**/*.sql``: ``{% test %}`` blocks, loaded like macros."""
        return [p for p in self.files("tests", (".sql",)) if "generic" in self.relative(p).split("/")[1:-1]]

    def singular_test_files(self) -> list[Path]:
        """``<test path>/**/*.sql`` but the generic ones: each a SELECT of failing rows."""
        generic = set(self.generic_test_files())
        return [p for p in self.files("tests", (".sql",)) if p not in generic]

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def yaml_items(self, key: str) -> Iterator[tuple[str, int, Any]]:
        """Each item of the list under ``key`` in the models' YAML files (dbt's ``unit_tests:``,
        ``exposures:``): the file as shown, the item's line (the key's when the item has none), the item."""
        for path in self.files("models", (".yml", ".yaml")):
            display = self.relative(path)
            data = load_yaml(path, display)
            items = data.get(key) if isinstance(data, LineDict) else None
            for item in items if isinstance(items, list) else []:
                yield display, getattr(item, "line", 0) or data.line_of(key), item

    def defaults_for(self, model_path: str) -> dict[str, Any]:
        """Folder defaults for a model file, like dbt's ``models:`` block (``+key: value``).

        ``model_path`` is relative to its model root (``staging/stg_offers.sql``); deeper
        folders override shallower ones.

        >>> p = Project(Path("."), "p", "1", ("models",), (), (), "target", {},
        ...             {"+materialized": "view", "marts": {"+materialized": "table"}}, {}, "local")
        >>> p.defaults_for("marts/x.sql"), p.defaults_for("staging/y.sql")
        ({'materialized': 'table'}, {'materialized': 'view'})

        Tags add up: ``+tags: [a]`` above and ``+tags: b`` below give ``['a', 'b']``.
        """
        return {key: value for key, (value, _) in self.defaults_with_lines(model_path).items()}

    def defaults_with_lines(self, model_path: str, block: str = "models") -> dict[str, tuple[Any, int]]:
        """Like ``defaults_for``, each value with its line in project.yml (0 if unknown); of the
        ``seeds:``, ``snapshots:`` or ``tests:`` block with ``block``."""
        return _folder_defaults(self._block(block), model_path, {})

    def _block(self, block: str) -> Mapping[str, Any]:
        return {"models": self.model_defaults, "seeds": self.seed_defaults, "tests": self.test_defaults,
                "snapshots": self.snapshot_defaults}[block]


def _folder_defaults(node: Any, model_path: str, above: Mapping[str, tuple[Any, Any]]) -> dict[str, tuple[Any, int]]:
    """The ``+key: value`` defaults of a block for ``model_path``, deeper folders over shallower ones,
    tags added to those ``above`` (an earlier block's)."""
    result: dict[str, tuple[Any, int]] = {}
    levels = model_path.split("/")[:-1] + [Path(model_path).stem]  # folders, then a level named after the file (dbt)
    for depth in range(len(levels) + 1):
        if not isinstance(node, Mapping):
            break
        lines = node.line_of if isinstance(node, LineDict) else (lambda key: 0)
        for key, value in node.items():
            earlier = result.get("tags", above.get("tags"))
            if key == "+tags" and earlier is not None:  # tags add up, like dbt's
                value = _as_list(earlier[0]) + [t for t in _as_list(value) if t not in _as_list(earlier[0])]
            if key.startswith("+"):
                result[key[1:]] = (value, lines(key))
        if depth < len(levels):
            node = node.get(levels[depth])
    return result


#: files mvflow reads from the project's folders: a special file named so is an error, not skipped
_PROJECT_SUFFIXES = (".sql", ".yml", ".yaml", ".csv", ".jinja", ".md", ".py")
_SPECIAL = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def _walk(root: Path, base: Path) -> tuple[list[Path], list[Problem]]:
    """The files under ``base`` (a folder of project ``root``), symbolic links inside the project
    followed (each real folder once), and the problems of what cannot be read there.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp()).resolve()
    >>> (root / "models" / "staging").mkdir(parents=True)
    >>> (root / "shared").mkdir()
    >>> for name in ("models/a.sql", "models/staging/b.sql", "shared/c.sql"):
    ...     _ = (root / name).write_text("select 1 as x")
    >>> (root / "models" / "shared").symlink_to("../shared")
    >>> (root / "models" / "gone.sql").symlink_to("nowhere.sql")
    >>> (root / "models" / ".#a.sql").symlink_to("someone@host.123")  # an editor's lock file
    >>> files, problems = _walk(root, root / "models")
    >>> sorted(p.relative_to(root).as_posix() for p in files)
    ['models/a.sql', 'models/shared/c.sql', 'models/staging/b.sql']
    >>> (root / "models" / "staging" / "up").symlink_to("..")
    >>> files, problems = _walk(root, root / "models")
    >>> for problem in problems: print(problem.format().replace(str(root), "<root>"))
    models/gone.sql:1: [broken-link] models/gone.sql is a symbolic link to nowhere.sql, which does not exist — fix the link or remove it
    models/staging/up: [link-loop] models/staging/up is a symbolic link to <root>/models, a folder that holds it — remove the link: it leads round in a loop
    """
    files: list[Path] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    todo = [base]
    while todo:
        folder = todo.pop()
        real = os.path.realpath(folder)
        if real in seen:
            continue
        seen.add(real)
        if folder == base and base.is_symlink():
            if _outside(root, real):
                problems.append(_link_outside(root, folder, real))
                continue
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except (FileNotFoundError, NotADirectoryError):  # a missing folder is missing_model_paths'
            continue
        except OSError as exc:
            if folder != base or base.exists():
                problems.append(Problem(f"cannot read the folder {_shown(root, folder)}: {exc.strerror}", _shown(root, folder),
                                        code="unreadable", hint="make it readable (chmod a+rx) or move it out of the "
                                                                "project's folders: it may hold models"))
            continue
        for entry in entries:
            path = Path(entry.path)
            try:
                if entry.is_symlink():
                    target = os.path.realpath(path)
                    if not os.path.exists(target):
                        if not entry.name.startswith("."):  # hidden: an editor's lock file, .#model.sql
                            problems.append(Problem(f"{_shown(root, path)} is a symbolic link to {os.readlink(path)}, which "
                                                    "does not exist", _shown(root, path), 1, code="broken-link",
                                                    hint="fix the link or remove it"))
                        continue
                    if _outside(root, target):
                        if os.path.isdir(target) or path.suffix in _PROJECT_SUFFIXES:
                            problems.append(_link_outside(root, path, target))
                        continue
                    if Path(real).is_relative_to(target):  # a link to a folder holding it: walked forever
                        problems.append(Problem(f"{_shown(root, path)} is a symbolic link to {target}, a folder that holds "
                                                "it", _shown(root, path), code="link-loop",
                                                hint="remove the link: it leads round in a loop"))
                        continue
                if entry.is_dir():
                    todo.append(path)
                    continue
                if entry.is_file():
                    files.append(path)
                    continue
                mode = entry.stat().st_mode
            except OSError as exc:
                problems.append(Problem(f"cannot read {_shown(root, path)}: {exc.strerror}", _shown(root, path), 1,
                                        code="unreadable", hint="make it readable, or move it out of the project's folders"))
                continue
            if path.suffix in _PROJECT_SUFFIXES and not entry.name.startswith("."):
                what = next((name for test, name in _SPECIAL if test(mode)), "a special file")
                problems.append(Problem(f"{_shown(root, path)} is {what}, not a file", _shown(root, path), 1, code="not-a-file",
                                        hint="remove it or move it out of the project's folders: mvflow reads every "
                                             f"*{path.suffix} file there"))
    return files, problems


def _outside(root: Path, real: str) -> bool:
    return not Path(real).is_relative_to(root)


def _link_outside(root: Path, link: Path, real: str) -> Problem:
    return Problem(f"{_shown(root, link)} is a symbolic link to {real}, outside the project", _shown(root, link),
                   1 if link.suffix in _PROJECT_SUFFIXES else None, code="link-outside",
                   hint="mvflow reads only files inside the project (a pull request could point a link anywhere): "
                        "copy the files into the project, or link to a folder inside it")


def _shown(root: Path, path: Path) -> str:
    """``path`` as the user sees it: relative to the project (through the links it went)."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _as_list(value: Any) -> list:
    if value in (None, ""):
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def env_var(name: str, default: str | None = None) -> str:
    """Jinja ``env_var()``: the environment variable, or the default, or a clear error."""
    if name in os.environ:
        return os.environ[name]
    if default is not None:
        return default
    raise jinja2.UndefinedError(f"environment variable '{name}' is not set and has no default")


@functools.cache
def _values_sandbox() -> Sandbox:
    """Where ``{{ env_var(...) }}`` in project.yml values renders (sandbox.py)."""
    return Sandbox(undefined=jinja2.StrictUndefined, limit=MAX_MODEL_BYTES)


def render_value(template: str, what: str) -> str:
    """A value kept unrendered at load (a store's secret dsn), rendered where it is used; the error
    names ``what``, never the value."""
    try:
        return _values_sandbox().from_string(template).render(env_var=env_var) if "{{" in template else template
    except (jinja2.TemplateError, SecurityError, TooLarge) as exc:
        raise RunError(Problem(f"{what}: {exc}", PROJECT_FILE, code="jinja",
                               hint="set the environment variable where mvflow runs")) from None


def _render_values(value: Any, display: str, line: int, path: tuple[str, ...] = ()) -> Any:
    """Render ``{{ env_var(...) }}`` inside string values of project.yml (but a store's dsn: ``render_value``)."""
    if len(path) == 5 and path[0] == "targets" and path[2] == "stores" and path[4] == "dsn":
        return value
    if isinstance(value, str) and "{{" in value:
        try:
            return _values_sandbox().from_string(value).render(env_var=env_var)
        except SecurityError as exc:
            raise ProjectError(Problem(f"unsafe template in value {value!r}: {exc}", display, line, code="unsafe-template",
                                       hint=UNSAFE_HINT)) from exc
        except TooLarge as exc:
            raise ProjectError(Problem(f"value {value if len(value) <= 40 else value[:40] + '…'!r}: {exc}", display, line,
                                       code="too-large", hint=exc.hint)) from exc
        except jinja2.TemplateError as exc:
            raise ProjectError(
                Problem(f"cannot render value {value!r}: {exc}", display, line, code="jinja",
                        hint="set the environment variable or give a default: env_var('NAME', 'default')"
                        if "environment variable" in str(exc) else "fix the {{ }} expression")
            ) from exc
    if isinstance(value, LineDict):
        rendered = LineDict({k: _render_values(v, display, value.line_of(k), (*path, str(k))) for k, v in value.items()})
        rendered.line, rendered.key_lines = value.line, value.key_lines
        return rendered
    if isinstance(value, list):
        return [_render_values(v, display, line) for v in value]
    return value


def load_project(root: Path | str, profiles_dir: Path | str | None = None) -> Project:
    """Read ``project.yml`` under ``root`` (or a dbt project's ``dbt_project.yml`` and its
    ``profiles.yml``: ``compiler/dbt``); every problem is reported with its line."""
    root = Path(root).resolve()
    path = root / PROJECT_FILE
    if not path.is_file() and (root / "dbt_project.yml").is_file():
        from .dbt.project import load_dbt_project

        return load_dbt_project(root, profiles_dir)
    if not path.is_file():
        raise ProjectError(
            Problem(
                f"no {PROJECT_FILE} in {root}",
                hint="run mvflow inside a project directory or pass --project-dir",
                code="no-project",
            )
        )
    raw = load_yaml(path, PROJECT_FILE)
    if not isinstance(raw, LineDict):
        raise ProjectError(Problem("project.yml must be a mapping", PROJECT_FILE, 1, code="yaml",
                                   hint="start with 'name: <project name>'"))
    data = _render_values(raw, PROJECT_FILE, raw.line)
    problems = check_keys(data, _PROJECT_KEYS, PROJECT_FILE, "project.yml", required={"name"})
    for key in ("name", "version", "default_target"):
        _scalar(data, key, problems)
    paths = _section(data, "paths", problems)
    problems += check_keys(paths, _PATH_KEYS, PROJECT_FILE, "paths")
    _scalar(paths, "target", problems)
    path_lists = {key: _path_list(paths, key, problems) for key in ("models", "macros", "lineage", "seeds", "tests", "snapshots")}
    variables = _section(data, "vars", problems)
    model_defaults = data.get("models") if isinstance(data.get("models"), LineDict) else LineDict()
    if data.get("models") is not None and not isinstance(data.get("models"), LineDict):
        problems.append(_not_a_mapping("'models:'", data, "models", "e.g. models: {+materialized: view, staging: {+schema: staging}}"))
    seed_defaults = _defaults_block(data, "seeds", problems, "e.g. seeds: {+schema: reference}")
    snapshot_defaults = _defaults_block(data, "snapshots", problems, "e.g. snapshots: {+schema: history}")
    test_defaults = _defaults_block(data, "data_tests" if "data_tests" in data else "tests", problems,
                                    "e.g. tests: {+severity: warn}")
    targets, default_target = _load_targets(root, data, problems)
    if problems:
        raise ProjectError(problems)
    return Project(
        root=root,
        name=str(data["name"]),
        version=str(data.get("version", "0")),
        model_paths=path_lists["models"],
        macro_paths=path_lists["macros"],
        lineage_paths=path_lists["lineage"],
        seed_paths=path_lists["seeds"],
        test_paths=path_lists["tests"],
        target_path=str(paths.get("target", "target")),
        vars=dict(variables),
        model_defaults=model_defaults,
        seed_defaults=seed_defaults,
        snapshot_paths=path_lists["snapshots"],
        snapshot_defaults=snapshot_defaults,
        test_defaults=test_defaults,
        targets=targets,
        default_target=default_target,
        targets_line=data.line_of("targets") if "targets" in data else 0,
        model_paths_line=paths.line_of("models"),
    )


def _load_targets(root: Path, data: LineDict, problems: list[Problem]) -> tuple[dict[str, Target], str]:
    state_tables = _section(data, "state", problems)
    problems += check_keys(state_tables, _STATE_TABLE_KEYS, PROJECT_FILE, "state")
    tables = {k: str(v) for k, v in state_tables.items() if k in _STATE_TABLE_KEYS and _scalar(state_tables, k, problems)}
    raw_targets = _section(data, "targets", problems) if "targets" in data else LineDict({"local": LineDict()})
    targets = {}
    for name, raw in raw_targets.items():
        raw = _section(raw_targets, name, problems, f"target '{name}'")
        problems += check_keys(raw, _TARGET_KEYS, PROJECT_FILE, f"target '{name}'")
        spark = _section(raw, "spark", problems, f"target '{name}' spark")
        state = _section(raw, "state", problems, f"target '{name}' state")
        conf = _section(spark, "conf", problems, f"target '{name}' spark conf")
        problems += check_keys(spark, _SPARK_KEYS, PROJECT_FILE, f"target '{name}' spark")
        problems += check_keys(state, _STATE_KEYS, PROJECT_FILE, f"target '{name}' state")
        for section in (spark, state, conf):
            for key in section:
                if key != "conf":
                    _scalar(section, key, problems)
        local_dir = root / ".mvflow" / str(name)
        metastore = _metastore(raw, str(name), conf, problems)
        table_format = str(raw.get("table_format", "parquet")).strip().lower()
        if table_format not in TABLE_FORMATS:
            problems.append(Problem(f"target '{name}': table_format '{raw.get('table_format')}' is not a table format",
                                    PROJECT_FILE, raw.line_of("table_format"),
                                    hint="write table_format: delta or table_format: parquet", code="bad-config"))
        targets[str(name)] = Target(
            name=str(name),
            spark=SparkSettings(
                master=str(spark.get("master", "local[*]")),
                remote=_remote(spark, str(name), problems),
                app_name=str(spark.get("app_name", "mvflow")),
                warehouse_dir=_resolve(root, spark.get("warehouse_dir"), local_dir / "warehouse"),
                metastore_dir=_resolve(root, spark.get("metastore_dir"), local_dir / "metastore"),
                database=str(spark.get("database", "default")),
                log_level=str(spark.get("log_level", "ERROR")),
                conf={**DEFAULT_SPARK_CONF, **{str(k): _conf_value(v) for k, v in conf.items()}},
            ),
            state=StateSettings(
                type=str(state.get("type", "sqlite")),
                path=_resolve(root, state.get("path"), local_dir / "state.sqlite"),
                dsn=str(state["dsn"]) if state.get("dsn") else None,
                **tables,
            ),
            table_format=table_format,
            metastore=metastore,
            stores=_stores(raw, str(name), problems),
        )
    default_target = str(data.get("default_target", next(iter(targets), "local")))
    if targets and default_target not in targets:
        problems.append(
            Problem(
                f"default_target '{default_target}' is not a target",
                PROJECT_FILE,
                data.line_of("default_target"),
                hint="targets defined: " + ", ".join(sorted(targets)),
                code="unknown-target",
            )
        )
    return targets, default_target


def _metastore(raw: LineDict, name: str, conf: LineDict, problems: list[Problem]) -> MetastoreSettings:
    """``metastore: {type: postgres, dsn: postgresql://user@host:5432/db}`` of a target (default: derby)."""
    section = _section(raw, "metastore", problems, f"target '{name}' metastore")
    problems += check_keys(section, _METASTORE_KEYS, PROJECT_FILE, f"target '{name}' metastore")
    for key in section:
        _scalar(section, key, problems)
    kind = str(section.get("type", "derby")).strip().lower()
    dsn = str(section["dsn"]).strip() if section.get("dsn") else None
    line = section.line_of("type") if "type" in section else section.line
    if kind not in METASTORE_TYPES:
        problems.append(Problem(f"target '{name}': metastore type '{section.get('type')}' is not a metastore type",
                                PROJECT_FILE, line, code="bad-config",
                                hint="write type: postgres (with a dsn) for a shared catalog, or leave metastore out "
                                     "for the embedded Derby one"))
    elif kind == "postgres" and not dsn:
        problems.append(Problem(f"target '{name}': a postgres metastore needs a dsn", PROJECT_FILE, line, code="bad-config",
                                hint="e.g. metastore: {type: postgres, dsn: postgresql://mvflow@db-host:5432/metastore}"))
    elif kind == "derby" and dsn:
        problems.append(Problem(f"target '{name}': metastore dsn is set but its type is derby", PROJECT_FILE,
                                section.line_of("dsn"), code="bad-config", hint="write type: postgres beside the dsn"))
    elif kind == "postgres" and "spark.hadoop.javax.jdo.option.ConnectionURL" in conf:
        problems.append(Problem(f"target '{name}': both metastore and spark.conf spark.hadoop.javax.jdo.option.ConnectionURL "
                                "name the metastore", PROJECT_FILE, conf.line_of("spark.hadoop.javax.jdo.option.ConnectionURL"),
                                code="bad-config", hint="keep one of them"))
    return MetastoreSettings(type=kind, dsn=dsn)


def _stores(raw: LineDict, name: str, problems: list[Problem]) -> dict[str, StoreSettings]:
    """``stores: {app: {type: postgres, dsn: "{{ env_var('APP_DSN') }}"}}`` of a target (compiler.publish.stores)."""
    section = _section(raw, "stores", problems, f"target '{name}' stores")
    found = {}
    for store, entry in section.items():
        line = section.line_of(store)
        more = store_problems(str(store), entry, name, PROJECT_FILE, line)
        if not more:
            try:  # rendered only when a publish connects, but a broken template is found now
                _values_sandbox().parse(str(entry["dsn"]))
            except jinja2.TemplateSyntaxError as exc:
                more.append(Problem(f"target '{name}' store '{store}': cannot read its dsn template: {exc.message}",
                                    PROJECT_FILE, line, code="jinja", hint="e.g. dsn: \"{{ env_var('APP_DSN') }}\""))
        problems += more
        if not more:
            found[str(store)] = StoreSettings(str(store), str(entry["type"]).strip().lower(), str(entry["dsn"]), line)
    return found


def _remote(spark: LineDict, name: str, problems: list[Problem]) -> str | None:
    """``spark: {remote: sc://host:port}``: the target's Spark Connect server (compiler/spark.py)."""
    remote = str(spark.get("remote") or "").strip() or None
    if remote is not None and not remote.startswith("sc://"):
        problems.append(Problem(f"target '{name}': spark remote '{remote}' is not a Spark Connect address", PROJECT_FILE,
                                spark.line_of("remote"), code="bad-config", hint="write remote: sc://host:15002"))
    elif remote is not None and "master" in spark:
        problems.append(Problem(f"target '{name}': spark has both master and remote", PROJECT_FILE, spark.line_of("master"),
                                code="bad-config", hint="a Spark Connect server has its own master: keep remote only"))
    return remote


def _defaults_block(data: LineDict, key: str, problems: list[Problem], example: str) -> LineDict:
    """A block of ``+key: value`` defaults like ``models:`` (empty when absent)."""
    value = data.get(key)
    if value is not None and not isinstance(value, LineDict):
        problems.append(_not_a_mapping(f"'{key}:'", data, key, example))
    return value if isinstance(value, LineDict) else LineDict()


def _conf_value(value: Any) -> str:
    """Spark conf values are strings; YAML booleans become Spark's ``true``/``false``."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _section(parent: LineDict, key: str, problems: list[Problem], what: str | None = None) -> LineDict:
    """``parent[key]`` when it is a mapping; empty when absent (or null); else a problem."""
    value = parent.get(key)
    if isinstance(value, LineDict):
        return value
    if value is not None:
        problems.append(_not_a_mapping(what or f"'{key}'", parent, key))
    empty = LineDict()
    empty.line = parent.line_of(key) if key in parent else parent.line
    return empty


def _not_a_mapping(what: str, parent: LineDict, key: str, hint: str | None = None) -> Problem:
    found = type(parent[key]).__name__.replace("str", "text").replace("list", "a list")
    return Problem(f"{what} must be a mapping (key: value lines), found {found}", PROJECT_FILE, parent.line_of(key),
                   hint=hint or "indent its entries under it as 'key: value'", code="bad-value")


def _scalar(parent: LineDict, key: str, problems: list[Problem]) -> bool:
    """True if ``parent[key]`` is absent or a single value (text, number, true/false)."""
    value = parent.get(key)
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    problems.append(Problem(f"'{key}' must be a single value, not a {'list' if isinstance(value, list) else 'mapping'}",
                            PROJECT_FILE, parent.line_of(key), hint=f"write '{key}: <value>'", code="bad-value"))
    return False


def _path_list(paths: LineDict, key: str, problems: list[Problem]) -> tuple[str, ...]:
    """``paths.<key>``: one folder or a list of folders (default: the key itself)."""
    value = paths.get(key, key)
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    problems.append(Problem(f"paths.{key} must be a folder or a list of folders", PROJECT_FILE, paths.line_of(key),
                            hint=f"e.g. '{key}: {key}' or '{key}: [{key}, more_{key}]'", code="bad-value"))
    return (key,)


def _resolve(root: Path, value: Any, default: Path) -> Path:
    if value in (None, ""):
        return default
    path = Path(str(value))
    return path if path.is_absolute() else root / path
