"""Contract suite of the state store: every backend must pass it (sqlite, and postgres on a
throwaway server started by the tests: ``tests/pg_server.py``).

Add a backend by adding its name to BACKENDS and a branch to ``settings_for``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from compiler.errors import RunError
from compiler.project import StateSettings
from compiler.state import (
    Commit,
    FencingError,
    LeaseHeld,
    Offset,
    StateStore,
    StepLogRow,
    open_state_store,
)

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ["sqlite", "postgres"]
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
POS1 = ("2024-05-01T10:00:00", 10)
POS2 = ("2024-05-01T11:00:00", 20)


def settings_for(name: str, base: Path, dsn: str | None = None) -> StateSettings:
    """One test's own store: a file, or tables of its own (named after its folder) on the server."""
    if name == "sqlite":
        return StateSettings(path=base / "state.sqlite", offsets_table="offs", step_log_table="slog")
    if name == "postgres":
        tag = "t" + hex(abs(hash(str(base))))[2:14]
        return StateSettings(type="postgres", dsn=dsn, offsets_table=f"{tag}_offs", step_log_table=f"{tag}_slog")
    raise AssertionError(name)


def open_backend(name: str, base: Path, dsn: str | None = None) -> StateStore:
    return open_state_store(settings_for(name, base, dsn))


@pytest.fixture
def dsn_for(request):
    """The PostgreSQL server's DSN when the backend needs one (the server starts on first use)."""
    return lambda backend: request.getfixturevalue("postgres_dsn") if backend == "postgres" else None


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path, dsn_for) -> StateStore:
    return open_backend(request.param, tmp_path, dsn_for(request.param))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_new_topic_has_no_offsets(store):
    assert store.get("orders") is None
    lease = store.acquire("orders", "a", 60, at(0))
    assert lease.token == 1 and lease.expires_at == at(60)
    offset = store.get("orders")
    assert (offset.last, offset.next, offset.hostid, offset.fence) == (None, None, "a", 1)
    assert not offset.in_flight


def test_set_next_then_commit_copies_next_to_last(store):
    lease = store.acquire("orders", "a", 60, at(0))
    store.set_next(lease, POS1, at(1))
    planned = store.get("orders")
    assert planned.last is None and planned.next == POS1 and planned.in_flight
    store.commit(lease, POS1, 42, "ok", at(2))
    done = store.get("orders")
    assert (done.last, done.next, done.rows, done.state, done.run, done.consumer) == (POS1, POS1, 42, "ok", at(2), "a")
    assert not done.in_flight


def test_positions_round_trip_as_tuples(store):
    lease = store.acquire("t", "a", 60, at(0))
    store.commit(lease, ("x", 1, 2.5, None), 0, "", at(1))
    assert store.get("t").last == ("x", 1, 2.5, None)


def test_second_holder_is_refused_naming_the_holder(store):
    store.acquire("orders", "host-a:1", 60, at(0))
    with pytest.raises(LeaseHeld) as info:
        store.acquire("orders", "host-b:2", 60, at(30))
    assert isinstance(info.value, RunError)
    assert "host-a:1" in str(info.value) and "2024-05-01T12:01:00" in str(info.value)


def test_renew_extends_the_lease(store):
    lease = store.acquire("orders", "a", 60, at(0))
    lease = store.renew(lease, 60, at(50))
    assert lease.expires_at == at(110) and lease.token == 1
    with pytest.raises(LeaseHeld):
        store.acquire("orders", "b", 60, at(100))


def test_expired_lease_is_taken_over_and_the_old_holder_is_fenced(store):
    old = store.acquire("orders", "a", 60, at(0))
    store.set_next(old, POS1, at(1))
    new = store.acquire("orders", "b", 60, at(61))
    assert new.token == old.token + 1
    for write in (lambda: store.set_next(old, POS2, at(62)),
                  lambda: store.commit(old, POS1, 5, "late", at(62)),
                  lambda: store.set_state(old, "late", at(62)),
                  lambda: store.renew(old, 60, at(62))):
        with pytest.raises(FencingError) as info:
            write()
        assert "taken over (now token 2, held by b)" in str(info.value)
    offset = store.get("orders")
    assert (offset.last, offset.next, offset.hostid) == (None, POS1, "b")
    store.release(old)  # a no-op: the lease is b's now
    assert store.get("orders").hostid == "b"
    store.commit(new, POS1, 5, "ok", at(63))
    assert store.get("orders").last == POS1


def test_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(store):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = f"{socket.gethostname()}:{dead.stdout.strip()}:abc123"
    old = store.acquire("orders", holder, 600, at(0))
    new = store.acquire("orders", "b", 60, at(1))
    assert new.token == old.token + 1
    with pytest.raises(FencingError):
        store.commit(old, POS1, 1, "", at(2))


