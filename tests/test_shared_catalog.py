"""A shared catalog: the Hive metastore on PostgreSQL (``metastore: {type: postgres, dsn: ...}``,
compiler/metastore.py), on the throwaway server of ``postgres_dsn``.

The fast tests check the settings, the dsn, the schema's creation (once, under an advisory lock, with
racing creators), the errors, and the Maven fetch the Delta jars share. The slow one runs real
``mvflow run`` processes on one catalog at the same time (each its own JVM: the test session's own
SparkSession is Derby-backed and Spark's static conf cannot change inside a process)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from compiler import maven, metastore
from compiler.errors import ProjectError, RunError
from compiler.lock import exclusive
from compiler.project import MetastoreSettings, load_project
from compiler.state import open_state_store

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from processes import MVFLOW, Background, env, mvflow  # noqa: E402


def _database(dsn: str, name: str) -> str:
    """The dsn of a fresh database ``name`` on the test server (dropped first when it is there)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
    return make_conninfo(dsn, dbname=name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- settings ---------------------------------------------------------------------------------

def test_a_postgres_metastore_target_is_shared_and_derby_stays_the_default(make_project):
    project = load_project(make_project({"project.yml": """
        name: t
        targets:
          local: {}
          shared:
            metastore: {type: postgres, dsn: "postgresql://mvflow@db:5432/metastore"}
        """}))
    local, shared = project.target("local"), project.target("shared")
    assert local.metastore.type == "derby" and local.metastore.dsn is None and exclusive(local)
    assert shared.metastore.type == "postgres" and shared.metastore.dsn == "postgresql://mvflow@db:5432/metastore"
    assert not exclusive(shared), "no target claim: the catalog admits many processes"


@pytest.mark.parametrize("block, words", [
    ("{type: oracle, dsn: x}", "metastore type 'oracle' is not a metastore type"),
    ("{type: postgres}", "a postgres metastore needs a dsn"),
    ("{dsn: 'postgresql://u@h/db'}", "metastore dsn is set but its type is derby"),
    ("{type: postgres, dsn: 'postgresql://u@h/db', url: x}", "url"),
])
def test_metastore_settings_errors_name_their_line(make_project, block, words):
    root = make_project({"project.yml": f"""
        name: t
        targets:
          shared:
            metastore: {block}
        """})
    with pytest.raises(ProjectError) as caught:
        load_project(root)
    assert words in str(caught.value) and "project.yml:4" in str(caught.value), str(caught.value)


def test_a_metastore_and_a_connection_url_in_the_conf_are_one_too_many(make_project):
    root = make_project({"project.yml": """
        name: t
        targets:
          shared:
            metastore: {type: postgres, dsn: "postgresql://u@h/db"}
            spark:
              conf: {spark.hadoop.javax.jdo.option.ConnectionURL: "jdbc:derby:x"}
        """})
    with pytest.raises(ProjectError, match="keep one of them"):
        load_project(root)


def test_jdbc_settings_from_a_dsn():
    assert metastore.jdbc_settings("postgresql://mvflow@127.0.0.1:5433/metastore") == {
        "ConnectionURL": "jdbc:postgresql://127.0.0.1:5433/metastore", "ConnectionDriverName": "org.postgresql.Driver",
        "ConnectionUserName": "mvflow"}
    settings = metastore.jdbc_settings("postgres://u:p%40ss@db/hms?sslmode=require")
    assert settings["ConnectionURL"] == "jdbc:postgresql://db:5432/hms?sslmode=require"
    assert settings["ConnectionPassword"] == "p@ss"
    assert metastore.jdbc_settings("host=::1 dbname=hms")["ConnectionURL"] == "jdbc:postgresql://[::1]:5432/hms"


@pytest.mark.parametrize("dsn, words", [
    ("mysql://u@h/db", "a mysql:// URL is not a PostgreSQL one"),
    ("postgresql://u@h:port/db", "port 'port' is not a number"),
    ("postgresql://u@h", "it names no database"),
    ("postgresql:///db?host=/var/run/postgresql", "no Unix socket"),
    ("nonsense", 'missing "="'),
])
def test_a_bad_dsn_is_one_clear_error_without_its_password(dsn, words):
    with pytest.raises(RunError) as caught:
        metastore.jdbc_settings(dsn)
    assert "[bad-metastore-dsn]" in str(caught.value) and words in str(caught.value), str(caught.value)
    with pytest.raises(RunError) as caught:
        metastore.jdbc_settings("postgresql://u:secret@h:x/db")
    assert "secret" not in str(caught.value) and "u:***@h" in str(caught.value)


# -- the schema -------------------------------------------------------------------------------

def test_the_schema_is_created_once_even_by_racing_processes(postgres_dsn):
    dsn = _database(postgres_dsn, "hms_race")  # not there yet: created too
    results, errors = [], []

    def create():
        try:
            results.append(metastore.ensure_schema(dsn))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(3)]  # each its own connection, as processes have
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(results) == 3 and len([r for r in results if r is not None]) == 1, f"exactly one creator: {results}"
    with psycopg.connect(dsn) as db:
        assert db.execute('SELECT "SCHEMA_VERSION" FROM "VERSION"').fetchall() == [("2.3.0",)]
        tables = {row[0] for row in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"DBS", "TBLS", "SDS", "COLUMNS_V2", "PARTITIONS", "TABLE_PARAMS", "KEY_CONSTRAINTS", "SEQUENCE_TABLE",
            "NOTIFICATION_LOG", "txns", "write_set"} <= tables
    assert metastore.ensure_schema(dsn) is None, "found, not created again"


