"""Shared fixtures: one local SparkSession for the whole test run, and tiny projects on disk."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from compiler.project import DEFAULT_SPARK_CONF, SparkSettings, StateSettings, Target

sys.path.insert(0, str(Path(__file__).parent))  # helper modules beside the tests (--import-mode=importlib)
from tiny_spark import TINY_DATA  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# The fast tier runs two pytest processes (pytest-xdist), a SparkSession each, on two cores: one task
# thread and one partition per stage each. With local[2] and two partitions, four task threads
# contended for the two cores: the MV shape and dbt-style modules took 371 s against 305 (one run
# after the other, 2026-11-28). Every mvflow process the tests start, the slow tier and the demo keep
# two partitions or more, so shuffles across partitions stay covered there.
# No generated code for expressions either (TINY_DATA), as Spark's own test suites can run. Under it
# the catalog's list* calls fail decoding their rows (EXPRESSION_DECODING_FAILED): tests use SHOW
# TABLES, mvflow neither.
IN_PROCESS = {**TINY_DATA, "spark.sql.shuffle.partitions": "1"}  # runtime settings, re-applied after every test


def pytest_sessionstart(session) -> None:
    session.mvflow_started = time.monotonic()


def pytest_collection_modifyitems(items) -> None:
    """Slow system tests last (``--all``): the fast tier's answer comes first. The rest keep their
    order: running the heaviest modules first was slower (20.4 minutes against 18.6, two runs one
    after the other on a fresh clone), their tests paying the JVM's cold start (a numerator crash
    test 74 s first, 22 s later)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)  # stable: the rest keep their order


# The slow tier (``scripts/test.sh --slow``: two pytest processes) runs each module below whole in one
# process: its module fixtures (dbt's side, the killed demo) are built once. The modules timed or sized
# for a machine of their own share one group and never run beside each other: serve's leases,
# takeovers and pauses, the concurrent runs, and the standalone cluster (its executors fit its workers:
# beside a kill -9 test, one was lost and relaunched, 2026-11-29). The other system modules (kill -9s
# of CLI runs, PostgreSQL, the browser) run beside them, as the in-process tests always did: 26.3
# minutes against 29.2 with every system module in one process (fresh clone, 2026-11-29). Weights: seconds measured (2026-12-03)
# on 2 cores; the heaviest groups start first, the in-process tests (kill points, the Delta runs of
# ``tests/tiers.py``) fill in.
GROUPS = {**dict.fromkeys(("test_serve_cluster.py", "test_serve.py", "test_concurrency.py", "test_cluster.py"), "alone"),
          **{module: module for module in ("test_dbt_projects.py", "test_kills_cli.py",
                                           "test_fact_crash.py",
                                           "test_shared_catalog.py", "test_run_failures.py", "test_docs_browser.py")}}
WEIGHTS = {"alone": 1380, "test_kills_cli.py": 1180, "test_dbt_projects.py": 470, "test_fact_crash.py": 210}


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (``scripts/test.sh --slow``) with the groups above, heaviest first.
    xdist's own groups (``xdist_group`` markers) are lost under pytest 9, which computes a test's
    id: every test of a group went its own way."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return GROUPS.get(nodeid.split("::", 1)[0].rsplit("/", 1)[-1], nodeid)

        def _assign_work_unit(self, node) -> None:
            heaviest = sorted(self.workqueue, key=lambda scope: -WEIGHTS.get(scope, len(self.workqueue[scope])))
            for scope in heaviest:  # stable: the rest keep xdist's order
                self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return ModuleGroups(config, log)


