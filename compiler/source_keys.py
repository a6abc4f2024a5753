"""Source rows that break their declaration's keys: a ``primary_key`` (or ``unique`` key) value held
by more than one row, or NULL. mvflow maps every change to keys, so such rows make a model's key
ambiguous: a Delta MERGE refuses them, a recomputation disagrees with the stored rows. This module
names them — the source, where it is declared, the key and a sample of its bad values — when a run
fails or ``verify`` disagrees; it costs nothing while the keys hold (one Spark job, only then).

>>> from compiler.sources import Source
>>> offers = Source("stage", "offers", ("id",), "lineage/stage.yml", 3)
>>> print(BadKeys(offers, ("id",), (("1", 2), ("NULL", 1))).format())
source stage.offers (lineage/stage.yml:3): primary_key [id] holds 1 in 2 rows, NULL in 1 row
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from .parse import pretty

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .manifest import Manifest, Model
    from .sources import Source

SAMPLES = 5
HINT = ("mvflow maps every change to its source's declared keys: fix or remove those rows in the source, "
        "or declare the key the rows really have (primary_key / unique in the lineage file)")


class DuplicateKeys(Exception):
    """A batch's recomputed rows hold one MV key more than once: a source's rows break its declared
    keys (``compiler.failures`` names them). The batch was not written."""

    def __init__(self, model: str, keys: list[str]):
        super().__init__(f"{model} was not written: its batch held MV keys {', '.join(keys)} more than once "
                         "(no source's rows break their declared keys: a join may match several rows)")

    def getCondition(self) -> str:  # noqa: N802 - read like a Spark error's (compiler.failures)
        return "MVFLOW_DUPLICATE_KEYS"


@dataclass(frozen=True)
class BadKeys:
    """A key of one source with values held by several rows or NULL (a sample, with row counts)."""

    source: "Source"
    key: tuple[str, ...]
    samples: tuple[tuple[str, int], ...]

    @property
    def what(self) -> str:
        return "primary_key" if self.key == self.source.primary_key else "unique key"

    def format(self) -> str:
        values = ", ".join(f"{value} in {rows} row{'s' if rows != 1 else ''}" for value, rows in self.samples)
        return (f"source {self.source.id} ({self.source.path}:{self.source.line}): "
                f"{self.what} [{', '.join(self.key)}] holds {values}")

    def words(self) -> str:
        """What is wrong, for an error that points at the declaration itself."""
        values = ", ".join(value for value, _ in self.samples)
        return f"source {self.source.id}: {self.what} [{', '.join(self.key)}] is not unique or is NULL (values {values})"


def sources_read(manifest: "Manifest", model: "Model") -> list["Source"]:
    """The keyed sources a model reads, itself or through the views and ephemeral models it selects from."""
    seen, found, todo = set(), {}, [model]
    while todo:
        current = todo.pop()
        for source_id in current.depends_on_sources:
            source = manifest.sources.get(source_id)
            if source is not None and source.primary_key:
                found[source.id] = source
        for name in current.depends_on_models:
            upstream = manifest.models.get(name)
            if upstream is not None and name not in seen and upstream.kind.name in ("view", "ephemeral"):
                seen.add(name)
                todo.append(upstream)
    return [found[k] for k in sorted(found)]


def bad_keys_query(sources: list["Source"]) -> exp.Query:
    """Up to ``SAMPLES`` bad values of every key of every source, in one query (so one Spark job).

    >>> from compiler.sources import Source
    >>> print(bad_keys_query([Source("d", "t", ("a", "b"), "l.yml", 1)]).sql(dialect="spark"))  # doctest: +NORMALIZE_WHITESPACE
    SELECT * FROM (SELECT 0 AS _mvflow_key, CONCAT_WS(', ', COALESCE(CAST(a AS STRING), 'NULL'), COALESCE(CAST(b AS STRING), 'NULL')) AS value,
    COUNT(*) AS rows FROM d.t GROUP BY a, b HAVING COUNT(*) > 1 OR a IS NULL OR b IS NULL ORDER BY value LIMIT 5)
    """
    branches = []
    for key_id, (source, key) in enumerate(_keys(sources)):
        shown = [exp.func("COALESCE", exp.cast(exp.column(c), "STRING"), exp.Literal.string("NULL")) for c in key]
        value = exp.Anonymous(this="CONCAT_WS", expressions=[exp.Literal.string(", "), *shown])  # no NULL to skip
        nulls = [exp.column(c).is_(exp.null()) for c in key]
        several = exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(1))
        branch = (exp.select(exp.alias_(exp.Literal.number(key_id), "_mvflow_key"), exp.alias_(value, "value"),
                             exp.alias_(exp.Count(this=exp.Star()), "rows"))
                  .from_(exp.to_table(source.id)).group_by(*[exp.column(c) for c in key])
                  .having(exp.or_(several, *nulls)).order_by("value").limit(SAMPLES))
        branches.append(exp.select("*").from_(branch.subquery()))
    query = branches[0]
    for branch in branches[1:]:
        query = exp.union(query, branch, distinct=False)
    return query


def _keys(sources: list["Source"]) -> list[tuple["Source", tuple[str, ...]]]:
    return [(source, key) for source in sources for key in (source.primary_key, *source.unique) if key]


def find_bad_keys(spark: "SparkSession", sources: list["Source"]) -> list[BadKeys]:
    """The keys of ``sources`` that the rows break, with a sample of bad values (one Spark job).
    A source that cannot be read is left out: this is a diagnosis, the error it explains is raised anyway."""
    keys = _keys(sources)
    if not keys:
        return []
    try:
        rows = spark.sql(pretty(bad_keys_query(sources))).collect()
    except Exception:  # noqa: BLE001 - see the docstring
        return []
    samples: dict[int, list[tuple[str, int]]] = {}
    for row in rows:
        samples.setdefault(row["_mvflow_key"], []).append((row["value"], row["rows"]))
    return [BadKeys(keys[i][0], keys[i][1], tuple(sorted(found))) for i, found in sorted(samples.items())]