def test_lease_of_a_live_process_on_this_host_is_respected(store):
    holder = f"{socket.gethostname()}:{os.getpid()}:abc123"
    store.acquire("orders", holder, 600, at(0))
    with pytest.raises(LeaseHeld):
        store.acquire("orders", "b", 60, at(1))


def test_reacquire_by_same_holder_fences_the_older_lease(store):
    first = store.acquire("orders", "a", 60, at(0))
    second = store.acquire("orders", "a", 60, at(1))
    assert second.token == first.token + 1
    with pytest.raises(FencingError):
        store.commit(first, POS1, 1, "", at(2))


def test_release_frees_the_topic(store):
    lease = store.acquire("orders", "a", 60, at(0))
    store.release(lease)
    assert store.get("orders").hostid == ""
    assert store.acquire("orders", "b", 60, at(1)).token == 2
    with pytest.raises(FencingError):
        store.set_next(lease, POS1, at(2))


def test_commit_many_is_all_or_nothing(store):
    a = store.acquire("mv.a", "r", 60, at(0))
    b = store.acquire("mv.b", "r", 60, at(0))
    store.commit_many([Commit(a, POS1, 1, "", at(1)), Commit(b, POS1, 2, "", at(1))])
    assert store.get("mv.a").last == POS1 and store.get("mv.b").last == POS1
    store.acquire("mv.b", "other", 60, at(100))  # b's lease expired and was taken over
    with pytest.raises(FencingError):
        store.commit_many([Commit(a, POS2, 1, "", at(101)), Commit(b, POS2, 2, "", at(101))])
    assert store.get("mv.a").last == POS1, "the first commit of the failed batch must be rolled back"


def test_reset_forgets_positions_but_keeps_the_fence(store):
    lease = store.acquire("orders", "a", 60, at(0))
    store.commit(lease, POS1, 3, "ok", at(1))
    store.reset("orders")
    offset = store.get("orders")
    assert (offset.last, offset.next, offset.rows, offset.fence, offset.hostid) == (None, None, 0, 1, "a")
    store.commit(lease, POS2, 3, "ok", at(2))
    assert store.get("orders").last == POS2


def test_watch_is_replaced_by_the_next_and_forgotten_on_reset(store):
    assert store.get_watch("orders") is None
    store.put_watch("orders", '{"a": 1}')
    store.put_watch("orders", '{"a": 2}')
    store.put_watch("other", '{"b": 1}')
    assert (store.get_watch("orders"), store.get_watch("other")) == ('{"a": 2}', '{"b": 1}')
    store.reset("orders")
    assert (store.get_watch("orders"), store.get_watch("other")) == (None, '{"b": 1}')


def test_offsets_lists_topics_sorted(store):
    for topic in ("b", "a", "c"):
        store.acquire(topic, "r", 60, at(0))
    assert [o.topic for o in store.offsets()] == ["a", "b", "c"]
    assert all(isinstance(o, Offset) for o in store.offsets())


def test_step_log_newest_first(store):
    for i in range(3):
        store.log_step(StepLogRow("orders", at(i), rows=i, last=POS1, next=POS2, min_pos=POS1, max_pos=POS2,
                                  max_lag_seconds=1.5, nulls={"x": i}, query_id=f"q{i}", seconds=0.1, consumer="a"))
    store.log_step(StepLogRow("other", at(9), rows=9))
    rows = store.steps("orders", limit=2)
    assert [r.rows for r in rows] == [2, 1]
    assert rows[0].nulls == {"x": 2} and rows[0].max_pos == POS2 and rows[0].ts == at(2) and rows[0].query_id == "q2"


def test_step_log_keeps_the_fencing_token(store):
    lease = store.acquire("orders", "a", 60, at(0))
    store.log_step(StepLogRow("orders", at(1), 5, consumer="a", token=lease.token))
    assert store.steps("orders")[0].token == lease.token == 1


def test_runners_register_beat_and_leave(store):
    store.heartbeat("h:1:a", "mvflow serve", at(0), "")
    store.heartbeat("h:2:b", "mvflow serve", at(1), "orders")
    store.heartbeat("h:2:b", "mvflow serve", at(5), "orders")  # still on it: since stays
    a, b = store.runners()
    assert (a.id, a.doing, a.heartbeat) == ("h:1:a", "", at(0))
    assert (b.doing, b.doing_since, b.heartbeat, b.started) == ("orders", at(1), at(5), at(1))
    assert b.alive_at(at(10), ttl_seconds=30) and not b.alive_at(at(40), ttl_seconds=30)
    store.leave("h:1:a")
    assert [r.id for r in store.runners()] == ["h:2:b"]


