"""Running view and table models on the shared local SparkSession: DAG order, blue/green table
slots (parquet), a Delta table replaced in place and switching between the two, an MV diffing a
Delta table model, failures that skip descendants, threads, kinds without a runner, run_results.json.

Each test gets its own databases (``t_run_<tag>_*``) so that tests never see each other's tables.
"""

from __future__ import annotations

import json
import textwrap
import threading
import uuid
from datetime import datetime, timezone

import pytest

from compiler.cli import main
from compiler.compile import compile_project
from compiler.kinds import TableKind, ViewKind
from compiler.kinds.table import run_table
from compiler.kinds.view import run_view
from compiler.project import load_project
from compiler.kinds.unchanged import UP_TO_DATE
from compiler.run import Result, RunOptions, run_models
from compiler.spark import LazySession
from compiler.state import open_state_store

MODELS = {
    "models/stg/stg_items.sql": """
        select i.id, i.shop, i.price
        from {{ source('SRC', 'items') }} as i
        where i.price > 0
    """,
    "models/mart/shop_stats.sql": """
        {{ config(materialized='table') }}
        select s.shop, count(*) as items, sum(s.price) as total
        from {{ ref('stg_items') }} as s
        group by s.shop
    """,
    "models/mart/top_shop.sql": """
        select shop from {{ ref('shop_stats') }} order by total desc limit 1
    """,
}


class Env:
    """A tiny project on disk with its own source database, compiled without Spark."""

    def __init__(self, spark, make_project, models: dict[str, str] | None = None, fmt: str = "parquet"):
        self.spark = spark
        tag = uuid.uuid4().hex[:8]
        self.src, self.stg, self.mart = (f"t_run_{tag}_{part}" for part in ("src", "stg", "mart"))
        files = {
            "project.yml": self.project_yml(fmt),
            "lineage/src.yml": f"""
                sources:
                  - {{name: items, database: {self.src}, primary_key: [id], dictionary: true}}
                  - {{name: events, database: {self.src}, primary_key: [id], position: [id]}}
            """,
        }
        files.update({path: text.replace("SRC", self.src) for path, text in {**MODELS, **(models or {})}.items()})
        self.root = make_project(files)
        spark.sql(f"CREATE DATABASE {self.src}")
        self.load_items([(1, "a", 10.0), (2, "a", 5.0), (3, "b", 7.0), (4, "b", -1.0)])
        spark.sql(f"CREATE TABLE {self.src}.events USING parquet AS SELECT 1L AS id")

    def project_yml(self, fmt: str) -> str:
        return f"""
            name: t_run
            models:
              +table_format: {fmt}
              stg: {{+schema: {self.stg}}}
              mart: {{+schema: {self.mart}}}
        """

    def switch(self, fmt: str) -> None:
        """Every model in another table format from the next run on."""
        (self.root / "project.yml").write_text(textwrap.dedent(self.project_yml(fmt)).lstrip("\n"))

    def tables(self, database: str) -> dict[str, str]:
        """Name → ``table_format.table_provider`` of everything in ``database``."""
        from compiler.table_format import table_provider

        return {r.tableName: table_provider(self.spark, f"{database}.{r.tableName}")
                for r in self.spark.sql(f"SHOW TABLES IN {database}").collect() if not r.isTemporary}

    def load_items(self, rows: list[tuple[int, str, float]]) -> None:
        values = ", ".join(f"({i}, '{s}', {p})" for i, s, p in rows)
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS {self.src}.items (id BIGINT, shop STRING, price DOUBLE) USING parquet")
        self.spark.sql(f"INSERT OVERWRITE TABLE {self.src}.items VALUES {values}")

    def manifest(self):
        return compile_project(load_project(self.root))

    def run(self, select: list[str] | None = None, **options):
        manifest = self.manifest()
        lines: list[str] = []
        names = select or manifest.order()
        report = run_models(self.spark, manifest, names, echo=lines.append, **options)
        return report, lines

    def rows(self, relation: str) -> list[tuple]:
        return sorted(tuple(r) for r in self.spark.table(relation).collect())

    def view_text(self, relation: str) -> str:
        info = {r.col_name: r.data_type for r in self.spark.sql(f"DESCRIBE TABLE EXTENDED {relation}").collect()}
        return info.get("View Text", "")

    def drop(self) -> None:
        for database in (self.src, self.stg, self.mart):
            self.spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")


