"""Writing compile output to ``target/``: compiled SQL, run scripts and ``manifest.json``.

Files are written only when their content changes, and the output is byte-stable: sorted
keys, no timestamps, one trailing newline.
"""

from __future__ import annotations

import json
import posixpath
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, Iterable

from .background import Background, worth_forking
from .manifest import Manifest, Model
from .data_tests import DataTest
from .dbt.docs import doc_blocks
from .graph import node_name
from .lineage import Lineage, lineage
from .paths import target_file

MANIFEST_VERSION = 1


def model_stem(model: Model, manifest: Manifest) -> str:
    """``models/staging/stg_offers.sql`` → ``staging/stg_offers`` (the path under target/); a
    package's model's is under the package's name (``dbt_utils/x``); a data test's is
    ``tests/<name>``; a snapshot's ``snapshots/<name>`` (a file may hold several)."""
    if isinstance(model, DataTest):
        return model.target_stem
    stem = model.path.rsplit(".", 1)[0]
    package = manifest.project.package_of(model.path)
    if package is not None:
        stem = f"{package.name}/{manifest.project.under_root(stem)}"
    else:
        prefixes = [root.rstrip("/") + "/" for root in manifest.project.model_paths]
        stem = next((stem[len(prefix):] for prefix in prefixes if model.path.startswith(prefix)), stem)
    if model.owner or model.kind.name == "snapshot":  # beside its owner's, or its file's
        return posixpath.join(posixpath.dirname(stem), model.name)
    return stem


def compiled_sql(model: Model) -> str:
    return f"-- {model.name} ({model.kind.name}) compiled from {model.path}\n{model.select_sql}\n"


def write_artifacts(manifest: Manifest, selected: Iterable[str] | None = None) -> list[Path]:
    """Write compiled SQL and run scripts of the selected models (default all) and the manifest."""
    write = _derive(manifest, selected)
    write.flush()
    return write.written


def check_artifacts(manifest: Manifest, selected: Iterable[str] | None = None) -> None:
    """Derive everything ``write_artifacts`` would write and write nothing: the checks compile makes
    beyond ``compile_project`` (column lineage, each kind's run files, paths under target/) fail
    here alike. ``mvflow plan`` calls it, so that it accepts exactly what ``mvflow compile`` accepts."""
    _derive(manifest, selected).check()


def _derive(manifest: Manifest, selected: Iterable[str] | None) -> "_Writer":
    target = manifest.project.target_dir
    write = _Writer(target)
    chosen = set(selected) if selected is not None else set(manifest.models)  # models and tests
    names = [name for name in (selected if selected is not None else manifest.models) if name in manifest.models]
    with Background(lambda: _traced(manifest), fork=worth_forking(len(manifest.models))) as later:
        for name in names:
            model = manifest.models[name]
            stem = model_stem(model, manifest)
            write(target / "compiled" / f"{stem}.sql", compiled_sql(model))
            files = model.kind.run_files(manifest, model)
            if model.kind.run_folder:
                for file_name, text in files.items():
                    write(target / "run" / stem / file_name, text)
                write.prune(target / "run" / stem)
            else:
                for text in files.values():
                    write(target / "run" / f"{stem}.sql", text)
        # with a selection, the tests selected or of what is selected (the others' files stay as they were)
        for test in [t for t in manifest.tests.values() if selected is None or t.name in chosen or chosen & set(t.depends_on)]:
            write(target / "compiled" / f"{test.target_stem}.sql", f"-- {test.name} (test) compiled from {test.path}\n{test.sql}")
            for text in test.kind.run_files(manifest, test).values():
                write(target / "run" / f"{test.target_stem}.sql", text)
        for which, statements in manifest.hooks.items():
            write(target / "run" / f"{which}.sql", f"-- mvflow: the project's {which} hooks\n" +
                  "".join(f"\n{sql.rstrip()};\n" for sql in statements))
        if selected is None:
            write.prune(target / "compiled" / "tests")
            write.prune(target / "run" / "tests")
        lineage_json, entries, changes = later.result()
    if manifest.cache is not None and later.forked:
        manifest.cache.apply_changes(changes)
    write(target / "lineage.json", lineage_json)
    entries = {name: _Json(text) for name, text in entries.items()}
    write(target / "manifest.json", _json_text(manifest_dict(manifest, entries=entries)))
    return write


