"""MVs written the way dbt's style guide teaches: staging views over sources, marts built from
import CTEs (``with offers as (select * from {{ ref('stg_offers') }})``), ``select *``, a closing
``select * from final``. The views and CTEs are expanded into the MV's SELECT (compiler.kinds.mv
.normalize), so a change of any source behind them refreshes only the keys it reaches, and after
every batch the MV equals a full recomputation of its SELECT."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path

import pytest

from compiler.kinds.mv.derive import explain
from compiler.kinds.mv.analyze import mv_plan
from compiler.phases import Crash, crash_at

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from tiers import FORMATS  # noqa: E402
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
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
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
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
with offers as (
    select * from {{{{ ref('stg_offers') }}}}
)
select shop_id, count(*) as offers, count(distinct cat_id) as categories
from offers
group by shop_id
"""


SHOP_SUMMARY = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
with shops as (
    select * from {{{{ ref('stg_shops') }}}}
),
counts as (
    select * from {{{{ ref('shop_counts') }}}}
)
select shops.shop_id, shops.shop_name, coalesce(counts.offers, 0) as offers
from shops
left join counts on counts.shop_id = shops.shop_id
"""


SHOP_CATEGORIES = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
select distinct shop_id, cat_id from {{{{ ref('stg_offers') }}}}
"""


OPEN_SHOP_OFFERS = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
select o.offer_id, o.title
from {{{{ ref('stg_offers') }}}} as o
where o.shop_id in (select shop_id from {{{{ ref('stg_shops') }}}} where rating >= 2)
  and not exists (select 1 from {{{{ source('{db}', 'prices') }}}} as p where p.offer_id = o.offer_id and p.kind = 'promo')
  and o.offer_id not in (select offer_id from {{{{ source('{db}', 'prices') }}}} where kind = 'clearance')
"""


# jaffle_shop's `customers`: aggregates joined back by key, one an intermediate view read by an import
# CTE (dbt's style guide), one a CTE over a join (payments to orders there, prices to offers here);
# each is lifted into an mv of its own (compiler.kinds.mv.lift)
INT_SHOP_OFFERS = """
{{{{ config(materialized='view', schema='{db}') }}}}
select shop_id, 'stg_offers' as counted_in, count(offer_id) as offers, min(title) as first_title
from {{{{ ref('stg_offers') }}}}
group by shop_id
"""

SHOP_STATS = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
with shops as (
    select * from {{{{ ref('stg_shops') }}}}
),
offers as (
    select * from {{{{ ref('stg_offers') }}}}
),
prices as (
    select * from {{{{ source('{db}', 'prices') }}}}
),
shop_offers as (
    select * from {{{{ ref('int_shop_offers') }}}}
),
shop_prices as (
    select offers.shop_id, sum(prices.price) as total_price, count(*) as prices
    from prices
    left join offers on prices.offer_id = offers.offer_id
    group by offers.shop_id
),
final as (
    select
        shops.shop_id,
        shops.shop_name,
        coalesce(shop_offers.offers, 0) as offers,
        shop_offers.first_title,
        shop_prices.total_price
    from shops
    left join shop_offers on shops.shop_id = shop_offers.shop_id
    left join shop_prices on shop_prices.shop_id = shops.shop_id
)
select * from final
"""


def _world(spark, tmp_path, table_format: str = "parquet") -> World:
    world = World(spark, tmp_path, {"stg_offers": STG_OFFERS, "stg_shops": STG_SHOPS.replace("<shop_filter>", ""),
                                    "offer_facts": OFFER_FACTS, "shop_counts": SHOP_COUNTS, "shop_summary": SHOP_SUMMARY,
                                    "shop_categories": SHOP_CATEGORIES, "open_shop_offers": OPEN_SHOP_OFFERS,
                                    "int_shop_offers": INT_SHOP_OFFERS, "shop_stats": SHOP_STATS},
                  table_format=table_format)
    seed(world)
    world.flush()
    world.build_views()  # the oracle recomputes the model's SELECT as written: through the views
    return world