@pytest.fixture
def env(spark, make_project):
    environment = Env(spark, make_project)
    yield environment
    environment.drop()


@pytest.fixture(params=["parquet", "delta"])
def fmt_env(request, spark, make_project):
    """An Env whose models are stored in each table format."""
    environment = Env(spark, make_project, fmt=request.param)
    yield environment
    environment.drop()


def statuses(report) -> dict[str, str]:
    return {r.name: r.status for r in report.results}


def test_views_and_tables_are_built_in_dag_order(fmt_env):
    env = fmt_env
    report, lines = env.run()

    assert report.ok and statuses(report) == {"stg_items": "success", "shop_stats": "success", "top_shop": "success"}
    assert [r.name for r in report.results] == ["stg_items", "shop_stats", "top_shop"]
    assert env.rows(f"{env.stg}.stg_items") == [(1, "a", 10.0), (2, "a", 5.0), (3, "b", 7.0)]
    assert env.rows(f"{env.mart}.shop_stats") == [("a", 2, 15.0), ("b", 1, 7.0)]
    assert env.rows(f"{env.mart}.top_shop") == [("a",)]
    table = next(r for r in report.results if r.name == "shop_stats")
    assert table.rows == 2 and table.kind == "table"
    # one line when a model starts and one when it ends
    assert sum("START" in line for line in lines) == 3
    assert sum(" OK " in line for line in lines) == 3
    assert any("of 3 OK    table shop_stats" in line and "2 rows" in line for line in lines)
    expected = {"view": {"shop_stats": "view", "shop_stats__mvflow_a": "parquet", "top_shop": "view"},
                "delta": {"shop_stats": "delta", "top_shop": "view"}}
    fmt = env.manifest().models["shop_stats"].table_format
    assert env.tables(env.mart) == expected["delta" if fmt == "delta" else "view"]


def test_a_run_with_nothing_moved_builds_no_table_or_view_and_starts_no_spark(fmt_env):
    """Issue 32's P4b (``compiler.kinds.unchanged``): a table or view is built again only when an
    input's files, its definition or its format moved, or its SELECT reads the clock."""
    env = fmt_env
    assert env.run()[0].ok

    def run_lazily(**options) -> tuple[dict[str, str], bool]:
        manifest = env.manifest()
        lazy = LazySession(lambda: env.spark)
        report = run_models(lazy, manifest, manifest.order(), echo=lambda _: None, options=RunOptions(**options))
        assert report.ok, report.results
        return {r.name: r.message for r in report.results}, lazy.started

    assert run_lazily() == ({name: UP_TO_DATE for name in ("stg_items", "shop_stats", "top_shop")}, False)
    manifest, now = env.manifest(), datetime.now(timezone.utc)
    store = open_state_store(manifest.project.target().state)
    assert {m.kind.next_run(manifest, m, store, now)[0] for m in manifest.models.values()} == {"nothing"}

    env.load_items([(1, "a", 10.0), (2, "a", 5.0), (3, "b", 7.0), (6, "c", 9.0)])  # the source's files move
    messages, started = run_lazily()
    assert started and UP_TO_DATE not in messages.values()  # the view, the table over it and its reader
    assert env.rows(f"{env.mart}.shop_stats") == [("a", 2, 15.0), ("b", 1, 7.0), ("c", 1, 9.0)]
    assert env.rows(f"{env.mart}.top_shop") == [("a",)]

    stats = env.manifest().models["shop_stats"]  # dropped outside mvflow (its files go): its own tables are watched
    for table in stats.kind.watched(stats)[0]:
        env.spark.sql(f"DROP TABLE IF EXISTS {table}")
    messages, started = run_lazily()
    assert started and messages["shop_stats"] != UP_TO_DATE and messages["stg_items"] == UP_TO_DATE
    assert env.rows(f"{env.mart}.shop_stats") == [("a", 2, 15.0), ("b", 1, 7.0), ("c", 1, 9.0)]

    (env.root / "models/mart/top_shop.sql").write_text("select shop from {{ ref('shop_stats') }} order by total limit 1\n")
    messages, _ = run_lazily()
    assert (messages["stg_items"], messages["shop_stats"]) == (UP_TO_DATE, UP_TO_DATE) != (messages["top_shop"],) * 2
    assert env.rows(f"{env.mart}.top_shop") == [("b",)]
    assert set(run_lazily(full_refresh=True)[0].values()) != {UP_TO_DATE}  # --full-refresh builds them all
    assert set(run_lazily(file_check=False)[0].values()) != {UP_TO_DATE}  # and so does --no-file-check

    (env.root / "models/mart/top_shop.sql").write_text("select shop, current_date() as day from {{ ref('shop_stats') }}\n")
    env.run()
    messages, started = run_lazily()
    assert started and messages["top_shop"] != UP_TO_DATE and messages["shop_stats"] == UP_TO_DATE  # it reads the clock
    (env.root / "models/mart/top_shop.sql").write_text("{{ config(after='select 1') }}\nselect shop from {{ ref('shop_stats') }}\n")
    env.run()
    assert run_lazily()[0]["top_shop"] != UP_TO_DATE  # its hook runs at every run, as dbt's do


