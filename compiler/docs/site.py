"""The docs site's content: compile artifacts (+ state, when known) → the site's files.

Pure: dicts in, ``{file name: text}`` out. Everything the page shows is in ``data.js``, one
global assignment, so the site opens from ``file://`` as well as over HTTP; ``app.js`` builds
the DOM with ``textContent`` only, so user text can never become markup. Output is
deterministic: sorted keys, no timestamps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from compiler.status import COLUMNS

from .layout import layout

SITE_VERSION = 1
ASSETS = ("index.html", "app.js", "style.css")


def site_data(manifest: Mapping[str, Any], run_files: Mapping[str, list[dict[str, str]]] | None = None,
              state: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The object ``data.js`` assigns to ``window.MVFLOW_DOCS``.

    ``manifest`` is ``target/manifest.json`` as a dict; ``run_files`` maps a model to its run
    scripts and derived statements (``[{"title", "path", "sql"}]``); ``state`` is what the state
    store holds (see ``compiler.docs.read_state``), or None when there is none.

    >>> data = site_data({"project": {"name": "p"}, "models": {"m": {"path": "models/a/m.sql", "kind": {"name": "view"},
    ...     "depends_on": {"models": [], "sources": ["d.t"]}, "lineage": {"columns": {}, "uses": {"source.d.t": ["x"]}}}},
    ...     "sources": {"d.t": {"id": "d.t", "columns": [{"name": "x"}]}}})
    >>> data["nodes"]["model.m"]["folder"], data["edges"], data["sources"]["d.t"]["used_by"]
    ('a', [['source.d.t', 'model.m']], {'x': ['m']})
    """
    models = {name: _model(entry, (run_files or {}).get(name, []), state) for name, entry in manifest.get("models", {}).items()}
    sources = {sid: _source(sid, entry, manifest.get("models", {})) for sid, entry in manifest.get("sources", {}).items()}
    nodes = {f"source.{sid}": {"id": f"source.{sid}", "name": sid, "type": "source", "kind": "source",
                               "folder": entry.get("database", "")} for sid, entry in sources.items()}
    nodes.update({f"model.{name}": {"id": f"model.{name}", "name": name, "type": "model", "kind": entry["kind"]["name"],
                                    "folder": _folder(entry["path"])} for name, entry in models.items()})
    edges = sorted([f"source.{s}" if f"source.{s}" in nodes else f"model.{s}", f"model.{name}"]
                   for name, entry in models.items()
                   for s in entry["depends_on"]["sources"] + entry["depends_on"]["models"])
    edges = [e for e in edges if e[0] in nodes]
    for node, (layer, row) in layout(nodes, [tuple(e) for e in edges]).items():
        nodes[node].update(layer=layer, row=row)
    return {
        "site_version": SITE_VERSION,
        "project": dict(manifest.get("project", {})),
        "target": manifest.get("target"),
        "warnings": list(manifest.get("warnings", [])),
        "nodes": dict(sorted(nodes.items())),
        "edges": edges,
        "models": models,
        "sources": sources,
        "state": _state_summary(state),
    }


def _folder(path: str) -> str:
    """``models/marts/core/x.sql`` → ``marts/core`` (the model root is dropped)."""
    parts = path.split("/")[1:-1]
    return "/".join(parts)


def _model(entry: Mapping[str, Any], runs: list[dict[str, str]], state: Mapping[str, Any] | None) -> dict[str, Any]:
    model = {k: v for k, v in entry.items() if k != "lineage"}
    lineage = dict(entry.get("lineage") or {"columns": {}, "uses": {}, "types": {}, "unknown": {"*": "not analysed"}})
    lineage.pop("sources", None)  # the page walks the direct edges itself
    model["lineage"] = lineage
    model["run_files"] = list(runs)
    model["state"] = (state or {}).get("models", {}).get(entry["name"]) if state else None
    return model


def _source(sid: str, entry: Mapping[str, Any], models: Mapping[str, Any]) -> dict[str, Any]:
    used: dict[str, set[str]] = {}
    readers = set()
    for name, model in models.items():
        uses = (model.get("lineage") or {}).get("uses", {}).get(f"source.{sid}")
        if sid in model.get("depends_on", {}).get("sources", []) or uses:
            readers.add(name)
        for column in uses or ():
            used.setdefault(column, set()).add(name)
    return {**entry, "used_by": {c: sorted(m) for c, m in sorted(used.items())}, "models": sorted(readers)}


def _state_summary(state: Mapping[str, Any] | None) -> dict[str, Any]:
    if not state:
        return {"available": False, "note": "Offsets, recent steps, lag and blocked-by reasons appear here once `mvflow run` has created it."}
    return {k: v for k, v in state.items() if k != "models"} | {"available": True, "columns": [list(c) for c in COLUMNS]}


def site_files(data: Mapping[str, Any]) -> dict[str, str]:
    """The site's files: the bundled assets plus ``data.js``.

    >>> sorted(site_files({"x": "</script>"}))
    ['app.js', 'data.js', 'index.html', 'style.css']
    >>> site_files({"x": "</script>"})["data.js"]
    'window.MVFLOW_DOCS = {"x":"<\\\\/script>"};\\n'
    """
    assets = Path(__file__).with_name("assets")
    files = {name: (assets / name).read_text(encoding="utf-8") for name in ASSETS}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).replace("</", "<\\/")
    files["data.js"] = f"window.MVFLOW_DOCS = {text};\n"
    return files
