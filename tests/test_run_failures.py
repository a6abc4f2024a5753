"""Run-time failures: messages that point into the model's file, the sources' schema check before
any write, Ctrl-C, and what reaches the terminal from Spark (nothing but mvflow's lines).

In-process tests share the session of conftest.py; the terminal tests start ``mvflow run`` in a
subprocess (its own JVM, warehouse and metastore under the project), as a user does.
"""

from __future__ import annotations

import _thread
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.compile import compile_project
from compiler.errors import RunError
from compiler.project import load_project
from compiler.run import run_models
from compiler.spark import LazySession

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from processes import MVFLOW_AT_A_TERMINAL  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class Project:
    """A project on disk whose source database is this test's own."""

    def __init__(self, spark, make_project, sources: str, models: dict[str, str]):
        self.spark, self.db = spark, f"t_fail_{uuid.uuid4().hex[:8]}"
        files = {"project.yml": f"name: t_fail\nmodels: {{+schema: {self.db}}}\n",
                 "lineage/src.yml": sources.replace("DB", self.db)}
        files.update({path: text.replace("DB", self.db) for path, text in models.items()})
        self.root = make_project(files)
        spark.sql(f"CREATE DATABASE {self.db}")

    def manifest(self):
        return compile_project(load_project(self.root))

    def cli_run(self, capsys, *args: str) -> tuple[int, str, str]:
        try:
            main(["--project-dir", str(self.root), "run", *args])
            code = 0
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err

    def drop(self) -> None:
        self.spark.sql(f"DROP DATABASE IF EXISTS {self.db} CASCADE")


SHOPS = """
    sources:
      - name: shops
        database: DB
        primary_key: [shop_id]
        dictionary: true
        columns:
          - {name: shop_id, type: bigint}
          - {name: rating, type: double}
          - {name: name, type: string}
"""
SHOPS_VIEW = {"models/shop_list.sql": "select s.shop_id, s.name\nfrom {{ source('DB', 'shops') }} as s"}


@pytest.fixture
def project(spark, make_project):
    made: list[Project] = []

    def make(sources: str = SHOPS, models: dict[str, str] | None = None) -> Project:
        made.append(Project(spark, make_project, sources, models or SHOPS_VIEW))
        return made[-1]

    yield make
    for each in made:
        each.drop()


def test_a_missing_source_table_names_the_model_line_the_yaml_and_what_to_do(project):
    env = project()  # no table created
    report = run_models(env.spark, env.manifest(), ["shop_list"], echo=lambda _: None)

    [result] = report.results
    assert result.status == "error"
    assert result.message == (
        f"models/shop_list.sql:2: [table-not-found] table {env.db}.shops does not exist — source {env.db}.shops is "
        "declared at lineage/src.yml:2 but its table does not exist: create it, or correct the database and name the "
        "declaration gives (ran target/run/shop_list.sql)")


def test_a_missing_change_feed_is_named_as_its_source_s_feed(project):
    env = project(sources="""
        sources:
          - {name: prices, database: DB, primary_key: [id], changes: {table: DB.prices_changes, position: [n]}}
    """, models={"models/feed.sql": "select c.id\nfrom DB.prices_changes as c"})

    [result] = run_models(env.spark, env.manifest(), ["feed"], echo=lambda _: None).results

    assert result.message == (
        f"models/feed.sql:2: [table-not-found] table {env.db}.prices_changes does not exist — it is the change feed of "
        f"source {env.db}.prices (declared at lineage/src.yml:2): create it, or correct the database and name the "
        "declaration gives (ran target/run/feed.sql)")


def test_the_line_is_where_the_failing_name_is_in_the_model_file(project):
    env = project(sources="sources: [{name: t, database: DB, primary_key: [a], dictionary: true}]", models={
        "models/pairs.sql": """
            {{ config(materialized='table') }}
            select x.a,
                   y.a as b,
                   y.zz
            from {{ source('DB', 't') }} as x
            join {{ source('DB', 't') }} as y on y.a = x.a
        """})
    env.spark.sql(f"CREATE TABLE {env.db}.t (a BIGINT, b STRING) USING parquet")

    [result] = run_models(env.spark, env.manifest(), ["pairs"], echo=lambda _: None).results

    assert result.message.startswith("models/pairs.sql:4: [unknown-column] column y.zz does not exist — ")
    assert f"{env.db}.t has columns: a, b" in result.message and result.message.endswith("(ran target/run/pairs.sql)")