def test_table_rebuild_swaps_slots_and_readers_keep_the_model_name(env):
    relation = f"{env.mart}.shop_stats"
    env.run(["stg_items", "shop_stats"])
    assert "__mvflow_a" in env.view_text(relation)

    env.load_items([(1, "a", 1.0), (5, "c", 2.0)])
    report, _ = env.run(["shop_stats"])
    assert report.ok
    assert "__mvflow_b" in env.view_text(relation)
    assert env.rows(relation) == [("a", 1, 1.0), ("c", 1, 2.0)]
    # the previous slot is kept until the next build (queries that started before the swap finish on it)
    assert env.rows(f"{relation}__mvflow_a") == [("a", 2, 15.0), ("b", 1, 7.0)]

    env.load_items([(9, "z", 3.0)])
    env.run(["shop_stats"])
    assert "__mvflow_a" in env.view_text(relation)
    assert env.rows(relation) == [("z", 1, 3.0)]
    tables = {r.tableName for r in env.spark.sql(f"SHOW TABLES IN {env.mart}").collect()}
    assert tables == {"shop_stats", "shop_stats__mvflow_a", "shop_stats__mvflow_b"}


def test_a_delta_table_is_replaced_in_place_and_formats_switch_both_ways(env):
    relation = f"{env.mart}.shop_stats"
    env.run(["stg_items", "shop_stats"])
    assert env.tables(env.mart) == {"shop_stats": "view", "shop_stats__mvflow_a": "parquet"}

    env.switch("delta")  # parquet → delta: the view and its slots give way to one Delta table
    env.load_items([(1, "a", 1.0), (5, "c", 2.0)])
    report, _ = env.run(["shop_stats"])
    assert report.ok and report.results[0].rows == 2
    assert env.tables(env.mart) == {"shop_stats": "delta"}
    assert env.rows(relation) == [("a", 1, 1.0), ("c", 1, 2.0)]
    env.load_items([(9, "z", 3.0)])
    assert env.run(["shop_stats"])[0].ok and env.rows(relation) == [("z", 1, 3.0)]
    history = env.spark.sql(f"DESCRIBE HISTORY {relation}").collect()
    assert [h.operation for h in history] == ["CREATE OR REPLACE TABLE AS SELECT"] * 2, "one commit per build"
    assert sorted(tuple(r) for r in env.spark.read.option("versionAsOf", history[-1].version).table(relation)
                  .collect()) == [("a", 1, 1.0), ("c", 1, 2.0)], "the old version is still readable"
    manifest = env.manifest()
    [text] = manifest.models["shop_stats"].kind.run_files(manifest, manifest.models["shop_stats"]).values()
    assert f"CREATE OR REPLACE TABLE {relation}\nUSING delta\nAS\n" in text and "IDENTIFIER(:build_table)" not in text
    assert f"(only when {relation} is a view now)\nDROP VIEW IF EXISTS {relation};" in text

    env.switch("parquet")  # delta → parquet: a slot, then the view replaces the Delta table
    env.load_items([(1, "a", 4.0)])
    assert env.run(["shop_stats"])[0].ok
    assert env.tables(env.mart) == {"shop_stats": "view", "shop_stats__mvflow_a": "parquet"}
    assert env.rows(relation) == [("a", 1, 4.0)]


