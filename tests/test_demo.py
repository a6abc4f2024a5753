"""The demo data generator on real local Spark tables (scale 0.02: 200 offers, 400 orders).

Tests run in file order: the init tests share one init, the change tests one init + batch.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compiler import demo
from compiler.project import load_project
from compiler.sources import load_sources

ROOT = Path(__file__).resolve().parent.parent
SCALE, SEED = 0.02, 7
FRACTION, CHANGE_SEED = 0.2, 3
TABLES = (*demo.SOURCES, *demo.FEEDS.values())
# child table, column → parent table, key
FOREIGN_KEYS = [
    ("offers", "shop_id", "shops", "shop_id"),
    ("offers", "category_id", "categories", "category_id"),
    ("shops", "warehouse_id", "warehouses", "warehouse_id"),
    ("warehouses", "region_id", "regions", "region_id"),
    ("prices", "offer_id", "offers", "offer_id"),
    ("orders", "offer_id", "offers", "offer_id"),
]
POSITIONS = {"offers": ("updated_at", "change_id"), "shops": ("updated_at", "change_id"),
             "orders": ("ts", "order_id")}


def table(spark, name: str):
    return spark.table(f"{demo.DATABASE}.{name}")


def snapshot(spark, tables=(*TABLES, demo.STATE_TABLE)) -> dict:
    """An in-memory copy of every table, kept after the tables are swapped."""
    return {name: table(spark, name).localCheckpoint() for name in tables}


def differences(spark, snap: dict) -> dict[str, int]:
    """Rows that differ (both ways, with duplicates) between the snapshot and the tables now
    (one Spark job for all tables)."""
    from functools import reduce

    from pyspark.sql import functions as F

    counts = []
    for name, before in snap.items():
        now = table(spark, name)
        diff = now.exceptAll(before).unionByName(before.exceptAll(now))
        counts.append(diff.groupBy().count().select(F.lit(name).alias("name"), "count"))
    return {row["name"]: row["count"] for row in reduce(lambda a, b: a.unionByName(b), counts).collect()}


def max_position(spark, name: str) -> tuple:
    columns = POSITIONS[name]
    return tuple(table(spark, name).orderBy(*[c for c in columns], ascending=False).first()[c] for c in columns)


def resolved_share(spark, child: str, column: str, parent: str, key: str) -> float:
    rows = table(spark, child).where(f"{column} IS NOT NULL")
    found = rows.join(table(spark, parent), rows[column] == table(spark, parent)[key], "left_semi").count()
    return found / rows.count()


@pytest.fixture(scope="module")
def initialized(spark):
    return demo.init(spark, scale=SCALE, seed=SEED)


def test_init_creates_the_declared_tables(spark, initialized):
    sources = load_sources(load_project(ROOT))
    for source in sources.values():
        schema = {f.name: f.dataType.simpleString() for f in table(spark, source.name).schema.fields}
        assert schema == {c.name: c.type for c in source.columns}, source.name
        if source.changes:
            feed = spark.table(source.changes.table)
            assert feed.columns == [*source.primary_key, *source.changes.position]
    expected = demo.sizes(SCALE)
    assert {t: initialized[t] for t in expected} == expected
    assert 1.2 * expected["offers"] < initialized["prices"] < 1.8 * expected["offers"]
    assert initialized["warehouses_changes"] == initialized["prices_changes"] == 0


def test_init_keys_are_unique_and_foreign_keys_resolve(spark, initialized):
    for name in demo.SOURCES:
        rows = table(spark, name)
        assert rows.count() == rows.select(*demo.KEYS[name]).distinct().count(), name
    for child, column, parent, key in FOREIGN_KEYS:
        assert resolved_share(spark, child, column, parent, key) == 1.0, (child, column)


def test_init_positions_lie_before_the_demo_clock(spark, initialized):
    for name in ("offers", "shops"):
        rows = table(spark, name)
        assert rows.select("change_id").distinct().count() == rows.count()
        # Ordering by time and by change id agree.
        assert [r.change_id for r in rows.orderBy("updated_at").collect()] == sorted(r.change_id for r in rows.collect())
    newest = table(spark, "orders").agg({"ts": "max"}).first()[0]
    assert newest.timestamp() * 1_000_000 < demo.BASE_US
    assert table(spark, "offers").where("is_deleted").count() < 0.1 * initialized["offers"]


def test_init_is_deterministic_for_a_seed(spark, initialized):
    before = snapshot(spark)
    assert demo.init(spark, scale=SCALE, seed=SEED) == initialized
    assert set(differences(spark, before).values()) == {0}
    demo.init(spark, scale=SCALE, seed=SEED + 1)
    changed = differences(spark, before)
    assert changed["offers"] > 0 and changed["orders"] > 0  # (the change tests start with their own init)


@pytest.fixture(scope="module")
def changed(spark):
    """One batch on a fresh init: (snapshot before, positions before, summary)."""
    demo.init(spark, scale=SCALE, seed=SEED)
    before = snapshot(spark)
    positions = {name: max_position(spark, name) for name in POSITIONS}
    summary = demo.change(spark, fraction=FRACTION, seed=CHANGE_SEED)
    return before, positions, summary


def test_change_summary_counts_every_table(spark, changed):
    _, _, summary = changed
    assert list(summary) == list(demo.SOURCES)
    for name, text in summary.items():
        assert re.fullmatch(r"\+\d+" if name == "orders" else r"\+\d+ ~\d+ -\d+", text), (name, text)
    assert summary["orders"] == f"+{round(FRACTION * demo.sizes(SCALE)['orders'])}"


def test_change_gives_every_changed_row_a_newer_position(spark, changed):
    before, positions, _ = changed
    for name in ("offers", "shops"):
        old_time, old_id = positions[name]
        new_rows = table(spark, name).exceptAll(before[name]).collect()
        assert new_rows, name
        assert all(r.updated_at > old_time and r.change_id > old_id for r in new_rows), name
        assert max_position(spark, name) > positions[name]
    old_ts, old_order = positions["orders"]
    appended = table(spark, "orders").exceptAll(before["orders"]).collect()
    assert len(appended) == round(FRACTION * demo.sizes(SCALE)["orders"])
    assert before["orders"].exceptAll(table(spark, "orders")).count() == 0
    assert all(r.ts > old_ts and r.order_id > old_order for r in appended)


def test_change_touches_about_the_fraction(spark, changed):
    before, _, _ = changed
    for name in ("offers", "shops", "prices"):
        old = before[name]
        keys = list(demo.KEYS[name])
        still_there = table(spark, name).join(old.select(*keys), keys, "left_semi")
        touched = still_there.exceptAll(old).count() + old.join(table(spark, name), keys, "left_anti").count()
        rows = old.count()
        assert 0.5 * FRACTION * rows <= touched <= 2 * FRACTION * rows + 3, (name, touched, rows)


def test_change_edits_join_keys_and_deletes(spark, changed):
    before, _, _ = changed

    def moved(name: str, column: str) -> int:
        key = demo.KEYS[name][0]
        now = table(spark, name).select(key, column)
        return now.join(before[name].select(key, column), key).where(now[column] != before[name][column]).count()

    assert moved("offers", "shop_id") > 0 and moved("offers", "category_id") > 0
    assert moved("offers", "is_deleted") > 0


def test_change_feeds_hold_every_changed_and_deleted_key(spark, changed):
    before, _, _ = changed
    for name, feed in demo.FEEDS.items():
        keys = list(demo.KEYS[name])
        now, old, log = table(spark, name), before[name], table(spark, feed)
        deleted = old.join(now, keys, "left_anti").select(*keys)
        assert name != "prices" or deleted.count() > 0
        edited = now.exceptAll(old).select(*keys)
        assert edited.count() > 0, name
        missing = deleted.unionByName(edited).join(log, keys, "left_anti")
        assert missing.count() == 0, name
        assert log.select("change_id").distinct().count() == log.count()
        oldest = log.agg({"changed_at": "min"}).first()[0]
        assert oldest.timestamp() * 1_000_000 >= demo.BASE_US


def test_change_keeps_keys_unique_and_foreign_keys_mostly_resolve(spark, changed):
    for name in demo.SOURCES:
        rows = table(spark, name)
        assert rows.count() == rows.select(*demo.KEYS[name]).distinct().count(), name
    for child, column, parent, key in FOREIGN_KEYS:
        assert resolved_share(spark, child, column, parent, key) >= 0.9, (child, column)
    # Offers referencing offers that are new in the batch resolve too.
    assert resolved_share(spark, "orders", "offer_id", "offers", "offer_id") == 1.0


def test_change_is_deterministic_for_state_and_seed(spark, changed):
    after = snapshot(spark)
    demo.init(spark, scale=SCALE, seed=SEED)
    demo.change(spark, fraction=FRACTION, seed=CHANGE_SEED)
    assert set(differences(spark, after).values()) == {0}


def test_delta_tables_hold_the_same_rows_and_record_their_change_data_feed(spark, changed):
    """On a delta target the sources are Delta tables with the Change Data Feed on, a batch
    changes each one in one commit (a MERGE, or an append), and the rows are the parquet ones."""
    from compiler.table_format import delta_version, table_details

    on_parquet = snapshot(spark)
    demo.init(spark, scale=SCALE, seed=SEED, table_format="delta")
    before = {name: delta_version(spark, f"{demo.DATABASE}.{name}") for name in demo.SOURCES}
    summary = demo.change(spark, fraction=FRACTION, seed=CHANGE_SEED)
    assert set(differences(spark, on_parquet).values()) == {0}
    for name in demo.SOURCES:
        table_format, properties = table_details(spark, f"{demo.DATABASE}.{name}")
        assert (table_format, properties.get("delta.enableChangeDataFeed")) == ("delta", "true"), name
        moved = any(int(n) for n in re.findall(r"\d+", summary[name]))
        assert delta_version(spark, f"{demo.DATABASE}.{name}") == before[name] + int(moved), name
    feed = spark.sql(f"SELECT _change_type AS kind, count(*) AS n FROM table_changes('{demo.DATABASE}.prices', "
                     f"{before['prices'] + 1}) GROUP BY _change_type").collect()
    kinds = {row.kind: row.n for row in feed}
    counts = dict(re.findall(r"([+~-])(\d+)", summary["prices"]))
    assert kinds.get("delete", 0) == int(counts["-"]) and kinds.get("update_postimage", 0) == int(counts["~"])


def test_next_batch_moves_positions_further(spark, changed):
    positions = {name: max_position(spark, name) for name in POSITIONS}
    feeds = {feed: table(spark, feed).localCheckpoint() for feed in demo.FEEDS.values()}
    demo.change(spark, fraction=0.05, seed=CHANGE_SEED + 1)
    for name, position in positions.items():
        assert max_position(spark, name) > position, name
    for feed, old in feeds.items():
        newest = old.agg({"change_id": "max"}).first()[0]
        assert old.exceptAll(table(spark, feed)).count() == 0, feed  # appended, never rewritten
        assert table(spark, feed).where(f"change_id <= {newest}").count() == old.count(), feed
        assert table(spark, feed).where(f"change_id > {newest}").count() > 0, feed


def test_the_state_keeps_the_row_counts_a_batch_is_sized_from(spark, changed):
    """A batch sizes its changes from the counts the state keeps (no count job per table); they
    equal the tables' after every batch, also after a demo state that kept none (counted then)."""
    def kept() -> dict[str, int]:
        state = {row["name"]: row["value"] for row in table(spark, demo.STATE_TABLE).collect()}
        return {name: state.get(f"rows.{name}") for name in demo.SOURCES}

    assert kept() == {name: table(spark, name).count() for name in demo.SOURCES}
    older = table(spark, demo.STATE_TABLE).where("name NOT LIKE 'rows.%'").localCheckpoint()
    demo._swap(spark, demo.STATE_TABLE, older)
    assert set(kept().values()) == {None}
    demo.change(spark, fraction=0.05, seed=CHANGE_SEED + 2)
    assert kept() == {name: table(spark, name).count() for name in demo.SOURCES}


def test_cli_demo_commands(spark, capsys):
    from compiler.cli import main

    conf = load_project(ROOT).target().spark.conf
    saved = {key: spark.conf.get(key, None) for key in conf}
    try:
        spark.sql(f"DROP TABLE IF EXISTS {demo.DATABASE}.{demo.STATE_TABLE}")
        with pytest.raises(SystemExit) as exit_info:
            main(["--project-dir", str(ROOT), "demo", "change"])
        assert exit_info.value.code == 2
        assert "mvflow demo init" in capsys.readouterr().err
        main(["--project-dir", str(ROOT), "demo", "init", "--scale", "0.01"])
        assert "offers (100 rows)" in capsys.readouterr().out
        assert table(spark, "offers").count() == 100
        main(["--project-dir", str(ROOT), "demo", "change", "--batches", "2", "--every", "0"])  # a stream of two
        assert capsys.readouterr().out.count("changed regions: ") == 2
        assert demo._read_state(spark)["batch"] == 2
    finally:
        for key, value in saved.items():
            if value is not None and spark.conf.isModifiable(key):
                spark.conf.set(key, value)
