"""The docs site generator (compiler/docs): content, determinism, escaping, state, derived SQL.

No browser here (see test_docs_browser.py) and no Spark."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from compiler import status
from compiler.artifacts import write_artifacts
from compiler.cli import cli
from compiler.compile import compile_project
from compiler.docs import generate_docs, site_data, site_files
from compiler.docs.layout import layout
from compiler.project import load_project

EVIL = '<script>alert("x")</script> & <img src=x onerror=alert(1)>'

FILES = {
    "lineage/s.yml": """
        sources:
          - name: orders
            database: raw
            description: "Orders. %s"
            primary_key: [id]
            position: [ts]
            delay: 5m
            columns:
              - {name: id, type: bigint, description: "Order id %s"}
              - {name: amount, type: "decimal(10,2)"}
              - {name: ts, type: timestamp}
          - name: rates
            database: raw
            primary_key: [currency]
            dictionary: true
            columns:
              - {name: currency, type: string}
              - {name: rate, type: double}
              - {name: note, type: string}
    """ % (EVIL.replace('"', '\\"'), EVIL.replace('"', '\\"')),
    "models/staging/stg.sql": "select o.id, o.amount, o.ts from {{ source('raw', 'orders') }} o",
    "models/marts/totals.sql": """
        {{ config(materialized='table') }}
        select s.id, s.amount * r.rate as amount_eur
        from {{ ref('stg') }} s join {{ source('raw', 'rates') }} r on r.currency = 'EUR'
    """,
    "models/marts/docs.yml": """
        models:
          - name: totals
            description: "%s"
            columns:
              - {name: amount_eur, description: "In euros </script>"}
    """ % EVIL.replace('"', '\\"'),
}


def _generate(root: Path) -> dict[str, bytes]:
    manifest = compile_project(load_project(root))
    write_artifacts(manifest)
    index = generate_docs(manifest)
    return {p.name: p.read_bytes() for p in sorted(index.parent.iterdir())}


def _data(files: dict[str, bytes]) -> dict:
    text = files["data.js"].decode()
    assert text.startswith("window.MVFLOW_DOCS = ") and text.endswith(";\n")
    return json.loads(text[len("window.MVFLOW_DOCS = "):-2])


def test_site_content(make_project):
    root = make_project(FILES)
    files = _generate(root)
    assert sorted(files) == ["app.js", "data.js", "index.html", "style.css"]
    data = _data(files)
    assert data["edges"] == [["model.stg", "model.totals"], ["source.raw.orders", "model.stg"], ["source.raw.rates", "model.totals"]]
    assert data["nodes"]["model.totals"]["folder"] == "marts" and data["nodes"]["model.totals"]["kind"] == "table"
    # Columns used by each model, per source column: `note` is read by nobody, `currency` only by a join.
    assert data["sources"]["raw.rates"]["used_by"] == {"currency": ["totals"], "rate": ["totals"]}
    totals = data["models"]["totals"]
    assert totals["lineage"]["columns"]["amount_eur"] == [
        {"column": "amount", "node": "model.stg", "transform": "expression"},
        {"column": "rate", "node": "source.raw.rates", "transform": "expression"}]
    assert [f["title"] for f in totals["run_files"]] == ["run script"]
    assert "CREATE TABLE IDENTIFIER(:build_table)" in totals["run_files"][0]["sql"]
    assert data["state"]["available"] is False
    # Column types as lineage.json has them (checked against Spark in test_lineage.py), spelled as Spark does.
    lineage_json = json.loads((root / "target" / "lineage.json").read_text())["models"]
    assert data["models"]["stg"]["lineage"]["types"] == lineage_json["stg"]["types"] == {
        "amount": "decimal(10,2)", "id": "bigint", "ts": "timestamp"}
    assert totals["lineage"]["types"] == {"amount_eur": None, "id": "bigint"}  # decimal × double: not guessed


def test_generation_is_deterministic_and_location_independent(make_project, tmp_path):
    root = make_project(FILES)
    first = _generate(root)
    assert _generate(root) == first
    copy = tmp_path / "elsewhere"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("target"))
    assert _generate(copy) == first


def test_user_text_cannot_become_markup(make_project):
    files = _generate(make_project(FILES))
    data_js = files["data.js"].decode()
    assert "</script>" not in data_js and "<\\/script>" in data_js
    assert _data(files)["models"]["totals"]["description"] == EVIL
    app = files["app.js"].decode()
    # The page builds the DOM from text only; the browser test checks what is shown.
    assert not re.search(r"\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|eval\(", app)
    assert "data.js" in files["index.html"].decode() and "http" not in files["index.html"].decode()


def test_no_network_in_assets():
    files = site_files({})
    for name in ("index.html", "app.js", "style.css"):
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", files[name]), name
        assert "@import" not in files[name] and "fetch(" not in files[name]


def test_derived_statements_and_state_are_shown(make_project):
    root = make_project(FILES)
    manifest = compile_project(load_project(root))
    write_artifacts(manifest)
    # What the MV/fact stages may add: statements under target/run/<model>/ ...
    derived_dir = root / "target" / "run" / "marts" / "totals"
    derived_dir.mkdir(parents=True)
    (derived_dir / "key_query_rates.sql").write_text("SELECT s.id FROM raw.rates AS r JOIN staging.stg AS s ON TRUE\n")
    # ... and a `derived` entry in the manifest, rendered generically.
    path = root / "target" / "manifest.json"
    entry = json.loads(path.read_text())
    entry["models"]["totals"]["derived"] = {"refresh": {"sql": "SELECT 1", "keys": ["id"]}}
    path.write_text(json.dumps(entry))
    state = pytest.importorskip("compiler.state")
    store = state.open_state_store(manifest.project.target(None).state)
    now = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    lease = store.acquire("totals", "host:1", 60, now)
    store.commit(lease, ("2024-05-01T11:00:00",), 42, "waiting for raw.orders", now)
    store.log_step(state.StepLogRow(topic="totals", ts=now, rows=42, next=("2024-05-01T11:00:00",), max_lag_seconds=90.0))
    data = _data({p.name: p.read_bytes() for p in generate_docs(manifest, now=now + timedelta(days=2)).parent.iterdir()})
    totals = data["models"]["totals"]
    assert [f["title"] for f in totals["run_files"]] == ["run script", "key query rates"]
    assert totals["run_files"][1]["path"] == "run/marts/totals/key_query_rates.sql"
    assert totals["derived"] == {"refresh": {"sql": "SELECT 1", "keys": ["id"]}}
    assert data["state"]["available"] and data["state"]["path"] == ".mvflow/local/state.sqlite"
    topic = totals["state"]["topics"][0]
    assert (topic["topic"], topic["rows"], topic["state"], topic["lag_seconds"]) == ("totals", 42, "waiting for raw.orders", 90.0)
    # In the words and positions of `mvflow status`, from the same functions (compiler/status.py).
    shown = status.topic_statuses(store.offsets(), now + timedelta(days=2))[0]
    assert topic["shown"] == {**dataclasses.asdict(shown), "run": "2024-05-01 12:00:00"}
    assert (shown.last, shown.age, shown.state) == ("2024-05-01 11:00:00", "2 days", "waiting for raw.orders")
    assert topic["steps"][0]["shown"] == {"ts": "2024-05-01 12:00:00", "range": "(start, 2024-05-01 11:00:00]", "lag": "90s"}
    assert data["state"]["columns"][3] == ["behind source", "behind"] and data["state"]["as_of"] == "2024-05-03 12:00:00"
    assert data["models"]["stg"]["state"] is None


def test_cli_generate_and_serve_without_a_site(make_project):
    root = make_project(FILES)
    runner = CliRunner()
    missing = runner.invoke(cli, ["--project-dir", str(root), "docs", "serve", "--port", "0"])
    assert missing.exit_code != 0 and "docs generate" in str(missing.exception)
    done = runner.invoke(cli, ["--project-dir", str(root), "docs", "generate"])
    assert done.exit_code == 0, done.output
    assert (root / "target" / "docs" / "index.html").exists() and (root / "target" / "lineage.json").exists()


def test_layout_layers_follow_edges_and_sources_sit_by_their_reader():
    nodes = ["s1", "s2", "a", "b", "c"]
    edges = [("s1", "a"), ("a", "b"), ("b", "c"), ("s2", "c")]
    placed = layout(nodes, edges)
    assert all(placed[u][0] < placed[v][0] for u, v in edges)
    assert placed["s2"][0] == placed["c"][0] - 1
    assert layout(list(reversed(nodes)), list(reversed(edges))) == placed


def _generator():
    """tests/test_lineage.py's project generator (test modules are not a package here)."""
    spec = importlib.util.spec_from_file_location("_mvflow_test_lineage", Path(__file__).with_name("test_lineage.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_site_data_on_a_generated_project(tmp_path):
    root = _generator().generate_project(tmp_path / "gen", 60)
    manifest = compile_project(load_project(root))
    write_artifacts(manifest)
    data = _data({p.name: p.read_bytes() for p in generate_docs(manifest).parent.iterdir()})
    assert len(data["models"]) == 60 and len(data["nodes"]) == 68
    rows = {(n["layer"], n["row"]) for n in data["nodes"].values()}
    assert len(rows) == 68  # no two nodes on the same spot