def test_a_database_with_another_schema_is_refused(postgres_dsn):
    dsn = _database(postgres_dsn, "hms_other")
    metastore.ensure_schema(dsn)
    with psycopg.connect(dsn) as db:
        db.execute("""UPDATE "VERSION" SET "SCHEMA_VERSION" = '3.1.0'""")
    with pytest.raises(RunError, match=r"\[metastore-schema\].*holds the Hive 3.1.0 schema"):
        metastore.ensure_schema(dsn)
    with psycopg.connect(dsn) as db:
        db.execute('DROP TABLE "VERSION"')
    with pytest.raises(RunError, match="Hive tables without a VERSION table"):
        metastore.ensure_schema(dsn)


def test_an_unreachable_server_is_one_clear_error():
    started = time.monotonic()
    with pytest.raises(RunError) as caught:
        metastore.ensure_schema(f"postgresql://mvflow@127.0.0.1:{_free_port()}/metastore")
    assert "[metastore-unreachable] cannot connect to the PostgreSQL metastore" in str(caught.value)
    assert "metastore.dsn" in str(caught.value) and time.monotonic() - started < 10


def test_files_that_cannot_be_fetched_are_clear_errors(postgres_dsn, tmp_path, monkeypatch):
    monkeypatch.setattr(maven, "MAVEN", f"http://127.0.0.1:{_free_port()}/maven2")
    fresh = _database(postgres_dsn, "hms_offline")
    with pytest.raises(RunError, match=r"\[no-metastore-scripts\] Hive's metastore scripts "
                                       r"hive-standalone-metastore-3.1.3-src.tar.gz is missing in .* is unreachable"):
        metastore.ensure_schema(fresh, tmp_path)
    with psycopg.connect(fresh) as db:  # the failed creation left nothing behind
        assert db.execute("""SELECT to_regclass('public."DBS"')""").fetchone() == (None,)
    made = _database(postgres_dsn, "hms_made")
    metastore.ensure_schema(made)  # the scripts from the shared cache
    with pytest.raises(RunError, match=r"\[no-jdbc-driver\] PostgreSQL JDBC driver postgresql-42.7.14.jar is missing"):
        metastore.postgres_options(MetastoreSettings(type="postgres", dsn=made), jars_dir=tmp_path)


def test_session_options_put_the_catalog_on_postgres_and_keep_the_targets_own(postgres_dsn):
    dsn = _database(postgres_dsn, "hms_options")
    options = metastore.postgres_options(MetastoreSettings(type="postgres", dsn=dsn), {"spark.driver.extraClassPath": "/opt/mine.jar",
                                                              "spark.hadoop.hive.metastore.schema.verification": "false"})
    assert options["spark.hadoop.javax.jdo.option.ConnectionURL"].startswith("jdbc:postgresql://127.0.0.1:")
    assert options["spark.hadoop.javax.jdo.option.ConnectionDriverName"] == "org.postgresql.Driver"
    assert options["spark.hadoop.datanucleus.schema.autoCreateAll"] == "false"
    assert "spark.hadoop.hive.metastore.schema.verification" not in options, "the target's own setting wins"
    driver, mine = options["spark.driver.extraClassPath"].split(os.pathsep)
    assert driver.endswith("postgresql-42.7.14.jar") and Path(driver).is_file() and mine == "/opt/mine.jar"


# -- the Maven fetch (shared with the Delta jars) ---------------------------------------------

