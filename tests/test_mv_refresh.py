"""Oracle tests of MV refresh on real Spark tables: after every change batch the MV equals a
full recomputation of its SELECT (``compiler.verify``)."""

from __future__ import annotations

from decimal import Decimal

import sys
from pathlib import Path

import pytest

from compiler.phases import Crash, crash_at

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from tiers import FORMATS  # noqa: E402
from mv_world import World, seed  # noqa: E402


@pytest.fixture(params=["parquet", "delta"])
def table_format(request) -> str:
    return request.param


@pytest.fixture
def world(spark, tmp_path, table_format):
    w = World(spark, tmp_path, table_format=table_format)
    seed(w)
    outcome = w.refresh()
    assert outcome.mode == "build"
    w.check()
    return w


@pytest.fixture
def parquet_world(spark, tmp_path):
    """For tests of change detection, which does not depend on the table format."""
    w = World(spark, tmp_path)
    seed(w)
    assert w.refresh().mode == "build"
    return w


def test_first_run_builds_and_matches(world):
    assert {r.id for r in world.table()} == {1, 2, 3, 6}


def test_main_inserts_updates_deletes(world):
    world.put("offers", id=7, shop_id=200, cat_id=7, title="new", status="active", note="n")
    world.put("offers", id=1, title="renamed")
    world.delete("offers", 2)
    outcome = world.refresh()
    assert outcome.mode == "refresh" and outcome.affected == 3
    world.check()
    assert {r.id for r in world.table()} == {1, 3, 6, 7}


@pytest.mark.parametrize("table_format", FORMATS)
def test_inner_and_left_inputs_one_and_two_hops(world):
    world.put("shops", id=100, name="Alpha2")          # inner, one hop
    world.put("warehouses", id=20, name="W20b")         # inner, two hops
    world.put("regions", id=1, name="Nord")             # left dictionary, three hops
    world.put("prices", offer_id=3, kind="retail", price=Decimal("9.99"))  # left, direct key
    assert world.refresh().mode == "refresh"
    world.check()
    world.delete("warehouses", 20)                      # inner two hops: rows of shop 200 vanish
    world.delete("regions", 1)                          # left: region becomes NULL
    world.delete("prices", 1, "retail")
    assert world.refresh().mode == "refresh"
    world.check()
    assert {r.id for r in world.table()} == {1, 2}


@pytest.mark.parametrize("table_format", FORMATS)
def test_join_key_repointing_both_ways(world):
    world.put("offers", id=1, shop_id=200)              # main row moves to another shop
    world.put("shops", id=200, wh_id=10)                # a shop moves to another warehouse
    world.put("warehouses", id=10, region_id=2)          # a warehouse moves to another region
    assert world.refresh().mode == "refresh"
    world.check()
    world.put("offers", id=1, shop_id=100)              # and back
    world.put("shops", id=200, wh_id=20)
    world.put("warehouses", id=10, region_id=1)
    world.put("warehouses", id=30, name="W30", region_id=2)
    world.put("shops", id=100, wh_id=30)                # towards a warehouse that did not exist at the last refresh
    world.refresh()
    world.check()


@pytest.mark.parametrize("table_format", FORMATS)
def test_rows_leave_and_reenter_where(world):
    world.put("offers", id=1, status="hidden")          # leaves through WHERE on the main source
    world.put("shops", id=200, rating=1)                 # leaves through WHERE on a joined source
    world.put("shops", id=300, rating=3)                 # enters through WHERE on a joined source
    world.put("offers", id=4, status="active")          # enters through WHERE on the main source
    world.refresh()
    world.check()
    assert {r.id for r in world.table()} == {2, 5}  # offer 4 entered, but its shop 200 left
    world.put("offers", id=1, status="active")
    world.put("shops", id=200, rating=4)
    world.put("shops", id=100, deleted=True)            # a soft-deleted shop fails its ON condition
    world.refresh()
    world.check()