def test_an_mv_diffs_a_delta_table_model_like_a_dictionary(spark, make_project):
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.kinds.mv.refresh import run_mv, watch_spec
    from compiler.project import load_project
    from compiler.state import open_state_store
    from compiler.verify import verify_model

    env = Env(spark, make_project, {
        "models/mart/shop_stats.sql": """
            {{ config(materialized='table', unique_key=['shop']) }}
            select s.shop, count(*) as items, sum(s.price) as total
            from {{ ref('stg_items') }} as s
            group by s.shop
        """,
        "models/mart/item_shops.sql": """
            {{ config(materialized='mv') }}
            select e.id, t.items, t.total
            from {{ source('SRC', 'events') }} as e
            left join {{ ref('shop_stats') }} as t on t.shop = 'a'
        """,
    }, fmt="delta")
    try:
        store = open_state_store(load_project(env.root).target().state)
        assert env.run(["stg_items", "shop_stats"])[0].ok
        manifest = env.manifest()
        mv = manifest.models["item_shops"]
        spec = watch_spec(mv_plan(mv, manifest), "x")
        assert f"{env.mart}.shop_stats" in spec.tables and not any("__mvflow_" in t for t in spec.tables)
        for items in ([(1, "a", 1.0)], [(1, "a", 1.0), (2, "a", 5.0)]):
            env.load_items(items)
            assert env.run(["shop_stats"])[0].ok
            result = run_mv(spark, manifest, mv, store)
            assert result.status == "success" and "re-created" not in result.message, result.message  # REPLACE keeps its log
            verdict = verify_model(spark, manifest, mv, store)
            assert verdict.ok, verdict.format()
        assert env.rows(mv.relation) == [(1, 2, 6.0)]
    finally:
        env.drop()


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_an_mv_reads_a_seed_keyed_by_its_tests(spark, make_project, fmt):
    """A seed (or table) is an mv input keyed by what the project declares of it: here a column
    tested both unique and not_null. A seed edit refreshes only the MV keys it reaches."""
    from compiler.kinds.mv.derive import explain
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.verify import verify_model

    env = Env(spark, make_project, {
        "seeds/shops.csv": "code,name\na,Alpha\nb,Beta\n",
        "seeds/shops.yml": "seeds:\n  - name: shops\n    columns:\n      - name: code\n        tests: [unique, not_null]\n",
        "models/mart/item_shops.sql": """
            {{ config(materialized='mv', strategy='incremental') }}
            select i.id, i.price, s.name as shop_name
            from {{ source('SRC', 'items') }} as i
            left join {{ ref('shops') }} as s on s.code = i.shop
        """,
    }, fmt=fmt)
    (env.root / "project.yml").write_text(textwrap.dedent(env.project_yml(fmt)).lstrip("\n") + f"seeds: {{+schema: {env.mart}}}\n")
    try:
        manifest = env.manifest()
        mv = manifest.models["item_shops"]
        from compiler.kinds.mv.refresh import watch_spec

        assert {t.rsplit("__", 1)[-1] for t in watch_spec(mv_plan(mv, manifest), "x").tables if "shops" in t} == \
            ({"mvflow_a", "mvflow_b"} if manifest.models["shops"].table_format == "parquet" else {f"{env.mart}.shops"}), \
            "the seed's files are watched"
        text = explain(mv_plan(mv, manifest))
        assert "key (code, tests unique and not_null of column code at seeds/shops.yml:5)" in text, text[:1500]
        report, _ = env.run(["shops", "item_shops"])
        assert report.ok and verify_model(spark, manifest, mv).ok
        (env.root / "seeds/shops.csv").write_text("code,name\na,Alpha\nb,Beta2\nc,Gamma\n")
        report, _ = env.run(["shops", "item_shops"])
        manifest = env.manifest()
        verdict = verify_model(spark, manifest, manifest.models["item_shops"])
        assert report.ok and verdict.ok, verdict.format()
        refreshed = report.results[1].message
        assert "2 keys refreshed (changed: shops 2)" in refreshed, refreshed  # items 3 and 4 are in shop b
        assert env.rows(mv.relation) == [(1, 10.0, "Alpha"), (2, 5.0, "Alpha"), (3, 7.0, "Beta2"), (4, -1.0, "Beta2")]
    finally:
        env.drop()


