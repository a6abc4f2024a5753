"""Compile: project files → a Manifest of resolved, parsed models and the DAG.

Pure: no Spark, no state store, no clock. Same files in, same Manifest out.
Steps: load sources → load model docs → render every model once to collect its config and
calls → resolve relations → build the DAG → render again with real names → parse with
sqlglot → output columns in DAG order.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from sqlglot import exp

from .errors import CompileError, Problem, ProblemList
from .graph import build_graph, model_id, model_order, source_id
from .kinds import Kind, KindError, create_kind
from .parse import output_columns, parse_select, table_references
from .project import Project
from .render import Call, Renderer
from .sources import Source, load_sources
from .yamlfile import LineDict, check_keys, load_yaml

_DOC_MODEL_KEYS = {"name", "description", "tags", "config", "columns"}
_DOC_COLUMN_KEYS = {"name", "description", "type", "tags", "tests"}


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
    ast: exp.Query | None = None
    columns: list[str] | None = None
    undeclared_tables: list[str] = field(default_factory=list)

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

    def order(self) -> list[str]:
        return model_order(self.graph)

    def relation_of(self, name: str) -> str:
        """The table/view name a ref or source resolves to."""
        return self.models[name].relation if name in self.models else name

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


def compile_project(project: Project, target: str | None = None) -> Manifest:
    """Compile every model of ``project`` for ``target`` (database defaults come from it)."""
    database = project.target(target).spark.database
    sources = load_sources(project)
    docs = _load_model_docs(project)
    renderer = Renderer(project)
    models, templates = _collect_models(project, renderer, docs, database)
    graph = _graph(models, sources)
    _render_final(models, templates, renderer, sources)
    warnings = _parse_models(models, graph, sources)
    manifest = Manifest(project, project.target(target).name, database, sources, models, graph, warnings)
    _infer_columns(manifest)
    return manifest


def _collect_models(project: Project, renderer: Renderer, docs: dict[str, LineDict], database: str):
    problems = ProblemList()
    models: dict[str, Model] = {}
    templates = {}
    for path in project.files("models", (".sql",)):
        display = project.relative(path)
        name = path.stem
        if name in models:
            problems.add(Problem(f"duplicate model name '{name}' (also {models[name].path})", display, 1,
                                 hint="model names are file names and must be unique: rename one file", code="duplicate-model"))
            continue
        try:
            template = renderer.template(path)
            first = renderer.render(template, this=f"{database}.{name}")
        except CompileError as exc:
            problems.extend(exc)
            continue
        model = _model(project, display, name, first, docs.get(name), database, problems)
        if model is not None:
            models[name] = model
            templates[name] = template
    for name, doc in docs.items():
        if name not in models and not any(p.path == doc.path for p in problems.problems):
            problems.add(Problem(f"model docs name '{name}', which is not a model", doc.path, doc.line,
                                 hint=_did_you_mean(name, models) or "remove the entry or add the model", code="unknown-model"))
    problems.raise_if_any()
    return dict(sorted(models.items())), templates


def _model(project: Project, display: str, name: str, first, doc: LineDict | None, database: str, problems: ProblemList):
    model_root = next((r for r in project.model_paths if display.startswith(r.rstrip("/") + "/")), "")
    config = {**project.defaults_for(display[len(model_root) + 1:] if model_root else display)}
    config.update((doc or {}).get("config") or {})
    config.update(first.config)
    if not config.get("enabled", True):
        return None
    try:
        kind = create_kind(config)
    except KindError as exc:
        key = "materialized" if exc.code == "unknown-kind" else next(iter(first.config), "materialized")
        problems.add(Problem(str(exc), display, first.config_lines.get(key, 1), hint=exc.hint, code=exc.code))
        return None
    schema = str(config.get("schema") or config.get("database") or database)
    tags = tuple(sorted(set(_as_list(config.get("tags"))) | set(_as_list((doc or {}).get("tags")))))
    raw = (project.root / display).read_text(encoding="utf-8")
    return Model(
        name=name,
        path=display,
        kind=kind,
        config=config,
        config_lines=first.config_lines,
        schema=schema,
        relation=f"{schema}.{config.get('alias') or name}".lower(),
        tags=tags,
        description=str((doc or {}).get("description") or config.get("description") or "").strip(),
        column_docs={str(c["name"]): str(c.get("description", "")).strip() for c in (doc or {}).get("columns") or []},
        raw_sql=raw,
        checksum=hashlib.sha256(raw.encode()).hexdigest(),
        refs=first.refs,
        source_calls=first.sources,
    )


def _as_list(value: Any) -> list[str]:
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _did_you_mean(name: str, candidates) -> str | None:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f"did you mean '{close[0]}'?" if close else None


def _graph(models: dict[str, Model], sources: dict[str, Source]) -> nx.DiGraph:
    problems = ProblemList()
    edges = []
    for model in models.values():
        for call in model.refs:
            if call.name not in models:
                problems.add(Problem(f"ref('{call.name}'): no such model", model.path, call.line,
                                     hint=_did_you_mean(call.name, models) or "check the model's file name", code="unknown-ref"))
            else:
                edges.append((model_id(call.name), model_id(model.name)))
        for call in model.source_calls:
            if call.name not in sources:
                db, _, table = call.name.partition(".")
                problems.add(Problem(f"source('{db}', '{table}'): no such source", model.path, call.line,
                                     hint=_did_you_mean(call.name, sources) or "declare it in lineage/*.yml", code="unknown-source"))
            else:
                edges.append((source_id(call.name), model_id(model.name)))
    problems.raise_if_any()
    nodes = [(model_id(m.name), {"kind": m.kind.name, "tags": m.tags, "path": m.path}) for m in models.values()]
    nodes += [(source_id(s.id), {"kind": "source", "tags": s.tags, "path": s.path}) for s in sources.values()]
    return build_graph(edges, nodes)


def _render_final(models: dict[str, Model], templates, renderer: Renderer, sources: dict[str, Source]) -> None:
    problems = ProblemList()
    for model in models.values():
        try:
            rendered = renderer.render(
                templates[model.name],
                this=model.relation,
                resolve_ref=lambda name, line: models[name].relation,
                resolve_source=lambda db, table, line: sources[f"{db}.{table}"].id,
            )
        except CompileError as exc:
            problems.extend(exc)
            continue
        model.sql = rendered.sql.strip() + "\n"
    problems.raise_if_any()


def _parse_models(models: dict[str, Model], graph: nx.DiGraph, sources: dict[str, Source]) -> list[Problem]:
    problems = ProblemList()
    warnings = []
    declared = {m.relation for m in models.values()} | set(sources)
    for model in models.values():
        try:
            model.ast = parse_select(model.sql, model.path)
        except CompileError as exc:
            problems.extend(exc)
            continue
        for table, line in table_references(model.ast):
            if table not in declared:
                model.undeclared_tables.append(table)
                warnings.append(Problem(f"table {table} is read but not declared: mvflow does not know its changes or position in the DAG",
                                        model.path, line, hint="declare it in lineage/*.yml and use source(), or ref() the model",
                                        code="undeclared-table"))
    problems.raise_if_any()
    return warnings


def _infer_columns(manifest: Manifest) -> None:
    schema = manifest.schema()
    for name in manifest.order():
        model = manifest.models[name]
        model.columns = output_columns(model.ast, schema)
        if model.columns:
            db, _, table = model.relation.partition(".")
            schema.setdefault(db, {})[table] = {c: "string" for c in model.columns}


def _load_model_docs(project: Project) -> dict[str, LineDict]:
    """``models/**/*.yml`` entries by model name, each tagged with its file path."""
    problems: list[Problem] = []
    docs: dict[str, LineDict] = {}
    for path in project.files("models", (".yml", ".yaml")):
        display = project.relative(path)
        data = load_yaml(path, display)
        if data is None:
            continue
        if not isinstance(data, LineDict) or not isinstance(data.get("models"), list):
            problems.append(Problem("a model docs file must hold 'models:', a list", display, 1, code="yaml"))
            continue
        for entry in data["models"]:
            if not isinstance(entry, LineDict) or "name" not in entry:
                problems.append(Problem("each entry of 'models:' needs a name", display, getattr(entry, "line", 1), code="yaml"))
                continue
            problems += check_keys(entry, _DOC_MODEL_KEYS, display, f"model '{entry['name']}' docs")
            for column in entry.get("columns") or []:
                if isinstance(column, LineDict):
                    problems += check_keys(column, _DOC_COLUMN_KEYS, display, "column docs", required={"name"})
            entry.path = display  # type: ignore[attr-defined]
            docs[str(entry["name"])] = entry
    if problems:
        raise CompileError(problems)
    return docs