def test_maven_fetch_checks_sha1_caches_and_names_what_is_missing(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    folder = repo / "org/example/thing/1.0"
    folder.mkdir(parents=True)
    (folder / "thing-1.0.jar").write_bytes(b"jar bytes")
    (folder / "thing-1.0.jar.sha1").write_text(hashlib.sha1(b"jar bytes").hexdigest() + "  thing-1.0.jar\n")
    (folder / "bad-1.0.jar").write_bytes(b"x")
    handler = functools.partial(_QuietHandler, directory=str(repo))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        monkeypatch.setattr(maven, "MAVEN", f"http://127.0.0.1:{server.server_address[1]}")
        thing = maven.Artifact("org.example", "thing", "1.0")
        path = maven.fetch(thing, tmp_path / "jars")
        assert path.read_bytes() == b"jar bytes" and not list((tmp_path / "jars").glob("*.part"))
        server.shutdown()
    assert maven.fetch(thing, tmp_path / "jars", offline=True) == path, "found: no network"
    with pytest.raises(maven.ArtifactMissing, match="--check forbids the network"):
        maven.fetch(maven.Artifact("org.example", "other", "1.0"), tmp_path / "jars", offline=True)
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        monkeypatch.setattr(maven, "MAVEN", f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(maven.ArtifactMissing, match="answers 404"):
            maven.fetch(maven.Artifact("org.example", "missing", "1.0"), tmp_path / "jars", what="the jar")
        (folder.parent.parent / "bad/1.0").mkdir(parents=True)
        (folder.parent.parent / "bad/1.0/bad-1.0.jar").write_bytes(b"x")
        (folder.parent.parent / "bad/1.0/bad-1.0.jar.sha1").write_text("0" * 40)
        with pytest.raises(maven.ArtifactMissing, match="does not match"):
            maven.fetch(maven.Artifact("org.example", "bad", "1.0"), tmp_path / "jars")
        server.shutdown()
    assert not (tmp_path / "jars" / "bad-1.0.jar").exists(), "a file that fails its check is not kept"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


# -- several processes on one catalog (SLOW: four JVMs) ---------------------------------------

# one task that sleeps 1 s per row: the run holds its session (and would hold a Derby target's claim) long enough
SLOW = """
{{ config(materialized='table') }}
SELECT id FROM range(0, 600, 1, 1) WHERE reflect('java.lang.Thread', 'sleep', CAST(id * 0 + 1000 AS BIGINT)) = 'null'
"""


@pytest.mark.slow
def test_processes_of_two_projects_share_one_catalog_at_the_same_time_slow(postgres_dsn, tmp_path):
    dsn = _database(postgres_dsn, "catalog")
    target = ("default_target: shared\ntargets:\n  shared:\n"
              f'    metastore: {{type: postgres, dsn: "{dsn}"}}\n'
              "    spark: {master: 'local[1]', database: DB, conf: {spark.sql.shuffle.partitions: 1}}\n")
    shop = _write(tmp_path / "shop", {
        "project.yml": "name: shop\n" + target.replace("DB", "shop"),
        "models/base.sql": "{{ config(materialized='table') }}\nSELECT id, id % 3 AS k FROM range(0, 30)\n",
        "models/slow.sql": SLOW,
        "models/evens.sql": "{{ config(materialized='table') }}\nSELECT id FROM {{ ref('base') }} WHERE id % 2 = 0\n",
    })
    mart = _write(tmp_path / "mart", {
        "project.yml": "name: mart\n" + target.replace("DB", "mart"),
        "lineage/shop.yml": "sources:\n  - {name: base, database: shop, primary_key: [id], dictionary: true}\n",
        "models/summary.sql": "{{ config(materialized='table') }}\n"
                              "SELECT k, count(*) AS n FROM {{ source('shop', 'base') }} GROUP BY k\n",
    })

    started = time.monotonic()
    first = mvflow(shop, "run", "--select", "base", ok=False, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "created the Hive 2.3.0 metastore schema in catalog" in first.stderr, first.stderr
    assert "30 rows" in first.stdout
    print(f"first run, schema creation included: {time.monotonic() - started:.1f}s")

    slow = Background(shop, "run", "--select", "slow")
    try:
        slow.wait_for("START table")  # a live session on the catalog, writing
        assert open_state_store(load_project(shop).target().state).claims() == [], "no target claim"
        both = [subprocess.Popen([*MVFLOW, *args], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env())
                for root, args in ((shop, ("run", "--select", "evens")), (mart, ("run",)))]
        (same_out, same_err), (other_out, other_err) = (p.communicate(timeout=300) for p in both)
        assert slow.proc.poll() is None, "the slow run was still on the catalog throughout"
    finally:
        slow.kill()
    assert both[0].returncode == 0 and "15 rows" in same_out, same_out + same_err  # the same project and target
    assert both[1].returncode == 0 and "3 rows" in other_out, other_out + other_err  # another project reads shop.base
    assert "created the Hive" not in same_err + other_err and "lease-held" not in same_err
    print(f"all runs: {time.monotonic() - started:.1f}s")

    with psycopg.connect(dsn) as db:
        tables = set(db.execute('SELECT d."NAME", t."TBL_NAME" FROM "TBLS" t JOIN "DBS" d USING ("DB_ID")').fetchall())
    assert {("shop", "base"), ("shop", "evens"), ("mart", "summary")} <= tables


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