def test_debug_logs_the_whole_error_with_the_java_stack_trace(project):
    env = project(models={"models/typo.sql": "select x.nope from (select 1 as id) as x"})
    logger, messages = logging.getLogger("mvflow"), []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)  # what --debug does (cli._debug_log)
    try:
        [result] = run_models(env.spark, env.manifest(), ["typo"], echo=lambda _: None).results
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)

    assert result.message.startswith("models/typo.sql:1: [unknown-column] column x.nope does not exist")
    [message] = messages
    assert "Traceback" in message and "\tat org.apache.spark.sql" in message


def test_schema_drift_stops_the_run_before_any_write(project, capsys):
    env = project(models={**SHOPS_VIEW, "models/ratings.sql": "select s.rating from {{ source('DB', 'shops') }} as s"})
    env.spark.sql(f"CREATE TABLE {env.db}.shops (shop_id BIGINT, rating STRING) USING parquet")

    code, out, err = env.cli_run(capsys)

    assert code == 2 and "Traceback" not in err
    assert (f"lineage/src.yml:2: [schema-drift] source {env.db}.shops: declared column name is not in the table "
            "(it has shop_id, rating) — declare the table's columns as they are, or fix the table") in err
    assert f"lineage/src.yml:2: [schema-drift] source {env.db}.shops: column rating is declared double, the table has string" in err
    assert " OK " not in out and "ERROR" not in out  # the error alone, no model result
    assert {r.tableName for r in env.spark.sql(f"SHOW TABLES IN {env.db}").collect()} == {"shops"}

    env.spark.sql(f"DROP TABLE {env.db}.shops")
    env.spark.sql(f"CREATE TABLE {env.db}.shops (SHOP_ID BIGINT, rating DOUBLE, name STRING, extra INT) USING parquet")
    code, out, err = env.cli_run(capsys, "--select", "shop_list")
    assert code == 0 and "1 ok, 0 failed" in out, err


def test_a_missing_source_table_stops_the_run(project, capsys):
    env = project()

    code, _, err = env.cli_run(capsys)

    assert code == 2
    assert (f"lineage/src.yml:2: [table-not-found] source {env.db}.shops: the table does not exist — "
            "create it, or correct the database and name the declaration gives") in err


def test_the_start_up_check_runs_once_when_spark_starts_and_its_failure_sticks(spark):
    calls: list[object] = []
    lazy = LazySession(lambda: spark, then=calls.append)
    assert not lazy.started and calls == []
    assert lazy.session() is spark and lazy.session() is spark
    assert calls == [spark]

    def fail(_):
        raise RunError("drifted")

    failing = LazySession(lambda: spark, then=fail)
    for _ in range(2):
        with pytest.raises(RunError, match="drifted"):
            failing.session()
    assert not failing.started and str(failing.failure) == "[error] drifted"


SLOW = "{{ config(materialized='table') }}\nselect reflect('java.lang.Thread', 'sleep', id + 8000L) as r from range(1)"


def test_ctrl_c_cancels_the_running_model_and_starts_no_other(project):
    env = project(models={"models/slow.sql": SLOW, "models/after.sql": "select * from {{ ref('slow') }}",
                          "models/zz_other.sql": "select 1 as one"})
    lines: list[str] = []

    def interrupt_when_a_job_runs() -> None:
        deadline = time.monotonic() + 60
        while not env.spark.sparkContext.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
            time.sleep(0.05)
        _thread.interrupt_main()

    handler = signal.getsignal(signal.SIGINT)
    threading.Thread(target=interrupt_when_a_job_runs, daemon=True).start()
    started = time.monotonic()
    report = run_models(env.spark, env.manifest(), ["slow", "after", "zz_other"], echo=lines.append)

    assert time.monotonic() - started < 7  # the job sleeps 8 s: it was cancelled, not waited for
    assert report.interrupted
    result = {r.name: r for r in report.results}
    assert result["slow"].status == "error" and result["slow"].message.startswith("interrupted (Ctrl-C): ")
    assert (result["after"].status, result["zz_other"].status) == ("skipped", "skipped")
    assert any("Ctrl-C: stopping the run, cancelling the Spark jobs of table slow "
               "(build the new version in the idle slot); no new model starts" in line for line in lines)
    assert not env.spark.catalog.tableExists(f"{env.db}.slow")
    assert signal.getsignal(signal.SIGINT) is handler  # a second Ctrl-C exits only while the run stops


# --- what reaches the terminal: `mvflow run` as a user starts it ------------------------------

TERMINAL_PROJECT = {
    "project.yml": """
        name: t_term
        default_target: t
        targets:
          t:
            spark: {master: "local[1]", conf: {spark.sql.shuffle.partitions: 1, spark.driver.memory: 512m}}
    """,
    "models/broken_col.sql": "-- a typo\nselect x.id,\n       x.nope\nfrom (select 1 as id) as x",
    "models/no_table.sql": "select *\nfrom nowhere.t",
    "models/slow.sql": SLOW.replace("8000L", "120000L"),
}


