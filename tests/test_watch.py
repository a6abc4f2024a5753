"""compiler.watch: an mv or fact model with nothing to do is answered from the state store and
the files, without starting Spark; any moved input (files, upstream offsets, the clock past a
fact's delay, the SQL) sends the runner to Spark again, and the oracle still holds."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from compiler.kinds.fact.steps import watch_spec
from compiler.kinds.mv.analyze import mv_plan
from compiler.kinds.mv.refresh import MvState, run_mv
from compiler.spark import LazySession
from compiler.watch import is_idle

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from mv_world import World, seed  # noqa: E402
from test_fact import T0, Env  # noqa: E402


def mv_run(world: World, file_check: bool = True):
    """One run of the MV through a session that starts only when the runner needs Spark."""
    world.flush()
    lazy = LazySession(lambda: world.spark)
    result = run_mv(lazy, world.manifest, world.manifest.models["wide"], world.store, file_check=file_check)
    assert result.status == "success", result.message
    return result, lazy.started


def test_mv_is_answered_without_spark_until_an_input_moves(spark, tmp_path):
    world = World(spark, tmp_path)
    seed(world)
    result, started = mv_run(world)
    assert started and "full build" in result.message
    result, started = mv_run(world)
    assert not started and result.message == "up to date (no input file or upstream batch moved since batch 1)"

    world.put("categories", id=7, name="Comics", note="x")
    result, started = mv_run(world)
    assert started and "keys refreshed" in result.message
    world.check()
    assert world.table() == sorted(spark.sql(world.manifest.models["wide"].sql).collect(), key=repr)

    world.dirty.add("regions")  # rewritten with the same rows: new files, same data
    result, started = mv_run(world)
    assert started and result.message.startswith("up to date (nothing changed since batch 2)")
    assert not mv_run(world)[1]
    assert mv_run(world, file_check=False)[1]

    slot = MvState.parse(world.store.get("wide").state).slot  # its table dropped outside mvflow: built again
    spark.sql(f"DROP TABLE {mv_plan(world.manifest.models['wide'], world.manifest).table_name(f'base_{slot}')}")
    result, started = mv_run(world)
    assert started and "full build" in result.message, result.message
    world.check()


def test_fact_waiting_for_its_delay_wakes_up_when_the_clock_passes_it(spark, make_project):
    env = Env(spark, make_project, extra=", delay='10m'")
    env.add_events(1, 6)  # ts = T0, T0+1m, T0+1m, T0+2m, T0+2m, T0+3m

    def run():
        lazy = LazySession(lambda: spark)
        result = _run_fact(env, lazy)
        return result, lazy.started

    env.now = T0 + timedelta(minutes=10, seconds=30)
    result, started = run()
    assert started and result.rows == 1
    assert is_idle(env.store, watch_spec(_plan(env)), env.now) is not None  # oldest pending: T0+1m → ready at T0+11m
    env.now = T0 + timedelta(minutes=10, seconds=50)
    result, started = run()
    assert not started and result.rows == 0 and "waiting for the delay of 600s" in result.message
    env.now = T0 + timedelta(minutes=11, seconds=1)
    result, started = run()
    assert started and result.rows == 2 and env.fact_rows() == env.oracle()

    env.now = T0 + timedelta(minutes=20)
    assert run()[0].rows == 3
    result, started = run()  # caught up: only new files can bring work
    assert not started and result.rows == 0
    env.add_events(7, 2)  # ts T0+3m, T0+4m: after the last position (T0+3m, 6)
    result, started = run()
    assert started and result.rows == 2 and env.fact_rows() == env.oracle()


def test_fact_blocked_by_an_upstream_mv_waits_on_its_offsets(spark, make_project):
    env = Env(spark, make_project, extra=", depends_on=['wide']", more={
        "models/wide.sql": "{{{{ config(materialized='mv') }}}} SELECT d.k, d.name FROM {{{{ source('{src}', 'dims') }}}} AS d",
    })
    env.add_events(1, 4)
    assert "never refreshed" in _run_fact(env, LazySession(lambda: spark)).message
    lazy = LazySession(lambda: spark)
    assert "never refreshed" in _run_fact(env, lazy).message and not lazy.started
    lease = env.store.acquire(f"wide:{env.src}.dims", "mv-runner", 60, env.now)
    env.store.commit(lease, ("2026-01-01 00:01:00", 0), 2, "ok", env.now)
    lazy = LazySession(lambda: spark)
    assert _run_fact(env, lazy).rows == 1 and lazy.started


def _plan(env: Env):
    from compiler.kinds.fact.plan import fact

    return fact(env.manifest, env.manifest.models["ev"])


def _run_fact(env: Env, session: LazySession):
    from compiler.kinds.fact.steps import StepOptions, run_fact

    options = StepOptions(clock=lambda: env.now, lease_ttl_seconds=60)
    return run_fact(session, env.manifest, env.manifest.models["ev"], env.store, options, env.lines.append)
