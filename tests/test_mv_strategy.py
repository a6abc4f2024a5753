"""The refresh strategies on real Spark tables: incremental, chunked and full give the same MV
(each equal to a full recomputation), a chunked batch crashed between two chunks resumes at the
next chunk while new changes land, and ``min_interval`` answers ``not due`` without Spark."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.kinds.mv.analyze import mv_plan
from compiler.kinds.mv.refresh import MvState, run_mv, strategy_lines
from compiler.kinds.mv.costs import CHUNKED, FULL, INCREMENTAL, runs
from compiler.phases import Crash, crash_at
from compiler.project import StateSettings
from compiler.spark import LazySession

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from mv_world import SHOP_STATS, WIDE, World, seed, tags_model  # noqa: E402

FORCED = "strategy='incremental'"
CHUNKS = "strategy='chunked', chunk_keys=2"


def test_every_strategy_gives_the_same_mv(spark, tmp_path):
    models = {"inc": WIDE, "chunk": WIDE.replace(FORCED, CHUNKS), "full": WIDE.replace(FORCED, "strategy='full'")}
    world = World(spark, tmp_path, models)
    seed(world)
    for name in models:
        assert world.refresh(name).mode == "build"
    world.put("offers", id=7, shop_id=200, cat_id=7, title="new", status="active", note="n")
    world.put("offers", id=1, title="renamed", shop_id=200)
    world.delete("offers", 2)
    world.put("shops", id=200, wh_id=10)                      # re-pointed joins
    world.delete("warehouses", 20)
    world.put("categories", id=7, name="Novels")             # a dictionary edit: every offer of cat 7
    world.put("settings", name="currency", value="USD")      # joined by a literal: every key
    outcomes = {name: world.refresh(name) for name in models}
    assert outcomes["inc"].strategy == INCREMENTAL and outcomes["inc"].mode == "refresh"
    assert outcomes["full"].strategy == FULL and outcomes["full"].mode == "build"
    assert outcomes["chunk"].strategy == CHUNKED and outcomes["chunk"].decision.chunks >= 2
    world.check("chunk")  # equal to a full recomputation, and so are the others:
    assert world.table("inc") == world.table("chunk") == world.table("full")
    steps = world.store.steps("chunk", 1)[0]
    assert steps.strategy == CHUNKED and steps.seconds > 0 and steps.detail["chunks"] >= 2
    by_key = runs(world.store.steps("inc", 1))[0]  # what the cost model reads of each phase of a batch by key
    assert by_key.changed >= 5 and 0 < by_key.keys_query < by_key.seconds and 0 < by_key.after_keys < by_key.seconds


def test_every_strategy_gives_the_same_one_to_many_mv(spark, tmp_path):
    tags = tags_model("LEFT JOIN")
    models = {"inc": tags, "chunk": tags.replace(FORCED, CHUNKS), "full": tags.replace(FORCED, "strategy='full'")}
    world = World(spark, tmp_path, models)
    seed(world)
    for tag, offer in ((900, 1), (901, 1), (902, 2), (903, 3)):
        world.put("offer_tags", id=tag, offer_id=offer, cat_id=7, text=f"tag {tag}")
    for name in models:
        assert world.refresh(name).mode == "build"
    world.put("offer_tags", id=901, offer_id=4)               # moves
    world.delete("offer_tags", 902)                           # offer 2 loses its only tag
    world.put("offer_tags", id=904, offer_id=3, text="more")  # offer 3 grows
    world.put("categories", id=7, name="Novels")             # every tag's category
    outcomes = {name: world.refresh(name) for name in models}
    assert outcomes["chunk"].strategy == CHUNKED and outcomes["chunk"].decision.chunks >= 2
    world.check("chunk")
    assert world.table("inc") == world.table("chunk") == world.table("full")
    assert len(world.table("inc")) == 6 + 1  # offer 3 has two tags


def test_a_chunked_group_by_batch_on_delta_counts_each_group_once(spark, tmp_path):
    """Chunks split the members, so a group is recomputed by every chunk holding one of them: each
    chunk's MERGE sees what the chunks before it wrote, and the groups counted (``World.check``)
    are the groups readers see."""
    assert FORCED in SHOP_STATS
    world = World(spark, tmp_path, {"stats": SHOP_STATS.replace(FORCED, CHUNKS)}, table_format="delta")
    seed(world)
    assert world.refresh("stats").mode == "build"
    world.put("shops", id=400, name="Delta", wh_id=20, rating=3)
    for offer in (1, 2, 3, 4, 5, 6):                          # every member moves: groups appear and vanish
        world.put("offers", id=offer, shop_id=400 if offer % 2 else 100)
    outcome = world.refresh("stats")
    assert outcome.strategy == CHUNKED and outcome.decision.chunks >= 2
    world.check("stats")
    assert {r.shop_id for r in world.table("stats")} == {100, 400}


def test_chunked_batch_crashed_between_chunks_resumes_with_new_changes_landing(spark, tmp_path):
    world = World(spark, tmp_path, {"wide": WIDE.replace(FORCED, CHUNKS)})
    seed(world)
    world.refresh()
    world.put("settings", name="currency", value="USD")      # every key: several chunks
    world.put("offers", id=3, title="first")
    with pytest.raises(Crash):
        world.refresh(phase=crash_at("mv:chunk-recorded", 1))
    offset = world.store.get("wide")
    progress = MvState.parse(offset.state).chunked
    assert offset.in_flight and progress["done"] == 1 and progress["chunks"] >= 2

    world.put("categories", id=7, name="Novels")             # lands between the crash and the redo
    world.put("settings", name="currency", value="GBP")
    world.put("offers", id=3, title="second")
    redo = world.refresh()
    assert redo.redo and redo.strategy == CHUNKED and redo.resumed_at == 1
    assert redo.decision.chunks == progress["chunks"]
    assert world.store.get("wide").last == (progress["batch"] + progress["chunks"] - 1,)  # a batch number per chunk
    assert not redo.covered                                   # what landed since is the next batch's
    after = world.refresh()
    assert after.batch == progress["batch"] + progress["chunks"]
    assert {k.split(".")[-1]: v for k, v in after.changed.items()}["categories"] == 1
    world.check()
    assert {r.currency for r in world.table()} == {"GBP"}


def test_auto_decides_a_full_build_on_the_probes_count_before_any_key_query(spark, tmp_path):
    world = World(spark, tmp_path, {"wide": WIDE.replace(FORCED, "strategy='auto'")})
    seed(world)
    assert world.refresh().strategy == FULL                  # the first build: the cost model's only figure
    phases: list[str] = []
    for offer in range(1, 6):                                 # 5 of 6 main keys: more than a build's worth
        world.put("offers", id=offer, title=f"edited {offer}")
    wide = world.refresh(phase=phases.append)
    assert wide.strategy == FULL and "changed main keys" in wide.decision.reason
    assert "mv:changed-keys" not in phases and "mv:affected-keys" not in phases
    world.check()


def test_a_warm_batch_builds_once_while_every_recorded_build_ran_cold(spark, tmp_path, monkeypatch):
    """The first MV batch of a process pays its warm-up, so its build is no estimate of a later one's:
    while every recorded build ran cold, a warm batch the estimates give to by key builds (exploring),
    and the next goes by key on the warm build's estimate."""
    import compiler.kinds.mv.refresh as refresh

    world = World(spark, tmp_path, {"wide": WIDE.replace(FORCED, "strategy='auto'")})
    seed(world)
    for offer in range(10, 40):  # by the prior a key costs 5 rows of a build: a key of 34 rows is cheaper
        world.put("offers", id=offer, shop_id=100, cat_id=7, title=f"offer {offer}", status="active", note="n")
    monkeypatch.setattr(refresh, "first_batch", lambda session: True)
    assert world.refresh().strategy == FULL
    assert world.store.steps("wide", 1)[0].detail["cold"] is True
    monkeypatch.setattr(refresh, "first_batch", lambda session: False)
    world.put("offers", id=1, title="edited once")
    explored = world.refresh()
    assert explored.strategy == FULL, explored.decision
    assert explored.decision.reason.startswith("exploring: every build recorded ran cold (1 build"), explored.decision
    assert "cold" not in world.store.steps("wide", 1)[0].detail
    world.check()
    world.put("offers", id=2, title="edited twice")
    keyed = world.refresh()
    assert keyed.strategy == INCREMENTAL and keyed.mode == "refresh", keyed.decision
    world.check()


