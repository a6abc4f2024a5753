"""The docs site's content: compile artifacts (+ state, when known) → the site's files.

Pure: dicts in, ``{file name: text}`` out. Everything the page shows is in ``data.js``, one
global assignment, so the site opens from ``file://`` as well as over HTTP; ``app.js`` builds
the DOM with ``textContent`` only, so user text can never become markup. Output is
deterministic: sorted keys, no timestamps but the ones ``run_results.json`` holds.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Mapping

from compiler.status import COLUMNS

from .layout import layout

SITE_VERSION = 1
ASSETS = ("index.html", "app.js", "style.css")
SEED_LINES = 20  # a seed's page shows its CSV's first lines, not the whole file
RESULT_KEYS = ("status", "seconds", "failures", "message", "started_at", "rows")


def site_data(manifest: Mapping[str, Any], run_files: Mapping[str, list[dict[str, str]]] | None = None,
              state: Mapping[str, Any] | None = None, raw_sql: Mapping[str, str] | None = None,
              results: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The object ``data.js`` assigns to ``window.MVFLOW_DOCS``.

    ``manifest`` is ``target/manifest.json`` as a dict; ``run_files`` maps a model or test to its
    run scripts and derived statements (``[{"title", "path", "sql"}]``); ``state`` is what the state
    store holds (see ``compiler.docs.read_state``), or None when there is none; ``raw_sql`` maps a
    model or singular test to its file as written (Jinja included; a seed's CSV); ``results`` is
    ``target/run_results.json``, or None: each model's and test's last result.

    >>> data = site_data({"project": {"name": "p"}, "models": {"m": {"path": "models/a/m.sql", "kind": {"name": "view"},
    ...     "depends_on": {"models": [], "sources": ["d.t"]}, "lineage": {"columns": {}, "uses": {"source.d.t": ["x"]}}}},
    ...     "sources": {"d.t": {"id": "d.t", "columns": [{"name": "x"}]}}})
    >>> data["nodes"]["model.m"]["folder"], data["edges"], data["sources"]["d.t"]["used_by"]
    ('a', [['source.d.t', 'model.m']], {'x': ['m']})
    """
    runs, raw, last = run_files or {}, raw_sql or {}, _last_results(results)
    models = {name: _model(entry, runs.get(name, []), state, raw.get(name, ""), last.get(name))
              for name, entry in manifest.get("models", {}).items()}
    sources = {sid: _source(sid, entry, manifest.get("models", {})) for sid, entry in manifest.get("sources", {}).items()}
    tests = {name: _test(entry, runs.get(name, []), raw.get(name, ""), last.get(name), models, sources)
             for name, entry in sorted(manifest.get("tests", {}).items())}
    for name, test in tests.items():
        for node in test["on"]:
            kind, _, owner = node.partition(".")
            (models if kind == "model" else sources)[owner]["tests"].append(name)
    exposures = dict(sorted(manifest.get("exposures", {}).items()))
    for name, exposure in exposures.items():
        for read in exposure["depends_on"]:
            page = models.get(read) or sources.get(read)
            if page is not None:
                page["exposures"].append(name)
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
        "tests": tests,
        "exposures": exposures,
        "results": _results_summary(results),
        "state": _state_summary(state),
    }


def _folder(path: str) -> str:
    """``models/marts/core/x.sql`` → ``marts/core`` (the model root is dropped)."""
    parts = path.split("/")[1:-1]
    return "/".join(parts)


def _model(entry: Mapping[str, Any], runs: list[dict[str, str]], state: Mapping[str, Any] | None, raw: str,
           result: dict[str, Any] | None) -> dict[str, Any]:
    model = {k: v for k, v in entry.items() if k != "lineage"}
    lineage = dict(entry.get("lineage") or {"columns": {}, "uses": {}, "types": {}, "unknown": {"*": "not analysed"}})
    lineage.pop("sources", None)  # the page walks the direct edges itself
    seed = entry["kind"]["name"] == "seed"
    if seed:  # a seed's columns come from its file: they have no upstream to be unknown
        lineage["unknown"] = {}
    model["lineage"] = lineage
    model["run_files"] = list(runs)
    model["state"] = (state or {}).get("models", {}).get(entry["name"]) if state else None
    model["raw_sql"] = None if seed else raw
    model["seed"] = _seed_preview(raw, entry["kind"].get("delimiter") or ",") if seed else None
    model["result"] = result
    model["tests"] = []
    model["exposures"] = []  # dbt's exposures that read it
    return model


