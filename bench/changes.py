"""The P2 grid's two change patterns on the demo's sources, both one ``demo.change`` batch:

- ``random``: ``mvflow demo change --fraction f`` as is — main and side tables touched at random
  keys, plus a dictionary edit (today's P2);
- ``clustered``: what production changes mostly look like — the most recent offers (the highest
  ids) and their prices are updated, new offers arrive (with their prices), and one shop is
  edited; no dictionary, warehouse or new-shop changes.

The clustered batch reuses ``compiler.demo``'s batch machinery (positions, change feeds, the
bookkeeping, the crash-safe swap) and only chooses other rows, so both patterns write changes
the same way. It belongs in ``compiler.demo`` once the demo needs it (``demo change --pattern``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from compiler import demo

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PATTERNS = ("random", "clustered")


def apply(spark: "SparkSession", pattern: str, fraction: float, seed: int) -> dict[str, str]:
    """One change batch of ``pattern`` touching about ``fraction`` of the offers; table → summary."""
    if pattern == "random":
        return demo.change(spark, fraction=fraction, seed=seed)
    if pattern == "clustered":
        with _batches_of(_ClusteredBatch):
            return demo.change(spark, fraction=fraction, seed=seed)
    raise ValueError(f"unknown change pattern {pattern!r}: choose from {', '.join(PATTERNS)}")


@contextmanager
def _batches_of(batch_class: type) -> Iterator[None]:
    """``demo.change`` with another batch class (so its state keeping and writes are reused as is)."""
    original = demo._Batch
    demo._Batch = batch_class
    try:
        yield
    finally:
        demo._Batch = original


class _ClusteredBatch(demo._Batch):
    """The newest ``fraction`` of offers and of prices, new offers, one shop edit."""

    def build(self) -> list:
        categories, warehouses = self._existing("categories"), self._existing("warehouses")
        no_deleted_warehouses = self.spark.table(demo._name("warehouses")).select("warehouse_id").limit(0)
        shops = self._shops(warehouses, no_deleted_warehouses, self._new_ids("shops", 0))
        first_new_offer = self.next_ids["offers"]
        offers = self._offers(categories, self._inserted("offers"))
        new_offers = self.next_ids["offers"] - first_new_offer
        return [shops, offers, self._prices(first_new_offer, new_offers), self._orders(first_new_offer, new_offers)]

    def _existing(self, table: str) -> "demo._Choices":
        key = demo.KEYS[table][0]
        return demo._Choices.of(self.spark.table(demo._name(table)).select(key), self.rows[table])

    def _touched(self, df: "DataFrame", table: str, count: int, purpose: str = "touch") -> "DataFrame":
        from pyspark.sql import functions as F

        if table == "shops":
            return super()._touched(df, table, min(count, 1), purpose)
        if table not in ("offers", "prices"):
            return super()._touched(df, table, count, purpose)
        keys = demo.KEYS[table]
        newest = df.orderBy(*[F.col(k).desc() for k in keys]).limit(count)
        return newest.withColumn("_a", self.dice.percent(f"{table}.action", *keys))

    def _new_ids(self, table: str, count: int) -> "DataFrame":
        return super()._new_ids(table, 0 if table == "shops" else count)

    def _prices(self, first_new_offer: int, new_offers: int) -> "demo._Delta":
        """Price changes of the newest prices and prices of the new offers (no new kinds for old
        offers: those would fall on random offers)."""
        from pyspark.sql import functions as F

        old, rows = self._table("prices")
        touched, _ = demo.batch_size(rows, self.fraction)
        t = self._touched(old, "prices", touched)
        a = F.col("_a")
        price, currency = demo._price_columns(self.dice)
        updated = t.select(
            "offer_id", "price_kind",
            F.when(a >= 15, price).otherwise(F.col("price")).alias("price"),
            F.when(a >= 90, currency).otherwise(F.col("currency")).alias("currency"),
            F.when(a < 15, "-").otherwise("~").alias("_op"))
        inserted = demo._price_rows(self.dice, demo._ids(self.spark, "offer_id", first_new_offer, new_offers))
        return self._delta("prices", [updated, inserted.withColumn("_op", F.lit("+"))], "hard", "changed_at")