def _traced(manifest: Manifest) -> tuple[str, dict[str, str], tuple[list[str], dict[str, Any]]]:
    """Column lineage as JSON: lineage.json, each model's entry for manifest.json, and what it
    did to the compile cache. This is the part of compile a child can do alone; text is what it
    sends back because text unpickles far faster than the dicts."""
    if manifest.cache is not None:
        manifest.cache.take_changes()
    traced = lineage(manifest)
    models = {name: _lineage_entry(traced, manifest, name) for name in manifest.models}
    entries = {name: _json_text(entry)[:-1] for name, entry in models.items()}
    changes = manifest.cache.take_changes() if manifest.cache is not None else ([], {})
    return _json_text({**traced.to_dict(), "models": models}), entries, changes


def _lineage_entry(traced: Lineage, manifest: Manifest, name: str) -> dict[str, Any] | None:
    """A model's lineage; for an MV also each input's used columns and derived key path."""
    entry = traced.model_dict(name)
    model = manifest.models[name]
    from .kinds import MvKind
    from .kinds.mv.derive import input_paths
    from .kinds.mv.analyze import mv_plan

    if not isinstance(model.kind, MvKind) or entry is None:
        return entry

    return {**entry, "mv_inputs": input_paths(mv_plan(model, manifest))}


def run_path(model: Model, manifest: Manifest) -> str:
    """Where under ``target/`` the model's run files are: ``run/<model>.sql`` or a folder ``run/<model>/``."""
    stem = model_stem(model, manifest)
    return f"run/{stem}/" if model.kind.run_folder else f"run/{stem}.sql"


class _Writer:
    """Collects the files of one compile, then writes those whose content changed: nothing is
    written when deriving any of them fails, so a failed compile leaves target/ as it was; nor when
    any of them would land outside ``target`` (``paths.target_file``)."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.written: list[Path] = []
        self._texts: dict[Path, str] = {}
        self._pruned: list[Path] = []

    def __call__(self, path: Path, text: str) -> None:
        self._texts[path] = text
        self.written.append(path)

    def prune(self, folder: Path) -> None:
        """At ``flush``, remove the SQL files of a model's run folder this compile did not write (an
        older mvflow's, or an input the model no longer reads), so the folder shows what runs."""
        self._pruned.append(folder)

    def check(self) -> None:
        """Every file lands inside ``target``."""
        for path in [*self._texts, *self._pruned]:
            target_file(self.target, path.relative_to(self.target).as_posix())

    def flush(self) -> None:
        self.check()
        for folder in sorted({path.parent for path in self._texts}):
            folder.mkdir(parents=True, exist_ok=True)
        for path, text in self._texts.items():
            try:
                same = path.read_text(encoding="utf-8") == text
            except FileNotFoundError:
                same = False
            if not same:
                path.write_text(text, encoding="utf-8")
        for folder in self._pruned:
            for path in folder.glob("*.sql"):
                if path not in self._texts:
                    path.unlink()


def _json_text(value: Any) -> str:
    """``json.dumps(value, indent=2, sort_keys=True)`` plus a newline, byte for byte, about twice
    as fast for manifest.json: the standard library's indenting encoder is pure Python.

    >>> data = {"b": [1, 2.5, None, True], "a": {"x": "é\\n"}, "c": [], "d": {}}
    >>> _json_text(data) == json.dumps(data, indent=2, sort_keys=True) + "\\n"
    True
    >>> inner = _Json(_json_text([1, {"c": 2}])[:-1])  # JSON text written elsewhere, re-indented here
    >>> _json_text({"a": {"b": inner}}) == json.dumps({"a": {"b": [1, {"c": 2}]}}, indent=2, sort_keys=True) + "\\n"
    True
    """
    chunks: list[str] = []
    try:
        _json_chunks(value, chunks.append, "\n")
    except TypeError:  # keys that are not strings, or values json itself rejects: let json decide
        return json.dumps(_plain(value), indent=2, sort_keys=True) + "\n"
    chunks.append("\n")
    return "".join(chunks)


