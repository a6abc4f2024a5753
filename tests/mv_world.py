"""A tiny marketplace on real Spark tables for the MV oracle tests: sources kept as Python
rows, written to parquet when they change, one MV refreshed and verified against a full
recomputation after every batch."""

from __future__ import annotations

import itertools
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
import textwrap
from pathlib import Path

from compiler.compile import compile_project
from compiler.kinds.mv.derive import derived
from compiler.kinds.mv.refresh import refresh_mv
from compiler.kinds.mv.storage import MvState
from compiler.project import StateSettings, load_project
from compiler.state import open_state_store
from compiler.verify import verify_model
from tiny_spark import rows_frame

_counter = itertools.count(1)
_SOFT_DELETED = ("offers", "shops", "offer_notes", "offer_tags", "shop_staff")

SCHEMAS = {
    "offers": "id BIGINT, shop_id BIGINT, cat_id INT, title STRING, status STRING, note STRING, deleted BOOLEAN, ts TIMESTAMP, seq BIGINT",
    "shops": "id BIGINT, name STRING, wh_id BIGINT, rating INT, deleted BOOLEAN, v BIGINT",
    "warehouses": "id BIGINT, name STRING, region_id INT",
    "warehouses_changes": "id BIGINT, v BIGINT",
    "regions": "id INT, name STRING",
    "categories": "id INT, name STRING, note STRING",
    "prices": "offer_id BIGINT, kind STRING, price DECIMAL(12,2)",
    "prices_changes": "offer_id BIGINT, kind STRING, v BIGINT",
    "settings": "name STRING, value STRING",
    "offer_notes": "id BIGINT, offer_id BIGINT, cat_id INT, text STRING, deleted BOOLEAN, v BIGINT",
    "offer_tags": "id BIGINT, offer_id BIGINT, cat_id INT, text STRING, deleted BOOLEAN, v BIGINT",
    "shop_staff": "id BIGINT, shop_id BIGINT, name STRING, deleted BOOLEAN, v BIGINT",
}
KEYS = {"offers": ("id",), "shops": ("id",), "warehouses": ("id",), "regions": ("id",), "categories": ("id",),
        "prices": ("offer_id", "kind"), "settings": ("name",), "offer_notes": ("id",),
        "offer_tags": ("id",), "shop_staff": ("id",)}

LINEAGE = """
sources:
  - {{name: offers, database: {db}, primary_key: [id], position: [ts, seq], deleted: deleted}}
  - {{name: shops, database: {db}, primary_key: [id], position: [v], deleted: deleted}}
  - name: warehouses
    database: {db}
    primary_key: [id]
    changes: {{table: {db}.warehouses_changes, position: [v]}}
  - {{name: regions, database: {db}, primary_key: [id], dictionary: true}}
  - {{name: categories, database: {db}, primary_key: [id], dictionary: true}}
  - name: prices
    database: {db}
    primary_key: [offer_id, kind]
    changes: {{table: {db}.prices_changes, position: [v]}}
  - {{name: settings, database: {db}, primary_key: [name], dictionary: true}}
  - {{name: offer_notes, database: {db}, primary_key: [id], unique: [[offer_id]], position: [v], deleted: deleted}}
  - {{name: offer_tags, database: {db}, primary_key: [id], position: [v], deleted: deleted}}
  - {{name: shop_staff, database: {db}, primary_key: [id], position: [v], deleted: deleted}}
"""

WIDE = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
SELECT
  o.id,
  o.title,
  s.name AS shop,
  w.name AS warehouse,
  r.name AS region,
  c.name AS category,
  p.price,
  g.value AS currency