@pytest.mark.parametrize("table_format", FORMATS)
def test_dictionaries_by_key_and_by_literal_several_at_once(world):
    world.put("categories", id=7, name="Novels")        # update
    world.put("categories", id=9, name="Toys")          # insert (no offer uses it yet)
    world.delete("categories", 8)                       # delete
    world.put("regions", id=2, name="Sud")              # a second dictionary in the same batch
    world.put("settings", name="currency", value="USD")  # joined only by a literal: every row
    outcome = world.refresh()
    assert outcome.changed[f"{world.db}.categories"] == 3  # 7 updated, 9 inserted, 8 deleted
    world.check()
    world.delete("settings", "currency")
    world.put("settings", name="other", value="changed")  # a row the literal does not select
    world.refresh()
    world.check()
    assert {r.currency for r in world.table()} == {None}


def test_noop_batch_leaves_mv_byte_identical(world):
    relation = world.manifest.models["wide"].relation
    files = sorted(world.spark.sql(f"SELECT * FROM {relation}").inputFiles())
    before = world.table()
    world.put("offers", id=1, note="unused column")     # the MV does not read offers.note
    world.put("categories", id=7, note="unused")        # nor categories.note: the snapshot diff ignores it
    world.put("prices", offer_id=2, kind="promo", price=Decimal("1.00"))  # a price kind the MV does not read
    outcome = world.refresh()
    assert outcome.affected <= 1  # the changed offer's own key only (categories/prices select nothing)
    assert world.table() == before
    if outcome.affected == 0:
        assert sorted(world.spark.sql(f"SELECT * FROM {relation}").inputFiles()) == files


def test_batch_without_changes_writes_nothing(world):
    relation = world.manifest.models["wide"].relation
    files = sorted(world.spark.sql(f"SELECT * FROM {relation}").inputFiles())
    world.put("categories", id=7, note="unused")
    world.put("prices", offer_id=2, kind="promo", price=Decimal("1.00"))
    outcome = world.refresh()
    assert outcome.affected == 0
    assert sorted(world.spark.sql(f"SELECT * FROM {relation}").inputFiles()) == files


@pytest.mark.parametrize("table_format", FORMATS)
def test_crash_after_write_before_commit_is_redone(world):
    world.delete("shops", 200)                          # found only through the hidden key columns
    world.put("offers", id=2, title="changed")
    with pytest.raises(Crash):
        world.refresh(phase=crash_at("mv:merged" if world.table_format == "delta" else "mv:delta-written"))
    crashed = world.store.get("wide")
    assert crashed.in_flight
    world.put("offers", id=3, title="after the crash")
    outcome = world.refresh()
    assert outcome.batch == crashed.next[0]
    world.check()
    assert "after the crash" not in {r.title for r in world.table()}  # beyond the planned range: next batch
    world.refresh()
    world.check()


def test_full_refresh_rebuilds(world):
    world.put("offers", id=1, title="x")
    outcome = world.refresh(full_refresh=True)
    assert outcome.mode == "build" and outcome.batch == 2
    world.check()
    world.put("offers", id=2, title="y")
    assert world.refresh().mode == "refresh"
    world.check()


def test_compaction_swaps_slots_and_keeps_rows(spark, tmp_path, table_format):
    from mv_world import WIDE

    w = World(spark, tmp_path, {"wide": WIDE.replace("compact_threshold=100", "compact_threshold=0")}, table_format)
    seed(w)
    w.refresh()
    w.put("offers", id=1, title="x")
    w.delete("warehouses", 20)
    outcome = w.refresh()
    assert outcome.compacted
    w.check()
    w.put("offers", id=2, title="y")
    assert w.refresh().compacted
    w.check()


NESTED = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=0, compact_below_rows=0) }}}}
SELECT
  o.id,
  named_struct('shop-name', s.name, 'rating', s.rating) AS `shop-info`,
  array(o.title, o.status) AS tags,
  map(o.title, p.price) AS `price-by-title`,
  p.price
