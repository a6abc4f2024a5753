"""The ``mv`` kind: a wide table joined from a main source and its related tables, refreshed
by key (DESIGN.md §4).

- compile time: ``lift`` (aggregates joined back become mvs of their own), ``normalize`` (views,
  CTEs, ``*``, semi-joins, DISTINCT and derived tables flattened into one SELECT), ``plan`` (the
  SELECT validated and analysed: ``shape``, ``inputs`` and their keys, joins, key paths),
  ``queries`` (the queries a batch runs, as sqlglot ASTs) and ``derive`` (every statement by
  name, as written under ``target/run/<mv>/``; ``mvflow explain``);
- ``refresh``: the runner: one batch (probe, ranges, changed and affected keys, write, commit);
- ``change_modes``: how each input's changes are seen (positions, feeds, the Change Data Feed,
  snapshot or time-travel diffs, upstream MVs);
- ``storage``: how the rows are stored, per table format (parquet slots + merge-on-read view, or
  one Delta table with a ``MERGE`` per batch);
- ``decisions`` and ``strategy``: the pure decisions (rebuild or not, up to date, ranges; the
  cost model choosing incremental, chunked or full).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..base import ModelKind, ModelRunner

if TYPE_CHECKING:
    from ...manifest import Manifest, Model
    from ...publish.spec import PublishSpec
    from ...run import RunOptions
    from ...state import StateStore
    from ...verify import Expected

#: ``config(strategy=...)``: how each batch with changes is applied (``strategy``).
MV_STRATEGIES = ("auto", "incremental", "chunked", "full")


@dataclass(frozen=True)
class MvKind(ModelKind):
    """A wide table refreshed by key (``mv``)."""

    name: ClassVar[str] = "mv"
    breaking: ClassVar[tuple[str, ...]] = ("unique_key",)
    operational: ClassVar[tuple[str, ...]] = ("fanout_threshold", "compact_threshold", "compact_below_rows", "strategy",
                                              "min_interval_seconds", "chunk_keys", "cluster_by", "publish")
    zero_ok: ClassVar[frozenset[str]] = frozenset({"compact_below_rows"})
    on_breaking: ClassVar[str] = "rebuild"
    run_folder: ClassVar[bool] = True
    unique_key: tuple[str, ...] = ()
    fanout_threshold: float = 0.2
    compact_threshold: float = 0.1
    #: an MV of at most this many rows is compacted after every batch by key, so its readers read a
    #: plain table (``strategy.compaction_reason``); 0: only past ``compact_threshold``
    compact_below_rows: int = 100_000
    strategy: str = "auto"
    min_interval_seconds: int = 0  # ``min_interval``: the shortest time between two batches
    chunk_keys: int = 500_000  # affected keys per chunk of a chunked refresh
    #: Delta liquid clustering columns; a change is applied by ``ALTER TABLE … CLUSTER BY`` (no rebuild)
    cluster_by: tuple[str, ...] = ()
    #: where its rows are published by key (``compiler.publish``): a serving store's table
    publish: "PublishSpec | None" = None

    @property
    def is_incremental(self) -> bool:
        return True

    def runner(self, options: "RunOptions") -> ModelRunner:
        from .refresh import mv_runner

        return mv_runner(options.store, options.full_refresh, options.echo, options.file_check, options.phase,
                         options.holder, options.lease_ttl)

    def watched(self, model: "Model") -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (), (model.name,)  # an MV's rows change only by a committed batch: its topic moves

    def next_run(self, manifest, model, store, now) -> tuple[str, str]:
        from .refresh import next_run

        return next_run(manifest, model, store, now)

    def run_files(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        header = f"-- mvflow: {model.name} (mv), derived from {model.path}\n"
        return {f"{name.replace(':', '__')}.sql": f"{header}{sql.rstrip()};\n"
                for name, sql in self.derived_sql(manifest, model).items()}

    def expected(self, manifest: "Manifest", model: "Model", store: "StateStore | None") -> "Expected":
        from ...parse import pretty
        from ...verify import Expected
        from .analyze import mv_plan

        plan = mv_plan(model, manifest)
        return Expected(pretty(model.ast), plan.visible_key)

    def derived_sql(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        from .derive import derived

        return derived(manifest, model).queries
