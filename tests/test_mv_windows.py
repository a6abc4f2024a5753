"""Oracle tests of window functions in an mv: every window partitions by a column of the main table,
so a change maps to the partitions its rows were in and are in now, and every row of those
partitions is recomputed (by key, or in chunks that each hold whole partitions). After every change
batch the MV equals a full recomputation of its SELECT (``compiler.verify``), also after a crash
and new changes before the redo."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path

import pytest

from compiler.phases import Crash, crash_at

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from tiers import FORMATS  # noqa: E402
from mv_world import World, ranked_model as ranked, seed  # noqa: E402


def test_windows_recompute_the_partitions_rows_enter_and_leave(spark, tmp_path):
    """Partitions gain, lose and swap rows; a joined row reorders a partition; a partition vanishes.
    The chunked twin writes its batches in chunks of whole partitions (2 keys a chunk)."""
    models = {"ranked": ranked(), "ranked_chunked": ranked("chunked")}
    world = World(spark, tmp_path, models)
    seed(world)
    for name in models:
        assert world.refresh(name).mode == "build"
        world.check(name)
    batches = [
        lambda: world.put("offers", id=7, shop_id=100, cat_id=7, title="new", status="active", note="n"),  # joins shop 100
        lambda: world.put("offers", id=1, shop_id=200),                                      # leaves 100 for 200
        lambda: world.put("prices", offer_id=3, kind="retail", price=Decimal("99.00")),       # reorders shop 200
        lambda: world.put("categories", id=8, name="Games2"),                                # a dictionary row
        lambda: world.delete("offers", 5),                                                   # shop 300's partition vanishes
        lambda: world.put("offers", id=4, status="active"),                                  # enters through WHERE
        lambda: world.delete("shops", 100),                                                  # an inner join partner goes
    ]
    for change in batches:
        change()
        for name in models:
            outcome = world.refresh(name)
            assert outcome.mode == "refresh", (name, outcome)
            world.check(name)
    rows = {(r.id, r.shop, r.rank_in_shop, r.shop_offers) for r in world.table("ranked")}
    assert rows == {(3, "Beta", 1, 4), (1, "Beta", 2, 4), (4, "Beta", 3, 4), (6, "Beta", 4, 4)}, rows
    assert {tuple(r) for r in world.table("ranked")} == {tuple(r) for r in world.table("ranked_chunked")}


def test_windows_explain_their_partitions(spark, tmp_path):
    from compiler.kinds.mv.derive import explain
    from compiler.kinds.mv.analyze import mv_plan

    world = World(spark, tmp_path, {"ranked": ranked()})
    plan = mv_plan(world.manifest.models["ranked"], world.manifest)
    assert plan.hidden[-1] == "_mvflow_w_shop_id"  # the partition column, not selected, is kept hidden
    text = explain(plan)
    assert "windows partitioned by o.shop_id (kept in _mvflow_w_shop_id)" in text and "-- partitions:p0" in text


@pytest.mark.parametrize("table_format", FORMATS)
def test_windows_crash_new_changes_and_redo(spark, tmp_path, table_format):
    world = World(spark, tmp_path, {"ranked": ranked()}, table_format=table_format)
    seed(world)
    assert world.refresh("ranked").mode == "build"
    world.put("offers", id=2, shop_id=200)                                  # moves: both partitions
    world.put("prices", offer_id=6, kind="retail", price=Decimal("50.00"))
    with pytest.raises(Crash):
        world.refresh("ranked", phase=crash_at("mv:merged" if table_format == "delta" else "mv:delta-written"))
    world.put("offers", id=2, shop_id=300)                                  # lands before the redo: moves again
    world.delete("offers", 6)
    redo = world.refresh("ranked")
    assert redo.redo and not redo.covered
    world.refresh("ranked")
    world.check("ranked")
    assert {(r.id, r.shop_offers) for r in world.table("ranked")} == {(1, 1), (3, 1), (2, 2), (5, 2)}