FROM {{{{ source('{db}', 'offers') }}}} AS o
JOIN {{{{ source('{db}', 'shops') }}}} AS s ON s.id = o.shop_id AND s.deleted = FALSE
JOIN {{{{ source('{db}', 'warehouses') }}}} AS w ON w.id = s.wh_id
LEFT JOIN {{{{ source('{db}', 'regions') }}}} AS r ON r.id = w.region_id
LEFT JOIN {{{{ source('{db}', 'categories') }}}} AS c ON c.id = o.cat_id
LEFT JOIN {{{{ source('{db}', 'prices') }}}} AS p ON p.offer_id = o.id AND p.kind = 'retail'
LEFT JOIN {{{{ source('{db}', 'settings') }}}} AS g ON g.name = 'currency'
WHERE o.deleted = FALSE AND o.status = 'active' AND s.rating >= 2
"""


_UNION_PARTS = """
SELECT <offer_key>, o.title AS name, c.name AS detail
FROM {{{{ source('{db}', 'offers') }}}} AS o
LEFT JOIN {{{{ source('{db}', 'categories') }}}} AS c ON c.id = o.cat_id
WHERE o.deleted = FALSE AND o.status = 'active'
UNION ALL
SELECT <shop_key>, s.name AS name, w.name AS detail
FROM {{{{ source('{db}', 'shops') }}}} AS s
JOIN {{{{ source('{db}', 'warehouses') }}}} AS w ON w.id = s.wh_id
WHERE s.deleted = FALSE
"""
_UNION_CONFIG = "{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0, unique_key=<key>) }}}}"
SHAPES = {
    "discriminator": {"<key>": "['kind', 'id']", "<offer_key>": "'offer' AS kind, o.id", "<shop_key>": "'shop' AS kind, s.id"},
    "computed": {"<key>": "'id'", "<offer_key>": "100000000 + CAST(o.id AS BIGINT) AS id", "<shop_key>": "200000000 + s.id AS id"},
}


def union_model(shape: str) -> str:
    """A UNION ALL mv over offers and shops, its parts told apart as ``SHAPES[shape]`` says."""
    text = _UNION_CONFIG + _UNION_PARTS
    for marker, value in SHAPES[shape].items():
        text = text.replace(marker, value)
    return text


_NOTES = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
SELECT o.id, o.title, n.text AS note, nc.name AS note_category
FROM {{{{ source('{db}', 'offers') }}}} AS o
<join> {{{{ source('{db}', 'offer_notes') }}}} AS n ON n.offer_id = o.id AND n.deleted = FALSE
LEFT JOIN {{{{ source('{db}', 'categories') }}}} AS nc ON nc.id = n.cat_id
WHERE o.deleted = FALSE
"""


def notes_model(join: str) -> str:
    """Offers with their note (``offer_notes`` joined by its unique ``offer_id``) and the note's category."""
    return _NOTES.replace("<join>", join)


_TAGS = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
SELECT o.id, o.title, t.text AS tag, tc.name AS tag_category
FROM {{{{ source('{db}', 'offers') }}}} AS o
<join> {{{{ source('{db}', 'offer_tags') }}}} AS t ON t.offer_id = o.id AND t.deleted = FALSE
LEFT JOIN {{{{ source('{db}', 'categories') }}}} AS tc ON tc.id = t.cat_id
WHERE o.deleted = FALSE
"""

# an aggregate joined back (kinds/mv/lift.py): offers with their tags counted by a CTE, itself a join
TAG_COUNTS = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
with tagged as (
    select t.offer_id, count(*) as tags, max(c.name) as last_category
    from {{{{ source('{db}', 'offer_tags') }}}} as t
    left join {{{{ source('{db}', 'categories') }}}} as c on c.id = t.cat_id
    where t.deleted = false
    group by t.offer_id
)
select o.id, o.title, coalesce(tagged.tags, 0) as tags, tagged.last_category
from {{{{ source('{db}', 'offers') }}}} as o
left join tagged on tagged.offer_id = o.id
where o.deleted = false
"""

STAFF = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
SELECT o.id, st.id AS staff_id, o.title, s.name AS shop, st.name AS staff
FROM {{{{ source('{db}', 'offers') }}}} AS o
JOIN {{{{ source('{db}', 'shops') }}}} AS s ON s.id = o.shop_id
LEFT JOIN {{{{ source('{db}', 'shop_staff') }}}} AS st ON st.shop_id = s.id AND st.deleted = FALSE
WHERE o.deleted = FALSE AND s.deleted = FALSE
"""


_RANKED = """
{{{{ config(materialized='mv', schema='{db}', strategy='<strategy>', chunk_keys=2, compact_threshold=100, compact_below_rows=0) }}}}
SELECT
  o.id,
  s.name AS shop,
  c.name AS category,
  ROW_NUMBER() OVER (PARTITION BY o.shop_id ORDER BY p.price DESC NULLS LAST, o.id) AS rank_in_shop,
  COUNT(*) OVER (PARTITION BY o.shop_id) AS shop_offers,
  SUM(p.price) OVER (PARTITION BY o.shop_id, o.cat_id) AS shop_category_total
