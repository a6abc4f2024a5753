"""The demo marketplace's source tables: ``mvflow demo init`` creates them in the ``stage``
database, ``mvflow demo change`` applies one batch of production-like changes.

Every value is computed inside Spark from ``xxhash64(seed, batch, purpose, key)``, never in a
Python loop, so a seed gives the same rows whatever the partitioning. The tables are managed
tables in the target's ``table_format``:

- Delta tables with the Change Data Feed on (and deletion vectors): a batch applies each table's
  changes with one ``MERGE``, so the table keeps its history (versions, time travel, its feed);
- parquet tables, which cannot be updated in place: a changed table is written beside the old
  one (``<table>__next``) and swapped in (drop + rename, a metadata operation).

Change feeds and orders are appended (the demo's lineage reads the same feeds on both formats).

A small bookkeeping table, ``stage.demo_state`` (name → value), keeps the batch number, the demo
clock and the next ids. ``change`` advances it *before* it touches a source table (like an
offsets table's ``next``): a batch that crashed half-way never hands out a position twice, so
positions only ever grow.

Time: the initial rows are spread over the 30 days before 2026-01-01 00:00 UTC; batch ``b``
stamps its rows inside the minute starting at 2026-01-01 00:00 + (b - 1) minutes.
"""

from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .errors import Problem, RunError
from .progress import Task, task_of
from .table_format import DELTA, DELTA_PROPERTIES, is_delta_table

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from .progress import Progress
    from .sources import Source

DATABASE = "stage"
# Delta sources record their Change Data Feed (a source may declare 'changes: cdf').
SOURCE_PROPERTIES = {**DELTA_PROPERTIES, "delta.enableChangeDataFeed": "true"}
STATE_TABLE = "demo_state"
SOURCES = ("regions", "categories", "warehouses", "shops", "offers", "prices", "orders")
FEEDS = {"warehouses": "warehouses_changes", "prices": "prices_changes"}
COLUMNS = {
    "regions": ("region_id", "name", "country"),
    "categories": ("category_id", "name", "parent_id"),
    "warehouses": ("warehouse_id", "name", "region_id", "capacity"),
    "shops": ("shop_id", "name", "warehouse_id", "rating", "updated_at", "change_id", "is_deleted"),
    "offers": ("offer_id", "shop_id", "category_id", "title", "status", "base_price", "updated_at", "change_id",
               "is_deleted"),
    "prices": ("offer_id", "price_kind", "price", "currency"),
    "orders": ("order_id", "offer_id", "quantity", "amount", "status", "ts"),
    "warehouses_changes": ("warehouse_id", "changed_at", "change_id"),
    "prices_changes": ("offer_id", "price_kind", "changed_at", "change_id"),
}
KEYS = {
    "regions": ("region_id",), "categories": ("category_id",), "warehouses": ("warehouse_id",),
    "shops": ("shop_id",), "offers": ("offer_id",), "prices": ("offer_id", "price_kind"), "orders": ("order_id",),
}


def creates(sources: "dict[str, Source]", table: str) -> bool:
    """Whether ``mvflow demo init`` creates ``table`` for this project: the project is the demo (or a
    copy of it), which declares every source table of the demo, and ``table`` is one of them.

    >>> from compiler.sources import Source
    >>> demo = {f"stage.{t}": Source("stage", t, ("id",), "lineage/stage.yml", 1) for t in SOURCES}
    >>> creates(demo, "stage.orders"), creates(demo, "stage.prices_changes"), creates(demo, "stage.other")
    (True, True, False)
    >>> creates({"stage.orders": demo["stage.orders"]}, "stage.orders")  # a project with a table named so
    False
    """
    declared = {source.id.lower() for source in sources.values()}
    if not all(f"{DATABASE}.{name}" in declared for name in SOURCES):
        return False
    return table.lower() in {f"{DATABASE}.{name}" for name in (*SOURCES, *FEEDS.values())}


# Share (%) of offers that have a price of each kind.
PRICE_KINDS = (("retail", 90), ("wholesale", 40), ("promo", 20))

_US = 1_000_000
BASE_US = 1_767_225_600 * _US  # 2026-01-01 00:00:00 UTC: the demo clock at init
HISTORY_US = 30 * 86_400 * _US  # initial rows are spread over the 30 days before it
BATCH_US = 60 * _US  # each change batch advances the clock one minute
_DICTIONARY_MIN_ROWS = 10  # a dictionary never shrinks below this, to stay usable
_BROADCAST_MAX_ROWS = 1_000_000
_WRITE_THREADS = 4

_ADJECTIVES = ("Red", "Blue", "Green", "Quiet", "Rapid", "Bright", "Solid", "Smart", "Tiny", "Grand", "Classic", "Modern")
_NOUNS = ("Kettle", "Lamp", "Chair", "Phone", "Backpack", "Bicycle", "Teapot", "Jacket", "Monitor", "Blender", "Guitar",
          "Watch")
_SHOP_WORDS = ("Market", "Store", "Outlet", "Corner", "Depot", "Bazaar", "House", "Hub")
_PLACES = ("North", "South", "East", "West", "Central", "Harbor", "Valley", "Airport")
_REGION_WORDS = ("Alpine", "Coastal", "Lakeside", "Northern", "Southern", "Eastern", "Western", "Highland", "Delta",
                 "Metro")
_COUNTRIES = ("DE", "FR", "PL", "NL", "IT", "ES", "SE", "CZ")
_CATEGORY_WORDS = ("Home", "Garden", "Kitchen", "Sports", "Toys", "Books", "Audio", "Office", "Outdoor", "Beauty",
                   "Tools", "Pets")