@pytest.mark.parametrize("table_format", FORMATS)
def test_marts_over_staging_views_and_import_ctes_refresh_by_key(spark, tmp_path, table_format):
    world = _world(spark, tmp_path, table_format)
    # shop_summary reads the groups shop_counts publishes; shop_categories is a SELECT DISTINCT;
    # open_shop_offers filters by IN, NOT EXISTS and NOT IN subqueries. On Delta, only what its storage
    # does differently: the groups a MERGE batch publishes
    marts = ("offer_facts", "shop_counts", "shop_summary", "shop_categories", "open_shop_offers",
             "shop_stats__shop_offers", "shop_stats__shop_prices", "shop_stats") if table_format == "parquet" else ("shop_counts", "shop_summary")
    for mart in marts:
        assert world.refresh(mart).mode == "build"
        world.check(mart)
    batches = [  # a few changes per batch: each refresh and check costs seconds
        lambda: (world.put("offers", id=7, shop_id=100, cat_id=8, title="new", status="active", note="n"),
                 world.put("offers", id=1, title="renamed"),
                 world.put("shops", id=100, name="Alpha2")),                     # behind the stg_shops view
        lambda: (world.put("categories", id=7, name="Books2"),                   # a source read by an import CTE
                 world.put("offers", id=3, shop_id=100, cat_id=8),               # re-pointed: leaves a group, joins another
                 world.delete("prices", 1, "promo"), world.delete("prices", 3, "promo")),  # NOT EXISTS turns true
        lambda: (world.delete("offers", 2),                                      # filtered out by the staging view
                 world.put("offers", id=5, status="hidden"),                     # leaves the mart's WHERE
                 world.put("prices", offer_id=3, kind="clearance", price=Decimal("0.50"))),  # NOT IN turns false
        lambda: (world.delete("shops", 200),                                     # the inner join's partner leaves its view
                 world.put("shops", id=300, rating=2),                           # enters the IN subquery
                 world.put("prices", offer_id=1, kind="promo", price=Decimal("1.00")),  # and false again
                 world.delete("prices", 3, "clearance")),                        # NOT IN true again
    ]
    for change in batches:
        change()
        for mart in marts:
            outcome = world.refresh(mart)
            assert outcome.mode in ("refresh", "noop"), (mart, outcome)  # shop_counts reads no shop or category
            assert outcome.mode == "refresh" or mart != "offer_facts", (mart, outcome)
            if not world.manifest.models[mart].owner:  # a lifted mv is checked through its owner's oracle
                world.check(mart)
    assert {r.shop_id: r.offers for r in world.table("shop_summary")} == {100: 3, 300: 1}  # 200 left stg_shops
    if table_format == "delta":
        return
    assert {(r.shop_id, r.offers, r.total_price) for r in world.table("shop_stats")} == {
        (100, 3, Decimal("6.00")), (300, 1, Decimal("10.60"))}  # offers 1, 3, 7: 1.50 + 1.00 + 3.50 | 5: 5.50 + 5.10
    assert sorted(r.offer_id for r in world.table("open_shop_offers")) == [3, 7]  # shops 100 and 300, no promo price
    facts = {r.offer_id: r for r in world.table("offer_facts")}
    assert facts[1].title == "renamed" and facts[1].shop_name == "Alpha2" and 2 not in facts and 5 not in facts


def test_the_views_sources_are_the_inputs_and_a_changed_view_rebuilds(spark, tmp_path):
    world = _world(spark, tmp_path)
    plan = mv_plan(world.manifest.models["offer_facts"], world.manifest)
    assert sorted(plan.inputs) == [f"{world.db}.categories", f"{world.db}.offers", f"{world.db}.shops"]
    assert plan.key == ("offer_id",) and plan.views == (f"{world.db}.stg_offers", f"{world.db}.stg_shops")
    text = explain(plan)
    assert f"reads through the views {world.db}.stg_offers, {world.db}.stg_shops" in text, text[:1200]
    assert world.refresh("offer_facts").mode == "build"
    (tmp_path / "models/stg_shops.sql").write_text(STG_SHOPS.replace("<shop_filter>", " and rating >= 2").format(db=world.db))
    world.recompile()
    world.build_views()
    outcome = world.refresh("offer_facts")
    assert outcome.mode == "build", outcome  # the view's SQL is part of the MV's definition
    world.check("offer_facts")
    assert {r.shop_name for r in world.table("offer_facts")} == {"Alpha", "Beta"}  # Gamma's rating is 1


def test_a_group_by_mv_crashed_after_publishing_is_redone_and_its_reader_follows(spark, tmp_path):
    """The groups a GROUP BY mv publishes are part of its batch: a crash after the publish, new
    changes before the redo, and the mv reading it still equals its recomputation."""
    world = _world(spark, tmp_path)
    for mart in ("shop_counts", "shop_summary"):
        assert world.refresh(mart).mode == "build"
    world.put("offers", id=5, shop_id=100)  # shop 300's only offer leaves for shop 100
    with pytest.raises(Crash):
        world.refresh("shop_counts", phase=crash_at("mv:published"))
    world.put("offers", id=6, shop_id=300)  # lands before the redo
    assert world.refresh("shop_counts").redo
    world.refresh("shop_counts")
    assert world.refresh("shop_summary").mode == "refresh"
    for mart in ("shop_counts", "shop_summary"):
        world.check(mart)
    assert {r.shop_id: r.offers for r in world.table("shop_summary")} == {100: 3, 200: 2, 300: 1}  # 1, 2, 5 | 3, 4 | 6
