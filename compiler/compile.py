"""Compile: project files → a Manifest of resolved, parsed models and the DAG.

Pure: no Spark, no state store, no clock. Same files in, same Manifest out.
Steps: load sources → load model docs → render every model once to collect its config and
calls → resolve relations → build the DAG → render again with real names → parse with
sqlglot → output columns in DAG order.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from pathlib import Path
from typing import Any, Callable

import networkx as nx

from .background import Background, worth_forking
from .cache import CompileCache, cache_key, read_tables
from .data_tests import compile_tests, place_scopes
from .declared_keys import constraint_key
from .depth import too_deep
from .errors import LOGGED, CompileError, MvflowError, Problem, ProblemList, did_you_mean
from .files import read_text
from .graph import build_graph, is_model, model_id, node_name, source_id
from .kinds import Kind, KindError, create_kind
from .dbt.config import HOOKS, RENAMED, translate as translate_dbt_config
from .dbt.exposures import load_exposures
from .dbt.packages import check_installed
from .kinds.ephemeral import cte_name
from .kinds.mv.lift import lift_models
from .kinds.mv.analyze import check_mvs
from .kinds.seed import read_seed, seed_select
from .kinds.snapshot import SnapshotKind
from .manifest import Manifest, Model
from .paths import name_problem
from .parse import (column_line, is_reserved, output_columns, parse_select, plain_columns, pretty, table_references,
                    unnamed_columns, with_ctes)
from .project import TABLE_FORMATS, Project, Target
from .publish.spec import check_published_tables
from .render import Node, Rendered, Renderer, SnapshotBlock, YamlSnapshot, snapshot_names
from .sources import IDENTIFIER, Source, are_tags, load_sources, tags_problem, type_problems
from .table_format import cluster_by_problems
from .yamlfile import LineDict, check_keys, load_yaml

_DOC_MODEL_KEYS = {"name", "description", "tags", "config", "columns", "tests", "data_tests", "constraints"}
_DOC_COLUMN_KEYS = {"name", "description", "type", "tags", "tests", "data_tests", "constraints"}
#: what dbt's schema YAML also holds of a model or seed and of its columns: accepted, not read
_DBT_MODEL_KEYS = {"meta", "docs", "access", "group", "latest_version", "versions", "deprecation_date", "time_spine"}
_DBT_COLUMN_KEYS = {"data_type", "meta", "quote", "granularity", "policy_tags", "docs"}


def compile_project(project: Project, target: str | None = None, cache: CompileCache | None = None,
                    needs: Callable[[nx.DiGraph], set[str] | None] | None = None) -> Manifest:
    """Compile every model of ``project`` for ``target`` (database defaults come from it).

    Problems are collected across all files and raised together, so one run shows them all.
    With a ``cache`` (see cache.py), results of earlier compiles are reused where their inputs
    are unchanged; the manifest is the same either way. ``needs`` (the DAG → the models a command
    runs, see ``select.needed``) narrows what must compile as dbt does: a model outside them and
    their ancestors whose SQL does not compile is set aside with a warning, with what is downstream
    of it; errors of reading the project (YAML, Jinja, refs) still stop the compile.
    """
    defaults = project.target(target)
    problems = ProblemList()
    for problem in project.missing_model_paths() + project.file_problems():
        problems.add(problem)
    if project.dialect == "dbt":
        before = len(problems.problems)
        _attempt(problems, check_installed, project)
        if len(problems.problems) > before:  # without its packages every model calling them fails: say the one cause
            problems.raise_if_any()
    sources = _attempt(problems, load_sources, project)
    docs = _attempt(problems, _load_model_docs, project) or {}
    renderer = _attempt(problems, Renderer, project, cache.jinja() if cache is not None else None, defaults)
    if renderer is None:
        problems.raise_if_any()
    if project.dialect == "dbt" and sources is not None:
        sources.update(_dbt_sources(project, renderer, problems))
        renderer.source_names = {s.ref_name: s.id for s in sources.values() if s.ref_name}
    models, templates, unusable = _collect_models(project, renderer, docs, defaults, problems, cache)
    warnings = _check_model_defaults(project, problems) + [note for m in models.values() for note in m.notes]
    if project.dialect == "dbt":
        from .dbt.project import unsupported

        warnings += unsupported(project)
    _check_relations(models, sources or {}, problems)
    graph = _graph(models, sources, unusable, problems)
    aside = SetAside(_needed(needs, graph, problems))
    _render_final(models, templates, renderer, sources or {}, problems)
    warnings += _parse_models(models, sources or {}, problems, cache)
    aside.settle(problems, models, graph)
    for problem in lift_models(models, {m.relation for m in models.values()} | {s.lower() for s in sources or {}}):
        problems.add(problem)
    if any(m.owner for m in models.values()):  # aggregates lifted into mvs of their own: nodes of the DAG
        models = dict(sorted(models.items()))
        graph = _graph(models, sources, unusable, problems)
    aside.settle(problems, models, graph)
    graph.graph["project"] = project.name  # what ``--select package:<the project>`` selects
    manifest = Manifest(project, defaults.name, defaults.spark.database, sources, models, graph, warnings, cache)
    _infer_columns(manifest, problems)
    aside.settle(problems, models, graph)
    manifest.warnings += aside.warnings()
    manifest.tests = compile_tests(project, renderer, models, sources or {}, docs, templates, set(aside.models))
    if project.dialect == "dbt":
        named = {**{sid: sid for sid in sources or {}}, **renderer.source_names}
        manifest.exposures, exposure_warnings = load_exposures(project, models, named)
        manifest.warnings += exposure_warnings
    manifest.hooks = {which: [renderer.render_string(sql) for sql in statements] for which, statements in
                      (("on-run-start", project.on_run_start), ("on-run-end", project.on_run_end)) if statements}
    manifest.warnings += check_mvs(manifest)
    check_published_tables(manifest)
    place_scopes(manifest)
    return manifest


def _needed(needs: Callable[[nx.DiGraph], set[str] | None] | None, graph: nx.DiGraph | None,
            problems: ProblemList) -> set[str] | None:
    """The models that must compile, or None for all (always when reading the project found problems)."""
    return needs(graph) if needs is not None and graph is not None and not problems.problems else None


class SetAside:
    """Models left out of a narrowed compile because their SQL does not compile and the command
    does not need them, with what is downstream of them (and the aggregates lifted out of them)."""

    def __init__(self, needed: set[str] | None):
        self.needed = needed  # None: every model is (or the project did not read without problems)
        self.models: dict[str, Problem] = {}  # name → why, at the model's file

    def settle(self, problems: ProblemList, models: dict[str, Model], graph: nx.DiGraph) -> None:
        """Set aside the models the ``problems`` are in, if none of them is needed; else raise them all."""
        files: dict[str | None, set[str]] = {}
        for model in models.values():
            files.setdefault(model.path, set()).add(model.name)
        culprits = [files.get(p.path, set()) for p in problems.problems]
        if self.needed is None or not all(culprits) or any(names & self.needed for names in culprits):
            problems.raise_if_any()
            return
        for problem, names in zip(problems.problems, culprits):
            for name in sorted(names):
                self._drop(name, problem, models, graph)
        problems.problems.clear()

    def _drop(self, name: str, why: Problem, models: dict[str, Model], graph: nx.DiGraph) -> None:
        if models.pop(name, None) is None:
            return
        self.models[name] = why
        node, readers = model_id(name), []
        if graph.has_node(node):
            readers = [node_name(n) for n in graph.successors(node) if is_model(n)]
            graph.remove_node(node)
        for other in readers:
            if other in models:
                self._drop(other, Problem(f"it reads '{name}', which is not compiled", models[other].path), models, graph)
        for other in [m for m in models.values() if m.owner == name]:
            self._drop(other.name, Problem(f"it is lifted out of '{name}', which is not compiled", other.path), models, graph)

    def warnings(self) -> list[Problem]:
        return [Problem(f"model '{name}' is not compiled: {why.message}", why.path, why.line, code="set-aside",
                        hint="it is not selected: the command goes on without it")
                for name, why in sorted(self.models.items())]


def _attempt(problems: ProblemList, step, *args):
    """Run one loading step; its user errors join ``problems`` and the result is None."""
    try:
        return step(*args)
    except MvflowError as exc:
        problems.extend(exc)
        return None


def _collect_models(project: Project, renderer: Renderer, docs: dict[str, LineDict], defaults: Target,
                    problems: ProblemList, cache: CompileCache | None = None):
    """Render every model file once for its config and calls.

    Returns the enabled models, their templates, and the names that cannot be referenced
    (name → why: failed to compile, or disabled) so that refs to them are not reported as unknown.
    On large projects a forked child compiles the second half of the templates into the cache's
    Jinja bytecode meanwhile, so the parent only loads them (Jinja compilation is its costliest step).
    """
    models: dict[str, Model] = {}
    templates = {}
    unusable: dict[str, str] = {}
    files: dict[str, str] = {}
    paths = list(project.files("models", (".sql",)))
    ahead = paths[len(paths) // 2:] if cache is not None and worth_forking(len(paths)) else []
    with Background(lambda: _compile_templates(renderer, cache, ahead), fork=bool(ahead)) as compiled:
        for path in paths:
            if ahead and path == ahead[0] and compiled.forked:
                cache.apply_changes(compiled.result())
            try:
                template = renderer.template(path)
            except CompileError as exc:
                problems.extend(exc)
                template = None
            _collect_model(project, renderer, docs, defaults, problems, project.relative(path), path.stem, template, files,
                           models, templates, unusable)
    for path in project.files("seeds", (".csv",)):
        _collect_seed(project, renderer, docs, defaults, problems, path, files, models, unusable)
    for name, display, template in _snapshot_templates(project, renderer, docs, problems):
        _collect_model(project, renderer, docs, defaults, problems, display, name, template, files, models, templates, unusable)
    for name, doc in docs.items():
        if name not in files:
            problems.add(Problem(f"model docs name '{name}', which is not a model", doc.path, doc.line,
                                 hint=did_you_mean(name, files) or "remove the entry or add the model", code="unknown-model"))
    return dict(sorted(models.items())), templates, unusable


def _compile_templates(renderer: Renderer, cache: CompileCache, paths: list[Path]) -> tuple[list[str], dict[str, Any]]:
    """Compile templates into the cache (a forked child's job); errors are the parent's to report."""
    cache.take_changes()
    for path in paths:
        try:
            renderer.template(path)
        except CompileError:
            pass
    return cache.take_changes()


def _collect_model(project: Project, renderer: Renderer, docs: dict[str, LineDict], defaults: Target,
                   problems: ProblemList, display: str, name: str, template: Any, files: dict[str, str],
                   models: dict[str, Model], templates: dict, unusable: dict[str, str]) -> None:
    """Render one model (a file, or a snapshot) for its config and calls; adds it to ``models`` or
    ``unusable``. ``template`` is None when the file's Jinja does not compile (already reported)."""
    what = _resource_type(project, display)
    if not _name_is_free(name, display, what, files, problems, unusable):
        return
    if template is None:
        unusable[name] = "broken"
        return
    try:
        first = renderer.render(template, this=f"{defaults.spark.database}.{name}")
        if what == "snapshot":
            first.config.setdefault("materialized", "snapshot")
        model = _model(project, renderer, display, name, first, docs.get(name), defaults)
    except CompileError as exc:
        problems.extend(exc)
        unusable[name] = "broken"
        return
    if model is None:
        unusable[name] = "disabled"
        return
    models[name] = model
    templates[name] = template


def _snapshot_templates(project: Project, renderer: Renderer, docs: dict[str, LineDict],
                        problems: ProblemList) -> list[tuple[str, str, Any]]:
    """Each snapshot as (name, file, template): the ``{% snapshot %}`` blocks of the snapshot
    folders' ``.sql`` files and dbt's YAML snapshots (an entry of ``snapshots:`` with a
    ``relation``: ``ref('x')`` or ``source('a', 'b')``, whose SELECT is ``select *`` of it)."""
    found: list[tuple[str, str, Any]] = []
    for path in project.files("snapshots", (".sql",)):
        display = project.relative(path)
        names = snapshot_names(read_text(path, display))
        if not names:
            problems.add(Problem("a snapshot file holds no {% snapshot name %} … {% endsnapshot %} block", display, 1,
                                 code="bad-snapshot", hint="wrap the SELECT in {% snapshot <name> %} … {% endsnapshot %}"))
            continue
        try:
            template = renderer.template(path)
        except CompileError as exc:
            problems.extend(exc)
            template = None
        found += [(name, display, SnapshotBlock(template, name) if template else None) for name in names]
    for name, doc in docs.items():
        if getattr(doc, "what", None) != "snapshot" or "relation" not in doc:
            continue
        relation, template = str(doc["relation"]), None
        if _resource_type(project, doc.path) != "snapshot":
            problems.add(Problem(f"snapshot '{name}' is defined outside the snapshot folders", doc.path, doc.line,
                                 code="bad-snapshot", hint=f"move it to a YAML file under {', '.join(project.snapshot_paths)}/ "
                                                           "(as dbt reads them)"))
        elif not _RELATION.fullmatch(relation):
            problems.add(Problem(f"snapshot '{name}': relation must be ref('model') or source('source', 'table'), got "
                                 f"{relation!r}", doc.path, doc.line_of("relation"), code="bad-snapshot",
                                 hint="e.g. relation: ref('stg_orders')"))
        else:
            template = YamlSnapshot(renderer.env.from_string(f"select * from {{{{ {relation} }}}}\n"), doc.path)
        found.append((name, doc.path, template))  # None: broken, said above
    return found


_RELATION = re.compile(r"\s*(ref|source)\s*\(\s*'[^']*'\s*(,\s*'[^']*'\s*)?\)\s*")


def _resource_type(project: Project, display: str) -> str:
    """What a file under the project's folders defines, as dbt names it: model, seed or snapshot."""
    if display.endswith(".csv"):
        return "seed"
    if any(display.startswith(root.rstrip("/") + "/") for root in project.snapshot_paths):
        return "snapshot"
    return "model"


def _name_is_free(name: str, display: str, what: str, files: dict[str, str], problems: ProblemList,
                  unusable: dict[str, str]) -> bool:
    """A model's or seed's name (its file's) is unique and a valid table name; else a problem."""
    if name in files:
        problems.add(Problem(f"duplicate model name '{name}' (also {files[name]})", display, 1, code="duplicate-model",
                             hint="models and seeds are named after their files and must be unique: rename one file"))
        return False
    files[name] = display
    bad_name = name_problem(name, f"{what} name", display, 1, hint="rename the file with letters, digits and _ only")
    if bad_name:
        problems.add(bad_name)
        unusable[name] = "broken"
        return False
    return True


def _collect_seed(project: Project, renderer: Renderer, docs: dict[str, LineDict], defaults: Target, problems: ProblemList,
                  path: Path, files: dict[str, str], models: dict[str, Model], unusable: dict[str, str]) -> None:
    """A seed file as a model of kind ``seed`` (``kinds/seed.py``): its SELECT casts the file's columns."""
    display = project.relative(path)
    name = path.stem
    if not _name_is_free(name, display, "seed", files, problems, unusable):
        return
    first = Rendered(sql="", config={"materialized": "seed"})
    try:
        model = _model(project, renderer, display, name, first, docs.get(name), defaults)
        if model is None:
            unusable[name] = "disabled"
            return
        seed = read_seed(project.root / display, display, model.kind.delimiter, dict(model.kind.column_types))
    except CompileError as exc:
        problems.extend(exc)
        unusable[name] = "broken"
        return
    model.sql = seed_select(name, seed) + "\n"
    models[name] = model


def _dbt_sources(project: Project, renderer: Renderer, problems: ProblemList) -> dict[str, Source]:
    from .dbt.sources import dbt_sources

    found, bad = dbt_sources(project, renderer)
    for problem in bad:
        problems.add(problem)
    return found


def _model_config(project: Project, renderer: Renderer, display: str, first, doc: LineDict | None, problems: list[Problem]):
    """The model's config (folder defaults < docs YAML < config()) and where each key was set; a
    value that cannot be merged (tags that are not text) joins ``problems`` instead. A dbt
    project's folder defaults may hold Jinja (``+enabled: "{{ var('x', false) }}"``), rendered as
    dbt renders them, to a value (hooks: when they run)."""
    config: dict[str, Any] = {}
    origin: dict[str, tuple[str, int]] = {}

    def put(key: str, value: Any, where: tuple[str, int]) -> None:
        if key == "tags" and not are_tags(value):
            problems.append(_bad_tags(value, *where))
            return
        config[key], origin[key] = _merged(config, key, value), where

    block = _resource_type(project, display) + "s"
    for key, (value, where) in project.config_defaults(display, block).items():
        put(key, renderer.render_value(value, where, display) if project.dialect == "dbt" and key not in HOOKS else value, where)
    doc_config = (doc or {}).get("config") or {}
    for key, value in doc_config.items():
        put(key, value, (doc.path, doc_config.line_of(key) if isinstance(doc_config, LineDict) else doc.line))
    if doc is not None and not are_tags(doc.get("tags")):
        problems.append(_bad_tags(doc["tags"], doc.path, doc.line_of("tags")))
    for key, value in first.config.items():
        put(key, value, (display, first.config_lines.get(key, 1)))
    return config, origin


def _bad_tags(value: Any, path: str, line: int) -> Problem:
    return tags_problem(value, path, line, "tags='daily' or tags=['daily', 'finance'] (in YAML: tags: [daily, finance])")


def _merged(config: dict[str, Any], key: str, value: Any) -> Any:
    """A config value overrides the one from above, except tags, which add up (as in dbt)."""
    if key != "tags" or key not in config:
        return value
    return _as_list(config[key]) + [t for t in _as_list(value) if t not in _as_list(config[key])]


def _node(project: Project, display: str, name: str, config: dict[str, Any]) -> Node:
    """The model or seed as a project's ``generate_schema_name`` sees it (dbt's node fields; a
    package's file with its package's name and its path in the package)."""
    under = project.under_root(display)
    tags = config.get("tags") or ()
    package = project.package_of(display)
    owner, file = (package.name, display[len(package.folder) + 1:]) if package else (project.name, display)
    return Node(name, _resource_type(project, display), owner, file, under, (owner, *under.split("/")[:-1], name), config,
                tuple([tags] if isinstance(tags, str) else tags))


def _check_model_defaults(project: Project, problems: ProblemList) -> list[Problem]:
    """Check project.yml's ``models:`` block: folders must be mappings (config keys start with
    ``+``); a folder that holds no model is a warning, since a typo would silently apply nothing."""
    defaults = project.model_defaults
    if not isinstance(defaults, LineDict):
        if defaults:
            problems.add(Problem("'models:' must be a mapping of folders and '+key: value' defaults", project.settings_file,
                                 hint="e.g. models: {+materialized: view, staging: {+schema: staging}}", code="bad-value"))
        return []
    folders = set()
    for path in project.files("models", (".sql",)):
        if project.package_of(project.relative(path)):
            continue  # a package's folders are configured under its name
        parts = project.under_root(project.relative(path)).split("/")[:-1] + [path.stem]  # a model's own level too
        folders.update("/".join(parts[:depth]) for depth in range(1, len(parts) + 1))
    warnings: list[Problem] = []

    def walk(node: LineDict, prefix: str) -> None:
        for key, value in node.items():
            if str(key).startswith("+"):
                continue
            folder, line = f"{prefix}{key}", node.line_of(key)
            if value is not None and not isinstance(value, LineDict):
                problems.add(Problem(f"models: '{folder}' is not a folder mapping", project.settings_file, line, code="bad-value",
                                     hint=f"config keys start with '+': write '+{key}: {value}'"))
                continue
            if folder not in folders:
                close = difflib.get_close_matches(folder, sorted(folders), n=1)
                warnings.append(Problem(f"models: no model folder '{folder}', so its defaults apply to nothing", project.settings_file,
                                        line, hint=f"did you mean '{close[0]}'?" if close else "check the folder name",
                                        code="unused-defaults"))
            if value:
                walk(value, folder + "/")

    walk(defaults, "")
    return warnings


def _model(project: Project, renderer: Renderer, display: str, name: str, first, doc: LineDict | None,
           defaults: Target) -> Model | None:
    """The model, or None when it is disabled; an invalid kind or option is a CompileError at its line."""
    config_problems: list[Problem] = []
    config, origin = _model_config(project, renderer, display, first, doc, config_problems)
    notes: list[Problem] = []
    meta = {**_mapping((doc or {}).get("meta")), **_mapping(config.get("meta"))}  # dbt's: shown on the docs site
    if project.dialect == "dbt":
        config, ignored = translate_dbt_config(config, origin)
        origin = {RENAMED.get(key, key): where for key, where in origin.items()}
        notes = [Problem(message, path or display, line or 1, code="dbt-unsupported") for message, path, line in ignored]
        notes += [Problem(message, display, line or 1, code="dbt-warn") for message, line in dict.fromkeys(first.warned)]
        notes += [Problem(message, display, line or 1, code=LOGGED) for message, line in dict.fromkeys(first.logged)]
    if config.get("enabled", True) is False:
        return None
    problems = ProblemList(list(config_problems))
    for key in ("enabled", "full_refresh"):
        if config.get(key) is not None and not isinstance(config[key], bool):
            path, line = origin[key]
            problems.add(Problem(f"{key} must be true or false, got {config[key]!r}", path, line,
                                 hint=f"write {key}=false (no quotes)", code="bad-config"))
    kind: Kind | None = None
    try:
        kind = create_kind(config)
    except KindError as exc:
        for error in exc.errors:
            path, line = origin.get(error.key, (display, 1))
            problems.add(Problem(str(error), path, line, hint=error.hint, code=error.code))
    custom = config.get("schema") or (config.get("database") if project.dialect != "dbt" else None)
    schema = renderer.schema_name(custom, defaults.spark.database, _node(project, display, name, config))
    snapshot = isinstance(kind, SnapshotKind)
    if snapshot and kind.target_schema:  # dbt's older config: the schema as written
        schema = kind.target_schema
    table_format = str(config.get("table_format") or ("delta" if snapshot else defaults.table_format)).lower()
    if table_format not in TABLE_FORMATS:
        path, line = origin.get("table_format", (display, 1))
        problems.add(Problem(f"table_format '{config['table_format']}' is not a table format", path, line,
                             hint="write table_format='delta' or table_format='parquet'", code="bad-config"))
    elif snapshot and table_format != "delta":
        path, line = origin.get("table_format", (display, 1))
        problems.add(Problem("a snapshot needs the delta table format (its history is kept by MERGE)", path, line,
                             code="bad-config", hint="set file_format='delta' (table_format='delta'), or leave it out"))
    elif kind is not None and getattr(kind, "incremental_strategy", None) == "merge" and table_format != "delta":
        path, line = origin.get("incremental_strategy", (display, 1))
        problems.add(Problem("incremental_strategy 'merge' needs the delta table format", path, line, code="bad-config",
                             hint="add file_format='delta' (table_format='delta'), or use append or insert_overwrite"))
    elif kind is not None:
        for message, hint in cluster_by_problems(getattr(kind, "cluster_by", ()), table_format,
                                                 getattr(kind, "partition_by", ())):
            path, line = origin.get("cluster_by", (display, 1))
            problems.add(Problem(f"model '{name}': {message}", path, line, hint=hint, code="cluster-by"))
    for key, value in (("schema", schema), ("alias", config.get("alias") or name)):
        path, line = origin.get(key, origin.get("database", (display, 1)))
        if not IDENTIFIER.fullmatch(str(value)):
            problems.add(Problem(f"{key} '{value}' is not a valid name", path, line,
                                 hint="use letters, digits and _ only", code="bad-name"))
        elif is_reserved(str(value)):  # else only the models reading it would fail, at their ref()
            what = f"{key} '{value}'" if key in config or key == "schema" else f"model name '{value}' (the file name)"
            problems.add(Problem(f"{what} is a reserved word of SQL: the table's name {schema}.{config.get('alias') or name} "
                                 "cannot be read unquoted", path, line, code="bad-name",
                                 hint=f"choose another {key}" if key in config or key == "schema" else
                                 "rename the file, or give the table another name: config(alias='...')"))
    problems.raise_if_any(CompileError)
    relation = f"{schema}.{config.get('alias') or name}".lower()
    for hook in ("before", "after"):  # hooks may use {{ this }}, {{ target }}: rendered for this model
        if config.get(hook):
            items = config[hook] if isinstance(config[hook], (list, tuple)) else [config[hook]]
            with renderer.scope(display):
                config[hook] = [renderer.render_string(str(item), relation) for item in items]
    tags = tuple(sorted(set(_as_list(config.get("tags"))) | set(_as_list((doc or {}).get("tags")))))
    raw = read_text(project.root / display, display)
    package = project.package_of(display)
    return Model(
        name=name,
        path=display,
        package=package.name if package else "",
        kind=kind,
        config=config,
        config_lines={key: line for key, (path, line) in origin.items() if path == display},
        schema=schema,
        relation=relation,
        table_format=table_format,
        tags=tags,
        description=renderer.render_string(str((doc or {}).get("description") or config.get("description") or ""), "",
                                           (doc.path, doc.line_of("description")) if doc else (display, 1)).strip(),
        column_docs={str(c["name"]): str(c.get("description", "")).strip() for c in (doc or {}).get("columns") or []},
        column_doc_lines={str(c["name"]): (doc.path, c.line) for c in (doc or {}).get("columns") or []},
        column_meta={name: found for name, found in ((str(c["name"]), _mapping(c.get("meta"))) for c in (doc or {}).get("columns") or [])
                     if found},
        constraint_key=constraint_key(doc, doc.path)[0] if doc else None,
        raw_sql=raw,
        checksum=hashlib.sha256(raw.encode()).hexdigest(),
        refs=first.refs,
        source_calls=first.sources,
        notes=notes,
        meta=meta,
    )


def _mapping(value: Any) -> dict[str, Any]:
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _check_relations(models: dict[str, Model], sources: dict[str, Source], problems: ProblemList) -> None:
    """Two models, or a model and a declared table, that are one table in Spark (whose names are
    case-insensitive) are an error: one would silently overwrite the other."""
    owners: dict[str, str] = {}
    for source in (s for s in sources.values() if not s.plain):  # a dbt source may well be a model's table
        owners[source.id.lower()] = f"the declared source {source.id} ({source.path}:{source.line})"
        if source.changes:
            owners[source.changes.table.lower()] = f"the change feed of source {source.id} ({source.path}:{source.line})"
    for model in sorted(models.values(), key=lambda m: ("alias" in m.config, m.path)):  # an alias is the likely cause
        owner = owners.get(model.relation)
        if owner is None:
            owners[model.relation] = f"model '{model.name}' ({model.path})"
            continue
        line = model.config_lines.get("alias") or model.config_lines.get("schema") or 1
        problems.add(Problem(f"model '{model.name}' is the table {model.relation}, and so is {owner}", model.path, line,
                             hint="give one of them another name, alias or schema (Spark names ignore case)",
                             code="relation-collision"))


def _as_list(value: Any) -> list[str]:
    if not value:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def _graph(models: dict[str, Model], sources: dict[str, Source] | None, unusable: dict[str, str],
           problems: ProblemList) -> nx.DiGraph | None:
    """The DAG; unknown refs/sources and a cycle join ``problems`` (None when there is a cycle)."""
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    for model in models.values():
        for call in model.refs:
            target = models.get(call.name)
            if target is not None and call.package not in (None, target.package):  # ref('package', 'model')
                where, named = (f"package '{p}'" if p else "the project" for p in (target.package, call.package))
                problems.add(Problem(f"ref() looks for '{call.name}' in {named}, and it is in {where}", model.path, call.line,
                                     hint=f"write ref('{call.name}')", code="unknown-ref"))
            elif target is not None:
                edges.setdefault((model_id(call.name), model_id(model.name)), {"path": model.path, "line": call.line})
            elif unusable.get(call.name) == "disabled":
                problems.add(Problem(f"ref('{call.name}'): that model is disabled (enabled=false)", model.path, call.line,
                                     hint=f"enable {call.name} or remove this ref", code="disabled-ref"))
            elif call.name not in unusable:
                problems.add(Problem(f"ref('{call.name}'): no such model", model.path, call.line,
                                     hint=did_you_mean(call.name, models) or "check the model's file name", code="unknown-ref"))
        for call in model.source_calls:
            if sources is None:  # lineage files are broken: already reported
                continue
            if call.name in sources:
                edges.setdefault((source_id(call.name), model_id(model.name)), {"path": model.path, "line": call.line})
            else:
                db, _, table = call.name.partition(".")
                close = difflib.get_close_matches(call.name, list(sources), n=1)
                hint = "did you mean source('{}', '{}')?".format(*close[0].split(".", 1)) if close else "declare it in lineage/*.yml"
                problems.add(Problem(f"source('{db}', '{table}'): no such source", model.path, call.line, hint=hint,
                                     code="unknown-source"))
    nodes = [(model_id(m.name), {"kind": m.kind.name, "tags": m.tags, "path": m.path, "package": m.package,
                                 **({"owner": model_id(m.owner)} if m.owner else {})}) for m in models.values()]
    nodes += [(source_id(s.id), {"kind": "source", "tags": s.tags, "path": s.path}) for s in (sources or {}).values()]
    try:
        return build_graph([(a, b, data) for (a, b), data in edges.items()], nodes)
    except CompileError as exc:
        problems.extend(exc)
        return None


def _render_final(models: dict[str, Model], templates, renderer: Renderer, sources: dict[str, Source],
                  problems: ProblemList) -> None:
    """Render again with real relation names (models whose refs and sources all resolve)."""
    for model in models.values():
        if model.name not in templates:  # a seed: its SELECT is written by mvflow
            continue
        if any(c.name not in models for c in model.refs) or any(c.name not in sources for c in model.source_calls):
            continue
        def render(incremental: bool = False) -> str:
            renderer.incremental = incremental
            try:
                return renderer.render(
                    templates[model.name],
                    this=model.relation,
                    resolve_ref=lambda name, line: cte_name(name) if models[name].kind.name == "ephemeral" else models[name].relation,
                    resolve_source=lambda db, table, line: sources[renderer.source_names.get(f"{db}.{table}", f"{db}.{table}")].id,
                ).sql
            finally:
                renderer.incremental = False

        try:
            # keep leading lines: SQL errors then point at the same line as in the model file
            model.sql = render().rstrip() + "\n"
            if model.kind.name == "incremental":
                model.incremental_sql = pretty(parse_select(render(incremental=True), model.path))
        except CompileError as exc:
            problems.extend(exc)
    _inline_ephemerals(models, problems)


def _inline_ephemerals(models: dict[str, Model], problems: ProblemList) -> None:
    """A model that refs ephemeral models reads them as CTEs placed before its own (dbt's
    ``__dbt__cte__<name>``), each ephemeral's own ephemerals first."""
    def needed(model: Model, seen: list[str]) -> list[str]:
        for call in model.refs:
            other = models.get(call.name)
            if other is not None and other.kind.name == "ephemeral" and call.name not in seen:
                needed(other, seen)
                seen.append(call.name)
        return seen

    for model in models.values():
        ctes = needed(model, [])
        if not ctes or model.kind.name == "ephemeral" or not model.sql:
            continue
        try:
            pieces = [(cte_name(n), models[n].sql) for n in ctes if models[n].sql]
            model.sql = with_ctes(model.sql, pieces, model.path)
            if model.incremental_sql:
                model.incremental_sql = with_ctes(model.incremental_sql, pieces, model.path)
        except CompileError as exc:
            problems.extend(exc)


def _parse_models(models: dict[str, Model], sources: dict[str, Source], problems: ProblemList,
                  cache: CompileCache | None = None) -> list[Problem]:
    """Parse every rendered model; returns warnings for tables read but not declared.

    A model's parse results (printed SQL, unnamed columns, tables read) come from the cache, from
    a forked child (half of the models to parse, on large projects), or from parsing it here; a
    model without its tree here is parsed again when something asks for it (``Model.ast``).
    """
    rendered = [m for m in models.values() if m.sql]
    results: dict[str, tuple] = {}
    if cache is not None:
        results = {m.name: hit for m in rendered if (hit := cache.get(cache_key("parse", m.sql))) is not None}
    todo = [m for m in rendered if m.name not in results]
    parsed_now = {m.name for m in todo}
    other = todo[len(todo) // 2:] if worth_forking(len(todo)) else []
    errors: dict[str, CompileError] = {}
    with Background(lambda: {m.name: _parse_results(m) for m in other}, fork=bool(other)) as later:
        for model in todo[:len(todo) - len(other)]:
            _parse_into(model, results, errors)
        from_child = later.result()
    for model in other:
        if from_child.get(model.name) is not None:
            results[model.name] = from_child[model.name]
        else:  # it failed to parse: parse here for the error
            _parse_into(model, results, errors)
    warnings = []
    declared = {m.relation for m in models.values()} | set(sources)
    for model in rendered:
        if model.name in errors:
            problems.extend(errors[model.name])
        if model.name not in results:
            continue
        printed, unnamed, model.tables_read, model.plain_columns = results[model.name]
        if model._ast is None:
            model.parsed_before(printed)
        if cache is not None and model.name in parsed_now:
            cache.put(cache_key("parse", model.sql), results[model.name])
        for text, line in unnamed:
            warnings.append(Problem(f"output column '{text}' has no name: Spark names it after the expression text",
                                    model.path, line, hint=f"add an alias: {text} AS <name>", code="unnamed-column"))
        for table, line in model.tables_read:
            if table not in declared and model.kind.name != "seed":
                model.undeclared_tables.append(table)
                warnings.append(Problem(f"table {table} is read but not declared: mvflow does not know its changes or position in the DAG",
                                        model.path, line, hint="declare it in lineage/*.yml and use source(), or ref() the model",
                                        code="undeclared-table"))
    return warnings


def _parse_results(model: Model) -> tuple[str, list, list, list | None] | None:
    """Printed SQL, unnamed columns, tables read and plain output columns of one model; None when
    it does not parse."""
    try:
        ast = parse_select(model.sql, model.path)
        return pretty(ast), unnamed_columns(ast), table_references(ast), plain_columns(ast)
    except (CompileError, RecursionError):
        return None


def _parse_into(model: Model, results: dict[str, tuple], errors: dict[str, CompileError]) -> None:
    try:
        model.ast = parse_select(model.sql, model.path)
        results[model.name] = (model.select_sql, unnamed_columns(model.ast), table_references(model.ast),
                               plain_columns(model.ast))
    except CompileError as exc:
        errors[model.name] = exc
    except RecursionError:  # parsed, but too deep to print or walk
        errors[model.name] = CompileError(too_deep(model.path))


def _infer_columns(manifest: Manifest, problems: ProblemList) -> None:
    """Output columns of every model in DAG order (``*`` expanded where inputs are known).

    Two output columns with one name (Spark compares names case-insensitively) are an error:
    Spark would refuse to create the view or table.
    """
    schema = manifest.schema()
    index = manifest.table_index()
    for name in manifest.order():
        model = manifest.models[name]
        model.columns = _stored_columns(model, _output_columns(model, schema, index, manifest.cache), problems)
        if model.columns:
            db, _, table = model.relation.partition(".")
            schema.setdefault(db, {})[table] = {c: "string" for c in model.columns}
            for column in _duplicates(model.columns):
                problems.add(Problem(f"two output columns are named '{column}'", model.path, column_line(model.ast, column),
                                     hint="give one of them another alias (AS ...)", code="duplicate-column"))
            _check_column_docs(model, manifest.warnings.append if manifest.project.dialect == "dbt" else problems.add)
            _check_cluster_by(model, problems)


def _stored_columns(model: Model, select_columns: list[str] | None, problems: ProblemList) -> list[str] | None:
    """What the model's table or view holds (``ModelKind.output_columns``): its SELECT's columns, or
    e.g. a numerator's key columns and ids."""
    try:
        return model.kind.output_columns(select_columns)
    except KindError as exc:
        problems.add(Problem(f"model '{model.name}': {exc}", model.path, model.config_lines.get(exc.key, 1),
                             hint=exc.hint, code=exc.code))
        return select_columns


def _check_column_docs(model: Model, report: Callable[[Problem], None]) -> None:
    """Docs of a column the model does not output (a typo, or a column since removed): an error in
    mvflow's projects, a warning in dbt's (dbt accepts them, and well-known projects have some)."""
    outputs = {c.lower(): c for c in model.columns or ()}
    for column, (path, line) in model.column_doc_lines.items():
        if column.lower() not in outputs:
            report(Problem(f"model '{model.name}' docs describe column '{column}', which the model does not output",
                           path, line, code="unknown-column",
                           hint=did_you_mean(column, model.columns) or "its columns: " + ", ".join(model.columns)))


def _check_cluster_by(model: Model, problems: ProblemList) -> None:
    """``cluster_by`` and ``partition_by`` name columns of the model's output (Spark would refuse the
    CREATE at run time)."""
    outputs = {c.lower() for c in model.columns or ()}
    for key in ("cluster_by", "partition_by"):
        for column in getattr(model.kind, key, ()):
            if column.lower() not in outputs:
                problems.add(Problem(f"model '{model.name}': {key} names column '{column}', which the model does not output",
                                     model.path, model.config_lines.get(key, 1), code=key.replace("_", "-"),
                                     hint=did_you_mean(column, model.columns) or "its columns: " + ", ".join(model.columns)))


def _output_columns(model: Model, schema: dict, index: dict, cache: CompileCache | None) -> list[str] | None:
    if model.plain_columns is not None:
        return list(model.plain_columns)
    if cache is None:
        return output_columns(model.ast, schema)
    key = cache_key("columns", model.sql, read_tables((name for name, _ in model.tables_read), schema, index))
    found = cache.get(key)
    if found is None:
        found = (output_columns(model.ast, schema),)
        cache.put(key, found)
    return found[0]


def _duplicates(columns: list[str]) -> list[str]:
    seen: set[str] = set()
    found = []
    for column in columns:
        if column.lower() in seen and column not in found:
            found.append(column)
        seen.add(column.lower())
    return found


def _load_model_docs(project: Project) -> dict[str, LineDict]:
    """The entries of ``models:`` and ``seeds:`` in ``models/**/*.yml`` (and YAML files beside the
    seeds) by name, each tagged with its file path."""
    problems: list[Problem] = []
    docs: dict[str, LineDict] = {}
    files = sorted(set(project.files("models", (".yml", ".yaml")) + project.files("seeds", (".yml", ".yaml"))
                       + project.files("snapshots", (".yml", ".yaml"))))
    for path in files:
        display = project.relative(path)
        data = load_yaml(path, display)
        if data is None:
            continue
        lists = [key for key in _DOC_LISTS if isinstance(data, LineDict) and isinstance(data.get(key), list)]
        if not lists and not (project.dialect == "dbt" and isinstance(data, LineDict)):
            problems.append(Problem("a model docs file must hold 'models:' (or 'seeds:', 'snapshots:'), a list", display, 1, code="yaml",
                                    hint="start the file with 'models:' and list models under it as '- name: ...'"))
            continue
        problems += check_keys(data, {"version", *_DOC_LISTS, *(_DBT_DOC_KEYS if project.dialect == "dbt" else ())},
                               display, "a model docs file")
        for key in lists:
            for entry in data[key]:
                problems += _add_doc_entry(docs, entry, display, data.line_of(key), key[:-1], project.dialect == "dbt")
    if problems:
        raise CompileError(problems)
    return docs


_DOC_LISTS = ("models", "seeds", "snapshots")
#: more keys of a dbt schema YAML file (sources: compiler/dbt/sources.py; the others are not read)
_DBT_DOC_KEYS = ("sources", "macros", "exposures", "metrics", "semantic_models", "saved_queries", "unit_tests", "analyses",
                 "groups")


def _add_doc_entry(docs: dict[str, LineDict], entry: object, display: str, line: int, what: str,
                   dbt: bool = False) -> list[Problem]:
    if not isinstance(entry, LineDict) or "name" not in entry:
        return [Problem(f"each entry of '{what}s:' needs a name", display, getattr(entry, "line", line),
                        hint=f"write '- name: <{what}>' with description/columns under it", code="yaml")]
    name = str(entry["name"])
    allowed = _DOC_MODEL_KEYS | (_DBT_MODEL_KEYS if dbt else set()) | ({"relation"} if what == "snapshot" else set())
    problems = check_keys(entry, allowed, display, f"{what} '{name}' docs")
    problems += _doc_shape_problems(entry, display, dbt)
    if name in docs:
        return problems + [Problem(f"{what} '{name}' is documented twice (also {docs[name].path}:{docs[name].line})",
                                   display, entry.line, hint="keep one entry", code="duplicate-docs")]
    entry.path = display  # type: ignore[attr-defined]
    entry.what = what  # type: ignore[attr-defined]
    docs[name] = entry
    return problems


def _doc_shape_problems(entry: LineDict, display: str, dbt: bool = False) -> list[Problem]:
    """``config`` must be a mapping, ``columns`` a list of mappings with a name, each ``type:`` a Spark
    SQL type (not in a ``dbt`` project: its docs may name a warehouse's types)."""
    problems = []
    config = entry.get("config")
    if config is not None and not isinstance(config, LineDict):
        problems.append(Problem(f"model '{entry['name']}' docs: config must be a mapping", display, entry.line_of("config"),
                                hint="e.g. 'config: {materialized: table}'", code="bad-value"))
        entry["config"] = None
    columns = entry.get("columns")
    if columns is not None and not (isinstance(columns, list) and all(isinstance(c, LineDict) and "name" in c for c in columns)):
        problems.append(Problem(f"model '{entry['name']}' docs: columns must be a list of '- name: ...' entries",
                                display, entry.line_of("columns"), hint="e.g. '- {name: id, description: ...}'", code="bad-value"))
        entry["columns"] = None
    problems += constraint_key(entry, display)[1]
    for column in entry.get("columns") or []:
        problems += check_keys(column, _DOC_COLUMN_KEYS | (_DBT_COLUMN_KEYS if dbt else set()), display, "column docs", required={"name"})
        if not dbt:
            problems += type_problems(column, display, f"model '{entry['name']}' docs: column '{column.get('name')}'")
    return problems
