"""The ``numerator`` kind (seed 001): a persistent ``<shard_id, doc_id>`` per key tuple across
generations, with the ids of long-gone keys reused after ``ttl_generations`` and a versioned
state ``T.S.V.G``.

``{{ config(materialized='numerator', key=[...], shards=N, ttl_generations=G) }}`` over a SELECT of
key tuples gives a view ``key…, shard_id, doc_id`` of the keys present now.

- ``version``: the state version, its compatibility rule and what the offsets row keeps of it;
- ``decisions``: what a generation does (append, rebuild, re-shard, nothing), from counts: pure;
- ``plan``: compile time: the statements of a generation (``target/run/<model>/generation.sql``);
- ``generation``: the runner: the lease, the build, the fenced commit, the view, the cleanup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ...sources import IDENTIFIER
from ..base import KindError, ModelKind, ModelRunner

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ...manifest import Manifest, Model
    from ...run import RunOptions
    from ...state import StateStore
    from ...verify import Expected

_RESERVED = ("shard_id", "doc_id", "last_seen", "present")  # the state's own columns (``plan.RESERVED``)


@dataclass(frozen=True)
class NumeratorKind(ModelKind):
    """Persistent ``<shard_id, doc_id>`` per key tuple (``numerator``)."""

    name: ClassVar[str] = "numerator"
    breaking: ClassVar[tuple[str, ...]] = ("key",)
    #: a new scheme or TTL is applied by the next generation itself (a re-shard, a later reuse)
    operational: ClassVar[tuple[str, ...]] = ("ttl_generations", "max_holes")
    run_folder: ClassVar[bool] = True
    zero_ok: ClassVar[frozenset[str]] = frozenset({"ttl_generations", "sharding_scheme", "state_type"})
    key: tuple[str, ...] = ()
    shards: int = 1
    ttl_generations: int = 3  # generations a key may be absent before its id goes to a new key
    sharding_scheme: int = 0  # S's input: bump it to re-shard with the same shards
    state_type: int = 1  # T
    max_holes: float = 0.5  # share of ids held by absent keys above which the state is compacted

    @property
    def verifiable(self) -> bool:
        return True

    @classmethod
    def check_config(cls, values: dict[str, Any]) -> list[KindError]:
        """Checks across the coerced config values.

        >>> [str(e) for e in NumeratorKind.check_config({"key": ("a", "doc_id", "a"), "max_holes": 1.5})]
        ["key column 'doc_id' is a column the numerator adds", "key names column 'a' twice", 'max_holes must be a share of the ids between 0 and 1, got 1.5']
        >>> str(NumeratorKind.check_config({})[0])
        'a numerator needs its key: config(key=[...])'
        """
        key = values.get("key", ())
        errors = []
        if not key:
            errors.append(KindError("a numerator needs its key: config(key=[...])",
                                    "name the columns of the SELECT whose tuples get ids, e.g. key=['shop_id', 'offer_id']",
                                    "numerator-key"))
        seen: set[str] = set()
        for column in key:
            if not IDENTIFIER.fullmatch(column):
                errors.append(KindError(f"key column '{column}' is not a plain column name", "use letters, digits and _ only",
                                        "numerator-key", "key"))
            elif column.lower() in seen:
                errors.append(KindError(f"key names column '{column}' twice", "list each column once", "numerator-key", "key"))
            elif column.lower() in _RESERVED:
                errors.append(KindError(f"key column '{column}' is a column the numerator adds",
                                        f"rename it in the SELECT ({', '.join(_RESERVED)} are the numerator's)",
                                        "numerator-key", "key"))
            seen.add(column.lower())
        if not 0 <= values.get("max_holes", 0.5) <= 1:
            errors.append(KindError(f"max_holes must be a share of the ids between 0 and 1, got {values['max_holes']}",
                                    "e.g. max_holes=0.5: compact when half the ids are held by absent keys",
                                    "bad-config", "max_holes"))
        return errors

    def output_columns(self, select_columns: list[str] | None) -> list[str]:
        """The view's columns: the SELECT's (its key tuple), then ``shard_id, doc_id``; a SELECT that
        outputs other columns or misses a key column raises KindError.

        >>> NumeratorKind(key=("a", "b")).output_columns(["b", "a"])
        ['b', 'a', 'shard_id', 'doc_id']
        >>> NumeratorKind(key=("a", "b")).output_columns(["a", "c"])
        Traceback (most recent call last):
        ...
        compiler.kinds.base.KindError: key column 'b' is not an output column of the SELECT
        """
        if select_columns is None:
            return [*self.key, "shard_id", "doc_id"]
        have = {c.lower() for c in select_columns}
        for column in self.key:
            if column.lower() not in have:
                raise KindError(f"key column '{column}' is not an output column of the SELECT",
                                "select it, or fix the key; the SELECT outputs " + ", ".join(select_columns),
                                "numerator-key", "key")
        extra = [c for c in select_columns if c.lower() not in {k.lower() for k in self.key}]
        if extra:
            raise KindError(f"the SELECT outputs {', '.join(extra)}, which {'is' if len(extra) == 1 else 'are'} not in the key",
                            "a numerator's SELECT outputs its key tuple only: drop the column or add it to key",
                            "numerator-key", "key")
        return [*select_columns, "shard_id", "doc_id"]

    def runner(self, options: "RunOptions") -> ModelRunner:
        from .generation import GenerationOptions, numerator_runner

        chosen = GenerationOptions(rebuild=options.rebuild_state, fresh=options.full_refresh, phase=options.phase,
                                   file_check=options.file_check)
        if options.holder:
            chosen.holder = options.holder
        if options.lease_ttl:
            chosen.lease_ttl_seconds = options.lease_ttl
        return numerator_runner(options.store, chosen)

    def watched(self, model: "Model") -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (), (model.name,)  # a numerator's rows change only by a committed generation: its topic moves

    def next_run(self, manifest, model, store, now) -> tuple[str, str]:
        from .generation import waiting_words, watch_spec
        from .plan import numerator

        plan = numerator(model)
        offset = store.get(plan.topic)
        if offset is None or offset.last is None:
            return "build", "no state committed yet"
        if offset.in_flight:
            return "redo", "the generation that did not commit"
        waiting = waiting_words(watch_spec(plan, model), store, now)
        return ("nothing", waiting) if waiting else ("generation", "an input file moved: a new generation if its key set changed")

    def run_files(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        from .plan import generation_script, numerator

        return {"generation.sql": generation_script(numerator(model), model)}

    def expected(self, manifest: "Manifest", model: "Model", store: "StateStore | None") -> "Expected":
        """The view holds one row per distinct key tuple of the SELECT (ids are not recomputable:
        they depend on every earlier generation)."""
        from sqlglot import exp

        from ...parse import pretty
        from ...verify import Expected
        from .plan import numerator

        key = numerator(model).output[:-2]
        return Expected(pretty(exp.select(*key).distinct().from_(model.ast.copy().subquery("q"))), tuple(key))

    def output_types(self, spark: "SparkSession", model: "Model") -> dict[str, str] | None:
        types = super().output_types(spark, model)
        return None if types is None else {**types, "shard_id": "int", "doc_id": "bigint"}
