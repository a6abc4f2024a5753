"""``mvflow serve``: the coordinator's election and hand-out on both state stores (in-process, the
clock given), then real ``serve`` processes on the demo project."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from compiler.serve.coordinator import COORDINATOR, Coordinator
from compiler.state import FencingError

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from processes import MVFLOW, copy_demo, env, mvflow  # noqa: E402
from test_state import at, dsn_for, store  # noqa: E402,F401 - the backends' fixtures

JOBS = ["customers", "offers_wide", "orders", "shops"]
TTL = 30


def beat(store, *runners, t):
    for runner in runners:
        store.heartbeat(runner, "mvflow serve", at(t), "")


def held(store) -> dict[str, list[str]]:
    by: dict[str, list[str]] = {}
    for a in store.assignments():
        by.setdefault(a.runner, []).append(a.job)
    return by


def test_one_coordinator_at_a_time_and_a_dead_ones_successor_fences_it(store):
    a, b = Coordinator(store, "a", TTL), Coordinator(store, "b", TTL)
    beat(store, "a", "b", t=0)
    assert a.tick(JOBS, at(0)) and not b.tick(JOBS, at(1))
    assert held(store) == {"a": ["customers", "offers_wide"], "b": ["orders", "shops"]}
    assert a.tick(JOBS, at(10)) and not b.tick(JOBS, at(11))  # renewed: still a's
    beat(store, "b", t=45)  # a paused: no renewal, no heartbeat
    assert b.tick(JOBS, at(45)) and b.lease.token == a.lease.token + 1
    assert held(store) == {"b": JOBS} and [r.id for r in store.runners()] == ["b"]
    with pytest.raises(FencingError):  # a wakes up: its old lease cannot write
        store.assign(a.lease, {"orders": "a"}, [], at(46))
    assert not a.tick(JOBS, at(46)) and a.lease is None
    assert store.get(COORDINATOR).hostid == "b"


def test_runners_joining_and_leaving_are_rebalanced_moving_few_jobs(store):
    boss = Coordinator(store, "r1", TTL)
    beat(store, "r1", t=0)
    boss.tick(JOBS, at(0))
    assert held(store) == {"r1": JOBS}
    beat(store, "r1", "r2", "r3", t=5)
    boss.tick(JOBS, at(5))
    after_join = held(store)
    assert sorted(len(v) for v in after_join.values()) == [1, 1, 2]
    assert set(after_join["r1"]) <= set(JOBS) and len(after_join["r1"]) == 2  # r1 kept two of its own
    store.leave("r2")  # a graceful stop
    beat(store, "r1", "r3", t=10)
    boss.tick(JOBS, at(10))
    after_leave = held(store)
    assert set(after_leave) == {"r1", "r3"} and after_leave["r1"] == after_join["r1"]
    assert sorted(len(v) for v in after_leave.values()) == [2, 2]
    boss.resign()
    assert not store.get(COORDINATOR).held_at(at(11))


def test_a_coordinator_alone_assigns_nothing_to_runners_whose_heartbeat_expired(store):
    boss = Coordinator(store, "r1", TTL)
    beat(store, "r1", "r2", t=0)
    boss.tick(JOBS, at(0))
    beat(store, "r1", t=40)
    boss.tick(JOBS, at(40) + timedelta(seconds=1))
    assert held(store) == {"r1": JOBS}


# -- real `mvflow serve` processes on the demo project ------------------------------------------

def serve(project: Path, log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([*MVFLOW, "serve", *args], cwd=project, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env())


def wait_for(log: Path, text: str, seconds: float = 300) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in log.read_text():
            return log.read_text()
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in the log after {seconds}s:\n{log.read_text()}")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    project = copy_demo(tmp_path_factory.mktemp("serve-demo"))
    mvflow(project, "demo", "init", "--scale", "0.02", "--seed", "7")
    mvflow(project, "seed")
    return project


@pytest.mark.slow
def test_one_runner_builds_refreshes_and_stops_on_sigterm_slow(demo, tmp_path):
    # the jobs a fact needs (a view, an mv, the fact): serve's life, not every kind's build, is tested here
    first = mvflow(demo, "serve", "--select", "+orders_enriched", "--interval", "1", "--ttl", "10", "--turns", "1").stdout
    assert "is now the coordinator (token 1)" in first and "runner" in first and " stopped" in first, first
    assert "ERROR" not in first and "OK    fact  orders_enriched" in first, first
    assert "runners" not in mvflow(demo, "status").stdout.split("topic")[0]  # it left the store

    mvflow(demo, "demo", "change", "--seed", "11")
    log = tmp_path / "serve.log"
    runner = serve(demo, log, "--select", "+orders_enriched", "--interval", "1", "--ttl", "10")
    wait_for(log, "START fact  ")
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=300) == 0, log.read_text()
    text = log.read_text()
    assert "SIGTERM: stopping after" in text and " stopped" in text and "Traceback" not in text, text
    verified = mvflow(demo, "verify", "--select", "+orders_enriched").stdout
    assert "FAIL" not in verified and "orders_enriched" in verified, verified
