"""Source rows that break their declared keys are named (issue 29, item 4): the source, its YAML line,
a sample of the bad values and what to do; the batch leaves nothing behind and commits nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from compiler import failures
from compiler.kinds.mv.refresh import run_mv

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from mv_world import World, seed  # noqa: E402


@pytest.mark.parametrize("table_format", ["delta", "parquet"])
def test_a_duplicate_and_a_null_primary_key_are_named_and_nothing_is_written(spark, tmp_path, table_format):
    """Delta's MERGE refuses the batch; parquet's batch is checked before its commit and its partition removed."""
    world = World(spark, tmp_path, table_format=table_format)
    seed(world)
    assert world.refresh().mode == "build"
    offers, model = f"{world.db}.offers", world.manifest.models["wide"]
    topic = model.name  # the MV topic (its batch)
    before = world.table(), world.store.get(topic).last
    # a second row for offer 1 and a row without an id, both newer than anything the MV read
    for key, title, of in (("id", "twin", 1), ("NULL", "no id", 3)):
        spark.sql(f"INSERT INTO {offers} SELECT {key}, shop_id, cat_id, '{title}', status, note, deleted, "
                  f"TIMESTAMP'2030-01-01', seq + 100 FROM {offers} WHERE id = {of}")

    with failures.running(failures.Running(world.manifest, model, spark)):
        result = run_mv(spark, world.manifest, model, world.store)

    assert result.status == "error"
    assert result.message.startswith(f"lineage/t.yml:2: [bad-source-keys] wide was not written: source {offers}: "
                                     "primary_key [id] is not unique or is NULL (values 1, NULL)"), result.message
    assert "fix or remove those rows in the source" in result.message and "Traceback" not in result.message
    assert (world.table(), world.store.get(topic).last) == before
    verdict = world.verdict()
    assert not verdict.ok
    assert f"source {offers} (lineage/t.yml:2): primary_key [id] holds 1 in 2 rows, NULL in 1 row" in verdict.format()
    assert "keys None" not in verdict.format()

    world.dirty.add("offers")  # the source fixed: its rows rewritten without the two
    world.refresh()
    world.check()
