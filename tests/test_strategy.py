"""The refresh strategy's pure decisions (compiler.kinds.mv.strategy, compiler.kinds.mv.decisions), its config
(compiler.kinds) and its history in the state store: no Spark."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from compiler.compile import compile_project
from compiler.errors import CompileError
from compiler.kinds import KindError, MvKind, create_kind
from compiler.kinds.mv.decisions import Seen, input_range, new_input, rebuild_reason, up_to_date
from compiler.project import load_project
from compiler.state import SqliteStateStore, StepLogRow
from compiler.kinds.mv.costs import CHUNKED, FULL, INCREMENTAL, Run, cost_model, runs
from compiler.kinds.mv.strategy import after_keys, before_changes, before_keys, chunk_count, not_due_until, not_due_words

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=timezone.utc)
# 100,000 rows: a build 1 s + 0.08 ms/row, a refresh 1.5 s + 0.1 ms/key (break-even at 80,000 keys)
HISTORY = [Run(FULL, 9.0, 100_000, 100_000), Run(FULL, 5.0, 50_000, 50_000),
           Run(INCREMENTAL, 1.6, 1_000, 100_000), Run(INCREMENTAL, 2.5, 10_000, 100_000)]


def test_cost_model_fits_fixed_and_variable_costs():
    model = cost_model(HISTORY)
    assert model.full(100_000) == pytest.approx(9.0)
    assert model.incremental(1_000) == pytest.approx(1.6)
    assert model.chunked(10_000, 3) == pytest.approx(2.5 + 2 * 0.5 * 1.5)


def test_cost_model_priors_and_noise():
    assert cost_model([]).incremental(5) is None and cost_model([]).full(5) is None
    only_build = cost_model([Run(FULL, 10.0, 100_000, 100_000)], fanout_threshold=0.5)
    assert only_build.incremental(50_000) == pytest.approx(only_build.full(100_000))  # the guard's break-even
    noisy = cost_model([Run(INCREMENTAL, 3.0, 10, 9), Run(INCREMENTAL, 2.0, 1_000, 9), Run(FULL, 1.0, 9, 9)])
    assert noisy.per_key >= 0 and noisy.refresh_fixed >= 0  # a slower small batch: no negative costs
    chunked = cost_model([Run(CHUNKED, 8.0, 40_000, 100_000, chunks=4), Run(FULL, 9.0, 100_000, 100_000)])
    assert chunked.incremental(10_000) == pytest.approx(2.0)  # a chunk is a refresh of keys / chunks


@pytest.mark.parametrize("affected, expected", [
    (1_000, INCREMENTAL), (60_000, CHUNKED), (95_000, FULL), (0, INCREMENTAL)])
def test_auto_takes_the_cheapest(affected, expected):
    decision = after_keys(MvKind(), affected, 100_000, HISTORY)
    assert decision.strategy == expected, decision.words()
    assert decision.estimates[FULL] == pytest.approx(9.0) and decision.keys == affected
    if expected == CHUNKED:
        assert decision.chunks == 2 and "resumable chunks" in decision.reason


def test_auto_chunks_more_keys_than_a_chunk_holds_even_when_narrow():
    decision = after_keys(MvKind(chunk_keys=1_000), 5_000, 1_000_000, [Run(FULL, 90.0, 1_000_000, 1_000_000)])
    assert (decision.strategy, decision.chunks) == (CHUNKED, 5)


def test_forced_strategies_ignore_the_estimates():
    assert after_keys(MvKind(strategy="incremental"), 99_000, 100_000, HISTORY).strategy == INCREMENTAL
    assert after_keys(MvKind(strategy="full"), 1, 100_000, HISTORY).strategy == FULL
    forced = after_keys(MvKind(strategy="chunked", chunk_keys=2), 7, 100, [])
    assert (forced.strategy, forced.chunks) == (CHUNKED, 4)
    assert before_changes(MvKind(strategy="full"), 100, []).strategy == FULL
    assert before_changes(MvKind(strategy="incremental"), 100, HISTORY).strategy is None
    assert before_keys(MvKind(strategy="incremental"), {"o": 10**6}, ["o"], 100, HISTORY).strategy is None


def test_without_a_recorded_build_the_fanout_guard_decides():
    assert after_keys(MvKind(), 20_001, 100_000, []).strategy == FULL
    assert after_keys(MvKind(), 20_000, 100_000, []).strategy == INCREMENTAL
    assert before_keys(MvKind(), {"o": 30_000}, ["o"], 100_000, []).strategy == FULL
    assert before_keys(MvKind(), {"o": 3, "c": 90_000}, ["o"], 100_000, []).strategy is None  # c is no main input


def test_a_small_mv_whose_refresh_costs_more_than_a_build_builds_before_any_key():
    small = [Run(FULL, 3.0, 10_000, 10_000), Run(INCREMENTAL, 5.0, 20, 10_000), Run(INCREMENTAL, 6.0, 200, 10_000),
             Run(INCREMENTAL, 5.5, 100, 10_000)]
    decision = before_changes(MvKind(), 10_000, small)
    assert decision.strategy == FULL and decision.estimates[INCREMENTAL] > decision.estimates[FULL]
    assert before_changes(MvKind(), 10_000, small[:3]).strategy is None  # two batches by key: measured again
    assert before_changes(MvKind(), 10_000_000, small).strategy is None  # grown past the break-even: keys decide
    assert before_changes(MvKind(), 10_000, small[:1]).strategy is None  # only a prior: measure a refresh first


def _simulate(seconds: dict[str, float], history: list[Run], batches: int, keys: int = 500, rows: int = 100_000,
              cold: bool = False) -> list[str]:
    """``auto``'s choices over ``batches`` batches of ``keys`` affected keys, each recorded with what
    it costs (``seconds`` per strategy, ±5%), through the refresh's three decision points; ``cold``:
    every batch the first MV batch of its process."""
    chosen = []
    for batch in range(batches):
        decision = before_changes(MvKind(), rows, history, cold=cold)
        if decision.strategy is None:
            decision = before_keys(MvKind(), {"main": keys}, ["main"], rows, history, cold=cold)
        if decision.strategy is None:
            decision = after_keys(MvKind(), keys, rows, history, cold=cold)
        chosen.append(decision.strategy)
        took = seconds[decision.strategy] * (1 + 0.05 * (batch % 3))
        history.insert(0, Run(decision.strategy, took, rows if decision.strategy == FULL else keys, rows, cold=cold))
    return chosen


def test_one_slow_batch_by_key_does_not_keep_an_mv_on_full_builds():
    """The demo's two MVs went to full builds for good after one batch by key on a loaded machine
    (est. 308 s against a 78 s build): by key is measured until three batches tell, then the median."""
    slow_first = [Run(INCREMENTAL, 60.0, 500, 100_000), Run(FULL, 10.0, 100_000, 100_000)]  # newest first
    assert _simulate({FULL: 10.0, INCREMENTAL: 1.5}, list(slow_first), 30) == [INCREMENTAL] * 30
    # by key truly dearer: after three measurements, full builds, by key measured again every tenth
    history = list(slow_first)
    chosen = _simulate({FULL: 10.0, INCREMENTAL: 30.0}, history, 30)
    assert chosen[:2] == [INCREMENTAL] * 2 and chosen[2:12] == [FULL] * 10 and chosen.count(INCREMENTAL) == 4
    assert sum(run.seconds for run in history[:30]) <= 1.3 * 30 * 10 * 1.05  # exploring: ≤ 1.3× building every time


def test_a_cold_first_build_does_not_keep_a_warm_process_on_batches_by_key():
    """The bench grid at 100,000 offers, in one process: the MV's first build ran cold (9.4 s) and on
    that estimate every batch went by key (4-8 s) where a build took 1.8-2.2 s. A warm batch now
    builds once while every recorded build ran cold, then decides on the warm builds; where every
    batch runs cold (a ``mvflow run`` each), the cold build is the estimate and by key goes on."""
    first = [Run(FULL, 9.4, 86_000, 86_000, cold=True)]
    costs = {FULL: 2.0, INCREMENTAL: 5.0}
    history = list(first)
    chosen = _simulate(costs, history, 30, rows=86_000)
    # the prior puts a batch by key at 0.3 s, too far below the build to explore it; once measured, by key
    # is measured 3 times (``explore_by_key``)
    assert chosen[:5] == [INCREMENTAL, FULL, INCREMENTAL, INCREMENTAL, FULL], chosen
    assert chosen.count(INCREMENTAL) == 5, chosen  # then again after 10 builds in a row
    assert sum(run.seconds for run in history[:30]) <= 1.5 * 30 * 2.0 * 1.05  # against 150 s by key every time
    assert _simulate({FULL: 9.4, INCREMENTAL: 5.0}, list(first), 30, rows=86_000, cold=True) == [INCREMENTAL] * 30


def test_the_seconds_spent_finding_the_keys_are_not_weighed_against_the_build():
    """Once the affected keys are found, their seconds are spent whichever way the batch goes: by
    key costs its write from there, a build the whole build. Here finding the keys takes 5 s, the
    write 0.5 s + 0.5 ms a key and a build 8 s: 6,000 affected keys cost 8.5 s by key in all, 13 s
    switched to a build (batches that record their phases: ``Run.after_keys``)."""
    def simulate(phases: bool) -> tuple[str, float]:
        history, chosen, total = [Run(FULL, 8.0, 100_000, 100_000)], "", 0.0
        for batch in range(12):
            keys = (4_000, 6_000, 9_000)[batch % 3]
            decision = before_changes(MvKind(), 100_000, history)
            if decision.strategy is None:
                decision = before_keys(MvKind(), {"main": 500}, ["main"], 100_000, history)
            if decision.strategy is None:
                decision = after_keys(MvKind(), keys, 100_000, history, spent=5.0 if phases else 0.0)
            write = 0.5 + 0.0005 * keys
            took = 5.0 + (8.0 if decision.strategy == FULL else write)
            chosen += decision.strategy[0]
            total += took
            history.insert(0, Run(FULL, 8.0, 100_000, 100_000) if decision.strategy == FULL else
                           Run(INCREMENTAL, took, keys, 100_000, after_keys=write if phases else None))
        return chosen, total

    assert simulate(phases=True) == ("i" * 12, 104.0)
    assert simulate(phases=False) == ("iiiiffiffiff", 126.5)  # whole batches: builds after the keys were paid for


def test_the_seconds_spent_finding_the_changed_keys_are_not_weighed_against_the_build():
    """The same at the second decision point: once the changed keys are found (the probe and their
    query: 4 s), by key costs its affected keys' query (1 s + 0.1 ms a changed key) and its write
    (0.5 s + 0.2 ms a key) from there, a build 8 s. Batches of 8,000-16,000 changed main keys cost
    7.9-10.3 s by key in all and 12 s switched to a build there; whole batches against a build send
    every batch of 12,000 keys or more to a build once by key has been measured three times."""
    def simulate(phases: bool) -> tuple[str, float]:
        history, chosen, total = [Run(FULL, 8.0, 100_000, 100_000)], "", 0.0
        for batch in range(12):
            keys = (8_000, 12_000, 16_000)[batch % 3]
            decision = before_changes(MvKind(), 100_000, history)
            if decision.strategy is None:
                decision = before_keys(MvKind(), {"main": keys, "shops": 20}, ["main"], 100_000, history,
                                       spent=4.0 if phases else 0.0)
            query, write = 1.0 + 0.0001 * (keys + 20), 0.5 + 0.0002 * keys
            if decision.strategy is None:
                decision = after_keys(MvKind(), keys, 100_000, history, spent=4.0 + query if phases else 0.0)
            took = 4.0 + (8.0 if decision.strategy == FULL else query + write)
            chosen += decision.strategy[0]
            total += took
            history.insert(0, Run(FULL, 8.0, 100_000, 100_000) if decision.strategy == FULL else
                           Run(INCREMENTAL, took, keys, 100_000, after_keys=write if phases else None,
                               changed=keys + 20 if phases else None, keys_query=query if phases else None))
        return chosen, round(total, 1)

    assert simulate(phases=True) == ("i" * 12, 109.2)
    assert simulate(phases=False) == ("iiiiffiffiff", 123.0)  # builds after the changed keys were paid for


def _small_mv(probe: float, finding: float, build: float, write: float, batches: int = 30) -> tuple[str, float]:
    """``auto`` on an MV of 182 rows whose batches affect 37 keys (a fifth: a wide change) through the
    refresh's three decision points, each batch recorded as the step log records it (a build's
    seconds from its decision on, ``costs.runs``): the probe, finding the keys, the build and the
    write by key cost what is given (±5%). Returns the choices (``e``: a build before any key
    query, ``f``: a build once the keys were found, ``c``: by key) and the seconds of all batches."""
    rows, keys, history, chosen, total = 182, 37, [Run(FULL, build, 182, 182)], "", 0.0
    for batch in range(batches):
        noise = 1 + 0.05 * (batch % 3)
        decision = before_changes(MvKind(), rows, history)
        if decision.strategy == FULL:
            chosen, took = chosen + "e", (probe + build) * noise
            history.insert(0, Run(FULL, build * noise, rows, rows))
        else:
            decision = before_keys(MvKind(), {"main": 20}, ["main"], rows, history, spent=probe)
            assert decision.strategy is None  # 20 changed main keys: not clearly wide
            decision = after_keys(MvKind(), keys, rows, history, spent=probe + finding)
            chosen += "f" if decision.strategy == FULL else decision.strategy[0]
            took = (probe + finding + (build if decision.strategy == FULL else write)) * noise
            history.insert(0, Run(FULL, build * noise, rows, rows, finding=finding * noise, affected=keys)
                           if decision.strategy == FULL else
                           Run(decision.strategy, took, keys, rows, decision.chunks, after_keys=write * noise,
                               finding=finding * noise))
        total += took
    return chosen, round(total, 1)


def test_a_small_mv_whose_keys_cost_more_than_its_build_learns_to_build_before_the_key_queries():
    """The demo at scale 0.02: finding the keys took 5 s of the probe's 3.7 s, a build 5.9 s; every
    batch found its keys and then built (2x a build), because with no batch by key measured a key
    cost 5 rows of a build and by key was never measured. Now the keys found are not weighed
    against the build: the first batches go by key, measure its write, and the batches after them
    build before any key query, finding the keys again every tenth batch."""
    chosen, total = _small_mv(probe=3.7, finding=5.0, build=5.9, write=3.0)
    assert chosen[:12] == "cc" + "e" * 10 and chosen.count("c") == 4, chosen
    always_built = 30 * (3.7 + 5.9) * 1.05
    assert total <= 1.15 * always_built, (total, always_built)
    # by key cheaper than the build, even with its keys to find: it stays by key
    assert _small_mv(probe=0.5, finding=1.0, build=9.0, write=1.0)[0] == "c" * 30


def test_the_probes_count_of_changed_main_keys_decides_before_the_key_queries():
    decision = before_changes(MvKind(), 100_000, HISTORY, probed_main_keys=95_000)
    assert decision.strategy == FULL and decision.keys == 95_000 and "changed main keys" in decision.reason
    assert before_changes(MvKind(), 100_000, HISTORY, probed_main_keys=600).strategy is None
    assert before_changes(MvKind(strategy="incremental"), 100_000, HISTORY, probed_main_keys=95_000).strategy is None


def test_second_decision_point_builds_at_once_only_when_clearly_wide():
    assert before_keys(MvKind(), {"o": 95_000}, ["o"], 100_000, HISTORY).strategy == FULL
    assert before_keys(MvKind(), {"o": 60_000}, ["o"], 100_000, HISTORY).strategy is None  # maybe chunked


def test_words_say_the_choice_and_its_estimates():
    words = after_keys(MvKind(), 607, 100_000, HISTORY).words()
    assert words == "incremental: est. 1.6 s vs full 9.0 s (607 keys of 100,000 rows)"
    assert after_keys(MvKind(), 60_000, 100_000, HISTORY).words().startswith("chunked (2 chunks): est. 8.2 s vs full 9.0 s, incremental 7.5 s")
    assert after_keys(MvKind(), 20, 100, []).words() == "incremental (20 keys of 100 rows)"  # nothing to estimate from


def test_chunk_count():
    assert [chunk_count(n, 10) for n in (0, 1, 2, 5, 25, 10_000)] == [1, 1, 2, 2, 3, 64]


def test_min_interval():
    assert not_due_until(T0 + timedelta(minutes=9), T0, 600) == T0 + timedelta(minutes=10)
    assert not_due_until(T0 + timedelta(minutes=10), T0, 600) is None
    assert not_due_until(T0, None, 600) is None and not_due_until(T0, T0, 0) is None
    assert not_due_words(T0 + timedelta(minutes=10), 600) == "not due until 10:10:00 UTC (min_interval 10m)"


def test_rebuild_reason_up_to_date_and_ranges():
    base = dict(committed=True, in_flight=False, stored_exists=True, definition_matches=True, swapping="")
    assert rebuild_reason(False, **base) is None
    assert rebuild_reason(True, **base) == "--full-refresh"
    assert rebuild_reason(False, **{**base, "committed": False}) == "first run"
    assert rebuild_reason(False, **{**base, "committed": False, "in_flight": True}) is None  # a crashed first refresh
    assert rebuild_reason(False, **{**base, "stored_exists": False}) == "no stored MV"
    assert rebuild_reason(False, **{**base, "swapping": "b"}) == "redo of an interrupted build or compaction"
    assert up_to_date({}) and not up_to_date({"x": Seen(True, None, (1,))})
    assert up_to_date({"x": Seen(True, None, None)})  # an input empty then and now
    # a resumed chunked batch keeps the ranges of its first try, even of inputs that moved since
    assert input_range(9, False, (3,), (3,), False, diffed=False, unchanged=False, current=(5,), resume=True) == ((3,), (3,))
    assert input_range(9, False, (3,), (3,), False, diffed=False, unchanged=False, current=(5,)) == ((3,), (5,))
    assert input_range(9, False, (3,), None, False, diffed=False, unchanged=False, current=None) == ((3,), (3,))
    assert input_range(9, True, (3,), None, False, diffed=False, unchanged=False, current=None) == (None, ())
    assert new_input({"a": (None, (1,))}) and not new_input({"a": ((1,), (2,))})


@pytest.mark.parametrize("config, key, message", [
    ({"strategy": "fast"}, "strategy", "invalid strategy 'fast'"),
    ({"min_interval": "soon"}, "min_interval", "invalid min_interval 'soon'"),
    ({"chunk_keys": 0}, "chunk_keys", "chunk_keys must be a positive number, got 0"),
])
def test_bad_strategy_config(config, key, message):
    with pytest.raises(KindError) as info:
        create_kind({"materialized": "mv", **config})
    assert (info.value.key, str(info.value)) == (key, message)


def test_strategy_config_errors_point_at_the_line(make_project):
    project = make_project({
        "lineage/s.yml": "sources:\n  - {name: o, database: d, primary_key: [id], position: [ts]}\n",
        "models/m.sql": "-- a wide MV\n{{ config(materialized='mv', strategy='sometimes') }}\nselect o.id from {{ source('d', 'o') }} o",
    })
    with pytest.raises(CompileError) as info:
        compile_project(load_project(project))
    text = info.value.problems[0].format()
    assert "models/m.sql:2:" in text and "invalid strategy 'sometimes'" in text and "auto, incremental, chunked, full" in text
    config = create_kind({"materialized": "mv", "strategy": "chunked", "min_interval": "10m", "chunk_keys": 1000})
    assert (config.strategy, config.min_interval_seconds, config.chunk_keys) == ("chunked", 600, 1000)


def test_step_log_keeps_strategy_and_detail_and_old_stores_migrate(tmp_path):
    path = tmp_path / "state.sqlite"
    db = sqlite3.connect(path)  # a step log as an older mvflow wrote it, with one row
    db.execute("""CREATE TABLE step_log (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, ts TEXT NOT NULL,
        rows INTEGER NOT NULL, last TEXT, next TEXT, min_pos TEXT, max_pos TEXT, max_lag_seconds REAL, nulls TEXT NOT NULL,
        query_id TEXT NOT NULL, seconds REAL NOT NULL, consumer TEXT NOT NULL)""")
    db.execute("INSERT INTO step_log (topic, ts, rows, nulls, query_id, seconds, consumer) "
               "VALUES ('wide', '2026-01-01T00:00:00+00:00', 5, '{}', '', 0.0, 'x')")
    db.commit()
    db.close()
    store = SqliteStateStore(path)
    store.log_step(StepLogRow("wide", T0, 607, seconds=1.9, strategy=INCREMENTAL,
                              detail={"keys": 607, "rows": 100_000, "chunks": 1}))
    newest, old = store.steps("wide")
    assert (old.strategy, old.detail) == ("", {})
    assert (newest.strategy, newest.detail["keys"]) == (INCREMENTAL, 607)
    assert runs([newest, old]) == [Run(INCREMENTAL, 1.9, 607, 100_000)]


def _small_mv_project(make_project, tmp_path, models: dict[str, str] | None = None):
    """A project whose MV ``m`` (182 rows) built once, found 37 keys by key, then found them and
    built: 8.4 s finding its keys against a 5.9 s build. Returns the manifest and the state store."""
    from compiler.kinds.mv.storage import MvState
    from compiler.project import StateSettings
    from compiler.state import open_state_store

    columns = "[{name: id, type: bigint}, {name: ts, type: timestamp}, {name: v, type: string}]"
    project = make_project({
        "lineage/s.yml": f"sources:\n  - {{name: o, database: d, primary_key: [id], position: [ts], columns: {columns}}}\n",
        "models/m.sql": "{{ config(materialized='mv') }}\nselect o.id, o.v from {{ source('d', 'o') }} o",
        **(models or {}),
    })
    manifest = compile_project(load_project(project))
    store = open_state_store(StateSettings(path=tmp_path / "state.sqlite"))
    lease = store.acquire("m", "host:1", 60, T0)
    store.commit(lease, (3,), 182, MvState(base_rows=182).dump(), T0)
    store.release(lease)
    store.log_step(StepLogRow("m", T0, 182, next=(1,), seconds=6.9, strategy=FULL,
                              detail={"keys": 182, "rows": 182, "phases": {"mv:probed": 0.3}}))
    return manifest, store


def _found_then_built(store) -> None:
    found = {"mv:probed": 3.7, "mv:changed-keys": 6.8, "mv:affected-keys": 8.7}
    store.log_step(StepLogRow("m", T0, 37, next=(2,), seconds=11.7, strategy=INCREMENTAL,
                              detail={"keys": 37, "rows": 182, "changed": 20, "phases": found}))
    store.log_step(StepLogRow("m", T0, 182, next=(3,), seconds=14.6, strategy=FULL,
                              detail={"keys": 182, "rows": 182, "affected": 37, "phases": {**found, "mv:fanout-guard": 8.7}}))


def test_plan_says_when_the_next_batch_builds_before_any_key_query(make_project, tmp_path):
    """``mvflow plan`` (no Spark) answers with the run's first decision: a small MV whose recent
    batches spent more finding their keys and writing them than a build costs is built."""
    from compiler.kinds.mv.refresh import next_run

    manifest, store = _small_mv_project(make_project, tmp_path)
    model = manifest.models["m"]
    assert next_run(manifest, model, store, T0)[0] == "refresh"  # a build measured, no key found yet
    _found_then_built(store)
    what, why = next_run(manifest, model, store, T0)
    assert what == "build" and why.startswith("an input moved; finding the keys and writing them costs more than a full build"), why
    assert "(as recent batches did: 37 keys)" in why and "full build: est. " in why, why
    assert "readers" not in why, why


@pytest.mark.parametrize("reader_build, what", [(20.0, "refresh"), (0.5, "build")])
def test_a_build_before_the_keys_counts_the_rebuilds_of_the_mvs_reading_it(make_project, tmp_path, reader_build, what):
    """A build before any key query publishes no keys, so the MV reading this one rebuilds: its
    build, by its own step log, counts on the build's side (here 5.9 s + its build against the
    8.4 s finding the keys cost: a reader's 20 s build keeps the batch by key, one of 0.5 s not)."""
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.kinds.mv.refresh import next_run, readers_rebuild
    from compiler.kinds.mv.storage import MvState

    manifest, store = _small_mv_project(make_project, tmp_path, {
        "models/r.sql": "{{ config(materialized='mv') }}\nselect m.id, m.v from {{ ref('m') }} m"})
    _found_then_built(store)
    assert readers_rebuild(store, mv_plan(manifest.models["m"], manifest)) == 0.0  # the reader never built
    lease = store.acquire("r", "host:1", 60, T0)
    store.commit(lease, (1,), 182, MvState(base_rows=182).dump(), T0)
    store.release(lease)
    store.log_step(StepLogRow("r", T0, 182, next=(1,), seconds=reader_build, strategy=FULL, detail={"keys": 182, "rows": 182}))
    assert readers_rebuild(store, mv_plan(manifest.models["m"], manifest)) == pytest.approx(reader_build)
    got, why = next_run(manifest, manifest.models["m"], store, T0)
    assert got == what, why
    if what == "build":
        assert f"and its readers' rebuilds ({reader_build:.1f} s)" in why, why