def test_an_mv_reads_an_incremental_model_that_merges_by_its_unique_key(spark, make_project):
    from compiler.verify import verify_model

    env = Env(spark, make_project, {
        "models/mart/shop_totals.sql": """
            {{ config(materialized='incremental', incremental_strategy='merge', unique_key='shop') }}
            select s.shop, sum(s.price) as total from {{ source('SRC', 'items') }} as s group by s.shop
        """,
        "models/mart/item_totals.sql": """
            {{ config(materialized='mv', strategy='incremental') }}
            select i.id, t.total from {{ source('SRC', 'items') }} as i left join {{ ref('shop_totals') }} as t on t.shop = i.shop
        """,
    }, fmt="delta")
    try:
        assert env.run(["shop_totals", "item_totals"])[0].ok
        env.load_items([(1, "a", 10.0), (2, "a", 5.0), (3, "b", 7.0), (4, "b", 1.0)])  # shop b's total moves
        report, _ = env.run(["shop_totals", "item_totals"])
        manifest = env.manifest()
        verdict = verify_model(spark, manifest, manifest.models["item_totals"])
        assert report.ok and verdict.ok, verdict.format()
        # items changed only a price, which the mv does not read: its diff finds no key
        assert "2 keys refreshed (changed: shop_totals 1)" in report.results[1].message, report.results[1].message
        assert env.rows(manifest.models["item_totals"].relation) == [(1, 15.0), (2, 15.0), (3, 8.0), (4, 8.0)]
    finally:
        env.drop()


def test_a_failing_model_skips_its_descendants(spark, make_project):
    env = Env(spark, make_project, {
        # `events` declares no columns, so compile cannot know that `nope` is missing: Spark finds out
        "models/mart/broken.sql": "select e.nope from {{ source('SRC', 'events') }} as e",
        "models/mart/after_broken.sql": "select * from {{ ref('broken') }}",
        "models/mart/after_after.sql": "select * from {{ ref('after_broken') }}",
    })
    try:
        report, lines = env.run()
        result = {r.name: r for r in report.results}
        assert not report.ok
        assert result["broken"].status == "error"
        # the model's file and line, what is wrong, the table's actual columns, the file that ran
        assert result["broken"].message == (
            f"models/mart/broken.sql:1: [unknown-column] column e.nope does not exist — did you mean e.id?; "
            f"{env.src}.events has columns: id (ran target/run/mart/broken.sql)")
        assert (result["after_broken"].status, result["after_broken"].message) == ("skipped", "upstream broken failed")
        assert (result["after_after"].status, result["after_after"].message) == ("skipped", "upstream broken failed")
        assert {result[n].status for n in ("stg_items", "shop_stats", "top_shop")} == {"success"}
        assert report.counts() == {"success": 3, "error": 1, "skipped": 2}
        assert not spark.catalog.tableExists(f"{env.mart}.after_broken")
        assert any("ERROR" in line and "broken" in line for line in lines)
    finally:
        env.drop()


