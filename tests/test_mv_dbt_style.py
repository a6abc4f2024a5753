"""MVs written the way dbt's style guide teaches: staging views over sources, marts built from
import CTEs (``with offers as (select * from {{ ref('stg_offers') }})``), ``select *``, a closing
``select * from final``. The views and CTEs are expanded into the MV's SELECT (compiler.kinds.mv
.normalize), so a change of any source behind them refreshes only the keys it reaches, and after
every batch the MV equals a full recomputation of its SELECT."""

from __future__ import annotations

import sys
from pathlib import Path

from compiler.kinds.mv.derive import explain
from compiler.kinds.mv.plan import mv_plan

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from mv_world import World, seed  # noqa: E402

STG_OFFERS = """
{{{{ config(schema='{db}') }}}}
with source as (
    select * from {{{{ source('{db}', 'offers') }}}}
),
renamed as (
    select id as offer_id, shop_id, cat_id, title, status
    from source
    where not deleted
)
select * from renamed
"""

STG_SHOPS = """
{{{{ config(schema='{db}') }}}}
select id as shop_id, name as shop_name, rating
from {{{{ source('{db}', 'shops') }}}}
where deleted = false<shop_filter>
"""

OFFER_FACTS = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100) }}}}
with offers as (
    select * from {{{{ ref('stg_offers') }}}}
),
shops as (
    select * from {{{{ ref('stg_shops') }}}}
),
categories as (
    select * from {{{{ source('{db}', 'categories') }}}}
),
final as (
    select
        offers.offer_id,
        offers.title,
        shops.shop_name,
        categories.name as category
    from offers
    join shops on shops.shop_id = offers.shop_id
    left join categories on categories.id = offers.cat_id
    where offers.status = 'active'
)
select * from final
"""

SHOP_COUNTS = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100) }}}}
with offers as (
    select * from {{{{ ref('stg_offers') }}}}
)
select shop_id, count(*) as offers, count(distinct cat_id) as categories
from offers
group by shop_id
"""


def _world(spark, tmp_path) -> World:
    world = World(spark, tmp_path, {"stg_offers": STG_OFFERS, "stg_shops": STG_SHOPS.replace("<shop_filter>", ""),
                                    "offer_facts": OFFER_FACTS, "shop_counts": SHOP_COUNTS})
    seed(world)
    world.flush()
    world.build_views()  # the oracle recomputes the model's SELECT as written: through the views
    return world


def test_marts_over_staging_views_and_import_ctes_refresh_by_key(spark, tmp_path):
    world = _world(spark, tmp_path)
    marts = ("offer_facts", "shop_counts")
    for mart in marts:
        assert world.refresh(mart).mode == "build"
        world.check(mart)
    batches = [  # a few changes per batch: each refresh and check costs seconds
        lambda: (world.put("offers", id=7, shop_id=100, cat_id=8, title="new", status="active", note="n"),
                 world.put("offers", id=1, title="renamed"),
                 world.put("shops", id=100, name="Alpha2")),                     # behind the stg_shops view
        lambda: (world.put("categories", id=7, name="Books2"),                   # a source read by an import CTE
                 world.put("offers", id=3, shop_id=100, cat_id=8)),              # re-pointed: leaves a group, joins another
        lambda: (world.delete("offers", 2),                                      # filtered out by the staging view
                 world.put("offers", id=5, status="hidden")),                    # leaves the mart's WHERE
        lambda: world.delete("shops", 200),                                      # the inner join's partner leaves its view
    ]
    for change in batches:
        change()
        for mart in marts:
            outcome = world.refresh(mart)
            assert outcome.mode in ("refresh", "noop"), (mart, outcome)  # shop_counts reads no shop or category
            assert outcome.mode == "refresh" or mart == "shop_counts", (mart, outcome)
            world.check(mart)
    facts = {r.offer_id: r for r in world.table("offer_facts")}
    assert facts[1].title == "renamed" and facts[1].shop_name == "Alpha2" and 2 not in facts and 5 not in facts


def test_the_views_sources_are_the_mvs_inputs_and_explain_shows_them(spark, tmp_path):
    world = _world(spark, tmp_path)
    plan = mv_plan(world.manifest.models["offer_facts"], world.manifest)
    assert sorted(plan.inputs) == [f"{world.db}.categories", f"{world.db}.offers", f"{world.db}.shops"]
    assert plan.key == ("offer_id",)
    assert plan.views == (f"{world.db}.stg_offers", f"{world.db}.stg_shops")
    text = explain(plan)
    assert f"reads through the views {world.db}.stg_offers, {world.db}.stg_shops" in text, text[:1200]


def test_a_changed_view_rebuilds_the_mvs_that_read_it(spark, tmp_path):
    world = _world(spark, tmp_path)
    assert world.refresh("offer_facts").mode == "build"
    (tmp_path / "models/stg_shops.sql").write_text(STG_SHOPS.replace("<shop_filter>", " and rating >= 2").format(db=world.db))
    world.recompile()
    world.build_views()
    outcome = world.refresh("offer_facts")
    assert outcome.mode == "build", outcome  # the view's SQL is part of the MV's definition
    world.check("offer_facts")
    assert {r.shop_name for r in world.table("offer_facts")} == {"Alpha", "Beta"}  # Gamma's rating is 1