def _plain(value: Any) -> Any:
    if isinstance(value, _Json):
        return json.loads(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


class _Json(str):
    """JSON text to embed as is (written at the top level: re-indented where it lands)."""


def _json_chunks(value: Any, emit, newline: str) -> None:
    if isinstance(value, _Json):
        emit(value.replace("\n", newline))  # JSON strings hold no raw newlines: only indentation changes
    elif isinstance(value, str):
        emit(encode_basestring_ascii(value))
    elif value is None or value is True or value is False:
        emit("null" if value is None else "true" if value else "false")
    elif isinstance(value, int):
        emit(int.__repr__(value))
    elif isinstance(value, float):
        emit(json.dumps(value))
    elif isinstance(value, (dict, list, tuple)):
        if not value:
            emit("{}" if isinstance(value, dict) else "[]")
            return
        inner = newline + "  "
        if isinstance(value, dict):
            separator = "{" + inner
            for key, item in sorted(value.items()):
                emit(separator)
                emit(encode_basestring_ascii(key))
                emit(": ")
                _json_chunks(item, emit, inner)
                separator = "," + inner
            emit(newline + "}")
        else:
            separator = "[" + inner
            for item in value:
                emit(separator)
                _json_chunks(item, emit, inner)
                separator = "," + inner
            emit(newline + "]")
    else:
        raise TypeError(f"{type(value).__name__} is not JSON serializable")


def manifest_dict(manifest: Manifest, traced: Lineage | None = None, entries: dict[str, Any] | None = None) -> dict[str, Any]:
    """manifest.json; ``entries``: each model's lineage entry, if already known (as ``_Json`` text)."""
    graph = manifest.graph
    if entries is None:
        traced = traced or lineage(manifest)
        entries = {name: _lineage_entry(traced, manifest, name) for name in manifest.models}
    return {
        "manifest_version": MANIFEST_VERSION,
        "project": {"name": manifest.project.name, "version": manifest.project.version,
                    "overview": doc_blocks(manifest.project).get("__overview__")},
        "target": manifest.target,
        "sources": {sid: s.to_dict() for sid, s in manifest.sources.items()},
        "models": {name: {**_model_dict(m, manifest), "lineage": entries[name]} for name, m in manifest.models.items()},
        "tests": {name: _test_dict(t) for name, t in manifest.tests.items()},
        "exposures": {e.name: e.to_dict() for e in manifest.exposures},
        "order": manifest.order(),
        "children": {node_name(n): sorted(node_name(c) for c in graph.successors(n)) for n in sorted(graph)},
        "warnings": [p.format() for p in manifest.warnings],
    }


def _model_dict(model: Model, manifest: Manifest) -> dict[str, Any]:
    stem = model_stem(model, manifest)
    return {
        "name": model.name,
        "path": model.path,
        "kind": model.kind.to_dict(),
        "config": jsonable(model.config),
        "relation": model.relation,
        "schema": model.schema,
        "tags": list(model.tags),
        "description": model.description,
        "meta": jsonable(model.meta),
        "columns": [{"name": c, "description": model.column_docs.get(c, ""),
                     **({"meta": jsonable(model.column_meta[c])} if c in model.column_meta else {})} for c in model.columns or []],
        "columns_known": model.columns is not None,
        "depends_on": {"models": model.depends_on_models, "sources": model.depends_on_sources},
        "undeclared_tables": model.undeclared_tables,
        "checksum": model.checksum,
        "compiled_path": f"compiled/{stem}.sql",
        "run_path": run_path(model, manifest),
        "derived": model.kind.derived_sql(manifest, model),
        "compiled_sql": model.select_sql,
    }


def _test_dict(test: DataTest) -> dict[str, Any]:
    declared = test.declaration
    return {
        "name": test.name,
        "path": test.path,
        "line": declared.line,
        "test_type": declared.test_type,
        "attached_to": declared.attached_to,
        "column": declared.column,
        "kwargs": jsonable(dict(declared.kwargs)),
        "config": jsonable(vars(test.config)),
        "depends_on": {"models": list(test.depends_on), "sources": list(test.sources)},
        "compiled_path": f"compiled/{test.target_stem}.sql",
        "run_path": f"run/{test.target_stem}.sql",
        "compiled_sql": test.sql,
    }


def jsonable(value: Any) -> Any:
    """Plain JSON data: dict keys as text, tuples as lists, times in ISO form, anything else as text.

    >>> jsonable({1: ("a", None)})
    {'1': ['a', None]}
    """
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return value.isoformat() if hasattr(value, "isoformat") else str(value)
