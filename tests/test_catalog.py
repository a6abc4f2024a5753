"""The catalog (seed 002): versions recorded by runs, compare-and-set on the version number,
breaking changes classified and acted on (an mv rebuilt, a fact refused unless the user says
otherwise, with nothing touched), ``mvflow plan`` and ``--select state:modified`` without Spark,
``mvflow catalog`` listing, diff and "as of".

A real local SparkSession, real tables, a real SQLite state store, the CLI in-process."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from compiler.catalog.changes import classify
from compiler.catalog.entry import Entry
from compiler.cli import cli
from compiler.errors import MvflowError
from compiler.project import load_project
from compiler.state import CatalogVersion, SqliteStateStore, open_state_store

NOW = datetime(2026, 11, 24, 10, 0, tzinfo=timezone.utc)

VIEW = """
select e.id, e.k, e.v, e.ts from {{ source('SRC', 'events') }} as e where e.v >= 0
"""
TABLE = """
{{ config(materialized='table') }}
select s.k, count(*) as n from {{ ref('stg_events') }} as s group by s.k
"""
FACT = """
{{ config(materialized='fact', maxstep=100ONCHANGE) }}
select s.id, s.ts, s.v * 2 as v2COLUMNS from {{ ref('stg_events') }} as s
"""
MV = """
{{ config(materialized='mv') }}
select e.id, e.v, d.name from {{ source('SRC', 'events') }} as e
left join {{ source('SRC', 'dims') }} as d on d.k = e.k
"""


class Env:
    """A project with a view, a table over it, a fact over it and an mv, on its own databases."""

    def __init__(self, spark, make_project):
        self.spark = spark
        tag = uuid.uuid4().hex[:8]
        self.src, self.out = f"cat_{tag}_src", f"cat_{tag}_out"
        self.root = make_project({
            "project.yml": f"name: t\nmodels:\n  +schema: {self.out}\n  +table_format: parquet\n",
            "lineage/src.yml": f"""
                sources:
                  - name: events
                    database: {self.src}
                    primary_key: [id]
                    position: [ts, id]
                    columns: [{{name: id, type: bigint}}, {{name: k, type: int}}, {{name: v, type: int}}, {{name: ts, type: timestamp}}]
                  - {{name: dims, database: {self.src}, primary_key: [k], dictionary: true}}
            """,
        })
        self.write(stg_events=VIEW, k_counts=TABLE, ev=FACT.replace("ONCHANGE", "").replace("COLUMNS", ""), wide=MV)
        spark.sql(f"CREATE DATABASE {self.src}")
        spark.sql(f"CREATE TABLE {self.src}.events (id BIGINT, k INT, v INT, ts TIMESTAMP) USING parquet")
        spark.sql(f"CREATE TABLE {self.src}.dims (k INT, name STRING) USING parquet")
        spark.sql(f"INSERT INTO {self.src}.dims VALUES (1, 'one'), (2, 'two')")
        self.insert(1, 5)

    def write(self, **models: str) -> None:
        (self.root / "models").mkdir(exist_ok=True)
        for name, sql in models.items():
            (self.root / "models" / f"{name}.sql").write_text(sql.replace("SRC", self.src))

    def insert(self, first: int, last: int) -> None:
        rows = ", ".join(f"({i}, {i % 2 + 1}, {i * 10}, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL {i} MINUTES)"
                         for i in range(first, last + 1))
        self.spark.sql(f"INSERT INTO {self.src}.events VALUES {rows}")

    def cli(self, *args: str, code: int = 0) -> str:
        """Run mvflow in-process; a user error exits as ``mvflow`` would (``compiler.cli.main``)."""
        done = CliRunner().invoke(cli, ["--project-dir", str(self.root), *args])
        error = done.exception if isinstance(done.exception, MvflowError) else None
        exit_code = error.exit_code if error is not None else done.exit_code
        assert exit_code == code, done.output + repr(done.exception)
        return done.output + (f"error: {error}" if error is not None else "")

    @property
    def store(self):
        return open_state_store(load_project(self.root).target().state)

    def versions(self, model: str) -> list[CatalogVersion]:
        return self.store.versions(model)

    def results(self) -> dict[str, dict]:
        data = json.loads((self.root / "target" / "run_results.json").read_text())
        return {r["name"]: r for r in data["results"]}


@pytest.fixture
def env(spark, make_project) -> Env:
    return Env(spark, make_project)


def test_first_run_records_a_version_per_model_and_an_unchanged_run_records_none(env):
    env.cli("run")
    for model in ("stg_events", "k_counts", "ev", "wide"):
        (v1,) = env.versions(model)
        assert (v1.version, v1.breaking) == (1, False)
    entry = Entry.from_json(env.versions("ev")[0].entry)
    assert entry.columns == (("id", "bigint"), ("ts", "timestamp"), ("v2", "int"))  # Spark's types
    assert dict(entry.upstream) == {"stg_events": 1}
    assert env.results()["ev"]["catalog"]["version"] == 1
    env.insert(6, 7)
    env.cli("run")
    assert [len(env.versions(m)) for m in ("stg_events", "k_counts", "ev", "wide")] == [1, 1, 1, 1]
    assert env.results()["ev"]["catalog"] is None
    listed = env.cli("catalog")
    assert "stg_events" in listed and "v1" in listed


def test_a_view_change_is_a_new_version_a_dropped_column_is_breaking_and_downstream_is_named(env):
    env.cli("run")
    env.write(stg_events=VIEW.replace("e.v, e.ts", "e.v, e.ts, e.k * 2 as k2"))
    out = env.cli("run", "-s", "stg_events")
    assert "catalog v2 (column added: k2 int)" in out
    env.write(stg_events=VIEW.replace("e.k, e.v, e.ts", "e.k, e.ts"))  # v dropped (and k2 gone again)
    out = env.cli("run", "-s", "stg_events")
    assert "catalog v3 (breaking: column dropped: v" in out and "downstream: ev, k_counts" in out
    assert [v.breaking for v in env.versions("stg_events")] == [False, False, True]
    diff = env.cli("catalog", "diff", "stg_events", "1", "3")
    assert "breaking" in diff and "! column dropped: v" in diff


def test_a_breaking_fact_change_is_refused_touching_nothing_then_append_new_columns_carries_on(env):
    env.cli("run")
    store = env.store
    offset, rows = store.get("ev"), env.spark.table(f"{env.out}.ev").count()
    env.write(ev=FACT.replace("ONCHANGE", "").replace("COLUMNS", ", s.k"))
    env.insert(6, 8)
    plan = env.cli("plan", code=1)
    assert "REFUSE" in plan and "ev" in plan
    out = env.cli("run", code=1)
    assert "[breaking-change] fact 'ev' changed in a breaking way since catalog version 1" in out
    assert "Traceback" not in out and "--full-refresh" in out
    assert store.get("ev").last == offset.last and env.spark.table(f"{env.out}.ev").count() == rows  # nothing touched
    assert len(env.versions("ev")) == 1

    env.write(ev=FACT.replace("ONCHANGE", ", on_schema_change='append_new_columns'").replace("COLUMNS", ", s.k"))
    out = env.cli("run")
    assert "added k" in out
    table = env.spark.table(f"{env.out}.ev")
    assert "k" in table.columns and table.count() == 8
    assert table.where("k IS NULL").count() == rows and table.where("k IS NOT NULL").count() == 3  # old rows kept as written
    assert dict(table.dtypes)["k"] == "int"  # the type Spark gives the SELECT's new column
    script = (env.root / "target/run/ev/add_columns.sql").read_text()  # what ran, the new columns filled in
    assert f"ALTER TABLE {env.out}.ev ADD COLUMNS ({{new_columns}});" in script
    assert [v.breaking for v in env.versions("ev")] == [False, True]


def test_a_refused_fact_is_rebuilt_with_full_refresh(env):
    env.cli("run")
    env.write(ev=FACT.replace("ONCHANGE", "").replace("s.v * 2 as v2", "s.v * 3 as v3").replace("COLUMNS", ""))
    env.cli("run", "-s", "ev", code=1)
    out = env.cli("run", "-s", "ev", "--full-refresh")
    assert "catalog v2 (breaking: column renamed: v2 → v3" in out
    assert sorted(r.v3 for r in env.spark.table(f"{env.out}.ev").collect()) == [30, 60, 90, 120, 150]


def test_a_breaking_mv_change_rebuilds_it(env):
    env.cli("run")
    env.write(wide=MV.replace("e.v, d.name", "e.v, d.name, e.k"))
    assert "rebuild" in env.cli("plan", "-s", "wide")
    out = env.cli("run", "-s", "wide")
    assert "catalog v2 (breaking: the mv definition changed" in out
    assert "k" in env.spark.table(f"{env.out}.wide").columns
    assert "OK" in env.cli("verify", "-s", "wide")


def test_plan_and_state_modified_need_no_spark(env):
    env.cli("run")
    env.write(k_counts=TABLE.replace("count(*) as n", "count(*) as n, max(s.v) as top"))
    plan = {line.split()[0]: line.split()[2] for line in env.cli("plan").splitlines()}
    assert plan == {"stg_events": "nothing", "k_counts": "run", "ev": "nothing", "wide": "nothing"}
    env.spark.sql(f"DROP DATABASE {env.out} CASCADE")  # plan reads the project, the catalog, the offsets and files only
    plan = {line.split()[0]: line.split(None, 3)[2:] for line in env.cli("plan", code=1).splitlines()}
    assert plan["wide"] == ["build", "its table is missing (dropped outside mvflow?): built again"], plan
    assert plan["ev"][0] == "REFUSE" and "--full-refresh" in plan["ev"][1], plan
    assert env.cli("ls", "-s", "state:modified").split() == ["k_counts"]
    assert env.cli("ls", "-s", "state:modified+").split() == ["k_counts"]
    env.write(stg_events=VIEW.replace("e.v >= 0", "e.v > 0"))
    assert sorted(env.cli("ls", "-s", "state:modified+").split()) == ["ev", "k_counts", "stg_events"]
    assert env.cli("ls", "-s", "state:new").split() == []


def test_catalog_as_of_a_time_and_bad_arguments(env):
    env.cli("run", "-s", "stg_events")
    env.write(stg_events=VIEW.replace("e.v >= 0", "e.v > 0"))
    env.cli("run", "-s", "stg_events")
    first, second = env.versions("stg_events")
    between = first.active_at + (second.active_at - first.active_at) / 2
    assert env.cli("catalog", "stg_events", "--at", between.isoformat()).startswith("v1 ")
    assert env.cli("catalog", "stg_events").count("\n") == 2
    assert "no catalog version 7" in env.cli("catalog", "diff", "stg_events", "1", "7", code=2)
    assert "no model named 'stg_event'" in env.cli("catalog", "stg_event", code=2)
    assert "not a time" in env.cli("catalog", "--at", "yesterday", code=2)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_append_version_is_a_compare_and_set_on_the_version_number(backend, tmp_path, request):
    from compiler.state_postgres import PostgresStateStore

    if backend == "sqlite":
        store = SqliteStateStore(tmp_path / "state.sqlite")
    else:
        store = PostgresStateStore(request.getfixturevalue("postgres_dsn"), offsets_table=f"o_{uuid.uuid4().hex[:8]}")
    version = lambda n, text="{}": CatalogVersion("m", n, text, False, NOW + timedelta(minutes=n))  # noqa: E731
    assert store.append_version(version(1))
    assert not store.append_version(version(1, '{"other": 1}'))  # version 1 is taken
    assert not store.append_version(version(3))  # version 2 is missing
    assert store.append_version(version(2))
    assert [(v.version, v.entry, v.active_at) for v in store.versions("m")] == [(1, "{}", NOW + timedelta(minutes=1)),
                                                                                (2, "{}", NOW + timedelta(minutes=2))]


def test_two_runs_recording_one_model_at_once_never_both_write_version_n(spark, make_project, tmp_path):
    """Two RunCatalogs (two runners) over one store record different entries for one model: one
    gets v2, the other, seeing v2 taken by another entry, classifies against it and writes v3."""
    from compiler.catalog.gate import Verdict
    from compiler.catalog.record import Check, RunCatalog
    from compiler.compile import compile_project

    root = make_project({"models/a.sql": "select 1 as x"})
    manifest = compile_project(load_project(root))
    store = SqliteStateStore(tmp_path / "s.sqlite")
    base = Entry("a", "view", "default.a", "h1", (("x", "int"),))
    store.append_version(CatalogVersion("a", 1, base.to_json(), False, NOW))
    one, two = (RunCatalog(manifest, lambda: store) for _ in range(2))
    model = manifest.models["a"]
    for catalog in (one, two):
        catalog.active()  # both read v1 as active before either records
    first = one.record(model, Check(Entry("a", "view", "default.a", "h2", (("x", "int"),)), Verdict("run"), 1))
    second = two.record(model, Check(Entry("a", "view", "default.a", "h3", (("y", "int"),)), Verdict("run"), 1))
    assert (first.version, second.version) == (2, 3)
    assert second.breaking  # against v2: x renamed to y
    assert [v.version for v in store.versions("a")] == [1, 2, 3]


def test_classify_names_every_kind_of_change():
    old = Entry("f", "fact", "db.f", "h1", (("id", "bigint"), ("v", "int")), key=("id",), config=(("source", '"a"'),))
    new = Entry("f", "fact", "db.f", "h2", (("id", "bigint"), ("v", "smallint")), key=("id", "ts"), config=(("source", '"b"'),),
                description="new words")
    words = [str(c) for c in classify(old, new, on_breaking="refuse", breaking_config=("source",))]
    assert words == ["breaking: key (id) → (id, ts)", "breaking: column v narrowed: int → smallint",
                     "breaking: the fact definition changed", 'breaking: config source: "a" → "b"', "descriptions changed"]