def _mvflow(root: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([*MVFLOW_AT_A_TERMINAL, "--project-dir", str(root), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=root)


@pytest.mark.slow
def test_the_terminal_shows_mvflow_lines_only(make_project):
    root = make_project(TERMINAL_PROJECT)
    out, err = _mvflow(root, "run", "--select", "broken_col no_table").communicate(timeout=300)
    text = out + err

    assert "done in" in out and "0 ok, 2 failed" in out, text
    assert ("\n  models/broken_col.sql:3: [unknown-column] column x.nope does not exist — did you mean x.id? "
            "(ran target/run/broken_col.sql)\n") in out
    assert "\n  models/no_table.sql:2: [table-not-found] table nowhere.t does not exist — create the table, or " \
           "correct the name (ran target/run/no_table.sql)\n" in out
    for noise in ("Traceback", "at org.apache", "SQLQueryContextLogger", "Using incubator modules",
                  "Setting default log level", "sc.setLogLevel"):
        assert noise not in text, text
    assert err.count("\n") <= 2, err  # the undeclared-table warning, nothing from Spark
    assert (root / ".mvflow" / "t" / "spark.log").is_file()


@pytest.mark.slow
def test_ctrl_c_twice_exits_at_once(make_project):
    root = make_project(TERMINAL_PROJECT)
    process = _mvflow(root, "run", "--select", "slow")
    assert "START table" in process.stdout.readline()
    process.send_signal(signal.SIGINT)
    assert "Ctrl-C: stopping the run, cancelling the Spark jobs of table slow" in process.stdout.readline()
    process.send_signal(signal.SIGINT)
    started = time.monotonic()
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130 and time.monotonic() - started < 5, out + err
    assert "Traceback" not in out + err


@pytest.mark.slow
def test_ctrl_c_stops_the_run_cleanly_with_exit_130(make_project):
    root = make_project(TERMINAL_PROJECT)
    process = _mvflow(root, "run", "--select", "slow")
    assert "START table" in process.stdout.readline()
    process.send_signal(signal.SIGINT)  # while Spark starts: its job is cancelled as soon as it runs
    out, err = process.communicate(timeout=100)  # the model's job would sleep 120 s

    assert process.returncode == 130, out + err
    assert "Ctrl-C: stopping the run, cancelling the Spark jobs of table slow" in out
    assert "interrupted (Ctrl-C): " in out and "interrupted in " in out and "0 ok, 1 failed, 0 skipped" in out
    assert "Traceback" not in out + err


# --- a project copied with its .mvflow/ (issue 29, item 6) ----------------------------------------

COPIED_PROJECT = {
    "project.yml": """
        name: t_copy
        default_target: t
        targets:
          t:
            table_format: parquet
            spark: {master: "local[1]", conf: {spark.sql.shuffle.partitions: 1, spark.driver.memory: 512m}}
    """,
    "models/numbers.sql": "{{ config(materialized='table') }}\nselect id from range(3)",
}


@pytest.mark.slow
def test_a_copy_of_a_project_with_its_metastore_refuses_to_write_into_the_originals_tables(make_project, tmp_path):
    import shutil

    original = make_project(COPIED_PROJECT)
    out, err = _mvflow(original, "run").communicate(timeout=300)
    assert "1 ok, 0 failed" in out, out + err
    warehouse = original / ".mvflow" / "t" / "warehouse"

    def files() -> dict[str, int]:
        return {str(p.relative_to(warehouse)): p.stat().st_mtime_ns for p in warehouse.rglob("*")}

    before = files()
    assert any(name.startswith("numbers") for name in before), before
    copy = Path(shutil.copytree(original, tmp_path / "copy"))
    (copy / "models/numbers.sql").write_text("{{ config(materialized='table') }}\nselect id from range(5)")

    run = _mvflow(copy, "run")
    out, err = run.communicate(timeout=300)
    assert run.returncode == 2, out + err  # the session is refused: the run stops before any model
    assert (out + err).count("[foreign-metastore] the metastore ") == 1 and f"keeps its tables in file:{original}" in out + err, out + err
    assert "Traceback" not in out + err
    assert files() == before, "the original's warehouse is untouched"


def test_a_session_that_cannot_start_stops_every_caller_with_its_error():
    starts: list[int] = []

    def refused():
        starts.append(1)
        raise RunError("[foreign-metastore] copied")

    lazy = LazySession(refused)
    for _ in range(2):
        with pytest.raises(RunError, match="copied"):
            lazy.session()
    assert starts == [1] and not lazy.started and lazy.failure is not None