def test_assignments_are_fenced_by_the_coordinators_lease(store):
    old = store.acquire("serve:coordinator", "a", 10, at(0))
    store.heartbeat("r1", "mvflow serve", at(0), "")
    store.heartbeat("r2", "mvflow serve", at(0), "")
    store.assign(old, {"orders": "r1", "wide": "r2"}, [], at(1))
    assert [(x.job, x.runner, x.token) for x in store.assignments()] == [("orders", "r1", 1), ("wide", "r2", 1)]
    new = store.acquire("serve:coordinator", "b", 10, at(20))  # a's lease expired
    with pytest.raises(FencingError):
        store.assign(old, {"orders": "r2"}, ["r1"], at(21))
    store.assign(new, {"orders": "r2", "wide": "r2"}, ["r1"], at(22))
    assert [(x.job, x.runner, x.token, x.since) for x in store.assignments()] == [
        ("orders", "r2", 2, at(22)), ("wide", "r2", 1, at(1))]  # unchanged: keeps its token and time
    assert [r.id for r in store.runners()] == ["r2"]
    store.assign(new, {}, [], at(23))
    assert store.assignments() == []


def test_times_must_be_timezone_aware(store):
    with pytest.raises(ValueError):
        store.acquire("orders", "a", 60, datetime(2024, 1, 1))


_RACER = """
import json, sys, time
from datetime import datetime, timezone
from pathlib import Path
from compiler.project import StateSettings
from compiler.state import LeaseHeld, open_state_store
settings, base, holder = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
store = open_state_store(StateSettings(**settings))
while not (Path(base) / "go").exists():
    time.sleep(0.005)
try:
    lease = store.acquire("orders", holder, 600, datetime.now(timezone.utc))
    print(json.dumps([holder, "won", lease.token]))
except LeaseHeld as exc:
    print(json.dumps([holder, "refused", exc.holder]))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_processes_racing_for_one_lease(backend, tmp_path, dsn_for):
    open_backend(backend, tmp_path, dsn_for(backend))  # create the tables first
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(settings_for(backend, tmp_path, dsn_for(backend))).items()}
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, json.dumps(settings), str(tmp_path), f"p{i}"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT) for i in range(4)]
    time.sleep(1.0)  # let every racer import and wait at the start line
    (tmp_path / "go").touch()
    outcomes = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    winners = [o for o in outcomes if o[1] == "won"]
    assert len(winners) == 1 and winners[0][2] == 1
    assert all(o[2] == winners[0][0] for o in outcomes if o[1] == "refused")
    assert open_backend(backend, tmp_path, dsn_for(backend)).get("orders").hostid == winners[0][0]


def test_unknown_backend_is_a_user_error(tmp_path):
    with pytest.raises(RunError, match="unknown state store type"):
        open_state_store(StateSettings(type="zookeeper", path=tmp_path / "x"))


def test_postgres_settings_are_checked(tmp_path, postgres_dsn):
    with pytest.raises(RunError, match=r"\[no-state-dsn\] the target's postgres state store has no dsn"):
        open_state_store(StateSettings(type="postgres"))
    port = int(postgres_dsn.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(RunError, match=r"\[state-unreachable\] cannot connect to the PostgreSQL state store"):
        open_state_store(StateSettings(type="postgres", dsn=postgres_dsn.replace(f":{port}/", f":{port + 1}/")))


def test_a_run_keeps_its_offsets_in_postgres(spark, make_project, postgres_dsn, capsys):
    """A fact's steps and `mvflow status` with the state in PostgreSQL (target state type postgres)."""
    import uuid

    from compiler.cli import main

    database = f"t_pg_{uuid.uuid4().hex[:8]}"
    root = make_project({
        "project.yml": f"name: t\nmodels: {{+schema: {database}}}\ntargets:\n  local:\n"
                       f"    state: {{type: postgres, dsn: '{postgres_dsn}'}}\n"
                       f"state: {{offsets_table: {database}_offsets, step_log_table: {database}_steps}}\n",
        "lineage/events.yml": f"sources:\n  - {{name: events, database: {database}, primary_key: [id], position: [id],\n"
                              "     columns: [{name: id, type: bigint}]}\n",
        "models/events_fact.sql": f"{{{{ config(materialized='fact', maxstep=2) }}}}\n"
                                  f"SELECT e.id FROM {{{{ source('{database}', 'events') }}}} AS e",
    })
    spark.sql(f"CREATE DATABASE {database}")
    try:
        spark.sql(f"CREATE TABLE {database}.events USING parquet AS SELECT id FROM range(1, 6)")
        main(["--project-dir", str(root), "run"])
        assert sorted(r.id for r in spark.table(f"{database}.events_fact").collect()) == [1, 2, 3, 4, 5]
        store = open_state_store(StateSettings(type="postgres", dsn=postgres_dsn, offsets_table=f"{database}_offsets",
                                               step_log_table=f"{database}_steps"))
        assert store.get("events_fact").last == (5,) and len(store.steps("events_fact")) == 3  # steps of at most 2 rows
        capsys.readouterr()
        main(["--project-dir", str(root), "status"])
        assert "events_fact" in capsys.readouterr().out
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
