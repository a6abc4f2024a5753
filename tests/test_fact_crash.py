"""Crash recovery of fact steps, on both table formats: a step crashes at every named phase
(in-process, ``compiler.phases``) with new rows landing before the redo, and a step process is
killed with SIGKILL at named points and re-run; the fact table then equals its SELECT up to the
committed position, with no duplicates.

SLOW: this test starts four Spark processes (a killed step needs its own process, and each
Spark start costs 10+ s). Each worker is this file run as a script:
``python tests/test_fact_crash.py <project> <point@n|-> [--setup]``. At the named checkpoint of
its n-th step the worker prints ``PAUSED`` and waits; the test kills it and its JVM with -9.
The points: ``planned`` (next chosen, not yet written), ``written`` (rows written, not
committed) and ``writing`` (killed while the INSERT's Spark job runs).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EVENTS = 12

FILES = {
    "project.yml": "name: crash\nmodels:\n  +schema: facts\n  +table_format: {fmt}\n",
    "lineage/src.yml": """
sources:
  - name: events
    database: src
    primary_key: [id]
    position: [ts, id]
    columns:
      - {name: id, type: bigint}
      - {name: v, type: int}
      - {name: ts, type: timestamp}
""",
    # the WHERE sleeps 300 ms per row inside the Spark task, so a kill can land mid-write
    # (Thread.sleep returns void, which reflect() shows as the string 'null')
    "models/ev.sql": """
{{ config(materialized='fact', maxstep=3) }}
SELECT e.id, e.ts, e.v * 10 AS v10
FROM {{ source('src', 'events') }} AS e
WHERE reflect('java.lang.Thread', 'sleep', CAST(e.id * 0 + 300 AS BIGINT)) = 'null'
""",
}


# -- the worker (a separate process) -------------------------------------------------------------
def _worker(project_dir: str, kill_at: str, setup: bool) -> None:
    sys.path.insert(0, str(ROOT))
    from compiler.compile import compile_project
    from compiler.kinds.fact.plan import STEP_COLUMN
    from compiler.kinds.fact.steps import StepOptions, run_fact
    from compiler.project import load_project
    from compiler.spark import spark_session
    from compiler.state import open_state_store

    project = load_project(project_dir)
    manifest = compile_project(project)
    spark = spark_session(project.target())
    jvm = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getName()
    print("JVM", jvm.split("@")[0], flush=True)
    if setup:
        spark.sql("CREATE DATABASE src")
        spark.sql("CREATE TABLE src.events (id BIGINT, v INT, ts TIMESTAMP) USING parquet")
        values = ", ".join(f"({i}, {i}, TIMESTAMP'2026-01-01 00:{i // 2:02d}:00')" for i in range(1, EVENTS + 1))
        spark.sql(f"INSERT INTO src.events VALUES {values}")
    point, _, nth = kill_at.partition("@")
    seen = {"n": 0}

    def pause() -> None:
        print("PAUSED", point, flush=True)
        time.sleep(3600)

    def when_job_runs() -> None:
        tracker = spark.sparkContext.statusTracker()
        while not tracker.getActiveJobsIds():
            time.sleep(0.01)
        pause()

    def phase(name: str) -> None:
        if name != f"fact:{point}":
            return
        seen["n"] += 1
        if seen["n"] == int(nth):
            if name == "writing":
                threading.Thread(target=when_job_runs, daemon=True).start()
            else:
                pause()

    store = open_state_store(project.target().state)
    model = manifest.models["ev"]
    result = run_fact(spark, manifest, model, store, StepOptions(lease_ttl_seconds=1, phase=phase), print)
    last = store.get("ev").last
    fact_rows = [list(map(str, r)) for r in spark.table(model.relation).drop(STEP_COLUMN).collect()]
    oracle = [list(map(str, r)) for r in spark.sql(
        f"SELECT q.* FROM ({model.sql}) AS q WHERE q.ts < TIMESTAMP'{last[0]}' "
        f"OR (q.ts = TIMESTAMP'{last[0]}' AND q.id <= {last[1]})").collect()]
    print("RESULT", json.dumps({"status": result.status, "message": result.message, "rows": result.rows,
                                "fact": sorted(fact_rows), "oracle": sorted(oracle)}), flush=True)


# -- the test ------------------------------------------------------------------------------------
class _Worker:
    def __init__(self, project: Path, kill_at: str, setup: bool = False):
        args = [sys.executable, __file__, str(project), kill_at] + (["--setup"] if setup else [])
        self.log = open(project / f"worker-{kill_at}.log", "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=ROOT)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout], daemon=True).start()
        self.jvm = int(self.wait_for("JVM").split()[1])

    def wait_for(self, prefix: str, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            if line.startswith(prefix):
                return line.strip()
        self.kill()
        raise AssertionError(f"worker never printed {prefix}; see {self.log.name}:\n" + Path(self.log.name).read_text()[-3000:])

    def kill(self) -> None:
        for pid in (self.proc.pid, getattr(self, "jvm", None)):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc.wait()
        while getattr(self, "jvm", None) and _alive(self.jvm):
            time.sleep(0.1)
        self.log.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _crash(project: Path, kill_at: str, setup: bool = False) -> None:
    worker = _Worker(project, kill_at, setup)
    worker.wait_for("PAUSED")
    worker.kill()
    assert worker.proc.returncode == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_killed_steps_are_redone_without_duplicates_or_losses_slow(make_project, fmt):
    from compiler.project import load_project
    from compiler.state import open_state_store

    project = make_project({**FILES, "project.yml": FILES["project.yml"].format(fmt=fmt)})
    store = open_state_store(load_project(project).target().state)

    _crash(project, "planned@2", setup=True)  # step 1 committed; step 2 chosen, next not written
    after_planned = store.get("ev")
    assert after_planned.last == ("2026-01-01 00:01:00", 3) and not after_planned.in_flight

    _crash(project, "written@1")  # step 2 written, not committed
    in_flight = store.get("ev")
    assert in_flight.in_flight and in_flight.last == after_planned.last
    assert in_flight.next == ("2026-01-01 00:03:00", 6)

    _crash(project, "writing@1")  # the redo of step 2 killed while its INSERT runs
    assert store.get("ev").next == in_flight.next and store.get("ev").last == in_flight.last

    final = _Worker(project, "-")
    result = json.loads(final.wait_for("RESULT").split(" ", 1)[1])
    final.proc.wait(timeout=120)
    final.log.close()
    assert result["status"] == "success", result["message"]
    assert store.get("ev").last == (f"2026-01-01 00:{EVENTS // 2:02d}:00", EVENTS)
    assert len(result["fact"]) == EVENTS and result["fact"] == result["oracle"]
    assert len({tuple(r) for r in result["fact"]}) == EVENTS, "no duplicates"
    log = store.steps("ev", 100)
    assert [(s.last, s.next) for s in reversed(log)][:2] == [(None, after_planned.last), (in_flight.last, in_flight.next)]


# -- in-process: a crash at every phase, changes landing before the redo ---------------------------
@pytest.mark.parametrize("fmt", ["delta"])  # parquet passes too; tests/test_kill_points.py crashes it at every phase
def test_a_step_crashed_at_every_phase_is_redone_exactly(spark, make_project, fmt):
    """Before each redo new rows land and, when a step was in flight, a row of its range moves to
    a later position (an update): the redo must drop what the crashed try wrote for it, or the
    fact would keep a row its source no longer has at that position (as a redo skipped by Delta's
    transaction ids would)."""
    import uuid

    from compiler.compile import compile_project
    from compiler.kinds.fact.steps import StepOptions, run_fact
    from compiler.phases import FACT_PHASES, Crash, crash_at
    from compiler.project import load_project
    from compiler.state import open_state_store

    db = f"crash_{uuid.uuid4().hex[:8]}"
    files = {**FILES, "project.yml": f"name: crash\nmodels:\n  +schema: {db}_out\n  +table_format: {fmt}\n",
             "lineage/src.yml": FILES["lineage/src.yml"].replace("database: src", f"database: {db}"),
             "models/ev.sql": "{{ config(materialized='fact', maxstep=10) }}\n"
                              f"SELECT e.id, e.ts, e.v * 10 AS v10 FROM {{{{ source('{db}', 'events') }}}} AS e"}
    project = load_project(make_project(files))
    manifest, store = compile_project(project), open_state_store(project.target().state)
    model, events = manifest.models["ev"], f"{db}.events"
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"CREATE TABLE {events} (id BIGINT, v INT, ts TIMESTAMP) USING parquet")
    t0, added, clock = datetime(2026, 1, 1), [0], [0]

    def tick() -> datetime:  # every insert or move gets a later time: positions only grow
        clock[0] += 1
        return t0 + timedelta(minutes=clock[0])

    def add(count: int) -> None:
        rows = [(added[0] + i, added[0] + i, tick()) for i in range(1, count + 1)]
        added[0] += count
        spark.createDataFrame(rows, "id BIGINT, v INT, ts TIMESTAMP").write.insertInto(events)

    def move(row_id: int) -> None:
        """The source row moves to a later position, with a new value (an update)."""
        when = tick()
        rows = [(r.id, r.v + 1000, when) if r.id == row_id else (r.id, r.v, r.ts) for r in spark.table(events).collect()]
        spark.createDataFrame(rows, "id BIGINT, v INT, ts TIMESTAMP").write.insertInto(events, overwrite=True)

    def run(phase=None):
        options = StepOptions(lease_ttl_seconds=60, **({"phase": phase} if phase else {}))
        return run_fact(spark, manifest, model, store, options, lambda _: None)

    for phase in FACT_PHASES:
        add(4)
        with pytest.raises(Crash):
            run(crash_at(phase))
        add(2)
        offset = store.get("ev")
        if offset.in_flight:
            move(offset.next[1])  # the last row of the crashed step's range
        result = run()
        assert result.status == "success", f"{phase}: {result.message}"
        last = store.get("ev").last
        fact = sorted(tuple(r) for r in spark.table(model.relation).select("id", "ts", "v10").collect())
        oracle = sorted(tuple(r) for r in spark.sql(
            f"SELECT id, ts, v * 10 FROM {events} WHERE ts < TIMESTAMP'{last[0]}' "
            f"OR (ts = TIMESTAMP'{last[0]}' AND id <= {last[1]})").collect())
        assert fact == oracle, f"{phase}: lost or extra rows"
        assert len({r[0] for r in fact}) == len(fact) == added[0], f"{phase}: a row twice or missing"


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2], "--setup" in sys.argv[3:])
