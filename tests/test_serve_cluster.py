"""Several ``mvflow serve`` runners on one demo project, as a deployment runs them: the state store
and the Hive metastore on one PostgreSQL server, every runner and every other command its own
process (its own Spark driver). Demo changes keep landing while runners are killed with -9 (one
mid-batch, then the coordinator) or paused with SIGSTOP; the others take over within the TTL, no
topic is ever written under two runners' leases at once (the fencing tokens in the step log), and
``mvflow verify`` passes at the end.

The runners' Spark is local (``local[1]``): what is tested is the runners' leases, which a cluster
manager does not change, and four Spark applications of a driver and an executor each, with the
cluster's own three JVMs, took 28 minutes on 2 cores. ``test_cluster.py`` runs a project on the
standalone cluster. SLOW: the slow tier runs it (``scripts/test.sh --slow``, as CI does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest

from compiler.serve.coordinator import COORDINATOR
from compiler.serve.runner import JOB_TOPIC
from compiler.state_postgres import PostgresStateStore

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from processes import MVFLOW, TINY_CONF, copy_demo, env, mvflow  # noqa: E402
from tiny_spark import INTERPRETED  # noqa: E402

pytestmark = pytest.mark.slow

TTL = 15  # seconds: heartbeats, the coordinator's lease and the topics' leases
MV, FACT = "offers_wide", "orders_enriched"
JOBS = "+orders_enriched"  # a view, an mv and a fact: one job per runner

TARGET = """
  shared:
    table_format: delta
    spark:
      master: local[1]
      app_name: mvflow-serve-test
      warehouse_dir: {warehouse}
      log_level: ERROR
      conf: {conf}
    state: {{type: postgres, dsn: "{state}"}}
    metastore: {{type: postgres, dsn: "{metastore}"}}
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory, postgres_dsn) -> Path:
    root = copy_demo(tmp_path_factory.mktemp("serve-cluster"))
    state_db = f"serve_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {state_db}")
    base = postgres_dsn.rsplit("/", 1)[0]
    text = (root / "project.yml").read_text().replace("default_target: local", "default_target: shared")
    # generated code, as users' runs have it: the one system test that keeps it (tiny_spark.INTERPRETED)
    conf = json.dumps({**{k: v for k, v in TINY_CONF.items() if k not in INTERPRETED}, "spark.driver.memory": "1g"})
    (root / "project.yml").write_text(text + TARGET.format(
        conf=conf, warehouse=root / "warehouse", state=f"{base}/{state_db}", metastore=f"{base}/{state_db}_hive"))
    mvflow(root, "demo", "init", "--scale", "0.02", "--seed", "7")
    mvflow(root, "run", "--select", JOBS)
    return root