def _seed_preview(text: str, delimiter: str) -> dict[str, Any]:
    """A seed's first lines as written, its first rows parsed, and how many rows it has.

    >>> _seed_preview('id,name\\n1,"a, b"\\n2,c\\n', ",")
    {'lines': ['id,name', '1,"a, b"', '2,c'], 'line_count': 3, 'header': ['id', 'name'], 'rows': [['1', 'a, b'], ['2', 'c']], 'row_count': 2}
    """
    lines = text.splitlines()
    records = [r for r in csv.reader(lines, delimiter=delimiter) if r]
    header, rows = (records[0], records[1:]) if records else ([], [])
    return {"lines": lines[:SEED_LINES], "line_count": len(lines), "header": header, "rows": rows[:SEED_LINES - 1],
            "row_count": len(rows)}


def _test(entry: Mapping[str, Any], runs: list[dict[str, str]], raw: str, result: dict[str, Any] | None,
          models: Mapping[str, Any], sources: Mapping[str, Any]) -> dict[str, Any]:
    return {**entry, "run_files": list(runs), "raw_sql": raw or None, "result": result,
            "on": _tested_nodes(entry, models, sources)}


def _tested_nodes(entry: Mapping[str, Any], models: Mapping[str, Any], sources: Mapping[str, Any]) -> list[str]:
    """The pages that list a test: the model, seed or source it is attached to; for a singular test,
    everything it reads."""
    attached = entry.get("attached_to")
    if attached:
        return [f"model.{attached}"] if attached in models else [f"source.{attached}"] if attached in sources else []
    reads = entry.get("depends_on") or {}
    return ([f"model.{m}" for m in reads.get("models", []) if m in models]
            + [f"source.{s}" for s in reads.get("sources", []) if s in sources])


def _last_results(results: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Each node's result in ``run_results.json`` (hooks left out), by name.

    >>> _last_results({"results": [{"name": "t", "kind": "test", "status": "fail", "failures": 2, "rows": None},
    ...                            {"name": "h", "kind": "hook", "status": "success"}]})
    {'t': {'kind': 'test', 'status': 'fail', 'failures': 2, 'rows': None}}
    """
    found = {}
    for result in (results or {}).get("results") or []:
        if isinstance(result, dict) and result.get("name") and result.get("kind") != "hook":
            found[str(result["name"])] = {"kind": result.get("kind")} | {k: result[k] for k in RESULT_KEYS if k in result}
    return found


def _results_summary(results: Mapping[str, Any] | None) -> dict[str, Any]:
    """When the last run started (its earliest result), for the page's "last results of ..." line."""
    if results is None:
        return {"available": False}
    started = sorted(str(r["started_at"]) for r in results.get("results") or [] if isinstance(r, dict) and r.get("started_at"))
    return {"available": True, "started_at": started[0] if started else None}


def _source(sid: str, entry: Mapping[str, Any], models: Mapping[str, Any]) -> dict[str, Any]:
    used: dict[str, set[str]] = {}
    readers = set()
    for name, model in models.items():
        uses = (model.get("lineage") or {}).get("uses", {}).get(f"source.{sid}")
        if sid in model.get("depends_on", {}).get("sources", []) or uses:
            readers.add(name)
        for column in uses or ():
            used.setdefault(column, set()).add(name)
    return {**entry, "used_by": {c: sorted(m) for c, m in sorted(used.items())}, "models": sorted(readers), "tests": [], "exposures": []}


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
