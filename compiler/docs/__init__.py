"""The static docs site (``mvflow docs generate`` / ``docs serve``), written to ``target/docs/``.

``site.py`` turns the compile artifacts into the site's files (pure), ``layout.py`` places the
DAG for the overview graph, ``serve.py`` serves the directory on localhost. This module does
the reading and writing: ``target/manifest.json``, the run scripts under ``target/run/``, the
last ``target/run_results.json`` and the state store of the target, read-only, when they exist.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compiler.artifacts import jsonable
from compiler.errors import Problem, RunError
from compiler.paths import target_file
from compiler.status import batch_topics, show_time, step_status, topic_status
from .serve import serve_docs
from .site import site_data, site_files

if TYPE_CHECKING:
    from compiler.manifest import Manifest

__all__ = ["generate_docs", "read_results", "read_state", "serve_docs", "site_data", "site_files"]

STEPS_SHOWN = 10


def generate_docs(manifest: Manifest, now: datetime | None = None) -> Path:
    """Write ``target/docs/`` from the artifacts ``write_artifacts`` wrote; returns index.html.

    ``now`` (default: the clock) is what the state's ages are measured against."""
    target = manifest.project.target_dir
    path = target / "manifest.json"
    if not path.exists():
        raise RunError(Problem(f"{path} is missing", hint="run `mvflow compile` first (`docs generate` does)", code="no-manifest"))
    data = json.loads(path.read_text(encoding="utf-8"))
    nodes = {**data.get("models", {}), **data.get("tests", {})}  # compile refuses a test named like a model
    runs = {name: _run_files(target, entry) for name, entry in nodes.items()}
    raw = {name: node.raw_sql for name, node in {**manifest.models, **manifest.tests}.items() if name in nodes}
    state = read_state(manifest.project.target(manifest.target).state, list(data.get("models", {})),
                       now or datetime.now(timezone.utc))
    if state and Path(state["path"]).is_relative_to(manifest.project.root):
        state["path"] = Path(state["path"]).relative_to(manifest.project.root).as_posix()
    files = site_files(site_data(data, runs, state, raw, read_results(target / "run_results.json")))
    for path, text in [(target_file(target, f"docs/{name}"), text) for name, text in files.items()]:
        _write(path, text)
    return target / "docs" / "index.html"


def read_results(path: Path) -> dict[str, Any] | None:
    """``run_results.json`` of the last ``mvflow run``/``test``/``build``, or None (none yet, or unreadable)."""
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return results if isinstance(results, dict) else None


def _run_files(target: Path, entry: dict[str, Any]) -> list[dict[str, str]]:
    """The model's run script plus any derived statements under ``target/run/<model>/``."""
    found = []
    run_path = entry.get("run_path")
    stem = entry.get("compiled_path", "")[len("compiled/"):-len(".sql")]
    if run_path and target_file(target, run_path).is_file():
        found.append({"title": "run script", "path": run_path, "sql": (target / run_path).read_text(encoding="utf-8")})
    folder = target_file(target, f"run/{stem}") if stem else target / "run"
    if stem and folder.is_dir():
        for file in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".sql", ".txt")):
            relative = file.relative_to(target).as_posix()
            found.append({"title": file.relative_to(folder).with_suffix("").as_posix().replace("_", " "),
                          "path": relative, "sql": file.read_text(encoding="utf-8")})
    return found


def read_state(settings, models: list[str], now: datetime) -> dict[str, Any] | None:
    """Offsets and recent steps per model from the target's state store, or None without one.
    Each topic and step also comes ``shown`` in the words of ``mvflow status`` (ages as of ``now``).

    Only reads: nothing is opened when the store's file does not exist.
    """
    if settings is None or settings.path is None or not Path(settings.path).exists():
        return None
    try:
        from compiler.state import open_state_store
    except ImportError:  # the state store module is not part of this build
        return None
    store = open_state_store(settings)
    topics = []
    per_model: dict[str, dict[str, Any]] = {}
    offsets = sorted(store.offsets(), key=lambda o: o.topic)
    batches = batch_topics(offsets)
    for offset in offsets:
        logged = store.steps(offset.topic, limit=STEPS_SHOWN)
        steps = [{**jsonable(vars(s)), "shown": step_status(s, offset.topic in batches)} for s in logged]
        row = {**jsonable(vars(offset)), "steps": steps, "lag_seconds": logged[0].max_lag_seconds if logged else None,
               "shown": asdict(topic_status(offset, now, batches)) | {"run": show_time(offset.run)}}
        topics.append(row)
        owner = _owner(offset.topic, models)
        if owner:
            per_model.setdefault(owner, {"topics": []})["topics"].append(row)
    from compiler.catalog.report import history

    for model, versions in history(store).items():
        per_model.setdefault(model, {"topics": []})["catalog"] = versions
    return {"path": str(settings.path), "topics": topics, "models": per_model, "as_of": show_time(now)}


def _owner(topic: str, models: list[str]) -> str | None:
    """The model a topic belongs to: its name, or its name followed by a separator (``mv:input``)."""
    matches = [m for m in models if topic == m or (topic.startswith(m) and not (topic[len(m)].isalnum() or topic[len(m)] == "_"))]
    return max(matches, key=len) if matches else None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
