"""Compile (no Spark): determinism, compiled SQL, manifest.json, config layering, Jinja context,
warnings. Tiny projects are written with the ``make_project`` fixture."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from compiler.artifacts import write_artifacts
from compiler.cli import main
from compiler.compile import compile_project
from compiler.kinds import FactKind, MvKind, TableKind, ViewKind
from compiler.parse import pretty
from compiler.project import load_project

ROOT = Path(__file__).resolve().parent.parent
DEMO_FILES = ("project.yml", "models", "macros", "lineage", "seeds", "data_tests")

SOURCES = """
sources:
  - name: offers
    database: stage
    primary_key: [offer_id]
    position: [updated_at]
    columns:
      - {name: offer_id, type: bigint}
      - {name: shop_id, type: bigint}
      - {name: updated_at, type: timestamp}
  - name: blobs
    database: stage
    primary_key: [id]
    dictionary: true
"""


def copy_demo(where: Path) -> Path:
    where.mkdir(parents=True)
    for name in DEMO_FILES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, where / name)
    return where


def compile_dir(project: Path, *args: str) -> None:
    main(["--project-dir", str(project), "compile", *args])


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def compiled(project: Path, target: str | None = None):
    return compile_project(load_project(project), target)


# -- determinism -----------------------------------------------------------------------------

def test_demo_compile_is_byte_identical_across_runs_and_directories(tmp_path: Path, capsys):
    first = copy_demo(tmp_path / "a")
    other = copy_demo(tmp_path / "somewhere" / "else" / "b")

    started = time.monotonic()
    compile_dir(first)
    elapsed = time.monotonic() - started
    once = tree(first / "target")
    compile_dir(first)
    compile_dir(other)

    assert once and "manifest.json" in once
    assert tree(first / "target") == once
    assert tree(other / "target") == once
    assert not any(str(tmp_path).encode() in text for text in once.values())
    with capsys.disabled():
        print(f"\n[compile of the demo project, in-process, with target/ written: {elapsed * 1000:.0f} ms]")


def test_demo_artifacts_are_tidy(tmp_path: Path):
    project = copy_demo(tmp_path / "p")
    compile_dir(project)
    files = tree(project / "target")
    assert {"compiled/marts/offers_wide.sql", "compiled/staging/stg_shops.sql", "run/marts/shop_stats.sql",
            "run/staging/stg_orders.sql"} <= set(files)
    for name, data in files.items():
        text = data.decode()
        assert text.endswith("\n") and not text.endswith("\n\n"), name
        assert "\n\n\n" not in text and " \n" not in text, name


def test_compile_removes_run_files_it_no_longer_writes(tmp_path: Path):
    project = copy_demo(tmp_path / "p")
    compile_dir(project)
    folders = [project / "target/run/marts/offers_wide", project / "target/run/marts/orders_enriched"]
    for folder in folders:
        (folder / "state.sql").write_text("-- an older mvflow's file\n")
    (project / "target/run/marts/notes.txt").write_text("not a run folder of a model\n")
    compile_dir(project)
    assert not any((folder / "state.sql").exists() for folder in folders)
    assert (folders[0] / "stored.sql").exists() and (folders[1] / "step.sql").exists()
    assert (project / "target/run/marts/notes.txt").exists()


def test_compile_does_not_modify_the_asts_it_keeps(tmp_path: Path):
    project = copy_demo(tmp_path / "p")
    manifest = compiled(project)
    before = {name: pretty(m.ast) for name, m in manifest.models.items()}
    write_artifacts(manifest)
    write_artifacts(manifest)
    assert {name: pretty(m.ast) for name, m in manifest.models.items()} == before


# -- compiled SQL ----------------------------------------------------------------------------

def test_compiled_sql_is_fully_qualified_and_pretty(tmp_path: Path):
    project = copy_demo(tmp_path / "p")
    compile_dir(project)
    manifest = json.loads((project / "target" / "manifest.json").read_text())
    for name, model in manifest["models"].items():
        text = (project / "target" / model["compiled_path"]).read_text()
        header, _, sql = text.partition("\n")
        assert header == f"-- {name} ({model['kind']['name']}) compiled from {model['path']}"
        query = sqlglot.parse_one(sql, read="spark")
        tables = list(query.find_all(exp.Table))
        seed = model["kind"]["name"] == "seed"  # a seed reads the temporary view of its file's rows
        assert tables and all(t.db or seed for t in tables), name
        assert sql == pretty(query) + "\n", name  # printing again changes nothing: it is the pretty form
        assert "{{" not in sql and "{%" not in sql
    shop_stats = (project / "target/compiled/marts/shop_stats.sql").read_text()
    assert "FROM staging.stg_shops AS s\nLEFT JOIN stage.offers AS o" in shop_stats
    assert "CAST(ROUND(AVG(o.base_price), 2) AS DECIMAL(12, 2)) AS avg_price" in shop_stats  # macro


def test_run_script_of_a_table_holds_the_whole_statement_sequence(tmp_path: Path, monkeypatch):
    project = copy_demo(tmp_path / "p")
    monkeypatch.setenv("MVFLOW_TABLE_FORMAT", "parquet")
    compile_dir(project)
    script = (project / "target/run/marts/shop_stats.sql").read_text()
    assert script.index("CREATE DATABASE IF NOT EXISTS marts") < script.index("CREATE TABLE IDENTIFIER(:build_table)") \
        < script.index("CREATE OR REPLACE VIEW marts.shop_stats AS")
    monkeypatch.setenv("MVFLOW_TABLE_FORMAT", "delta")  # the demo's default
    compile_dir(project)
    script = (project / "target/run/marts/shop_stats.sql").read_text()
    assert script.index("CREATE DATABASE IF NOT EXISTS marts") < script.index(
        "CREATE OR REPLACE TABLE marts.shop_stats\nUSING delta")
    view = (project / "target/run/staging/stg_shops.sql").read_text()
    assert view.index("CREATE OR REPLACE VIEW staging.stg_shops AS\n") < view.index("SELECT\n  s.shop_id")


def test_select_limits_the_files_written_but_not_the_manifest(tmp_path: Path):
    project = copy_demo(tmp_path / "p")
    compile_dir(project, "--select", "offers_wide")
    files = set(tree(project / "target"))
    assert "compiled/marts/offers_wide.sql" in files and "compiled/marts/shop_stats.sql" not in files
    manifest = json.loads((project / "target/manifest.json").read_text())
    assert len(manifest["models"]) == 8  # seven models and a seed
    tests = {f for f in files if f.startswith("compiled/tests/")}
    assert tests == {f"compiled/tests/{name}.sql" for name, t in manifest["tests"].items()
                     if "offers_wide" in t["depends_on"]["models"]}, "only the selected model's tests"
    assert "compiled/tests/unique_offers_wide_offer_id.sql" in tests and len(tests) < len(manifest["tests"])
    compile_dir(project)
    every = {f for f in tree(project / "target") if f.startswith("compiled/tests/")}
    compile_dir(project, "--select", "offers_wide")
    assert {f for f in tree(project / "target") if f.startswith("compiled/tests/")} == every  # the others stay


# -- manifest.json ---------------------------------------------------------------------------

def test_demo_manifest_content(tmp_path: Path):
    project = copy_demo(tmp_path / "p")
    compile_dir(project)
    manifest = json.loads((project / "target/manifest.json").read_text())
    models = manifest["models"]

    assert manifest["project"] == {"name": "marketplace", "version": "1.0", "overview": None}
    assert manifest["order"].index("stg_orders") < manifest["order"].index("orders_enriched")
    assert manifest["order"].index("offers_wide") < manifest["order"].index("orders_enriched")
    assert {name: m["kind"]["name"] for name, m in models.items()} == {
        "category_stats": "mv", "currencies": "seed", "offer_ids": "numerator", "offers_wide": "mv", "orders_enriched": "fact",
        "shop_stats": "table", "stg_orders": "view", "stg_shops": "view"}
    fact = models["orders_enriched"]
    assert fact["kind"]["maxstep"] == 50000 and fact["kind"]["depends_on"] == ["offers_wide"]
    assert fact["config"] == {"materialized": "fact", "maxstep": 50000, "depends_on": ["offers_wide"],
                              "schema": "marts", "tags": ["marts"]}
    assert fact["depends_on"] == {"models": ["offers_wide", "stg_orders"], "sources": []}
    assert fact["relation"] == "marts.orders_enriched"
    assert models["stg_shops"]["tags"] == ["staging"] and models["stg_shops"]["schema"] == "staging"
    wide = models["offers_wide"]
    assert wide["depends_on"]["sources"] == ["stage.categories", "stage.offers", "stage.prices", "stage.regions",
                                             "stage.shops", "stage.warehouses"]
    assert [c["name"] for c in wide["columns"]][-2:] == ["retail_price", "currency"]  # alias from var()
    assert wide["columns"][0] == {"name": "offer_id", "description": "Offer id (the unique key)."}
    assert wide["description"].startswith("The wide offers table behind search")
    assert all(m["columns_known"] for m in models.values())
    for model in models.values():
        assert model["checksum"] == hashlib.sha256((project / model["path"]).read_bytes()).hexdigest()
    assert manifest["children"]["stage.offers"] == ["offer_ids", "offers_wide", "shop_stats"]
    assert manifest["children"]["offers_wide"][0] == "category_stats"  # an mv over the keys offers_wide publishes
    offers = manifest["sources"]["stage.offers"]
    assert offers["change_mode"] == "position" and offers["primary_key"] == ["offer_id"]
    assert manifest["sources"]["stage.orders"]["delay_seconds"] == 60
    assert manifest["sources"]["stage.warehouses"]["changes"] == {"table": "stage.warehouses_changes",
                                                                   "position": ["changed_at", "change_id"]}
    assert manifest["warnings"] == []


def test_star_expansion_where_schemas_are_known(make_project):
    project = make_project({
        "lineage/stage.yml": SOURCES,
        "models/a.sql": "select * from {{ source('stage', 'offers') }}",
        "models/b.sql": "select b.*, 1 as extra from {{ ref('a') }} as b",
        "models/c.sql": "select * from {{ source('stage', 'blobs') }}",
        "models/d.sql": "select * from {{ ref('c') }}",
        "models/e.sql": "select id, count(*) as n from {{ ref('c') }} group by id",
    })
    models = compiled(project).models
    assert models["a"].columns == ["offer_id", "shop_id", "updated_at"]
    assert models["b"].columns == ["offer_id", "shop_id", "updated_at", "extra"]
    assert models["c"].columns is None and models["d"].columns is None
    assert models["e"].columns == ["id", "n"]
    compile_dir(project)
    manifest = json.loads((project / "target/manifest.json").read_text())["models"]
    assert manifest["c"]["columns_known"] is False and manifest["c"]["columns"] == []
    assert manifest["b"]["columns_known"] is True


def test_model_docs_add_descriptions_column_docs_and_tags(make_project):
    project = make_project({
        "models/a.sql": "{{ config(tags=['hourly']) }}\nselect 1 as x, 2 as y",
        "models/docs.yml": """
            models:
              - name: a
                description: The a model.
                tags: [core]
                columns:
                  - {name: x, description: The x.}
        """,
    })
    model = compiled(project).models["a"]
    assert model.description == "The a model."
    assert model.column_docs == {"x": "The x."}
    assert model.tags == ("core", "hourly")


# -- config layering -------------------------------------------------------------------------

def test_folder_defaults_deeper_folders_and_config_win(make_project):
    project = make_project({
        "project.yml": """
            name: t
            models:
              +materialized: view
              +tags: [all]
              staging:
                +schema: stg
                +tags: staging
                deep:
                  +materialized: table
                  +schema: stg_deep
              marts:
                +schema: marts
        """,
        "models/top.sql": "select 1 as x",
        "models/staging/s.sql": "select 1 as x",
        "models/staging/deep/d.sql": "select 1 as x",
        "models/staging/deep/own.sql": "{{ config(materialized='view', schema='mine', tags=['own']) }}\nselect 1 as x",
        "models/marts/m.sql": "{{ config(materialized='fact', maxstep=10) }}\nselect 1 as x",
    })
    models = compiled(project).models
    assert (type(models["top"].kind), models["top"].relation, models["top"].tags) == (ViewKind, "default.top", ("all",))
    assert (type(models["s"].kind), models["s"].relation, models["s"].tags) == (ViewKind, "stg.s", ("all", "staging"))
    assert (type(models["d"].kind), models["d"].relation) == (TableKind, "stg_deep.d")
    assert (type(models["own"].kind), models["own"].relation, models["own"].tags) == \
        (ViewKind, "mine.own", ("all", "own", "staging"))
    assert models["m"].kind == FactKind(maxstep=10) and models["m"].relation == "marts.m"


def test_default_schema_comes_from_the_target(make_project):
    project = make_project({
        "project.yml": """
            name: t
            default_target: dev
            targets:
              dev: {spark: {database: dev_db}}
              prod: {spark: {database: prod_db}}
        """,
        "models/a.sql": "select 1 as x",
        "models/b.sql": "select x from {{ ref('a') }}",
    })
    assert compiled(project).models["b"].ast.sql() == "SELECT x FROM dev_db.a"
    assert compiled(project, "prod").models["b"].ast.sql() == "SELECT x FROM prod_db.a"


def test_alias_renames_the_relation(make_project):
    project = make_project({
        "models/a.sql": "{{ config(alias='a_v2', schema='s') }}\nselect 1 as x",
        "models/b.sql": "select x from {{ ref('a') }}",
    })
    models = compiled(project).models
    assert models["a"].relation == "s.a_v2" and models["b"].ast.sql() == "SELECT x FROM s.a_v2"


def test_disabled_models_are_left_out(make_project):
    project = make_project({
        "project.yml": "name: t\nmodels:\n  old:\n    +enabled: false\n",
        "models/a.sql": "select 1 as x",
        "models/b.sql": "{{ config(enabled=false) }}\nselect x from {{ ref('nowhere') }}",
        "models/old/c.sql": "select 1 as x",
        "models/docs.yml": "models:\n  - name: b\n    description: disabled but documented\n",
    })
    manifest = compiled(project)
    assert list(manifest.models) == ["a"]
    compile_dir(project)
    written = {name for name in tree(project / "target") if name.startswith(("compiled/", "run/"))}
    assert written == {"compiled/a.sql", "run/a.sql"}


# -- Jinja context ---------------------------------------------------------------------------

def test_env_var_in_project_yml_and_models(make_project, monkeypatch):
    project = make_project({
        "project.yml": """
            name: t
            vars:
              kind: "{{ env_var('T_MVFLOW_KIND', 'retail') }}"
            targets:
              local:
                spark:
                  database: "{{ env_var('T_MVFLOW_DB', 'dflt') }}"
        """,
        "models/a.sql": "select '{{ var('kind') }}' as kind, '{{ env_var('T_MVFLOW_X', 'none') }}' as x",
    })
    monkeypatch.delenv("T_MVFLOW_KIND", raising=False)
    monkeypatch.delenv("T_MVFLOW_DB", raising=False)
    monkeypatch.delenv("T_MVFLOW_X", raising=False)
    model = compiled(project).models["a"]
    assert (model.relation, model.ast.sql()) == ("dflt.a", "SELECT 'retail' AS kind, 'none' AS x")

    monkeypatch.setenv("T_MVFLOW_KIND", "promo")
    monkeypatch.setenv("T_MVFLOW_DB", "from_env")
    monkeypatch.setenv("T_MVFLOW_X", "set")
    model = compiled(project).models["a"]
    assert (model.relation, model.ast.sql()) == ("from_env.a", "SELECT 'promo' AS kind, 'set' AS x")


def test_var_default_and_this(make_project):
    project = make_project({
        "project.yml": "name: t\nvars:\n  limit: 5\n",
        "models/a.sql": """
            {{ config(schema='s') }}
            select '{{ this }}' as me, {{ var('limit') }} as lim, '{{ var('missing', 'fallback') }}' as d
        """,
    })
    assert compiled(project).models["a"].ast.sql() == "SELECT 's.a' AS me, 5 AS lim, 'fallback' AS d"


def test_this_has_schema_and_name(make_project):
    project = make_project({"models/a.sql": "{{ config(schema='s', alias='tbl') }}\nselect '{{ this.schema }}' as s, '{{ this.name }}' as n"})
    assert compiled(project).models["a"].ast.sql() == "SELECT 's' AS s, 'tbl' AS n"


def test_macros_calling_macros_across_files(make_project):
    project = make_project({
        "macros/inner.sql": "{% macro cents(x) %}ROUND({{ x }} * 100){% endmacro %}",
        "macros/outer.sql": "{% macro price(x) %}CAST({{ cents(x) }} AS BIGINT){% endmacro %}",
        "models/a.sql": "select {{ price('p') }} as c from {{ ref('b') }}",
        "models/b.sql": "select 1.5 as p",
    })
    assert compiled(project).models["a"].ast.sql("spark") == "SELECT CAST(ROUND(p * 100) AS BIGINT) AS c FROM default.b"


def test_refs_and_sources_inside_macros_count_as_dependencies(make_project):
    project = make_project({
        "lineage/stage.yml": SOURCES,
        "macros/m.sql": "{% macro offers() %}{{ source('stage', 'offers') }}{% endmacro %}",
        "models/a.sql": "select offer_id from {{ offers() }}",
    })
    model = compiled(project).models["a"]
    assert model.depends_on_sources == ["stage.offers"] and model.undeclared_tables == []


def test_sql_error_lines_match_the_model_file(make_project):
    project = make_project({"models/a.sql": "{{ config(materialized='view') }}\n\nselect\n  a b c\nfrom t\n"})
    with pytest.raises(Exception) as info:
        compiled(project)
    problem = info.value.problems[0]
    assert (problem.path, problem.line, problem.code) == ("models/a.sql", 4, "sql-syntax")


# -- warnings --------------------------------------------------------------------------------

def test_undeclared_tables_are_warnings_with_file_and_line(make_project, capsys):
    project = make_project({
        "lineage/stage.yml": SOURCES,
        "models/a.sql": """
            with recent as (select * from {{ source('stage', 'offers') }})
            select r.offer_id
            from recent as r
            join other.tbl as t on t.id = r.offer_id
        """,
    })
    manifest = compiled(project)
    assert manifest.models["a"].undeclared_tables == ["other.tbl"]
    assert [(w.path, w.line, w.code) for w in manifest.warnings] == [("models/a.sql", 4, "undeclared-table")]

    compile_dir(project)
    err = capsys.readouterr().err
    assert "warning: models/a.sql:4: [undeclared-table] table other.tbl is read but not declared" in err
    assert json.loads((project / "target/manifest.json").read_text())["models"]["a"]["undeclared_tables"] == ["other.tbl"]


def test_unnamed_output_columns_are_warnings(make_project):
    project = make_project({"models/a.sql": "select\n  1 as x,\n  upper('a')\n"})
    manifest = compiled(project)
    assert manifest.models["a"].columns == ["x", "UPPER('a')"]
    assert [(w.line, w.code) for w in manifest.warnings] == [(3, "unnamed-column")]


def test_folder_defaults_for_a_missing_folder_are_a_warning(make_project):
    project = make_project({
        "project.yml": "name: t\nmodels:\n  stagng:\n    +schema: s\n",
        "models/staging/a.sql": "select 1 as x",
    })
    warnings = compiled(project).warnings
    assert [(w.path, w.line, w.code, w.hint) for w in warnings] == \
        [("project.yml", 3, "unused-defaults", "did you mean 'staging'?")]


def test_a_narrowed_compile_sets_aside_what_does_not_compile_outside_the_selection(make_project):
    """``needs`` (a run's selection): models whose SQL does not compile (a parse error, two columns of
    one name) outside it are left out with what reads them and the tests that read them; inside it,
    or in an ancestor of it, the compile fails as before."""
    from compiler.errors import CompileError
    from compiler.select import needed

    root = make_project({
        "models/a.sql": "select 1 as id",
        "models/bad.sql": "select id, from where {{ ref('a') }}",
        "models/twice.sql": "select id, id as ID from {{ ref('a') }}",
        "models/after.sql": "select * from {{ ref('bad') }}",
        "models/a.yml": "models:\n  - name: after\n    columns:\n      - name: id\n        tests: [not_null]\n",
        "tests/reads_twice.sql": "select * from {{ ref('twice') }} where id is null",
    })
    manifest = compile_project(load_project(root), needs=needed(["a"]))
    assert set(manifest.models) == {"a"} and list(manifest.graph) == ["model.a"]
    assert manifest.tests == {}
    warned = {w.message.split(":")[0]: (w.path, w.code) for w in manifest.warnings}
    assert warned == {"model 'after' is not compiled": ("models/after.sql", "set-aside"),
                      "model 'bad' is not compiled": ("models/bad.sql", "set-aside"),
                      "model 'twice' is not compiled": ("models/twice.sql", "set-aside")}, warned
    for selection in (["after"], ["twice"], None):
        with pytest.raises(CompileError):
            compile_project(load_project(root), needs=needed(selection) if selection else None)