class Runners:
    """``mvflow serve`` processes, each in its own process group (kill -9 takes its JVM too)."""

    def __init__(self, project: Path, logs: Path):
        self.project, self.logs = project, logs
        self.procs: dict[str, subprocess.Popen] = {}  # holder id → process
        self.store = store_of(project)

    def start(self, name: str, **extra: str) -> subprocess.Popen:
        log = (self.logs / f"{name}.log").open("w")
        proc = subprocess.Popen([*MVFLOW, "serve", "--select", JOBS, "--interval", "5", "--ttl", str(TTL)], cwd=self.project,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env(**extra))
        proc.name = name  # type: ignore[attr-defined]
        return proc

    def id_of(self, proc: subprocess.Popen, seconds: float = 120) -> str:
        """The runner id a process registered under (``host:pid:…``)."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            found = [r.id for r in self.store.runners() if r.id.split(":")[1] == str(proc.pid)]
            if found:
                self.procs[found[0]] = proc
                return found[0]
            time.sleep(0.5)
        raise AssertionError(f"{proc.name} did not register:\n{self.log(proc)}")  # type: ignore[attr-defined]

    def log(self, proc: subprocess.Popen) -> str:
        return (self.logs / f"{proc.name}.log").read_text()  # type: ignore[attr-defined]

    def report(self) -> str:
        """The MV's and the fact's offsets and job leases, and every runner's last log lines: what a
        timeout needs to be understood after the test's files are gone."""
        lines = [f"{topic}: {self.store.get(topic)}" for topic in (MV, FACT, JOB_TOPIC + MV, JOB_TOPIC + FACT)]
        for runner, proc in self.procs.items():
            tail = self.log(proc).splitlines()[-25:]
            lines += [f"--- {proc.name} ({runner}, exit {proc.poll()}):", *tail]  # type: ignore[attr-defined]
        return "\n".join(lines)

    def kill(self, runner: str) -> None:
        """kill -9 the runner and its JVM; reaped at once, as an init system would (a zombie's pid
        still answers, and the runners would wait for the TTL instead of seeing it gone)."""
        proc = self.procs[runner]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def store_of(project: Path) -> PostgresStateStore:
    text = (project / "project.yml").read_text()
    dsn = text.split("state: {type: postgres, dsn: \"")[1].split('"')[0]
    return PostgresStateStore(dsn)


def wait_until(what: str, check, seconds: float = 300, every: float = 0.25):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")


def caught_up(store: PostgresStateStore, landed: datetime):
    """Whether the MV read every change that landed before ``landed``: a batch of it started after
    that, or a whole run of it began after the job was first seen idle (after ``landed``) and left
    the offset as it was, having found nothing to do. (A batch in flight at ``landed`` that commits
    later is neither: the run after it decides. Nor is the redo of a batch killed before ``landed``,
    which reads the ranges planned before the kill: under load the takeover's redo started after
    the last change, and verify found the MV stale, 2026-11-29.)"""
    idle: list[tuple[int, object]] = []  # (job fence, offset) when first seen idle

    def check() -> bool:
        step = next(iter(store.steps(MV, limit=1)), None)
        if step is not None and not step.detail.get("redo") and step.ts - timedelta(seconds=step.seconds) > landed:
            return True
        job, offset = store.get(JOB_TOPIC + MV), store.get(MV)
        if job.hostid or offset.in_flight:
            return False
        if not idle:
            idle.append((job.fence, offset.last))
        return job.fence > idle[0][0] and offset.last == idle[0][1]

    return check


def assert_fenced(store: PostgresStateStore, topics: list[str]) -> None:
    """Per topic, step log rows in commit order never go back to an older token, and each token
    belongs to one runner: no two runners ever wrote one topic under one lease."""
    for topic in topics:
        rows = sorted(store.steps(topic, limit=10_000), key=lambda r: r.ts)
        tokens = [r.token for r in rows]
        assert tokens == sorted(tokens), f"{topic}: a step committed under an older token: {tokens}"
        by_token = defaultdict(set)
        for row in rows:
            by_token[row.token].add(row.consumer)
        assert all(len(holders) == 1 for holders in by_token.values()), f"{topic}: {dict(by_token)}"