def pytest_sessionfinish(session, exitstatus) -> None:
    """``MVFLOW_TEST_BUDGET`` (minutes, CI sets it per tier): a run that took longer fails, loudly,
    instead of creeping towards CI's limit unseen. No test skips itself for lack of time."""
    budget = os.environ.get("MVFLOW_TEST_BUDGET")
    spent = (time.monotonic() - session.mvflow_started) / 60
    if budget and spent > float(budget):
        session.config.get_terminal_writer().line(
            f"TEST BUDGET EXCEEDED: this run took {spent:.1f} minutes, its budget is {budget} "
            "(MVFLOW_TEST_BUDGET): find the new slow tests in --durations", red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def spark_target(tmp_path_factory) -> Target:
    """The target every Spark test shares (Spark keeps static settings for the whole process)."""
    base = tmp_path_factory.mktemp("spark")
    return Target(
        name="test",
        spark=SparkSettings(
            master="local[1]",
            app_name="mvflow-tests",
            warehouse_dir=base / "warehouse",
            metastore_dir=base / "metastore",
            # Delta rebuilds a snapshot with 50 tasks by default: 2 halve a Delta write here (bench/results/delta_writes.md)
            # ~700 tests share one driver JVM (the executors too, in local mode): Spark's 1g default
            # ran out building a broadcast 40 minutes into a CI run
            # Throughput over pauses: the parallel collector has no concurrent marking (G1's took a tenth
            # of the JVM's CPU; 6% less wall on three oracle tests, measured once side by side). Not C1 only
            # (-XX:TieredStopAtLevel=1, as the short-lived CLI processes use, tests/processes.py): in this
            # long-lived JVM C2 took half the CPU of a GROUP BY oracle test, yet without it the fast tier
            # had done 46% of its tests after 17 minutes, against all in 18.6 with C2 (2026-11-27; C1's
            # 48 MB code cache filled, its sweeper spinning, until given 512 MB)
            # The in-memory catalog, as Spark's and Delta's own test suites use: Hive's (Derby through
            # DataNucleus, a getTable per table a statement names) took 15% of the JVM's samples and
            # ~12% of the tier's wall (docs/architecture.md, Tests). Every CLI test's process, the
            # slow tier and `scripts/demo.sh` run on Hive's catalog.
            # Tungsten's page size: Spark's default, sized from the heap (64 MB here), gave every broadcast
            # hash table of a few rows a 64 MB page that the memory store kept (1.2 GB after one GROUP BY
            # oracle test, the old generation's full collections); 1 MB: 232 s against 256 for four of the
            # heaviest oracle tests (test_mv_shapes, test_mv_dbt_style), one run after the other (2026-12-01).
            conf={**DEFAULT_SPARK_CONF, "spark.default.parallelism": "1", "spark.driver.memory": "3g",
                  "spark.buffer.pageSize": "1m",
                  "spark.driver.extraJavaOptions": "-XX:+UseParallelGC", "spark.sql.catalogImplementation": "in-memory",
                  **IN_PROCESS},
        ),
        state=StateSettings(path=base / "state.sqlite"),
    )


@pytest.fixture(scope="session")
def spark(spark_target):
    from compiler.spark import first_batch, spark_session

    session = spark_session(spark_target, delta=True)  # both table formats in one session
    # Every test's batches count as warm: which test runs first in a process must not change what
    # any MV decides (``compiler.kinds.mv.strategy.explore_build``; tests/test_strategy.py has the cold ones).
    first_batch(session)
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _tiny_data_settings():
    """An in-process ``mvflow`` command applies its target's settings to the shared session
    (``getOrCreate`` does): ``spark.sql.shuffle.partitions: 8`` stayed for every later test."""
    yield
    session = sys.modules["pyspark.sql"].SparkSession._instantiatedSession if "pyspark.sql" in sys.modules else None
    if session is not None:
        for key, value in IN_PROCESS.items():
            session.conf.set(key, value)


def write_project(root: Path, files: dict[str, str]) -> Path:
    """Write a small project: ``{"project.yml": "...", "models/a.sql": "..."}`` (dedented)."""
    files = {"project.yml": "name: t\n", **files}
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


@pytest.fixture
def make_project(tmp_path):
    return lambda files: write_project(tmp_path, files)


@pytest.fixture(scope="session")
def postgres_dsn():
    """A PostgreSQL server for the whole test session (``tests/pg_server.py``)."""
    from pg_server import PostgresServer

    server = PostgresServer().start()
    yield server.dsn
    server.stop()


@pytest.fixture(scope="session")
def spark_cluster():
    """A Spark standalone cluster, a master and two workers on loopback, for the whole test session
    (``tests/spark_cluster.py``): mvflow runs on it in subprocesses (the ``spark`` fixture is process-wide)."""
    from spark_cluster import SparkCluster

    cluster = SparkCluster(cores=2, memory="2g").start()  # 4 executor slots: test_serve_cluster's runners at once
    yield cluster
    cluster.stop()
