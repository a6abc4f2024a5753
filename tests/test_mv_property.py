"""Property test: random change sequences on every input kind keep the MV equal to a full
recomputation of its SELECT. Examples are few and small: each refresh is a Spark round trip."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from mv_world import (REGION_STATS, SHOP_STATS, STAFF, TAG_COUNTS, World, notes_model, ranked_model, seed,  # noqa: E402
                      tags_model, union_model)

OFFERS, SHOPS, WAREHOUSES, REGIONS, CATEGORIES = range(1, 8), (100, 200, 300, 400), (10, 20, 30), (1, 2, 3), (7, 8, 9)

operation = st.one_of(
    st.builds(lambda i, s, c, a: ("put", "offers", dict(id=i, shop_id=s, cat_id=c, title=f"t{i}{s}", note="n",
                                                        status="active" if a else "hidden", deleted=False)),
              st.sampled_from(OFFERS), st.sampled_from(SHOPS), st.sampled_from(CATEGORIES + (None,)), st.booleans()),
    st.builds(lambda i: ("delete", "offers", (i,)), st.sampled_from(OFFERS)),
    st.builds(lambda i, w, r, d: ("put", "shops", dict(id=i, name=f"s{i}{w}", wh_id=w, rating=r, deleted=d)),
              st.sampled_from(SHOPS), st.sampled_from(WAREHOUSES), st.integers(1, 3), st.booleans()),
    st.builds(lambda i, r: ("put", "warehouses", dict(id=i, name=f"w{i}{r}", region_id=r)),
              st.sampled_from(WAREHOUSES), st.sampled_from(REGIONS)),
    st.builds(lambda i: ("delete", "warehouses", (i,)), st.sampled_from(WAREHOUSES)),
    st.builds(lambda i, n: ("put", "regions", dict(id=i, name=n)), st.sampled_from(REGIONS), st.sampled_from("NSEW")),
    st.builds(lambda i: ("delete", "regions", (i,)), st.sampled_from(REGIONS)),
    st.builds(lambda i, n: ("put", "categories", dict(id=i, name=n, note="x")), st.sampled_from(CATEGORIES), st.sampled_from("ABC")),
    st.builds(lambda i: ("delete", "categories", (i,)), st.sampled_from(CATEGORIES)),
    st.builds(lambda i, p: ("put", "prices", dict(offer_id=i, kind="retail", price=Decimal(p))), st.sampled_from(OFFERS),
              st.sampled_from(["1.00", "2.50"])),
    st.builds(lambda i: ("delete", "prices", (i, "retail")), st.sampled_from(OFFERS)),
    st.builds(lambda v: ("put", "settings", dict(name="currency", value=v)), st.sampled_from(["EUR", "USD"])),
    st.just(("delete", "settings", ("currency",))),
)

# for the other shapes (tests/test_mv_shapes.py): one note per offer keeps offer_notes.offer_id unique
notes = st.one_of(
    st.builds(lambda i, c, t: ("put", "offer_notes", dict(id=900 + i, offer_id=i, cat_id=c, text=t, deleted=False)),
              st.sampled_from(OFFERS), st.sampled_from(CATEGORIES), st.sampled_from("xy")),
    st.builds(lambda i: ("delete", "offer_notes", (900 + i,)), st.sampled_from(OFFERS)),
)
# one-to-many: tags and staff move freely between offers and shops
many = st.one_of(
    st.builds(lambda t, i, c: ("put", "offer_tags", dict(id=t, offer_id=i, cat_id=c, text=f"t{t}{i}", deleted=False)),
              st.sampled_from((950, 951, 952)), st.sampled_from(OFFERS), st.sampled_from(CATEGORIES)),
    st.builds(lambda t: ("delete", "offer_tags", (t,)), st.sampled_from((950, 951, 952))),
    st.builds(lambda p, s: ("put", "shop_staff", dict(id=p, shop_id=s, name=f"p{p}{s}", deleted=False)),
              st.sampled_from((60, 61)), st.sampled_from(SHOPS)),
    st.builds(lambda p: ("delete", "shop_staff", (p,)), st.sampled_from((60, 61))),
)
SHAPE_MODELS = {"parts": union_model("computed"), "notes": notes_model("LEFT JOIN"), "tags": tags_model("JOIN"),
                "staff": STAFF, "shop_stats": SHOP_STATS, "region_stats": REGION_STATS, "ranked": ranked_model(),
                "tag_counts": TAG_COUNTS}
SHAPES = ("tag_counts__tagged", *SHAPE_MODELS)  # the mv lifted out of tag_counts first, as a run orders them

_worlds: dict[str, World] = {}


def _world(spark, tmp_path_factory, table_format: str = "parquet") -> World:
    if table_format not in _worlds:
        world = World(spark, tmp_path_factory.mktemp("mvprop"), table_format=table_format)
        seed(world)
        world.refresh()
        _worlds[table_format] = world
    return _worlds[table_format]


def _apply_and_check(world: World, batches, models: tuple[str, ...] = ("wide",)) -> None:
    for batch in batches:
        for action, table, args in batch:
            if action == "put":
                world.put(table, **args)
            else:
                world.delete(table, *args)
        for name in models:
            outcome = world.refresh(name)
            assert outcome.mode in ("refresh", "noop")
            world.check(name)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(batches=st.lists(st.lists(operation, min_size=1, max_size=5), min_size=1, max_size=2))
def test_random_change_sequences_keep_the_mv_equal_to_its_select(spark, tmp_path_factory, batches):
    _apply_and_check(_world(spark, tmp_path_factory), batches)


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(batches=st.lists(st.lists(operation, min_size=1, max_size=5), min_size=1, max_size=2))
def test_random_change_sequences_keep_the_delta_mv_equal_to_its_select(spark, tmp_path_factory, batches):
    _apply_and_check(_world(spark, tmp_path_factory, "delta"), batches)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(batches=st.lists(st.lists(st.one_of(operation, notes, many), min_size=1, max_size=5), min_size=1, max_size=2))
def test_random_change_sequences_keep_every_mv_shape_equal_to_its_select(spark, tmp_path_factory, batches):
    if "shapes" not in _worlds:
        world = World(spark, tmp_path_factory.mktemp("mvshapes"), SHAPE_MODELS)
        seed(world)
        for name in SHAPES:
            world.refresh(name)
        _worlds["shapes"] = world
    _apply_and_check(_worlds["shapes"], batches, SHAPES)