def test_min_interval_is_answered_without_spark_and_runs_report_the_strategy(spark, tmp_path, capsys):
    world = World(spark, tmp_path, {"wide": WIDE.replace(FORCED, "strategy='auto', min_interval='10m'")})
    seed(world)
    t0 = datetime.now(timezone.utc).replace(microsecond=0)

    def run(at: datetime):
        world.flush()
        lazy = LazySession(lambda: world.spark)
        result = run_mv(lazy, world.manifest, world.manifest.models["wide"], world.store, now=lambda: at)
        assert result.status == "success", result.message
        return result, lazy.started

    result, started = run(t0)
    assert started and "full build (first run)" in result.message and result.strategy == FULL
    world.put("offers", id=1, title="renamed")
    result, started = run(t0 + timedelta(minutes=5))
    due = (t0 + timedelta(minutes=10)).strftime("%H:%M:%S")
    assert not started and result.message == f"not due until {due} UTC (min_interval 10m)"
    result, started = run(t0 + timedelta(minutes=11))
    assert started and result.strategy in (INCREMENTAL, CHUNKED, FULL)
    assert "est. " in result.message and result.estimates["estimates"]["full"] is not None
    world.check()
    step = world.store.steps("wide", 1)[0]
    assert step.strategy == result.strategy and step.seconds > 0 and step.detail["rows"] > 0
    # the cost model reads what finding the keys cost (by key, or before switching to a build) and a build from its decision on
    batch, phases = runs([step])[0], step.detail["phases"]
    found = "mv:affected-keys" in phases  # else built on the changed keys' count
    assert batch.finding == (round(phases["mv:affected-keys"] - phases["mv:probed"], 3) if found else None), (batch, phases)
    if batch.strategy == FULL:
        assert batch.seconds < step.seconds - phases["mv:probed"] and batch.affected == step.detail.get("affected"), batch
        assert ("affected" in step.detail) == found, step.detail
    lines = strategy_lines(StateSettings(path=tmp_path / "state.sqlite"), mv_plan(world.manifest.models["wide"], world.manifest),
                           world.manifest.models["wide"].kind)
    assert lines[0].startswith("  strategy: auto (") and "min_interval 10m" in lines[0]
    assert lines[1].startswith("  cost model: by key") and " build" in lines[1]  # 1 or 2: auto may rebuild a tiny MV
    # `mvflow explain --costs`: the batches the model read, and each decision estimated against actual
    (tmp_path / "project.yml").write_text("name: t\ntargets:\n  local:\n    state: {path: state.sqlite}\n")
    main(["--project-dir", str(tmp_path), "explain", "wide", "--costs"])
    out = capsys.readouterr().out
    inputs, decisions = out.split("  cost model inputs (newest first")[1].split("  last decisions (newest first)")
    assert "full" in inputs and "/row" in inputs and inputs.count(" s ") == 2, inputs  # 4 rows: ms or s a row
    latest, phases, first = decisions.strip().splitlines()[1:4]
    assert f"{t0 + timedelta(minutes=11):%H:%M:%S} UTC  batch 2  {result.strategy}  est. " in latest and " actual " in latest
    assert phases.strip().startswith("phases: probed ") and "committed " in phases, phases  # the batch split by phase
    assert f"{t0:%H:%M:%S} UTC  batch 1  full  est. ?  actual " in first and "first run" in first, decisions
