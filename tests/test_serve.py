"""``mvflow serve``: the coordinator's election and hand-out on both state stores (in-process, the
clock given), then real ``serve`` processes on the demo project."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from compiler.serve.coordinator import COORDINATOR, Coordinator
from compiler.serve.schedule import Job, JobState, Turns, startable
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
    first = mvflow(demo, "serve", "--select", "+orders_enriched", "--interval", "1", "--ttl", "10", "--turns", "1", "--threads", "2").stdout
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


# -- which jobs start when (``compiler.serve.schedule``), simulated on a clock ------------------

def simulate(jobs: dict, seconds: dict[str, float], threads: int, until: float, interval: float = 1.0) -> list[tuple]:
    """A runner's life on a made-up clock: ``(start, end, job)`` of every run, each job taking
    ``seconds[job]``; the runner looks again whenever a run ends or a tick passes."""
    states: dict[str, JobState] = {}
    running: dict[str, float] = {}  # job → when it ends
    runs, now = [], 0.0
    while now < until:
        for name in startable(jobs, states, set(running), at(now), interval, threads):
            running[name] = now + seconds[name]
            states[name] = JobState(at(now), "success", tried=at(now))
        now = min([*running.values(), now + interval / 4])
        for name in [n for n, end in running.items() if end <= now]:
            runs.append((states[name].last_run, at(running.pop(name)), name))
            states[name].finished = at(now)
    return runs


DEMO = {  # the demo's serve jobs as schedule sees them (two independent lines)
    "offer_ids": Job("numerator"),
    "offers_wide": Job("mv", downstream={"category_stats", "orders_enriched"}),
    "shop_stats": Job("table"),
    "category_stats": Job("mv", upstream={"offers_wide"}),
    "orders_enriched": Job("fact", upstream={"offers_wide"}),
}
COST = {"offer_ids": 33, "offers_wide": 40, "shop_stats": 9, "category_stats": 15, "orders_enriched": 13}


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_jobs_in_one_lineage_never_overlap_and_every_job_keeps_its_turns(threads):
    runs = simulate(DEMO, COST, threads, until=2000)
    for start, end, name in runs:
        others = [r for r in runs if r[2] in DEMO[name].upstream | DEMO[name].downstream]
        assert all(e <= start or s >= end for s, e, _ in others), (name, start)
        assert sum(1 for s, e, _ in runs if s <= start < e) <= threads  # running when this one started
    for upper, lower in (("offers_wide", "category_stats"), ("offers_wide", "orders_enriched")):
        ends = [e for s, e, n in runs if n == upper]
        starts = [s for s, e, n in runs if n == lower]
        # between two runs of a model, each model below it runs once, on what the first one wrote
        assert all(any(a <= s <= b for s in starts) for a, b in zip(ends, ends[1:])), (upper, lower)
    if threads == 1:  # one at a time, in dependency order, turn after turn: a sequential runner's order
        names = [n for _, _, n in sorted(runs)]
        assert names[:10] == list(DEMO) * 2


def test_more_threads_refresh_the_mv_more_often_and_a_fast_model_cannot_starve_a_slow_one():
    counts = {t: Counter(n for _, _, n in simulate(DEMO, COST, t, until=3600)) for t in (1, 2)}
    assert counts[2]["offers_wide"] > 1.4 * counts[1]["offers_wide"], counts
    fast = {"top": Job("mv", downstream={"slow"}), "slow": Job("mv", upstream={"top"}), "quick": Job("table")}
    seen = Counter(n for _, _, n in simulate(fast, {"top": 0.1, "slow": 30, "quick": 0.1}, threads=2, until=600))
    assert seen["slow"] >= 19 and seen["top"] <= seen["slow"] + 1 and seen["quick"] > 500, seen  # every second or so


def test_a_view_runs_once_and_a_held_lease_is_tried_again_after_a_tick():
    jobs = {"v": Job("view", downstream={"m"}), "m": Job("mv", upstream={"v"})}
    assert Counter(n for _, _, n in simulate(jobs, {"v": 1, "m": 1}, 2, until=20))["v"] == 1
    refused = {"m": JobState(tried=at(0), refused_until=at(2))}
    assert startable({"m": Job("mv")}, refused, set(), at(1), 1, 1) == []
    assert startable({"m": Job("mv")}, refused, set(), at(2), 1, 1) == ["m"]


def test_a_turn_ends_when_each_job_due_at_its_start_has_had_a_try():
    turns = Turns(limit=2)
    assert not turns.step({"a", "b"}, {"a", "b"}, {"a"}) and turns.done == 0
    assert not turns.step({"a"}, {"a", "b"}, {"b"}) and turns.done == 1  # a's second run belongs to turn 2
    assert not turns.step({"a", "b"}, {"a"}, set())  # b moved to another runner: not owed
    assert turns.step(set(), {"a"}, {"a"}) and turns.done == 2