FROM {{{{ source('{db}', 'offers') }}}} AS o
JOIN {{{{ source('{db}', 'shops') }}}} AS s ON s.id = o.shop_id AND s.deleted = FALSE
LEFT JOIN {{{{ source('{db}', 'prices') }}}} AS p ON p.offer_id = o.id AND p.kind = 'retail'
LEFT JOIN {{{{ source('{db}', 'categories') }}}} AS c ON c.id = o.cat_id
WHERE o.deleted = FALSE AND o.status = 'active'
"""


def ranked_model(strategy: str = "incremental") -> str:
    """Offers ranked within their shop by retail price, with per-shop and per-shop-and-category
    windows (partitioned by the main table's ``shop_id``, which the SELECT does not select);
    ``chunked``: every batch in chunks of 2 keys."""
    return _RANKED.replace("<strategy>", strategy)


SHOP_STATS = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
SELECT
  o.shop_id,
  s.name AS shop,
  COUNT(*) AS offers,
  COUNT(DISTINCT o.cat_id) AS categories,
  SUM(p.price) AS total,
  MIN(p.price) AS cheapest,
  AVG(p.price) AS mean,
  MAX(o.title) AS last_title,
  ARRAY_SORT(COLLECT_SET(c.name)) AS category_names
FROM {{{{ source('{db}', 'offers') }}}} AS o
JOIN {{{{ source('{db}', 'shops') }}}} AS s ON s.id = o.shop_id AND s.deleted = FALSE
LEFT JOIN {{{{ source('{db}', 'prices') }}}} AS p ON p.offer_id = o.id AND p.kind = 'retail'
LEFT JOIN {{{{ source('{db}', 'categories') }}}} AS c ON c.id = o.cat_id
WHERE o.deleted = FALSE AND o.status = 'active'
GROUP BY o.shop_id, s.name
"""

REGION_STATS = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0) }}}}
SELECT r.name AS region, COUNT(*) AS offers, COUNT(DISTINCT s.id) AS shops
FROM {{{{ source('{db}', 'offers') }}}} AS o
JOIN {{{{ source('{db}', 'shops') }}}} AS s ON s.id = o.shop_id
JOIN {{{{ source('{db}', 'warehouses') }}}} AS w ON w.id = s.wh_id
LEFT JOIN {{{{ source('{db}', 'regions') }}}} AS r ON r.id = w.region_id
WHERE o.deleted = FALSE
GROUP BY r.name
HAVING COUNT(*) >= 2
"""


def tags_model(join: str) -> str:
    """Offers with each of their tags (``offer_tags``: many per offer, keyed by their own id,
    which stays hidden in the MV's key) and each tag's category."""
    return _TAGS.replace("<join>", join)


def with_format(model: str, table_format: str) -> str:
    """The model's text with ``table_format`` in its config (parquet: unchanged)."""
    if table_format == "parquet":
        return model
    return model.replace("materialized='mv',", f"materialized='mv', table_format='{table_format}',", 1)


class World:
    """Source tables in database ``db`` plus one project whose models read them."""

    def __init__(self, spark, root: Path, models: dict[str, str] | None = None, table_format: str = "parquet",
                 project: str = "name: t\n"):
        self.spark = spark
        self.db = f"mvt{next(_counter)}_{abs(hash(str(root))) % 10_000}"
        self.root, self.table_format = root, table_format
        self.rows: dict[str, dict[tuple, tuple]] = {t: {} for t in SCHEMAS}
        self.dirty: set[str] = set(SCHEMAS)
        self.clock = 0
        files = {"project.yml": project, "lineage/t.yml": LINEAGE.format(db=self.db)}
        for name, text in (models or {"wide": WIDE}).items():
            files[f"models/{name}.sql"] = with_format(text.format(db=self.db), table_format)
        for name, text in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"))
        self.store = open_state_store(StateSettings(path=root / "state.sqlite"))
        self.manifest = compile_project(load_project(root))
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {self.db}")

    # -- changing sources --------------------------------------------------------------
    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def put(self, table: str, **values) -> None:
        """Insert or update one row (position columns and change feeds are maintained here)."""
        columns = [c.split()[0] for c in SCHEMAS[table].split(", ")]
        key = tuple(values[k] for k in KEYS[table])
        old = dict(zip(columns, self.rows[table].get(key, (None,) * len(columns))))
        row = {**old, **values}
        self._position(table, row, key)
        self.rows[table][key] = tuple(row[c] for c in columns)
        self.dirty.add(table)

    def delete(self, table: str, *key) -> None:
        """A soft delete for position sources, a hard delete (plus a feed entry) otherwise."""
        if table in _SOFT_DELETED:
            self.put(table, **dict(zip(KEYS[table], key)), deleted=True)
            return
        self.rows[table].pop(tuple(key), None)
        self._feed(table, tuple(key))
        self.dirty.add(table)

    def _position(self, table: str, row: dict, key: tuple) -> None:
        tick = self.tick()
        if table == "offers":
            import datetime as dt

            row["ts"], row["seq"] = dt.datetime(2024, 1, 1) + dt.timedelta(seconds=tick // 3), tick
            row.setdefault("deleted", False)
            row["deleted"] = bool(row["deleted"])
        elif table in _SOFT_DELETED:
            row["v"] = tick
            row["deleted"] = bool(row.get("deleted"))
        self._feed(table, key)

    def _feed(self, table: str, key: tuple) -> None:
        feed = f"{table}_changes"
        if feed in SCHEMAS:
            self.rows[feed][(*key, self.tick())] = (*key, self.clock)
            self.dirty.add(feed)

    def flush(self) -> None:
        """Write the changed tables, at once: a few rows' write is mostly fixed latency (planning,
        the metastore), which threads overlap (the seed's 12 tables: a quarter less wall)."""
        def write(table: str) -> None:
            # a pool thread's JVM side has no active session: without it, a frame of spark.sql is
            # written as a REPLACE TABLE that the session catalog refuses for parquet
            self.spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.spark._jsparkSession)
            frame = rows_frame(self.spark, list(self.rows[table].values()), SCHEMAS[table])
            frame.write.mode("overwrite").format("parquet").saveAsTable(f"{self.db}.{table}")

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(write, sorted(self.dirty)))
        self.dirty.clear()

    # -- the MV ------------------------------------------------------------------------
    def recompile(self) -> None:
        """Compile the project again (after a model file changed)."""
        self.manifest = compile_project(load_project(self.root))

    def build_views(self) -> None:
        """Create the project's view models (an MV reads through them; ``verify`` reads them)."""
        from compiler.kinds.view import run_view

        for name in self.manifest.order():
            model = self.manifest.models[name]
            if model.kind.name == "view":
                result = run_view(self.spark, self.manifest, model)
                assert result.status == "success", result.message

    def refresh(self, name: str = "wide", **options):
        self.flush()
        return refresh_mv(self.spark, self.manifest, self.manifest.models[name], self.store, **options)

    def verdict(self, name: str = "wide"):
        return verify_model(self.spark, self.manifest, self.manifest.models[name])

    def check(self, name: str = "wide") -> int:
        """The MV's rows equal its recomputation, as a multiset (a key stored twice is a mismatch too);
        a GROUP BY MV's state counts its groups as readers see them (parquet: as of the last build or
        compaction). Returns the rows. Compared in Python: ``verify``'s jobs took longer than the
        refresh they checked; it runs on a mismatch, for its report."""
        model = self.manifest.models[name]
        wanted = model.kind.expected(self.manifest, model, self.store)
        expected = self.spark.sql(wanted.sql, args=wanted.args or None)
        stored = self.spark.table(model.relation).select(*[f"`{c}`" for c in expected.columns])
        want, got = Counter(map(_hashable, expected.collect())), Counter(map(_hashable, stored.collect()))
        if want != got:
            raise AssertionError(f"{self.verdict(name).format()}\nonly recomputed: {want - got}\nonly stored: {got - want}")
        queries = derived(self.manifest, model).queries if model.kind.name == "mv" else {}
        if "count_groups" in queries or "count_base" in queries:  # grouped: Delta's groups counted by batch, parquet's by build
            state = MvState.parse(self.store.get(name).state)
            if not state.slot or not state.delta_rows:
                assert state.groups == got.total(), state
        return got.total()

    def table(self, name: str = "wide") -> list:
        model = self.manifest.models[name]
        return sorted(self.spark.table(model.relation).collect(), key=repr)


