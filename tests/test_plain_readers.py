"""Every view mvflow creates is readable by a Spark without Delta Lake (issue 29, item 7): Spark keeps
in a view the session's settings, the session catalog (Delta's, in mvflow's sessions) among them, and
a reader without Delta's jars failed on every view — a parquet model's too ("Cannot find catalog
plugin class for catalog 'spark_catalog': …DeltaCatalog", checked by hand with a plain pyspark on a
copy of the metastore). Each view mvflow makes must not carry that setting."""

from __future__ import annotations

import pytest

from test_run_simple import Env

CAPTURED_CATALOG = "view.sqlConfig.spark.sql.catalog.spark_catalog"


def view_settings(spark, relation: str) -> set[str] | None:
    """The names of the settings the metastore keeps with ``relation``; None for a table."""
    database, name = relation.split(".")
    table = spark._jsparkSession.sharedState().externalCatalog().getTable(database, name)
    if table.tableType().name() != "VIEW":
        return None
    return {key for key in table.properties().keySet().toString().strip("Set()").split(", ") if key.startswith("view.sqlConfig.")}


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_no_view_mvflow_makes_pins_the_delta_catalog(spark, make_project, fmt):
    env = Env(spark, make_project, {
        "models/mart/item_list.sql": """
            {{ config(materialized='mv') }}
            select i.id, i.shop from {{ source('SRC', 'items') }} as i
        """,
        "models/mart/shop_counts.sql": """
            {{ config(materialized='mv') }}
            select i.shop, count(*) as items from {{ source('SRC', 'items') }} as i group by i.shop
        """,
    }, fmt=fmt)
    try:
        report, lines = env.run()
        assert report.ok, lines
        manifest = env.manifest()
        views = {}
        for model in manifest.models.values():
            settings = view_settings(spark, model.relation)
            if settings is not None:
                views[model.name] = settings
        # stg_items and top_shop are views; a parquet table and parquet MVs are views over their slots;
        # a GROUP BY MV is a view over its rows in either format
        expected = {"stg_items", "top_shop", "shop_counts"} | ({"shop_stats", "item_list"} if fmt == "parquet" else set())
        assert set(views) == expected, views
        assert all(settings and CAPTURED_CATALOG not in settings for settings in views.values()), views
    finally:
        env.drop()