def test_three_runners_survive_kill_9_of_a_runner_mid_batch_and_of_the_coordinator_slow(project, tmp_path):
    runners = Runners(project, tmp_path)
    store = runners.store
    try:
        ids = [runners.id_of(runners.start(f"r{i}")) for i in range(3)]
        wait_until("the jobs spread over three runners", lambda: len({a.runner for a in store.assignments()} & set(ids)) == 3)
        done = threading.Event()

        def changes() -> None:  # three batches from one process, as a stream lands
            landed = mvflow(project, "demo", "change", "--seed", "100", "--batches", "3", "--every", "20").stdout
            assert landed.count("changed ") == 3, landed
            done.set()

        changer = threading.Thread(target=changes, daemon=True)
        changer.start()

        def busy_runner():
            boss = store.get(COORDINATOR).hostid
            return next((r for r in store.runners() if r.doing in (MV, FACT) and r.id != boss and r.id in runners.procs), None)

        victim = wait_until("a runner mid-batch", busy_runner, seconds=600, every=0.1)
        killed_at = time.monotonic()
        runners.kill(victim.id)
        wait_until("the killed runner's jobs handed on",
                   lambda: all(a.runner != victim.id for a in store.assignments()) and victim.id not in {r.id for r in store.runners()})
        handed = time.monotonic() - killed_at
        job = victim.doing
        wait_until(f"another runner running {job}", lambda: (lambda o: o is not None and o.hostid not in ("", victim.id))(
            store.get(JOB_TOPIC + job)), seconds=300, every=0.1)
        resumed = time.monotonic() - killed_at

        boss = store.get(COORDINATOR)
        boss_killed_at = time.monotonic()
        runners.kill(boss.hostid)
        new = wait_until("a new coordinator", lambda: (lambda c: c if c.hostid != boss.hostid and c.held_at(datetime.now(timezone.utc)) else None)(store.get(COORDINATOR)))
        elected = time.monotonic() - boss_killed_at
        assert new.fence > boss.fence
        survivor = new.hostid
        wait_until("every job on the survivor", lambda: {a.runner for a in store.assignments()} == {survivor})
        print(f"\ntakeover after kill -9: jobs handed on in {handed:.1f}s, {job} running on another runner "
              f"{resumed:.1f}s after the kill; new coordinator in {elected:.1f}s (ttl {TTL}s)")
        assert handed < TTL and elected < TTL

        changer.join(timeout=900)
        assert done.is_set()
        try:
            wait_until(f"{MV} caught up with the last change", caught_up(store, datetime.now(timezone.utc)), seconds=600)
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}\n{runners.report()}") from None
    finally:
        runners.stop_all()
    assert_fenced(store, [MV, FACT])
    # A change that landed while the survivor's last batch ran is the next batch's: one run reads
    # it. Changes a batch skipped (positions committed past rows it did not read) it cannot:
    # verify fails then. (Under load the last demo write landed after that batch's probe: three
    # offers' prices stale at the stop, 2026-11-29 and -30.)
    caught = mvflow(project, "run", "--select", f"{MV} {FACT}").stdout
    verified = mvflow(project, "verify", "--select", f"{MV} {FACT}").stdout
    assert "FAIL" not in verified and MV in verified and FACT in verified, caught + verified


def test_a_runner_paused_past_its_lease_cannot_commit_slow(project, tmp_path):
    runners = Runners(project, tmp_path)
    store = runners.store
    try:
        mvflow(project, "demo", "change", "--seed", "200")
        before = store.get(FACT)
        stalled = runners.start("stalled", MVFLOW_KILL_AT="fact:written@1:stop")  # SIGSTOP itself mid-step
        stalled_id = runners.id_of(stalled)
        wait_until("the runner stopped mid-step", lambda: _stopped(stalled.pid) and store.get(FACT).in_flight, seconds=600)
        paused = store.get(FACT)
        assert paused.hostid == stalled_id and paused.next != before.last
        other_id = runners.id_of(runners.start("other"))
        step = wait_until("the other runner's redo of the step", lambda: next(
            (s for s in store.steps(FACT, limit=5) if s.consumer == other_id and s.next == paused.next), None), seconds=600)
        assert step.token > paused.fence
        os.kill(stalled.pid, signal.SIGCONT)
        wait_until("the stalled runner's commit refused", lambda: "was taken over" in runners.log(stalled), seconds=120)
        assert all(s.consumer != stalled_id for s in store.steps(FACT, limit=20) if s.next == paused.next)
    finally:
        runners.stop_all()
    assert_fenced(store, [FACT])
    verified = mvflow(project, "verify", "--select", f"{MV} {FACT}").stdout
    assert "FAIL" not in verified and FACT in verified, verified


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