def test_cli_run_exits_1_on_failure_and_writes_run_results(spark, make_project, capsys):
    env = Env(spark, make_project, {"models/mart/broken.sql": "select e.nope from {{ source('SRC', 'events') }} as e"})
    try:
        with pytest.raises(SystemExit) as info:
            main(["--project-dir", str(env.root), "run", "--select", "broken stg_items"])
        out, err = capsys.readouterr()
        assert info.value.code == 1, err
        assert "1 ok, 1 failed, 0 skipped" in out
        assert "\n  models/mart/broken.sql:1: [unknown-column] column e.nope does not exist" in out
        assert "(ran target/run/mart/broken.sql)" in out
        for noise in ("Traceback", "at org.apache", "SQLQueryContextLogger", "Py4JJavaError"):
            assert noise not in out + err
        results = json.loads((env.root / "target" / "run_results.json").read_text())
        assert results["counts"] == {"success": 1, "error": 1, "skipped": 0}
        assert {r["name"]: r["status"] for r in results["results"]} == {"stg_items": "success", "broken": "error"}
        assert (env.root / "target" / "run" / "stg" / "stg_items.sql").is_file()

        main(["--project-dir", str(env.root), "run", "--select", "+top_shop"])
        assert "3 ok, 0 failed, 0 skipped" in capsys.readouterr().out
        assert env.rows(f"{env.mart}.top_shop") == [("a",)]
    finally:
        env.drop()


def test_a_model_whose_sql_does_not_compile_blocks_only_runs_that_select_it(spark, make_project, capsys):
    """As dbt renders only what it runs: broken SQL outside the selection (and what reads it) is set
    aside with a warning; selected, or needed upstream, it stops the run; a Jinja error anywhere
    still stops every command (reading the project)."""
    env = Env(spark, make_project, {"models/mart/bad_sql.sql": "select id, from where {{ ref('stg_items') }}",
                                    "models/mart/after_bad.sql": "select * from {{ ref('bad_sql') }}"})
    try:
        main(["--project-dir", str(env.root), "run", "--select", "+top_shop"])
        out, err = capsys.readouterr()
        assert "3 ok, 0 failed, 0 skipped" in out
        assert "warning: models/mart/bad_sql.sql:1" in err and "[set-aside] model 'bad_sql' is not compiled: " in err, err
        assert "warning: models/mart/after_bad.sql: [set-aside] model 'after_bad' is not compiled: it reads 'bad_sql'" in err, err
        assert env.rows(f"{env.mart}.top_shop") == [("a",)]
        for args in (["run", "--select", "after_bad"], ["run"], ["compile"]):
            with pytest.raises(SystemExit) as info:
                main(["--project-dir", str(env.root), *args])
            assert info.value.code == 2, args
            assert "models/mart/bad_sql.sql:1" in capsys.readouterr().err, args
        assert not spark.catalog.tableExists(f"{env.mart}.after_bad")

        (env.root / "models" / "mart" / "bad_sql.sql").write_text("select {{ no_such_macro() }} as id")
        with pytest.raises(SystemExit) as info:
            main(["--project-dir", str(env.root), "run", "--select", "+top_shop"])
        assert info.value.code == 2 and "'no_such_macro' is undefined" in capsys.readouterr().err
    finally:
        env.drop()


def test_threads_run_independent_models_at_the_same_time(spark, make_project, monkeypatch):
    env = Env(spark, make_project, {
        "models/stg/left.sql": "select i.id from {{ source('SRC', 'items') }} as i",
        "models/stg/right.sql": "select i.shop from {{ source('SRC', 'items') }} as i",
    })
    # both runners must be inside at once to pass the barrier: impossible with one thread
    barrier = threading.Barrier(2, timeout=60)

    def meet_then_run(spark, manifest, model) -> Result:
        if model.name in ("left", "right"):
            barrier.wait()
        return run_view(spark, manifest, model)

    monkeypatch.setattr(ViewKind, "runner", lambda kind, options: meet_then_run)
    try:
        report, _ = env.run(["left", "right"], threads=2)
        assert report.ok and statuses(report) == {"left": "success", "right": "success"}
        assert env.rows(f"{env.stg}.left") == [(1,), (2,), (3,), (4,)]
    finally:
        env.drop()


def test_dependent_models_wait_for_their_parents_even_with_threads(env, monkeypatch):
    order: list[str] = []
    lock = threading.Lock()

    def recording(run):
        def record(spark, manifest, model) -> Result:
            result = run(spark, manifest, model)
            with lock:
                order.append(model.name)
            return result
        return lambda kind, options: record

    monkeypatch.setattr(ViewKind, "runner", recording(run_view))
    monkeypatch.setattr(TableKind, "runner", recording(run_table))
    report, _ = env.run(threads=3)
    assert report.ok and order == ["stg_items", "shop_stats", "top_shop"]
