"""The session switches of a batch by key (``compiler.kinds.mv.scope.BatchScope``): its write joins
the inputs by shuffles of the broadcast keys' rows, with no runtime bloom filter of its own (on the
demo's MV that filter was a job scanning all of offers), and the target's settings come back after."""

from __future__ import annotations

from compiler.kinds.mv.scope import BLOOM_FILTER, BROADCAST, BatchScope
from compiler.spark_connect import launch_conf

# Spark injects a bloom filter of the filtered offers into a shuffle join with a large enough
# prices table (InjectRuntimeFilter); a catalog table without statistics counts as very large,
# as the demo's did: here the size threshold is 0 instead
QUERY = """
SELECT o.offer_id, p.price
FROM scope_offers AS o
JOIN scope_prices AS p ON p.offer_id = o.offer_id
WHERE o.shop_id IN (1, 2)
"""
LARGE = "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold"


def _plan(spark) -> str:
    return spark.sql(QUERY)._jdf.queryExecution().executedPlan().toString()


def test_the_write_of_a_batch_by_key_plans_no_runtime_bloom_filter_and_the_targets_settings_come_back(spark, tmp_path):
    spark.range(2_000).selectExpr("id AS offer_id", "id % 7 AS shop_id").write.parquet(str(tmp_path / "offers"))
    spark.range(2_000).selectExpr("id AS offer_id", "id * 1.5 AS price").write.parquet(str(tmp_path / "prices"))
    spark.read.parquet(str(tmp_path / "offers")).createOrReplaceTempView("scope_offers")
    spark.read.parquet(str(tmp_path / "prices")).createOrReplaceTempView("scope_prices")
    scope = BatchScope(spark, plan=None, derived=None)  # the switches read the session alone
    before = {key: spark.conf.get(key) for key in (BROADCAST, BLOOM_FILTER)}
    large = spark.conf.get(LARGE)
    try:
        spark.conf.set(LARGE, "0")
        spark.conf.set(BROADCAST, "-1")  # shuffle joins, as inside the switch below
        assert "bloom_filter_agg" in _plan(spark), "with the target's settings Spark filters prices by a bloom filter"
        spark.conf.set(BROADCAST, before[BROADCAST])
        with scope.broadcasts(on=False):
            assert spark.conf.get(BROADCAST) == "-1"
            plan = _plan(spark)
            assert "SortMergeJoin" in plan and "bloom_filter_agg" not in plan, plan
        # back as the target set them (the session's values now may be another batch's switch)
        assert spark.conf.get(BROADCAST) == launch_conf(spark, BROADCAST, "10MB")
        assert spark.conf.get(BLOOM_FILTER) == launch_conf(spark, BLOOM_FILTER, "true") == "true"
    finally:
        for key, value in {**before, LARGE: large}.items():
            spark.conf.set(key, value)
        spark.catalog.dropTempView("scope_offers")
        spark.catalog.dropTempView("scope_prices")