def _hashable(value):
    """A collected row as a Counter key: arrays and maps as tuples (in their stored order, as
    ``verify`` compares them).

    >>> _hashable((1, [2, 3], {"b": 1, "a": [4]}))
    (1, (2, 3), (('a', (4,)), ('b', 1)))
    """
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def seed(world: World) -> None:
    """Two regions, two warehouses, three shops, categories, prices, settings, six offers."""
    world.put("regions", id=1, name="North")
    world.put("regions", id=2, name="South")
    world.put("warehouses", id=10, name="W10", region_id=1)
    world.put("warehouses", id=20, name="W20", region_id=2)
    world.put("shops", id=100, name="Alpha", wh_id=10, rating=5)
    world.put("shops", id=200, name="Beta", wh_id=20, rating=4)
    world.put("shops", id=300, name="Gamma", wh_id=10, rating=1)
    world.put("categories", id=7, name="Books", note="x")
    world.put("categories", id=8, name="Games", note="y")
    world.put("settings", name="currency", value="EUR")
    world.put("settings", name="other", value="z")
    for i, (shop, cat, status) in enumerate([(100, 7, "active"), (100, 8, "active"), (200, 7, "active"),
                                             (200, None, "hidden"), (300, 8, "active"), (200, 8, "active")], start=1):
        world.put("offers", id=i, shop_id=shop, cat_id=cat, title=f"offer {i}", status=status, note="n")
        if i % 2:
            world.put("prices", offer_id=i, kind="retail", price=Decimal(f"{i}.50"))
        world.put("prices", offer_id=i, kind="promo", price=Decimal(f"{i}.10"))
