"""Publishing an MV by key to PostgreSQL (``compiler.publish``), on a real server: after every batch
the published table equals the MV, which equals a full recomputation of its SELECT — also after
a crash at each publish phase with new changes landing before the redo."""

from __future__ import annotations

import itertools
import sys
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from compiler.phases import PUBLISH_PHASES, Crash, crash_at
from compiler.publish.postgres import Fenced, PostgresStore
from compiler.publish.publisher import publish_mv
from compiler.state import LeaseHeld

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from mv_world import REGION_STATS, WIDE, World, seed  # noqa: E402

_databases = itertools.count(1)
PASSWORD = "S3cret-pw-4711"
PROJECT = """
name: t
targets:
  local:
    stores:
      app: {type: postgres, dsn: "{{ env_var('MVFLOW_TEST_APP_DSN') }}"}
"""
PUBLISHED = WIDE.replace("compact_below_rows=0)", "compact_below_rows=0, publish={{'to': 'app', 'table': 'serving.wide', "
                                                  "'indexes': [['shop', 'price'], 'region'], 'chunk_rows': 3}})")

#: a table model published in full after each build (a GROUP BY: one row per shop)
SHOP_OFFERS = """
{{{{ config(materialized='table', schema='{db}', unique_key='shop_id', publish={{'to': 'app', 'indexes': ['offers']}}) }}}}
SELECT o.shop_id, COUNT(*) AS offers, MAX(o.title) AS last_title
FROM {{{{ source('{db}', 'offers') }}}} AS o
WHERE o.deleted = FALSE
GROUP BY o.shop_id
"""


@pytest.fixture
def app_dsn(postgres_dsn, monkeypatch) -> str:
    """A database of its own on the session's server, named by a dsn with a password (trust auth
    ignores it): it must never be printed or written."""
    name = f"app{next(_databases)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    dsn = postgres_dsn.replace("postgres@", f"postgres:{PASSWORD}@").rsplit("/", 1)[0] + f"/{name}"
    monkeypatch.setenv("MVFLOW_TEST_APP_DSN", dsn)
    return dsn


@pytest.fixture
def world(spark, tmp_path, app_dsn):
    w = World(spark, tmp_path, models={"wide": PUBLISHED}, project=PROJECT)
    seed(w)
    assert w.refresh().mode == "build"
    return w


def publish(world: World, name: str = "wide", **options):
    return publish_mv(world.spark, world.manifest, world.manifest.models[name], world.store, **options)


def published_rows(dsn: str, table: str = "serving.wide", columns: list[str] | None = None) -> list[tuple]:
    with psycopg.connect(dsn) as db:
        return sorted(db.execute(f"SELECT {', '.join(columns or ['*'])} FROM {table}").fetchall(), key=repr)


def assert_published(world: World, dsn: str, name: str = "wide", table: str = "serving.wide", recompute: bool = True) -> int:
    """The published table equals the model's table, which equals its recomputation (an MV's)."""
    if recompute:
        world.check(name)
    model = world.manifest.models[name]
    mv = sorted((tuple(r) for r in world.spark.table(model.relation).select(*model.columns).collect()), key=repr)
    assert published_rows(dsn, table, model.columns) == mv
    return len(mv)


def change_some(world: World, n: int) -> None:
    """Inserts, updates, a delete and a dictionary edit: keys upserted and keys deleted."""
    world.put("offers", id=100 + n, shop_id=100, cat_id=7, title=f"new {n}", status="active", note="n")
    world.put("offers", id=1, title=f"renamed {n}")
    world.put("categories", id=7, name=f"cat {n}", note="x")
    world.put("prices", offer_id=3, kind="retail", price=Decimal(f"{n}.50"))
    world.delete("offers", 100 + n - 1)


