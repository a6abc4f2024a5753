"""The docs site generator (compiler/docs): content, determinism, escaping, state, derived SQL.

No browser here (see test_docs_browser.py) and no Spark."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from compiler import status
from compiler.artifacts import write_artifacts
from compiler.cli import cli, main
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
    assert topic["steps"][0]["shown"] == {"ts": "2024-05-01 12:00:00", "range": "(start, 2024-05-01 11:00:00]", "lag": "90s",
                                          "skipped": "-"}
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


SEED = "id,name\n" + "".join(f"{i},name {i}\n" for i in range(1, 25))  # 25 lines: more than a seed page shows
ORDERS = """\
{{ config(materialized='table') }}
{# one row per order #}
select o.id as order_id, c.id as customer_id from {{ ref('customers') }} c
join (select 1 as id, 1 as customer) o on o.customer = c.id
"""
TESTED = {
    "seeds/customers.csv": SEED,
    "models/orders.sql": ORDERS,
    "models/orders.md": "{% docs orders %}\nOne row per order.\n\nPlaced or shipped.\n{% enddocs %}\n",
    "models/schema.yml": """
        models:
          - name: orders
            description: "{{ doc('orders') }}"
            columns:
              - name: order_id
                tests: [unique, {not_null: {config: {severity: warn}}}]
              - name: customer_id
                tests:
                  - relationships: {to: ref('customers'), field: id}
        seeds:
          - name: customers
            columns:
              - name: id
                tests: [unique]
    """,
    "tests/no_big_orders.sql": "SELECT * FROM {{ ref('orders') }} WHERE order_id > 100",
}
RESULTS = {"results": [
    {"name": "customers", "kind": "seed", "status": "success", "seconds": 0.5, "rows": None, "message": "",
     "started_at": "2024-05-01T12:00:00+00:00", "strategy": None, "estimates": None, "failures": None},
    {"name": "unique_orders_order_id", "kind": "test", "status": "pass", "seconds": 0.2, "rows": None, "message": "",
     "started_at": "2024-05-01T12:00:02+00:00", "strategy": None, "estimates": None, "failures": 0},
    {"name": "not_null_orders_order_id", "kind": "test", "status": "warn", "seconds": 0.2, "rows": None,
     "message": "Got 3 results, configured to warn if != 0", "started_at": "2024-05-01T12:00:03+00:00",
     "strategy": None, "estimates": None, "failures": 3},
    {"name": "relationships_orders_customer_id__id__ref_customers_", "kind": "test", "status": "fail", "seconds": 0.3,
     "rows": None, "message": "Got 2 results, configured to fail if != 0", "started_at": "2024-05-01T12:00:04+00:00",
     "strategy": None, "estimates": None, "failures": 2},
    {"name": "on-run-end", "kind": "hook", "status": "success", "seconds": 0.0, "rows": None, "message": "",
     "started_at": "", "strategy": None, "estimates": None, "failures": None},
], "counts": {"success": 2, "pass": 1, "warn": 1, "fail": 1}}


def test_tests_seeds_and_jinja_source_on_the_model_pages(make_project):
    root = make_project(TESTED)
    manifest = compile_project(load_project(root))
    write_artifacts(manifest)
    without = _data({p.name: p.read_bytes() for p in generate_docs(manifest).parent.iterdir()})
    (root / "target" / "run_results.json").write_text(json.dumps(RESULTS))
    files = {p.name: p.read_bytes() for p in generate_docs(manifest).parent.iterdir()}
    data = _data(files)

    # Each model's tests, a singular test on what it reads, with the last result of run_results.json.
    orders = data["models"]["orders"]
    assert orders["tests"] == ["no_big_orders", "not_null_orders_order_id",
                               "relationships_orders_customer_id__id__ref_customers_", "unique_orders_order_id"]
    warned = data["tests"]["not_null_orders_order_id"]
    assert (warned["test_type"], warned["column"], warned["config"]["severity"], warned["on"]) == (
        "not_null", "order_id", "warn", ["model.orders"])
    assert warned["result"] == {"kind": "test", "status": "warn", "failures": 3, "seconds": 0.2, "rows": None,
                                "message": "Got 3 results, configured to warn if != 0", "started_at": "2024-05-01T12:00:03+00:00"}
    assert data["tests"]["relationships_orders_customer_id__id__ref_customers_"]["result"]["status"] == "fail"
    assert "order_id IS NULL" in warned["compiled_sql"] and warned["compiled_path"] == "compiled/tests/not_null_orders_order_id.sql"
    assert [f["path"] for f in warned["run_files"]] == ["run/tests/not_null_orders_order_id.sql"]
    singular = data["tests"]["no_big_orders"]
    assert singular["result"] is None and singular["on"] == ["model.orders"]  # not in the last run
    assert singular["raw_sql"] == "SELECT * FROM {{ ref('orders') }} WHERE order_id > 100"
    assert "{{" not in singular["compiled_sql"]
    assert data["results"] == {"available": True, "started_at": "2024-05-01T12:00:00+00:00"}
    assert "on-run-end" not in data["tests"] and orders["result"] is None
    assert without["results"] == {"available": False} and without["tests"]["not_null_orders_order_id"]["result"] is None

    # A seed: a seed node, its CSV's first lines and rows instead of a Jinja source, its own tests and last load.
    customers = data["models"]["customers"]
    assert data["nodes"]["model.customers"]["kind"] == "seed" and customers["kind"]["name"] == "seed"
    assert customers["seed"]["lines"] == SEED.splitlines()[:20] and customers["seed"]["line_count"] == 25
    assert customers["seed"]["header"] == ["id", "name"] and customers["seed"]["rows"][0] == ["1", "name 1"]
    assert len(customers["seed"]["rows"]) == 19 and customers["seed"]["row_count"] == 24
    assert customers["raw_sql"] is None and customers["lineage"]["unknown"] == {}
    assert customers["tests"] == ["unique_customers_id"] and customers["result"]["status"] == "success"
    assert ["model.customers", "model.orders"] in data["edges"]

    # The Jinja source as written beside the compiled SQL; a docs block's description keeps its lines.
    assert orders["raw_sql"] == ORDERS and orders["seed"] is None
    assert "{{" not in orders["compiled_sql"] and "default.customers" in orders["compiled_sql"]
    assert orders["description"] == "One row per order.\n\nPlaced or shipped."
    assert "white-space: pre-wrap" in files["style.css"].decode().split(".description {")[1].split("}")[0]

    # Still deterministic, and an unreadable run_results.json is no result at all.
    assert {p.name: p.read_bytes() for p in generate_docs(manifest).parent.iterdir()} == files
    (root / "target" / "run_results.json").write_text("{not json")
    assert _data({p.name: p.read_bytes() for p in generate_docs(manifest).parent.iterdir()}) == without


def test_tests_on_sources_and_singular_tests_are_listed_where_they_belong():
    manifest = {
        "sources": {"raw.orders": {"id": "raw.orders", "database": "raw", "columns": [{"name": "id"}]}},
        "models": {"m": {"name": "m", "path": "models/m.sql", "kind": {"name": "view"}, "lineage": None,
                         "depends_on": {"models": [], "sources": ["raw.orders"]}}},
        "tests": {
            "source_unique_orders_id": {"name": "source_unique_orders_id", "test_type": "unique", "attached_to": "raw.orders",
                                        "column": "id", "depends_on": {"models": [], "sources": ["raw.orders"]}},
            "both": {"name": "both", "test_type": "singular", "attached_to": None,
                     "depends_on": {"models": ["m"], "sources": ["raw.orders"]}},
        },
    }
    results = {"results": [{"name": "source_unique_orders_id", "kind": "test", "status": "error", "failures": None,
                            "message": "boom", "started_at": "2024-05-01T12:00:00+00:00", "seconds": 1.0}]}
    data = site_data(manifest, raw_sql={"m": "select 1", "both": "select {{ 1 }}"}, results=results)
    assert data["sources"]["raw.orders"]["tests"] == ["both", "source_unique_orders_id"]
    assert data["models"]["m"]["tests"] == ["both"] and data["models"]["m"]["raw_sql"] == "select 1"
    assert data["tests"]["both"]["on"] == ["model.m", "source.raw.orders"]
    assert data["tests"]["source_unique_orders_id"]["result"]["status"] == "error"
    assert data["tests"]["both"]["raw_sql"] == "select {{ 1 }}"


def test_a_dbt_models_meta_reaches_its_page(tmp_path):
    """dbt's ``meta`` (the model's YAML and its config, the config's winning; a column's) is in
    manifest.json and in the site's data, which the model's page lists in its Overview and its
    columns table (app.js)."""
    (tmp_path / "dbt_project.yml").write_text("name: shop\nprofile: shop\nconfig-version: 2\n")
    (tmp_path / "profiles.yml").write_text(
        "shop:\n  target: dev\n  outputs:\n    dev: {type: spark, method: session, host: NA, schema: shop_dev}\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sql").write_text("{{ config(meta={'owner': 'data-team', 'tier': 1}) }}\nselect 1 as x\n")
    (tmp_path / "models" / "m.yml").write_text(
        "version: 2\nmodels:\n  - name: m\n    meta: {owner: nobody, contains_pii: false}\n"
        "    columns:\n      - {name: x, description: one, meta: {pii: email}}\n")
    data = _data(_generate(tmp_path))
    assert data["models"]["m"]["meta"] == {"contains_pii": False, "owner": "data-team", "tier": 1}
    assert data["models"]["m"]["columns"] == [{"name": "x", "description": "one", "meta": {"pii": "email"}}]
    assert json.loads((tmp_path / "target" / "manifest.json").read_text())["models"]["m"]["meta"]["owner"] == "data-team"


def test_a_dbt_projects_exposures_are_listed_on_the_pages_of_what_they_read(tmp_path, capsys):
    (tmp_path / "dbt_project.yml").write_text("name: shop\nprofile: shop\nconfig-version: 2\n")
    (tmp_path / "profiles.yml").write_text(
        "shop:\n  target: dev\n  outputs:\n    dev: {type: spark, method: session, host: NA, schema: shop_dev}\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sql").write_text("select id from {{ source('raw', 'orders') }}\n")
    (tmp_path / "models" / "m.yml").write_text(textwrap.dedent("""
        version: 2
        sources:
          - name: raw
            tables: [{name: orders}]
        exposures:
          - name: kpis
            type: dashboard
            owner: {name: Ana, email: ana@example.com}
            depends_on: ["ref('m')", "source('raw', 'orders')", "ref('gone')"]
            url: "javascript:alert(1)"
            description: Weekly KPIs
          - {name: odd, type: poster, depends_on: ["m"]}
    """))
    main(["--project-dir", str(tmp_path), "compile"])
    err = capsys.readouterr().err
    assert "warning: models/m.yml:7: [bad-exposure] exposure 'kpis': ref('gone'): no such model" in err, err
    assert "[bad-exposure] exposure 'odd': type 'poster' is not one of dbt's" in err
    assert "[bad-exposure] exposure 'odd': depends_on entry 'm' is not ref(" in err
    assert "exposures' is not supported" not in err
    data = _data(_generate(tmp_path))
    source = next(iter(data["sources"]))
    assert data["models"]["m"]["exposures"] == ["kpis"] and data["sources"][source]["exposures"] == ["kpis"]
    kpis = data["exposures"]["kpis"]
    assert (kpis["type"], kpis["owner"], kpis["depends_on"]) == ("dashboard", {"name": "Ana", "email": "ana@example.com"},
                                                                ["m", source])
    assert json.loads((tmp_path / "target" / "manifest.json").read_text())["exposures"]["odd"]["depends_on"] == []