FROM {{{{ source('{db}', 'offers') }}}} AS o
JOIN {{{{ source('{db}', 'shops') }}}} AS s ON s.id = o.shop_id AND s.deleted = FALSE
LEFT JOIN {{{{ source('{db}', 'prices') }}}} AS p ON p.offer_id = o.id AND p.kind = 'retail'
WHERE o.deleted = FALSE AND o.status = 'active'
"""


def test_an_mv_of_nested_and_quoted_columns_builds_refreshes_and_compacts(spark, tmp_path, table_format):
    """The tables a build makes beside its rows (parquet: each slot's delta; both: the published
    keys) take their columns from the built table's definitions: structs with field names to quote,
    arrays, maps, decimals and quoted names survive a build, batches by key and a compaction."""
    w = World(spark, tmp_path, {"nested": NESTED}, table_format)
    seed(w)
    assert w.refresh("nested").mode == "build"
    w.check("nested")
    w.put("shops", id=100, name="Alpha renamed")
    w.put("prices", offer_id=1, kind="retail", price=Decimal("7.25"))
    outcome = w.refresh("nested")
    assert outcome.mode == "refresh" and outcome.affected > 0 and outcome.compacted
    w.check("nested")
    w.put("offers", id=2, title="again")
    assert w.refresh("nested", full_refresh=True).mode == "build"  # a build into the other slot, its delta made anew
    w.put("offers", id=3, title="after the rebuild")
    assert w.refresh("nested").mode == "refresh"
    rows = {r.id: r for r in w.table("nested")}
    assert rows[3].tags[0] == "after the rebuild" and rows[1]["shop-info"]["shop-name"] == "Alpha renamed"
    w.check("nested")


def test_a_parquet_tables_rows_are_summed_from_its_footers_without_a_job(spark):
    """What a parquet MV's build and compaction count their base with (``table_format.parquet_rows``);
    Spark counts a table of too many files, or of files that are not parquet."""
    import uuid

    from bench.jobs import count_jobs
    from compiler.table_format import FOOTERS_READ_MAX, parquet_rows

    name = f"default.footers_{uuid.uuid4().hex[:8]}"
    spark.range(0, 1000, numPartitions=3).write.format("parquet").saveAsTable(name)
    with count_jobs(spark) as counted:
        assert parquet_rows(spark, name) == 1000
    assert counted.jobs == 0
    spark.range(0, FOOTERS_READ_MAX + 1, numPartitions=FOOTERS_READ_MAX + 1).write.format("parquet").saveAsTable(f"{name}_many")
    spark.range(0, 10, numPartitions=2).write.format("json").saveAsTable(f"{name}_json")
    assert parquet_rows(spark, f"{name}_many") is None and parquet_rows(spark, f"{name}_json") is None
    for table in (name, f"{name}_many", f"{name}_json"):
        spark.sql(f"DROP TABLE {table}")


@pytest.mark.parametrize("table_format", ["parquet", "delta"])
def test_a_small_mv_is_compacted_after_every_batch_and_its_cost_is_counted(spark, tmp_path, table_format):
    """Issue 32 item 1 (P5): below ``compact_below_rows`` (the default, 100,000) every batch by key is
    followed by a compaction, so readers read a plain table: the parquet view reads the new base
    alone, the Delta table is one file, built without the deletion-vectors feature. The compaction is logged as a step
    of its own (the batch's range, its seconds), the cost model adds it to a batch by key."""
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.kinds.mv.refresh import strategy_lines
    from compiler.kinds.mv.costs import COMPACTION
    from compiler.project import StateSettings
    from mv_world import WIDE

    w = World(spark, tmp_path, {"wide": WIDE.replace(", compact_below_rows=0", "")}, table_format)
    seed(w)
    w.refresh()
    for n in range(2):
        w.put("offers", id=1, title=f"x{n}")
        w.delete("warehouses", 20) if n == 0 else w.put("shops", id=200, name="s200b")
        outcome = w.refresh()
        assert outcome.mode == "refresh" and outcome.compacted, outcome
        w.check()
        compaction, batch = w.store.steps("wide", 2)
        assert compaction.strategy == COMPACTION and batch.strategy == "incremental", (compaction, batch)
        assert (compaction.last, compaction.next) == (batch.last, batch.next) and compaction.seconds > 0
        assert compaction.detail["reason"].startswith("a small MV"), compaction.detail
    if table_format == "parquet":
        view = spark.sql(f"SHOW CREATE TABLE {w.db}.wide").first()[0]
        assert "__mvflow_base_" in view and "__mvflow_delta_" not in view, view
    else:
        stored = mv_plan(w.manifest.models["wide"], w.manifest).table  # beside the view: it keeps hidden keys
        detail = spark.sql(f"DESCRIBE DETAIL {stored}").first()
        assert detail["numFiles"] == 1 and "deletionVectors" not in detail["tableFeatures"], detail  # a reader's extra job
    lines = strategy_lines(StateSettings(path=tmp_path / "state.sqlite"), mv_plan(w.manifest.models["wide"], w.manifest),
                           w.manifest.models["wide"].kind, costs=True)
    assert any("+ its compaction" in line for line in lines), lines
    assert any(line.split()[:1] == [COMPACTION] for line in lines), lines


STACKED = """
{{{{ config(materialized='mv', schema='{db}', fanout_threshold=100, compact_threshold=100, compact_below_rows=0) }}}}
SELECT o.id, o.status, w.shop, w.region
FROM {{{{ source('{db}', 'offers') }}}} AS o
LEFT JOIN {{{{ ref('wide') }}}} AS w ON w.id = o.id
"""


@pytest.mark.parametrize("table_format", FORMATS)
def test_stacked_mv_reads_the_keys_its_upstream_refreshed(spark, tmp_path, table_format):
    from mv_world import WIDE

    w = World(spark, tmp_path, {"wide": WIDE, "stacked": STACKED}, table_format)
    seed(w)
    w.refresh("wide")
    assert w.refresh("stacked").mode == "build"
    w.check("stacked")
    w.put("shops", id=100, name="Renamed")              # reaches `stacked` only through `wide`
    w.put("regions", id=2, name="Sud")
    w.refresh("wide")
    outcome = w.refresh("stacked")
    assert outcome.mode == "refresh" and outcome.changed["wide"] > 0
    w.check("stacked")
    assert {r.shop for r in w.table("stacked") if r.id in (1, 2)} == {"Renamed"}


def test_stacked_mv_rebuilds_after_an_upstream_build_no_mv_read(spark, tmp_path):
    """A build publishes its keys only when an MV reads it (compile time): a reader removed from
    the project and put back finds the unpublished build in its upstream's state and rebuilds."""
    from mv_world import WIDE

    from compiler.compile import compile_project
    from compiler.project import load_project

    w = World(spark, tmp_path, {"wide": WIDE, "stacked": STACKED})
    seed(w)
    w.refresh("wide")
    assert w.refresh("stacked").mode == "build"
    stacked = tmp_path / "models" / "stacked.sql"
    text = stacked.read_text()
    stacked.unlink()
    w.manifest = compile_project(load_project(tmp_path))   # nothing reads `wide` now
    w.put("shops", id=100, name="Renamed")
    assert w.refresh("wide", full_refresh=True).mode == "build"
    stacked.write_text(text)
    w.manifest = compile_project(load_project(tmp_path))
    outcome = w.refresh("stacked")
    assert outcome.mode == "build" and "without publishing" in outcome.reason
    w.check("stacked")
    w.put("shops", id=100, name="Again")                # from here on `wide` publishes for `stacked`
    assert w.refresh("wide").mode == "refresh"
    assert w.refresh("stacked").mode == "refresh"
    w.check("stacked")


@pytest.mark.parametrize("table_format", FORMATS)
def test_a_stacked_mv_goes_on_by_key_after_a_build_its_upstream_chose_and_rebuilds_after_one_asked(
        spark, tmp_path, table_format, monkeypatch):
    """A build the cost model chose once the affected keys were counted publishes those keys (the
    other keys' rows are unchanged): the MV reading it refreshes by key, also over the batches before
    it. A build asked for (every key may have changed) publishes none: the reader rebuilds."""
    from mv_world import WIDE

    from compiler.kinds.mv import strategy

    w = World(spark, tmp_path, {"wide": WIDE, "stacked": STACKED}, table_format)
    seed(w)
    w.refresh("wide")
    assert w.refresh("stacked").mode == "build"
    w.put("shops", id=100, name="Renamed")
    assert w.refresh("wide").mode == "refresh"          # `stacked` stays behind this batch
    w.put("regions", id=2, name="Sud")
    w.put("offers", id=5, title="moved", shop_id=300)
    chosen = lambda kind, affected, rows, history, **_: strategy.Decision(strategy.FULL, "a full build is cheaper", affected, rows)  # noqa: E731
    with monkeypatch.context() as patched:
        patched.setattr(strategy, "after_keys", chosen)
        built = w.refresh("wide")
    assert built.mode == "build" and built.reason == "a full build is cheaper"
    published = spark.sql(f"SELECT mvflow_batch, count(*) AS n FROM {w.db}.wide__mvflow_changes GROUP BY 1").collect()
    assert {r.mvflow_batch: r.n for r in published} == {2: 2, 3: built.decision.keys}  # batch 2's kept too
    outcome = w.refresh("stacked")
    assert outcome.mode == "refresh" and outcome.changed["wide"] > 0, outcome
    w.check("stacked")
    w.put("shops", id=100, name="Again")
    assert w.refresh("wide", full_refresh=True).mode == "build"
    outcome = w.refresh("stacked")
    assert outcome.mode == "build" and "without publishing its keys" in outcome.reason, outcome
    w.check("stacked")
    assert {r.shop for r in w.table("stacked") if r.id in (1, 2)} == {"Again"}


def test_full_build_reads_a_feed_that_was_empty_from_the_start(parquet_world):
    world = parquet_world
    world.rows["prices_changes"].clear()                 # the source and its feed are re-created...
    world.dirty.add("prices_changes")
    world.clock = 0                                      # ...and their positions start again
    assert world.refresh(full_refresh=True).mode == "build"
    world.put("prices", offer_id=1, kind="retail", price=Decimal("7.77"))
    assert world.refresh().changed[f"{world.db}.prices"] == 1
    world.check()


def test_up_to_date_opens_no_batch_and_changes_are_still_seen(parquet_world):
    world = parquet_world
    offset = world.store.get("wide")
    outcome = world.refresh()
    assert (outcome.mode, outcome.reason, outcome.batch) == ("noop", "up to date", offset.last[0])
    assert world.store.get("wide").last == offset.last           # no batch was opened
    world.put("categories", id=7, note="unused")                 # a column the MV does not read
    assert world.refresh().reason == "up to date"
    world.put("categories", id=7, name="Renamed")                # a used column of a dictionary
    outcome = world.refresh()
    assert outcome.mode == "refresh" and {k.split(".")[-1]: v for k, v in outcome.changed.items()}["categories"] == 1
    world.check()
    assert world.refresh().reason == "up to date"
    world.put("warehouses", id=20, name="Moved")                 # a change feed row past last
    assert world.refresh().mode == "refresh"
    world.check()
    world.put("shops", id=100, name="Renamed")                   # a position past last
    assert world.refresh().mode == "refresh"
    world.check()
    assert world.refresh().reason == "up to date"


def test_the_changed_keys_are_the_rows_the_probe_read_past_last(parquet_world):
    # A position input is read once per batch: its probe keeps the rows past the last position, and
    # the changed keys come from those. An offer updated again between the probe and the changed
    # keys (its new position past the batch's next) is still refreshed by this batch, from the
    # table as it is then; read from the table a second time it would be left to the next batch.
    world = parquet_world
    world.put("offers", id=1, title="seen by the probe")
    world.put("warehouses", id=20, name="Moved")               # a feed input: its rows past last kept too

    def land(name: str) -> None:
        if name == "mv:probed":
            world.put("offers", id=1, title="after the probe")
            world.flush()

    outcome = world.refresh(phase=land)
    assert outcome.mode == "refresh" and outcome.changed[f"{world.db}.offers"] == 1, outcome
    world.check()                                              # offer 1 as the table holds it now
    assert "after the probe" in {r.title for r in world.table()}
    assert {k.split(".")[-1]: v for k, v in world.refresh().changed.items() if v} == {"offers": 1}
    world.check()
    assert world.refresh().reason == "up to date"


def test_unchanged_dictionary_keeps_its_snapshot_and_later_edits_are_found(parquet_world):
    world = parquet_world
    from compiler.kinds.mv.analyze import mv_plan

    plan = mv_plan(world.manifest.models["wide"], world.manifest)

    def snapshot_batches(name: str) -> list[int]:
        table = plan.table_name(f"snap_{world.db}_{name}")
        return sorted(r[0] for r in world.spark.sql(f"SELECT DISTINCT mvflow_batch FROM {table}").collect())

    regions = world.store.get(plan.topic(f"{world.db}.regions"))
    world.put("categories", id=7, name="Novels")                 # categories move, regions do not
    outcome = world.refresh()
    assert outcome.mode == "refresh"
    assert world.store.get(plan.topic(f"{world.db}.regions")).last == regions.last  # kept, not retaken
    assert snapshot_batches("regions") == [regions.last[0]]
    assert snapshot_batches("categories") == [outcome.batch]    # the one diffed against was dropped
    world.check()
    world.put("regions", id=2, name="Sud")                       # a later edit is diffed against the kept one
    outcome = world.refresh()
    assert {k.split(".")[-1]: v for k, v in outcome.changed.items()}["regions"] == 1
    assert snapshot_batches("regions") == [outcome.batch]
    world.check()


def test_switching_the_table_format_rebuilds_in_the_other_format_and_back(spark, tmp_path):
    from compiler.compile import compile_project
    from compiler.kinds.mv.plan import SLOTS
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.project import load_project
    from compiler.table_format import is_delta_table
    from mv_world import WIDE, with_format

    w = World(spark, tmp_path)
    seed(w)
    w.refresh()
    relation = w.manifest.models["wide"].relation
    for table_format in ("delta", "parquet"):
        (tmp_path / "models/wide.sql").write_text(with_format(WIDE.format(db=w.db), table_format).lstrip("\n"))
        w.manifest = compile_project(load_project(tmp_path))
        w.put("offers", id=1, title=f"in {table_format}")
        outcome = w.refresh()
        assert outcome.mode == "build"  # the other format's storage is not there
        w.check()
        plan = mv_plan(w.manifest.models["wide"], w.manifest)
        assert plan.table == plan.table_name("rows") != relation  # its joins' keys: beside a view (Delta)
        assert is_delta_table(spark, plan.table) == (table_format == "delta")  # the parquet format drops it
        assert spark.table(relation).columns == list(plan.columns)
        slots = [plan.table_name(f"base_{s}") for s in SLOTS]
        assert any(spark.catalog.tableExists(t) for t in slots) == (table_format == "parquet")
        w.put("offers", id=2, title=f"refreshed in {table_format}")
        assert w.refresh().mode == "refresh"
        w.check()


def test_delta_batch_is_one_commit_and_a_redo_forgets_what_the_crashed_merge_wrote(spark, tmp_path):
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.kinds.mv.storage import MvState
    from compiler.table_format import delta_version

    w = World(spark, tmp_path, table_format="delta")
    seed(w)
    w.refresh()
    relation = mv_plan(w.manifest.models["wide"], w.manifest).table
    built = delta_version(spark, relation)
    # compact_below_rows=0: a large MV as far as compaction goes; its MERGEs write deletion vectors
    assert "deletionVectors" in spark.sql(f"DESCRIBE DETAIL {relation}").first()["tableFeatures"]
    w.put("offers", id=1, title="one commit")
    w.put("categories", id=8, name="Puzzles")
    assert w.refresh().mode == "refresh"
    assert delta_version(spark, relation) == built + 1 == MvState.parse(w.store.get("wide").state).version
    w.put("categories", id=7, name="Novels")
    with pytest.raises(Crash):
        w.refresh(phase=crash_at("mv:merged"))
    assert "Novels" in {r.category for r in w.table()}  # the crashed try merged its rows
    w.put("categories", id=7, name="Books")              # undone before the redo: its diff finds nothing
    outcome = w.refresh()
    assert outcome.redo
    w.check()
    assert "Novels" not in {r.category for r in w.table()}