def test_published_table_follows_the_mv_by_key(world, app_dsn):
    first = publish(world)
    assert first.action.what == "full" and first.action.reason == "first publish"
    assert_published(world, app_dsn)
    for n in range(1, 3):
        change_some(world, n)
        assert world.refresh().mode == "refresh"
        publication = publish(world)
        assert publication.action.what == "keys", publication.words()
        assert publication.chunks >= 2, "chunk_rows=3: more keys than one chunk"
        assert_published(world, app_dsn)
    assert publication.deleted >= 1  # the offer inserted by the batch before (and keys the MV never held)
    again = publish(world)
    assert again.action.what == "nothing" and again.action.reason == "batch 3 is published"
    with psycopg.connect(app_dsn) as db:
        indexes = {r[0] for r in db.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'serving'")}
        offsets = db.execute("SELECT batch, rows FROM mvflow_published").fetchall()
        types = dict(db.execute("SELECT column_name, data_type FROM information_schema.columns "
                                "WHERE table_schema = 'serving' AND table_name = 'wide'").fetchall())
    assert indexes == {"wide_key", "wide__shop_price", "wide__region"}
    assert offsets == [(3, len(published_rows(app_dsn)))]
    assert types["id"] == "bigint" and types["price"] == "numeric" and types["title"] == "text"


def test_a_crash_in_a_by_key_publish_is_redone_with_new_changes(world, app_dsn):
    publish(world)
    for n, phase in enumerate(("publish:leased", "publish:chunk-committed"), start=1):
        change_some(world, 2 * n)
        world.refresh()
        with pytest.raises(Crash):
            publish(world, phase=crash_at(phase))
        change_some(world, 2 * n + 1)  # lands before the redo
        world.refresh()
        assert publish(world).action.what == "keys"
        assert_published(world, app_dsn)


FULL_CRASHES = ("publish:loaded", "publish:indexed", "publish:swapped")


def test_every_publish_phase_is_crashed_at():
    assert {"publish:leased", "publish:chunk-committed", *FULL_CRASHES} == set(PUBLISH_PHASES)


def test_a_crash_in_a_full_publish_leaves_readers_the_old_table(world, app_dsn):
    """A full publish (forced by ``repair``; a rebuilt MV's is ``test_a_changed_definition…`` and the
    slow CLI kill at ``publish:indexed``) crashed at each of its phases, then new changes, then the redo."""
    publish(world)
    with psycopg.connect(app_dsn, autocommit=True) as db:  # an application's role: its grant outlives the swaps
        db.execute("DO $$ BEGIN CREATE ROLE mvflow_reader; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        db.execute("GRANT SELECT ON serving.wide TO mvflow_reader")
    for n, phase in enumerate(FULL_CRASHES, start=1):
        before = published_rows(app_dsn)
        change_some(world, 2 * n)
        world.refresh()
        with pytest.raises(Crash):
            publish(world, repair=True, phase=crash_at(phase))
        if phase != "publish:swapped":
            assert published_rows(app_dsn) == before  # the fresh table is not swapped in
        change_some(world, 2 * n + 1)
        world.refresh()
        assert publish(world).action.what == "keys"  # from whichever table readers had
        assert_published(world, app_dsn)
        with psycopg.connect(app_dsn) as db:  # the crashed publish's fresh table dropped with the batch
            assert db.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'serving'").fetchone()[0] == 1
            assert db.execute("SELECT has_table_privilege('mvflow_reader', 'serving.wide', 'SELECT')").fetchone()[0]


def test_a_second_publisher_is_refused(world, app_dsn):
    """A publish holds the MV's own lease (its refresh and its publish are one job): while another
    runner holds it, the publish is refused; once a newer lease published, the older token is fenced."""
    from datetime import datetime, timezone

    publish(world)
    change_some(world, 1)
    world.refresh()
    held = world.store.acquire("wide", "other-runner", 60, datetime.now(timezone.utc))
    with pytest.raises(LeaseHeld):
        publish(world)
    world.store.release(held)
    assert publish(world).action.what == "keys"  # written with a newer token: the other runner's is stale
    store = PostgresStore("app", app_dsn)
    from compiler.publish.schema import Column, Table

    table = Table("serving", "wide", (Column("id", "bigint"),), ("id",))
    with pytest.raises(Fenced):
        store.upsert_chunk(table, [], [(1,)], held, done=None, mv="wide")
    assert_published(world, app_dsn)
    # a row written before the lease's topic was recorded (by a publish lease of its own): its token,
    # of another topic, does not fence the MV's lease
    with psycopg.connect(app_dsn) as db:
        db.execute("UPDATE mvflow_published SET lease = '', token = 1000000")
    change_some(world, 2)
    world.refresh()
    assert publish(world).action.what == "keys"
    with psycopg.connect(app_dsn) as db:
        assert db.execute("SELECT lease, token < 1000000 FROM mvflow_published").fetchone() == ("wide", True)
    assert_published(world, app_dsn)


def test_an_added_column_is_added_in_place_and_a_retyped_one_republishes_in_full(world, app_dsn):
    """A column added to the MV is added to the table readers have (an application's view on it
    stays); a column whose type changed needs a fresh table, which that view stops, saying so."""
    from compiler.errors import RunError

    publish(world)
    with psycopg.connect(app_dsn) as db:
        db.execute("CREATE VIEW serving.wide_titles AS SELECT id, title FROM serving.wide")
        table_oid = db.execute("SELECT 'serving.wide'::regclass::oid").fetchone()[0]
    model = world.root / "models" / "wide.sql"
    model.write_text(model.read_text().replace("  o.title,", "  o.title,\n  o.status,"))
    world.recompile()
    change_some(world, 1)
    assert world.refresh().mode == "build"
    added = publish(world)
    assert added.action.what == "replace" and "column status added" in added.action.reason, added.words()
    assert_published(world, app_dsn)
    with psycopg.connect(app_dsn) as db:
        assert db.execute("SELECT 'serving.wide'::regclass::oid").fetchone()[0] == table_oid
        assert db.execute("SELECT count(*) FROM serving.wide_titles").fetchone()[0] == len(published_rows(app_dsn))
    assert publish(world).action.what == "nothing"

    model.write_text(model.read_text().replace("  p.price,", "  CAST(p.price AS DOUBLE) AS price,"))
    world.recompile()
    world.refresh()
    with pytest.raises(RunError) as refused:
        publish(world)
    assert "views of the store on the published table stop it" in refused.value.problems[0].hint
    with psycopg.connect(app_dsn, autocommit=True) as db:
        db.execute("DROP VIEW serving.wide_titles")
    assert publish(world).action.reason == "the MV's columns, types or key changed"
    assert_published(world, app_dsn)


def test_every_spark_type_round_trips(spark, app_dsn):
    """What the published table holds, read back by an application, equals what Spark holds."""
    import datetime as dt
    import json

    from compiler.publish.decisions import Published
    from compiler.publish.schema import table_of
    from compiler.state import Lease

    rows = spark.sql("""
        SELECT CAST(1 AS BIGINT) AS id, CAST(7 AS INT) AS n, CAST(3 AS SMALLINT) AS s, CAST(2 AS TINYINT) AS b,
               'Zürich "q"' AS name, CAST('12345.67' AS DECIMAL(12,2)) AS price, CAST(0.5 AS DOUBLE) AS share,
               CAST(1.5 AS FLOAT) AS f, TRUE AS flag, DATE'2026-11-29' AS day,
               TIMESTAMP'2026-11-29 20:15:00' AS at, TIMESTAMP_NTZ'2026-11-29 20:15:00' AS local_at,
               array('a', 'b') AS tags, array(1, 2) AS nums, named_struct('k', 1, 'v', 'x') AS pair,
               map('a', 1) AS counts, array(named_struct('k', 2)) AS pairs, CAST('ab' AS BINARY) AS raw,
               CAST(NULL AS STRING) AS missing
    """)
    table = table_of(rows.schema, "serving.types", ("id",))
    store = PostgresStore("app", app_dsn)
    lease = Lease("types", "test", 1, dt.datetime.now(dt.timezone.utc))
    store.create_new(table, lease)
    store.load_new(table, [tuple(r) for r in rows.collect()], lease)
    store.index_new(table, (), lease)
    store.swap_in(table, (), lease, mv="types", done=Published(1, "d", table.fingerprint, 1, lease="types"))
    with psycopg.connect(app_dsn) as db:
        [got] = db.execute("SELECT * FROM serving.types").fetchall()
    want = rows.collect()[0]
    got = dict(zip(rows.columns, got))
    assert got["at"] == dt.datetime(2026, 11, 29, 20, 15, tzinfo=dt.timezone.utc)  # the session's zone is UTC
    assert got["local_at"] == dt.datetime(2026, 11, 29, 20, 15)
    assert got["pair"] == {"k": 1, "v": "x"} and got["counts"] == {"a": 1} and got["pairs"] == [{"k": 2}]
    assert bytes(got["raw"]) == b"ab"
    for name in ("id", "n", "s", "b", "name", "price", "share", "f", "flag", "day", "tags", "nums", "missing"):
        assert got[name] == want[name], name
    assert json.loads(json.dumps(got["pair"])) == want["pair"].asDict()


def test_run_publishes_and_status_shows_it_without_the_password(spark, tmp_path, app_dsn, capsys, monkeypatch):
    """``mvflow run`` publishes the MV by key and the table model in full after each build; status,
    verify and ``verify --repair`` see both; a run whose store is down fails, and the next run
    publishes what it built (the table is not built again)."""
    from compiler.cli import main

    world = World(spark, tmp_path, models={"wide": PUBLISHED, "shop_offers": SHOP_OFFERS}, project=PROJECT)
    seed(world)
    world.flush()

    def cli(*args: str, code: int = 0) -> str:
        try:
            main(["--project-dir", str(tmp_path), *args])
            exited = 0
        except SystemExit as exc:
            exited = exc.code or 0
        out, err = capsys.readouterr()
        assert exited == code, out + err
        return out + err

    shown = cli("run")
    assert "published app.serving.wide in full at batch 1 (first publish)" in shown, shown
    assert "published app.public.shop_offers in full (first publish)" in shown, shown
    change_some(world, 1)
    world.flush()
    shown += cli("run")
    assert "published app.serving.wide by key (batch 2 of the MV)" in shown, shown
    assert "published app.public.shop_offers in full (the table was rebuilt)" in shown, shown
    again = cli("run")  # nothing moved: neither built nor published
    assert "published" not in again and "shop_offers" in again, again
    status = cli("status")
    assert [line.split()[:4] for line in status.splitlines() if line.startswith("app.")] == \
        [["app.public.shop_offers", "shop_offers", "-", "-"], ["app.serving.wide", "wide", "2", "-"]], status
    assert_published(world, app_dsn, "shop_offers", "public.shop_offers", recompute=False)
    with psycopg.connect(app_dsn) as db:  # drift: a row changed, one gone, one extra
        db.execute("UPDATE serving.wide SET title = 'tampered' WHERE id = 1")
        db.execute("DELETE FROM serving.wide WHERE id = 3")
        db.execute("INSERT INTO serving.wide (id, title) VALUES (999, 'stray')")
        db.execute("UPDATE public.shop_offers SET offers = offers + 1")
    drift = cli("verify", code=1)
    assert "FAIL  wide published (app.serving.wide)" in drift, drift
    assert "missing: 1 (keys 3)" in drift and "extra: 1 (keys 999)" in drift and "different: 1 (keys 1)" in drift
    assert "FAIL  shop_offers published (app.public.shop_offers)" in drift, drift
    repaired = cli("verify", "--repair")
    assert "published app.serving.wide in full at batch 2 (repair asked)" in repaired, repaired
    assert "published app.public.shop_offers in full (repair asked)" in repaired, repaired
    assert "OK    wide published (app.serving.wide)" in repaired.rsplit("repair asked", 1)[1]
    assert "OK    shop_offers published (app.public.shop_offers)" in repaired.rsplit("repair asked", 1)[1]
    change_some(world, 2)
    world.flush()
    port = app_dsn.rsplit(":", 1)[1].split("/", 1)[0]
    monkeypatch.setenv("MVFLOW_TEST_APP_DSN", app_dsn.replace(f":{port}/", ":1/"))  # nothing listens there
    down = cli("run", code=1)
    assert "publishing failed" in down and down.count("cannot connect to PostgreSQL") >= 2, down  # both models
    monkeypatch.setenv("MVFLOW_TEST_APP_DSN", app_dsn)
    back = cli("run")
    assert "up to date" in next(line for line in back.splitlines() if " shop_offers " in line and "OK" in line), back
    assert "published app.public.shop_offers in full (the table was rebuilt)" in back, back
    assert "published app.serving.wide by key (batch 3 of the MV)" in back, back
    assert_published(world, app_dsn, "shop_offers", "public.shop_offers", recompute=False)
    assert_published(world, app_dsn)
    shown += status + drift + repaired + down + back + cli("compile") + cli("docs", "generate")
    assert PASSWORD not in shown
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("project, model, message", [
    ("name: t\n", PUBLISHED, "publish names store 'app', which target 'local' does not declare"),
    (PROJECT, PUBLISHED.replace("'region'", "'nope'"), "publish indexes name column 'nope', which the mv does not output"),
    (PROJECT, PUBLISHED.replace("'chunk_rows': 3", "'chunk_rows': 0"), "publish chunk_rows must be a positive number"),
    (PROJECT.replace("\"{{ env_var('MVFLOW_TEST_APP_DSN') }}\"", "postgresql://app:hunter2@db/app"), PUBLISHED,
     "the dsn holds a password written in project.yml"),
    (PROJECT, SHOP_OFFERS.replace("unique_key='shop_id', ", ""), "table 'wide' cannot be published: its rows have no unique key"),
    (PROJECT, SHOP_OFFERS.replace("unique_key='shop_id'", "unique_key='shop'"),
     "its unique_key names column(s) shop, which it does not output"),
])
def test_a_bad_publish_config_fails_compile_with_its_line(spark, tmp_path, project, model, message):
    from compiler.errors import MvflowError

    with pytest.raises(MvflowError) as caught:
        World(spark, tmp_path, models={"wide": model}, project=project)
    problems = caught.value.problems
    assert any(message in p.message for p in problems), [p.message for p in problems]
    assert all(p.line and p.path in ("models/wide.sql", "project.yml") for p in problems), problems
    assert "hunter2" not in str([p.message + (p.hint or "") for p in problems])


def test_a_group_by_mv_is_published_by_its_groups_a_null_group_included(spark, tmp_path, app_dsn):
    stats = REGION_STATS.replace("compact_below_rows=0)", "compact_below_rows=0, publish={{'to': 'app'}})")
    world = World(spark, tmp_path, models={"stats": stats}, project=PROJECT)
    seed(world)
    world.refresh("stats")
    publish(world, "stats")
    assert_published(world, app_dsn, "stats", "public.stats")
    for region in list(world.rows["regions"]):  # every offer's region gone: one NULL group
        world.delete("regions", *region)
    world.refresh("stats")
    assert publish(world, "stats").action.what == "keys"
    assert assert_published(world, app_dsn, "stats", "public.stats") >= 1
    assert [r for r in published_rows(app_dsn, "public.stats") if r[0] is None]
    world.put("regions", id=1, name="Nord")  # the NULL group shrinks or goes
    world.refresh("stats")
    publish(world, "stats")
    assert_published(world, app_dsn, "stats", "public.stats")
