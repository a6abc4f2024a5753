"""Writing compile output to ``target/``: compiled SQL, run scripts and ``manifest.json``.

Files are written only when their content changes, and the output is byte-stable: sorted
keys, no timestamps, one trailing newline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from . import materialize
from .compile import Manifest, Model
from .graph import node_name
from .lineage import Lineage, lineage

MANIFEST_VERSION = 1


def model_stem(model: Model, manifest: Manifest) -> str:
    """``models/staging/stg_offers.sql`` → ``staging/stg_offers`` (the path under target/)."""
    for root in manifest.project.model_paths:
        prefix = root.rstrip("/") + "/"
        if model.path.startswith(prefix):
            return model.path[len(prefix):-len(".sql")]
    return model.path[: -len(".sql")]


def compiled_sql(model: Model) -> str:
    return f"-- {model.name} ({model.kind.name}) compiled from {model.path}\n{model.select_sql}\n"


def write_artifacts(manifest: Manifest, selected: Iterable[str] | None = None) -> list[Path]:
    """Write compiled SQL and run scripts of the selected models (default all) and the manifest."""
    target = manifest.project.target_dir
    written = []
    for name in selected if selected is not None else manifest.models:
        model = manifest.models[name]
        stem = model_stem(model, manifest)
        written.append(_write(target / "compiled" / f"{stem}.sql", compiled_sql(model)))
        items = materialize.statements(model)
        if items is not None:
            written.append(_write(target / "run" / f"{stem}.sql", materialize.script(model, items)))
        if model.kind.name == "fact":
            written += _write_fact(target / "run" / stem, manifest, model)
        if model.kind.name == "mv":
            written += _write_mv(target / "run" / stem, manifest, model)
    traced = lineage(manifest)
    written.append(_write(target / "lineage.json", json.dumps(traced.to_dict(), indent=2, sort_keys=True) + "\n"))
    written.append(_write(target / "manifest.json", json.dumps(manifest_dict(manifest, traced), indent=2, sort_keys=True) + "\n"))
    return written


def _write_fact(folder: Path, manifest: Manifest, model: Model) -> list[Path]:
    """``run/<model>/step.sql`` and ``bounds.sql``: a fact's step and how its ``next`` is chosen."""
    from .fact import bounds_script, fact, step_script

    plan = fact(manifest, model)
    return [_write(folder / "step.sql", step_script(plan)), _write(folder / "bounds.sql", bounds_script(plan))]


def _write_mv(folder: Path, manifest: Manifest, model: Model) -> list[Path]:
    """``run/<model>/<name>.sql``: every query and statement derived for an MV (see compiler/mv.py)."""
    header = f"-- mvflow: {model.name} (mv), derived from {model.path}\n"
    return [_write(folder / f"{name.replace(':', '__')}.sql", f"{header}{sql.rstrip()};\n")
            for name, sql in (_mv_derived(model, manifest) or {}).items()]


def _mv_derived(model: Model, manifest: Manifest) -> dict[str, str] | None:
    """An MV's derived SQL by name, derived once for its run files and manifest.json."""
    from .mv import derive, mv_plan

    if model.kind.name != "mv":
        return None
    return manifest.derived("mv_queries", model, lambda: derive(mv_plan(model, manifest)).queries)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def manifest_dict(manifest: Manifest, traced: Lineage | None = None) -> dict[str, Any]:
    graph = manifest.graph
    traced = traced or lineage(manifest)
    return {
        "manifest_version": MANIFEST_VERSION,
        "project": {"name": manifest.project.name, "version": manifest.project.version},
        "target": manifest.target,
        "sources": {sid: s.to_dict() for sid, s in manifest.sources.items()},
        "models": {name: {**_model_dict(m, manifest), "lineage": traced.model_dict(name)} for name, m in manifest.models.items()},
        "order": manifest.order(),
        "children": {node_name(n): sorted(node_name(c) for c in graph.successors(n)) for n in sorted(graph)},
        "warnings": [p.format() for p in manifest.warnings],
    }


def _model_dict(model: Model, manifest: Manifest) -> dict[str, Any]:
    stem = model_stem(model, manifest)
    has_run = materialize.statements(model) is not None
    return {
        "name": model.name,
        "path": model.path,
        "kind": model.kind.to_dict(),
        "config": _jsonable(model.config),
        "relation": model.relation,
        "schema": model.schema,
        "tags": list(model.tags),
        "description": model.description,
        "columns": [{"name": c, "description": model.column_docs.get(c, "")} for c in model.columns or []],
        "columns_known": model.columns is not None,
        "depends_on": {"models": model.depends_on_models, "sources": model.depends_on_sources},
        "undeclared_tables": model.undeclared_tables,
        "checksum": model.checksum,
        "compiled_path": f"compiled/{stem}.sql",
        "run_path": f"run/{stem}.sql" if has_run else f"run/{stem}/" if model.kind.name in ("fact", "mv") else None,
        "derived": _mv_derived(model, manifest),
        "compiled_sql": model.select_sql,
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