_CURRENCIES = ("EUR", "EUR", "EUR", "EUR", "USD", "PLN")
_TOP_CATEGORIES = 8
_OFFERS_PER_CATEGORY = 100


def sizes(scale: float) -> dict[str, int]:
    """Rows per table that ``init`` creates at ``scale`` (prices are drawn: ~1.5 per offer).

    Categories grow with the offers (~100 offers each), so that editing a share ``f`` of them
    touches about ``f`` of the offers; regions stay a small fixed dictionary.

    >>> sizes(0.01)
    {'regions': 20, 'categories': 50, 'warehouses': 3, 'shops': 5, 'offers': 100, 'orders': 200}
    >>> sizes(10)["offers"], sizes(10)["categories"], sizes(10)["shops"], sizes(10)["warehouses"]
    (100000, 1000, 5000, 500)
    """
    offers = max(1, round(10_000 * scale))
    shops = max(1, round(offers / 20))
    return {"regions": 20, "categories": max(50, offers // _OFFERS_PER_CATEGORY),
            "warehouses": max(3, round(shops / 10)), "shops": shops, "offers": offers, "orders": 2 * offers}


def batch_size(rows: int, fraction: float) -> tuple[int, int]:
    """How many existing rows a change batch touches, and how many it inserts.

    >>> batch_size(10_000, 0.01)
    (100, 25)
    >>> batch_size(5, 0.01)
    (1, 1)
    >>> batch_size(5, 0)
    (0, 0)
    """
    if fraction <= 0:
        return 0, 0
    return min(rows, max(1, round(fraction * rows))), max(1, round(fraction * rows / 4))


def init(spark: "SparkSession", scale: float = 1.0, seed: int = 1, table_format: str = "parquet",
         progress: "Progress | None" = None) -> dict[str, int]:
    """(Re)create the demo source tables and their change feeds in ``table_format`` (Delta: with
    the Change Data Feed on); return table → row count."""
    n = sizes(scale)
    dice = _Dice(seed, 0)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    for table in _tables(spark):
        if table.endswith("__next"):
            spark.sql(f"DROP TABLE {_name(table)}")
    regions = _Choices.dense(spark, n["regions"])
    categories = _Choices.dense(spark, n["categories"])
    warehouses = _Choices.dense(spark, n["warehouses"])
    shops = _shop_rows(dice, _ids(spark, "shop_id", 1, n["shops"]), warehouses, deleted_percent=2)
    offers = _offer_rows(dice, _ids(spark, "offer_id", 1, n["offers"]), n["shops"], categories, deleted_percent=2)
    change_id = 1 + n["shops"] + n["offers"]
    tables = {
        "regions": _region_rows(dice, _ids(spark, "region_id", 1, n["regions"])),
        "categories": _category_rows(dice, _ids(spark, "category_id", 1, n["categories"])),
        "warehouses": _warehouse_rows(dice, _ids(spark, "warehouse_id", 1, n["warehouses"]), regions),
        "shops": _history(shops, "shop_id", 1, n["shops"]),
        "offers": _history(offers, "offer_id", 1 + n["shops"], n["offers"]),
        "prices": _price_rows(dice, _ids(spark, "offer_id", 1, n["offers"])),
        "orders": _order_rows(dice, _ids(spark, "order_id", 1, n["orders"]), _uniform_offer(dice, n["offers"]),
                              start_us=BASE_US - HISTORY_US, step_us=_step(HISTORY_US, n["orders"]), first_id=1),
        **{feed: spark.createDataFrame([], _feed_schema(feed)) for feed in FEEDS.values()},
    }
    with task_of(progress, "demo init") as task:
        _in_parallel([lambda t=t, rows=rows: _create(spark, t, rows, table_format) for t, rows in tables.items()], task)
    counts = _row_counts(spark, (*SOURCES, *FEEDS.values()))
    _write_state(spark, {"seed": seed, "batch": 0, "clock_us": BASE_US, "change_id": change_id,
                         **{table: n[table] + 1 for table in ("regions", "categories", "warehouses", "shops", "offers",
                                                              "orders")},
                         **_rows_state({table: counts[table] for table in SOURCES})})
    return counts


def change(spark: "SparkSession", fraction: float = 0.01, seed: int = 2, progress: "Progress | None" = None) -> dict[str, str]:
    """Apply one batch of changes touching about ``fraction`` of each big table; return table →
    ``"+inserted ~updated -deleted"``. Deterministic for (current state, seed)."""
    _recover(spark)
    state = _read_state(spark)
    batch = _Batch(spark, _Dice(seed, state["batch"] + 1), fraction, state)
    deltas = batch.build()
    clock, change_id = state["clock_us"], state["change_id"]
    for delta in deltas:
        if delta.position is not None:
            delta.first_change_id, delta.start_us = change_id, clock
            change_id += delta.size
    # One minute per batch, unless a batch has more rows than microseconds in a minute.
    span = max(BATCH_US, *(delta.size for delta in deltas))
    _write_state(spark, {**batch.next_ids, "seed": state["seed"], "batch": state["batch"] + 1,
                         "clock_us": clock + span, "change_id": change_id,
                         **_rows_state({**batch.rows, **{d.table: d.rows_after(batch.rows[d.table]) for d in deltas}})})
    with task_of(progress, "demo change") as task:
        _in_parallel([lambda delta=delta: delta.apply(spark) for delta in deltas], task)
    return {delta.table: delta.summary() for delta in deltas}


def _in_parallel(writes: list[Callable[[], None]], task: Task) -> None:
    """Run independent table writes concurrently: it overlaps Spark's per-job latency (planning,
    metastore calls), which dominates for small tables. ``task`` says how many are written."""
    with ThreadPoolExecutor(max_workers=_WRITE_THREADS) as pool:
        futures = [pool.submit(write) for write in writes]
        task.passed(f"0/{len(writes)} tables written")
        for n, future in enumerate(as_completed(futures), 1):
            future.result()
            task.passed(f"{n}/{len(writes)} tables written")


# --- random values as Spark columns -------------------------------------------------------------


class _Dice:
    """Deterministic random values as Spark columns: ``xxhash64(seed, batch, purpose, keys...)``."""

    def __init__(self, seed: int, batch: int):
        self.seed, self.batch = seed, batch

    def hash(self, purpose: str, *keys: "str | Column") -> "Column":
        from pyspark.sql import functions as F

        columns = [F.col(k) if isinstance(k, str) else k for k in keys]
        return F.xxhash64(F.lit(self.seed), F.lit(self.batch), F.lit(purpose), *columns)

    def below(self, n: int, purpose: str, *keys: "str | Column") -> "Column":
        """A whole number in [0, n)."""
        from pyspark.sql import functions as F

        return F.pmod(self.hash(purpose, *keys), F.lit(n))

    def percent(self, purpose: str, *keys: "str | Column") -> "Column":
        return self.below(100, purpose, *keys)

    def pick(self, values: tuple[str, ...], purpose: str, *keys: "str | Column") -> "Column":
        from pyspark.sql import functions as F

        return F.element_at(F.array(*[F.lit(v) for v in values]), (self.below(len(values), purpose, *keys) + 1).cast("int"))

    def money(self, purpose: str, key: "str | Column", low_cents: int, high_cents: int,
              *more_keys: "str | Column") -> "Column":
        cents = self.below(high_cents - low_cents, purpose, key, *more_keys) + low_cents
        return (cents.cast("decimal(14,0)") / 100).cast("decimal(12,2)")

    def flag(self, decide: str) -> int:
        """A whole number in [0, 100) for a decision about a whole batch (made on the driver)."""
        return zlib.crc32(f"{self.seed}/{self.batch}/{decide}".encode()) % 100


@dataclass
class _Choices:
    """Values to draw from, densely indexed: a DataFrame ``(_idx, _value)`` and its size."""

    table: "DataFrame"
    size: int

    @staticmethod
    def dense(spark: "SparkSession", n: int) -> "_Choices":
        from pyspark.sql import functions as F

        return _Choices(spark.range(n).select(F.col("id").alias("_idx"), (F.col("id") + 1).alias("_value")), n)

    @staticmethod
    def of(values: "DataFrame", size: int) -> "_Choices":
        """Index the ``size`` distinct values of a one-column DataFrame (a small table: the
        window puts it in one partition)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        column = values.columns[0]
        table = values.select(F.col(column).alias("_value"))
        return _Choices(table.withColumn("_idx", F.row_number().over(Window.orderBy("_value")) - 1), size)

    def draw(self, df: "DataFrame", name: str, dice: _Dice, purpose: str, *keys: str) -> "DataFrame":
        """Add column ``name`` holding a value drawn by hash of ``keys``."""
        from pyspark.sql import functions as F

        if self.size == 0:
            return df.withColumn(name, F.lit(None))
        drawn = df.withColumn("_pick", dice.below(self.size, purpose, *keys))
        joined = drawn.join(F.broadcast(self.table), F.col("_pick") == F.col("_idx"), "left")
        return joined.drop("_pick", "_idx").withColumnRenamed("_value", name)


# --- row generators (shared by init and by the inserts of a batch) -------------------------------


def _ids(spark: "SparkSession", name: str, first: int, count: int) -> "DataFrame":
    return spark.range(first, first + count).withColumnRenamed("id", name)


def _label(dice: _Dice, words: tuple[str, ...], purpose: str, key: str, *more: "Column",
           renamed: bool = False) -> "Column":
    """``"<word> <key>"``; a rename adds ``" v<batch>"`` so that it always changes the name."""
    from pyspark.sql import functions as F

    parts = [*more, dice.pick(words, purpose, key), F.col(key).cast("string")]
    if renamed:
        parts.append(F.lit(f"v{dice.batch}"))
    return F.concat_ws(" ", *parts)


def _region_rows(dice: _Dice, ids: "DataFrame") -> "DataFrame":
    from pyspark.sql import functions as F

    return ids.select(F.col("region_id").cast("int").alias("region_id"),
                      _label(dice, _REGION_WORDS, "regions.name", "region_id").alias("name"),
                      dice.pick(_COUNTRIES, "regions.country", "region_id").alias("country"))


def _category_rows(dice: _Dice, ids: "DataFrame") -> "DataFrame":
    from pyspark.sql import functions as F

    key = F.col("category_id")
    parent = F.when(key > _TOP_CATEGORIES, dice.below(_TOP_CATEGORIES, "categories.parent", key) + 1)
    return ids.select(key.cast("int").alias("category_id"),
                      _label(dice, _CATEGORY_WORDS, "categories.name", "category_id").alias("name"),
                      parent.cast("int").alias("parent_id"))


def _warehouse_rows(dice: _Dice, ids: "DataFrame", regions: _Choices) -> "DataFrame":
    from pyspark.sql import functions as F

    drawn = regions.draw(ids, "_region", dice, "warehouses.region", "warehouse_id")
    return drawn.select(F.col("warehouse_id").cast("bigint").alias("warehouse_id"),
                        _label(dice, _PLACES, "warehouses.name", "warehouse_id").alias("name"),
                        F.col("_region").cast("int").alias("region_id"),
                        _capacity(dice, "warehouse_id").alias("capacity"))


def _capacity(dice: _Dice, key: str) -> "Column":
    return ((dice.below(50, "warehouses.capacity", key) + 1) * 1000).cast("int")


def _shop_rows(dice: _Dice, ids: "DataFrame", warehouses: _Choices, deleted_percent: int) -> "DataFrame":
    from pyspark.sql import functions as F

    drawn = warehouses.draw(ids, "_warehouse", dice, "shops.warehouse", "shop_id")
    return drawn.select(F.col("shop_id").cast("bigint").alias("shop_id"),
                        _label(dice, _SHOP_WORDS, "shops.name", "shop_id").alias("name"),
                        F.col("_warehouse").cast("bigint").alias("warehouse_id"),
                        _rating(dice, "shop_id").alias("rating"),
                        (dice.percent("shops.deleted", "shop_id") < deleted_percent).alias("is_deleted"))


def _rating(dice: _Dice, key: str) -> "Column":
    return ((dice.below(401, "shops.rating", key) + 100) / 100).cast("double")


def _offer_rows(dice: _Dice, ids: "DataFrame", shops: int, categories: _Choices, deleted_percent: int) -> "DataFrame":
    from pyspark.sql import functions as F

    drawn = categories.draw(ids, "_category", dice, "offers.category", "offer_id")
    return drawn.select(
        F.col("offer_id").cast("bigint").alias("offer_id"),
        (dice.below(shops, "offers.shop", "offer_id") + 1).cast("bigint").alias("shop_id"),
        F.col("_category").cast("int").alias("category_id"),
        _title(dice, "offer_id").alias("title"),
        F.when(dice.percent("offers.status", "offer_id") < 10, "hidden").otherwise("active").alias("status"),
        dice.money("offers.price", "offer_id", 100, 100_000).alias("base_price"),
        (dice.percent("offers.deleted", "offer_id") < deleted_percent).alias("is_deleted"),
    )


def _title(dice: _Dice, key: str) -> "Column":
    return _label(dice, _NOUNS, "offers.title.noun", key, dice.pick(_ADJECTIVES, "offers.title.adjective", key))


def _price_rows(dice: _Dice, offer_ids: "DataFrame") -> "DataFrame":
    """Prices of each kind for the given offers (an offer has each kind with its PRICE_KINDS share)."""
    from pyspark.sql import functions as F

    kinds = F.array(*[F.struct(F.lit(kind).alias("price_kind"), F.lit(share).alias("_share"))
                      for kind, share in PRICE_KINDS])
    pairs = offer_ids.select(F.col("offer_id").cast("bigint").alias("offer_id"), F.explode(kinds).alias("_k"))
    pairs = pairs.select("offer_id", "_k.*")
    pairs = pairs.where(dice.percent("prices.has", "offer_id", "price_kind") < F.col("_share"))
    return _price_values(dice, pairs.select("offer_id", "price_kind"))


def _price_values(dice: _Dice, keys: "DataFrame") -> "DataFrame":
    price, currency = _price_columns(dice)
    return keys.select("offer_id", "price_kind", price.alias("price"), currency.alias("currency"))


def _price_columns(dice: _Dice) -> "tuple[Column, Column]":
    """A price and a currency drawn for the row's (offer_id, price_kind)."""
    return (dice.money("prices.price", "offer_id", 100, 100_000, "price_kind"),
            dice.pick(_CURRENCIES, "prices.currency", "offer_id", "price_kind"))


def _uniform_offer(dice: _Dice, offers: int) -> "Column":
    return dice.below(offers, "orders.offer", "order_id") + 1


def _order_rows(dice: _Dice, ids: "DataFrame", offer: "Column", start_us: int, step_us: int,
                first_id: int) -> "DataFrame":
    """Orders with ``ts`` growing with ``order_id`` from ``start_us`` by ``step_us``."""
    from pyspark.sql import functions as F

    key = F.col("order_id")
    quantity = (dice.below(5, "orders.quantity", key) + 1).cast("int")
    unit = dice.money("orders.unit_price", key, 100, 100_000)
    draw = dice.percent("orders.status", key)
    status = (F.when(draw < 8, "cancelled").when(draw < 30, "created").when(draw < 55, "paid")
              .when(draw < 80, "shipped").otherwise("delivered"))
    ts = F.timestamp_micros(F.lit(start_us) + (key - first_id) * step_us)
    return ids.select(key.cast("bigint").alias("order_id"), offer.cast("bigint").alias("offer_id"),
                      quantity.alias("quantity"), (unit * quantity).cast("decimal(12,2)").alias("amount"),
                      status.alias("status"), ts.alias("ts"))


def _history(rows: "DataFrame", key: str, first_change_id: int, count: int) -> "DataFrame":
    """Positions of initial rows: change ids in key order, times spread over the history."""
    from pyspark.sql import functions as F

    return _stamp(rows, F.col(key) - 1, first_change_id, BASE_US - HISTORY_US, _step(HISTORY_US, count),
                  "updated_at")


def _step(span_us: int, count: int) -> int:
    """Time between ``count`` rows spread over ``span_us``: whole milliseconds when there is room."""
    step = max(1, span_us // max(1, count))
    return step - step % 1000 if step >= 1000 else step


def _stamp(rows: "DataFrame", rank: "Column", first_change_id: int, start_us: int, step_us: int,
           time_column: str) -> "DataFrame":
    """Add ``change_id = first + rank`` and ``time_column = start + rank * step`` (both grow together)."""
    from pyspark.sql import functions as F

    ranked = rows.withColumn("_rank", rank)
    return (ranked.withColumn("change_id", F.lit(first_change_id) + F.col("_rank"))
            .withColumn(time_column, F.timestamp_micros(F.lit(start_us) + F.col("_rank") * step_us))
            .drop("_rank"))


# --- one change batch ----------------------------------------------------------------------------


@dataclass
class _Delta:
    """The changed rows of one table in a batch, with ``_op`` = '+', '~' or '-' (materialized).

    ``position`` is the time column to stamp (with ``change_id``): ``updated_at`` for tables with
    position columns, the feed's ``changed_at`` for tables with a change feed, None otherwise.
    """

    table: str
    rows: "DataFrame"
    mode: str  # soft (position + soft delete) | hard (change feed, hard delete) | append
    position: str | None
    counts: dict[str, int]
    first_change_id: int = 0
    start_us: int = 0

    @property
    def size(self) -> int:
        return sum(self.counts.values())

    def rows_after(self, before: int) -> int:
        """The table's row count once the delta is applied: a soft delete keeps its row."""
        deleted = self.counts.get("-", 0) if self.mode in ("hard", "dictionary") else 0
        return before + self.counts.get("+", 0) - deleted

    def summary(self) -> str:
        if self.mode == "append":
            return f"+{self.counts.get('+', 0)}"
        return " ".join(f"{op}{self.counts.get(op, 0)}" for op in "+~-")

    def stamped(self) -> "DataFrame":
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        keys = KEYS[self.table]
        rank = F.row_number().over(Window.orderBy(*keys)) - 1
        return _stamp(self.rows, rank, self.first_change_id, self.start_us, _step(BATCH_US, self.size), self.position)

    def apply(self, spark: "SparkSession") -> None:
        from pyspark.sql import functions as F

        name = _name(self.table)
        if self.size == 0:
            return
        if self.mode == "append":
            _append(spark, self.table, self.rows)
            return
        rows = self.stamped() if self.mode == "soft" else self.rows
        if is_delta_table(spark, name):  # a soft delete is an update of its flag
            _merge(spark, self.table, rows.withColumn("_op", F.lit("~")) if self.mode == "soft" else rows)
        else:
            self._rewrite(spark, rows)
        if self.mode == "hard":
            _append(spark, FEEDS[self.table], self.stamped())

    def _rewrite(self, spark: "SparkSession", rows: "DataFrame") -> None:
        """Parquet: the kept rows and the changed ones written beside the table, then swapped in."""
        from pyspark.sql import functions as F

        name, keys = _name(self.table), list(KEYS[self.table])
        changed = self.rows.select(*keys)
        if self.size <= _BROADCAST_MAX_ROWS:
            changed = F.broadcast(changed)
        kept = spark.table(name).join(changed, keys, "left_anti")
        written = rows if self.mode == "soft" else rows.where(F.col("_op") != "-")
        _swap(spark, self.table, kept.unionByName(written.select(*COLUMNS[self.table])))


class _Batch:
    """Builds the deltas of one batch from the current tables and the bookkeeping state."""

    def __init__(self, spark: "SparkSession", dice: _Dice, fraction: float, state: dict[str, int]):
        self.spark, self.dice, self.fraction, self.clock_us = spark, dice, fraction, state["clock_us"]
        self.next_ids = {t: state[t] for t in ("regions", "categories", "warehouses", "shops", "offers", "orders")}
        self.rows = _rows_of(state) or _row_counts(spark, SOURCES)

    def build(self) -> list[_Delta]:
        """The deltas in three independent chains, side by side (each delta is a Spark job that
        counts it): places (regions, warehouses, shops), the catalog (categories, offers) and sales
        (prices, orders). The ids a chain inserts that another one uses are taken first."""
        new_shops = self._inserted("shops")
        first_new_offer = self.next_ids["offers"]
        new_offers = self._inserted("offers")
        count = self.next_ids["offers"] - first_new_offer

        def places() -> list[_Delta]:
            # the small fixed regions only when the fraction amounts to a whole region (5% of the offers)
            regions, region_choices = self._dictionary("regions", _region_rows, _REGION_WORDS, at_least_one=False)
            warehouses, warehouse_choices = self._warehouses(region_choices)
            return [regions, warehouses, self._shops(warehouse_choices, warehouses.rows.where("_op = '-'"), new_shops)]

        def catalog() -> list[_Delta]:  # a batch always edits the categories (the "dictionary edit")
            categories, category_choices = self._dictionary("categories", _category_rows, _CATEGORY_WORDS)
            return [categories, self._offers(category_choices, new_offers)]

        def sales() -> list[_Delta]:
            return [self._prices(first_new_offer, count), self._orders(first_new_offer, count)]

        with ThreadPoolExecutor(max_workers=3) as pool:
            (regions, warehouses, shops), (categories, offers), (prices, orders) = pool.map(
                lambda chain: chain(), (places, catalog, sales))
        return [regions, categories, warehouses, shops, offers, prices, orders]

    # helpers

    def _table(self, table: str) -> "tuple[DataFrame, int]":
        return self.spark.table(_name(table)), self.rows[table]

    def _new_ids(self, table: str, count: int) -> "DataFrame":
        first = self.next_ids[table]
        self.next_ids[table] = first + count
        return _ids(self.spark, KEYS[table][0], first, count)

    def _inserted(self, table: str) -> "DataFrame":
        """The ids of the rows this batch inserts into ``table`` (taken now)."""
        return self._new_ids(table, batch_size(self.rows[table], self.fraction)[1])

    def _touched(self, df: "DataFrame", table: str, count: int, purpose: str = "touch") -> "DataFrame":
        """``count`` rows chosen by hash (top-k, so the count is exact), with an action draw ``_a``."""
        keys = KEYS[table]
        chosen = df.withColumn("_h", self.dice.hash(f"{table}.{purpose}", *keys)).orderBy("_h", *keys).limit(count)
        return chosen.drop("_h").withColumn("_a", self.dice.percent(f"{table}.action", *keys))

    def _delta(self, table: str, parts: "list[DataFrame]", mode: str, position: str | None) -> _Delta:
        from functools import reduce

        # Materialized by the first action (the counts): later steps must not re-read the table,
        # which may have been swapped by then.
        rows = reduce(lambda a, b: a.unionByName(b), parts).localCheckpoint(eager=False)
        counts = {row["_op"]: row["count"] for row in rows.groupBy("_op").count().collect()}
        return _Delta(table, rows, mode, position, counts)

    # per table

    def _dictionary(self, table: str, generate: Callable[[_Dice, "DataFrame"], "DataFrame"], words: tuple[str, ...],
                    at_least_one: bool = True):
        """Rename a few entries, sometimes insert one, rarely delete one. Without ``at_least_one``
        a batch leaves the dictionary alone when ``fraction`` × rows rounds to 0."""
        from pyspark.sql import functions as F

        key = KEYS[table][0]
        old, rows = self._table(table)
        touched, _ = batch_size(rows, self.fraction)
        if not at_least_one and round(self.fraction * rows) < 1:
            touched = 0
        deleting = touched > 0 and rows > _DICTIONARY_MIN_ROWS and self.dice.flag(f"{table}.delete") < 10
        inserting = touched > 0 and self.dice.flag(f"{table}.insert") < 50
        gone = self._touched(old, table, 1 if deleting else 0, "delete")
        rest = old.join(gone.select(key), key, "left_anti")
        edited = self._touched(rest, table, min(touched, rows - int(deleting)), "rename")
        edited = edited.withColumn("name", _label(self.dice, words, f"{table}.name", key, renamed=True))
        inserted = generate(self.dice, self._new_ids(table, 1 if inserting else 0))
        parts = [gone.drop("_a").withColumn("_op", F.lit("-")), edited.withColumn("_op", F.lit("~")),
                 inserted.withColumn("_op", F.lit("+"))]
        delta = self._delta(table, [p.select(*COLUMNS[table], "_op") for p in parts], "dictionary", None)
        live = rest.select(key).unionByName(inserted.select(key))
        return delta, _Choices.of(live, delta.rows_after(rows))

    def _warehouses(self, regions: _Choices):
        """Hard deletes, region re-pointing, capacity changes, inserts; each key goes to the feed."""
        from pyspark.sql import functions as F

        old, rows = self._table("warehouses")
        touched, inserting = batch_size(rows, self.fraction)
        t = regions.draw(self._touched(old, "warehouses", touched), "_region", self.dice, "warehouses.region",
                         "warehouse_id")
        a = F.col("_a")
        updated = t.select(
            "warehouse_id", "name",
            F.when((a >= 15) & (a < 50), F.col("_region")).otherwise(F.col("region_id")).cast("int").alias("region_id"),
            F.when(a >= 50, _capacity(self.dice, "warehouse_id")).otherwise(F.col("capacity")).alias("capacity"),
            F.when(a < 15, "-").otherwise("~").alias("_op"))
        inserted = _warehouse_rows(self.dice, self._new_ids("warehouses", inserting), regions)
        delta = self._delta("warehouses", [updated, inserted.withColumn("_op", F.lit("+"))], "hard", "changed_at")
        live = delta.rows.where(F.col("_op") != "-").select("warehouse_id").unionByName(
            old.join(delta.rows.select("warehouse_id"), "warehouse_id", "left_anti").select("warehouse_id"))
        return delta, _Choices.of(live, delta.rows_after(rows))

    def _shops(self, warehouses: _Choices, deleted_warehouses: "DataFrame", new_ids: "DataFrame") -> _Delta:
        """Soft deletes (and some un-deletes), warehouse re-pointing, ratings, renames, inserts.
        Shops of a warehouse deleted in this batch move to another one, as a foreign key would
        force in the OLTP database."""
        from pyspark.sql import functions as F

        old, rows = self._table("shops")
        touched, _ = batch_size(rows, self.fraction)
        gone = deleted_warehouses.select(F.col("warehouse_id").alias("_gone"))
        orphans = old.join(gone, F.col("warehouse_id") == F.col("_gone"), "left_semi")
        chosen = self._touched(old.join(orphans.select("shop_id"), "shop_id", "left_anti"), "shops", touched)
        both = chosen.withColumn("_orphan", F.lit(False)).unionByName(
            orphans.withColumn("_a", F.lit(100)).withColumn("_orphan", F.lit(True)))
        t = warehouses.draw(both, "_warehouse", self.dice, "shops.warehouse", "shop_id")
        a, live, orphan = F.col("_a"), ~F.col("is_deleted"), F.col("_orphan")

        def act(low: int, high: int) -> "Column":
            return live & ~orphan & (a >= low) & (a < high)

        updated = t.select(
            "shop_id",
            F.when(act(60, 100), _label(self.dice, _SHOP_WORDS, "shops.name", "shop_id", renamed=True))
            .otherwise(F.col("name")).alias("name"),
            F.when(orphan | act(10, 30), F.col("_warehouse")).otherwise(F.col("warehouse_id"))
            .cast("bigint").alias("warehouse_id"),
            F.when(act(30, 60), _rating(self.dice, "shop_id")).otherwise(F.col("rating")).alias("rating"),
            F.when(orphan, F.col("is_deleted")).when(live, a < 10).otherwise(a >= 50).alias("is_deleted"),
            F.when(act(0, 10), "-").otherwise("~").alias("_op"))
        inserted = _shop_rows(self.dice, new_ids, warehouses, deleted_percent=0)
        return self._delta("shops", [updated, inserted.withColumn("_op", F.lit("+"))], "soft", "updated_at")

    def _offers(self, categories: _Choices, new_ids: "DataFrame") -> _Delta:
        """Soft deletes (and some un-deletes), shop and category re-pointing, status flips, price and
        title changes, inserts."""
        from pyspark.sql import functions as F

        old, rows = self._table("offers")
        touched, _ = batch_size(rows, self.fraction)
        shops = self.next_ids["shops"] - 1
        t = categories.draw(self._touched(old, "offers", touched), "_category", self.dice, "offers.category",
                            "offer_id")
        a, live = F.col("_a"), ~F.col("is_deleted")

        def act(low: int, high: int) -> "Column":
            return live & (a >= low) & (a < high)

        # Shift the shop by 1..shops-1 so that a re-pointed offer really moves.
        other_shop = (F.col("shop_id") + self.dice.below(max(1, shops - 1), "offers.shop", "offer_id")) % shops + 1
        flipped = F.when(F.col("status") == "active", "hidden").otherwise("active")
        updated = t.select(
            "offer_id",
            F.when(act(10, 25) & F.lit(shops > 1), other_shop).otherwise(F.col("shop_id")).cast("bigint").alias("shop_id"),
            F.when(act(25, 40), F.col("_category")).otherwise(F.col("category_id")).cast("int").alias("category_id"),
            F.when(a >= 90, _title(self.dice, "offer_id")).otherwise(F.col("title")).alias("title"),
            F.when(act(40, 55), flipped).otherwise(F.col("status")).alias("status"),
            F.when(a >= 55, self.dice.money("offers.price", "offer_id", 100, 100_000))
            .otherwise(F.col("base_price")).alias("base_price"),
            F.when(live, a < 10).otherwise(a >= 50).alias("is_deleted"),
            F.when(live & (a < 10), "-").otherwise("~").alias("_op"))
        inserted = _offer_rows(self.dice, new_ids, shops, categories, deleted_percent=0)
        return self._delta("offers", [updated, inserted.withColumn("_op", F.lit("+"))], "soft", "updated_at")

    def _prices(self, first_new_offer: int, new_offers: int) -> _Delta:
        """Hard deletes and price/currency changes; prices for new offers and new kinds for old ones."""
        from pyspark.sql import functions as F

        old, rows = self._table("prices")
        touched, adding = batch_size(rows, self.fraction)
        t = self._touched(old, "prices", touched)
        a = F.col("_a")
        price, currency = _price_columns(self.dice)
        updated = t.select(
            "offer_id", "price_kind",
            F.when(a >= 15, price).otherwise(F.col("price")).alias("price"),
            F.when(a >= 90, currency).otherwise(F.col("currency")).alias("currency"),
            F.when(a < 15, "-").otherwise("~").alias("_op"))
        for_new_offers = _price_rows(self.dice, _ids(self.spark, "offer_id", first_new_offer, new_offers))
        old_offers = first_new_offer - 1
        candidates = self.spark.range(adding if old_offers else 0).select(
            (self.dice.below(max(1, old_offers), "prices.add.offer", "id") + 1).alias("offer_id"),
            self.dice.pick(tuple(k for k, _ in PRICE_KINDS), "prices.add.kind", "id").alias("price_kind"))
        new_kinds = candidates.dropDuplicates(["offer_id", "price_kind"]).join(old, ["offer_id", "price_kind"], "left_anti")
        inserted = for_new_offers.unionByName(_price_values(self.dice, new_kinds))
        return self._delta("prices", [updated, inserted.withColumn("_op", F.lit("+"))], "hard", "changed_at")

    def _orders(self, first_new_offer: int, new_offers: int) -> _Delta:
        """New orders after all previous ones; about a fifth of them for the offers new in this batch."""
        from pyspark.sql import functions as F

        _, rows = self._table("orders")
        count = 0 if self.fraction <= 0 else max(1, round(self.fraction * rows))
        first = self.next_ids["orders"]
        ids = self._new_ids("orders", count)
        offer = _uniform_offer(self.dice, self.next_ids["offers"] - 1)
        if new_offers:
            fresh = self.dice.below(new_offers, "orders.new_offer", "order_id") + first_new_offer
            offer = F.when(self.dice.percent("orders.fresh", "order_id") < 20, fresh).otherwise(offer)
        orders = _order_rows(self.dice, ids, offer, self.clock_us, _step(BATCH_US, count), first_id=first)
        return _Delta("orders", orders, "append", None, {"+": count})


# --- tables and bookkeeping ----------------------------------------------------------------------


def _name(table: str) -> str:
    return f"{DATABASE}.{table}"


def _row_counts(spark: "SparkSession", tables: tuple[str, ...]) -> dict[str, int]:
    """Row counts of several tables in one Spark job."""
    from functools import reduce

    from pyspark.sql import functions as F

    counts = [spark.table(_name(t)).groupBy().count().select(F.lit(t).alias("table"), "count") for t in tables]
    return {row["table"]: row["count"] for row in reduce(lambda a, b: a.unionByName(b), counts).collect()}


def _rows_state(counts: dict[str, int]) -> dict[str, int]:
    """The source tables' row counts as bookkeeping entries: a batch sizes its changes from them
    without counting the tables (~14 s of a cold `demo change`'s 52 s at 200 offers, on Delta).
    Tables edited by hand since only make a batch's share of them a little off."""
    return {f"rows.{table}": n for table, n in counts.items()}


def _rows_of(state: dict[str, int]) -> dict[str, int] | None:
    """The row counts the state keeps, or None when it keeps none (a demo initialized before they were kept)."""
    counts = {table: state.get(f"rows.{table}") for table in SOURCES}
    return None if None in counts.values() else counts


def _feed_schema(table: str) -> str:
    types = {"warehouse_id": "bigint", "offer_id": "bigint", "price_kind": "string", "changed_at": "timestamp",
             "change_id": "bigint"}
    return ", ".join(f"{column} {types[column]}" for column in COLUMNS[table])


def _create(spark: "SparkSession", table: str, rows: "DataFrame", table_format: str = "parquet") -> None:
    if table_format != DELTA:
        _new_table(spark, _name(table), rows.select(*COLUMNS[table]))
        return
    spark.sql(f"DROP TABLE IF EXISTS {_name(table)}")  # it may have been parquet: no replace in place
    writer = rows.select(*COLUMNS[table]).writeTo(_name(table)).using(DELTA)
    for key, value in sorted(SOURCE_PROPERTIES.items()):
        writer = writer.tableProperty(key, value)
    writer.create()


def _new_table(spark: "SparkSession", name: str, rows: "DataFrame") -> None:
    # Not mode("overwrite"): with Delta's catalog on, that is a REPLACE TABLE AS SELECT, which
    # parquet tables refuse (UNSUPPORTED_FEATURE.TABLE_OPERATION) when writes run in threads.
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    rows.write.format("parquet").saveAsTable(name)


def _merge(spark: "SparkSession", table: str, rows: "DataFrame") -> None:
    """Apply changed rows (``_op``: '+', '~', '-') to a Delta table in one MERGE (one version)."""
    import uuid

    view = f"demo_changes_{uuid.uuid4().hex[:12]}"  # the batch's tables are merged side by side
    rows.createOrReplaceTempView(view)
    columns = COLUMNS[table]
    on = " AND ".join(f"t.{k} = s.{k}" for k in KEYS[table])
    sets = ", ".join(f"t.{c} = s.{c}" for c in columns if c not in KEYS[table])
    try:
        spark.sql(f"MERGE INTO {_name(table)} AS t USING {view} AS s ON {on}\n"
                  f"WHEN MATCHED AND s._op = '-' THEN DELETE\n"
                  f"WHEN MATCHED THEN UPDATE SET {sets}\n"
                  f"WHEN NOT MATCHED AND s._op <> '-' THEN INSERT ({', '.join(columns)}) "
                  f"VALUES ({', '.join(f's.{c}' for c in columns)})")
    finally:
        spark.catalog.dropTempView(view)


def _append(spark: "SparkSession", table: str, rows: "DataFrame") -> None:
    rows.select(*COLUMNS[table]).write.insertInto(_name(table))


def _swap(spark: "SparkSession", table: str, rows: "DataFrame") -> None:
    """Write the new version beside the table, then drop the old one and rename the new one."""
    side = f"{_name(table)}__next"
    _new_table(spark, side, rows)
    spark.sql(f"DROP TABLE IF EXISTS {_name(table)}")
    spark.sql(f"ALTER TABLE {side} RENAME TO {_name(table)}")


def _recover(spark: "SparkSession") -> None:
    """Finish or undo a swap that a crash interrupted: a side table whose table is gone is the
    new version; one whose table still exists was never swapped in."""
    tables = _tables(spark)
    for side in sorted(t for t in tables if t.endswith("__next")):
        table = side.removesuffix("__next")
        if table in tables:
            spark.sql(f"DROP TABLE {_name(side)}")
        else:
            spark.sql(f"ALTER TABLE {_name(side)} RENAME TO {_name(table)}")


def _tables(spark: "SparkSession") -> set[str]:
    if not spark.catalog.databaseExists(DATABASE):
        return set()
    return {row["tableName"] for row in spark.sql(f"SHOW TABLES IN {DATABASE}").collect() if not row["isTemporary"]}


def _read_state(spark: "SparkSession") -> dict[str, int]:
    if not spark.catalog.tableExists(_name(STATE_TABLE)):
        raise RunError(Problem(f"the demo tables do not exist ({_name(STATE_TABLE)} is missing)",
                               hint="run `mvflow demo init` first", code="no-demo"))
    return {row["name"]: row["value"] for row in spark.table(_name(STATE_TABLE)).collect()}


def _write_state(spark: "SparkSession", state: dict[str, int]) -> None:
    rows = spark.createDataFrame(sorted(state.items()), "name string, value bigint").coalesce(1)
    _swap(spark, STATE_TABLE, rows)
