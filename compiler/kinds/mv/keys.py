"""The key sets of a batch by key, in Spark: each moved input's changed keys, then the MV keys they
affect (``compiler.kinds.mv.queries`` derives the statements that map one to the other).

Each set is a checkpoint (``BatchScope.checkpoint``) materialized by the job that counts it, and
a temporary view the next statements read: ``changed_<input>``, ``affected_p<part>`` (the main keys
of each part of the MV), ``keys`` (the MV keys the batch recomputes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .queries import lookup_inputs, walk_inputs
from .scope import BatchScope, small, union_all

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_TAG = "_mvflow_input"  # which input a row of the combined changed-keys checkpoint belongs to


def changed_keys(scope: BatchScope, frames: dict[str, "DataFrame"],
                 fingerprints: list["DataFrame"]) -> tuple[dict[str, int], dict[str, str]]:
    """The changed keys of each input in ``frames`` (its changes' keys), materialized together in one
    checkpoint (each input's view selects its rows from it) by the one job that counts them and
    reads the ``fingerprints`` of the snapshots taken for the commit. Returns the count per input
    and the fingerprint per snapshotted input."""
    from pyspark.sql import functions as F

    tags = {input_id: n for n, input_id in enumerate(frames)}
    tagged = [frame.select(F.lit(tags[i]).alias(_TAG), *[F.col(c).alias(f"{_TAG}{tags[i]}_{j}")
                                                        for j, c in enumerate(frame.columns)])
              for i, frame in frames.items()]
    keys = scope.checkpoint(union_all(tagged))
    counts = keys.groupBy(_TAG).count().select(F.col(_TAG).cast("string").alias("input"), "count")
    rows = [r.asDict() for r in union_all([counts, *fingerprints]).collect()]
    names = {str(n): input_id for input_id, n in tags.items()}
    changed = {input_id: 0 for input_id in frames}
    changed.update({names[r["input"]]: r["count"] for r in rows if r.get("fingerprint") is None})
    for input_id, frame in frames.items():
        n = tags[input_id]
        own = [F.col(f"{_TAG}{n}_{j}").alias(c) for j, c in enumerate(frame.columns)]
        scope.view(f"changed_{scope.plan.inputs[input_id].slug}",
                   small(keys.where(F.col(_TAG) == n).select(*own), changed[input_id]))
    return changed, {r["input"]: r["fingerprint"] for r in rows if r.get("fingerprint") is not None}


def affected_keys(scope: BatchScope, changed: dict[str, int]) -> tuple[int, dict[int, "DataFrame"]]:
    """The affected main keys of every part (views ``affected_p<i>``) and their MV keys (view
    ``keys``) for the ``changed`` counts of the views ``changed_keys`` made. Returns how many MV
    keys, and each part's affected main keys."""
    plan, queries = scope.plan, scope.derived.queries
    moved = {input_id for input_id, n in changed.items() if n}
    parts = {}
    for part in plan.parts:
        names = [f"key:{i}:p{part.index}" for i in sorted(moved)]
        for name, inputs in (("lookup", lookup_inputs(part)), ("walk", walk_inputs(part))):
            if moved & inputs:
                names.append(f"{name}:p{part.index}")
                _empty_changed_views(scope, inputs - moved)  # the query reads the view of each of its inputs
        frames = [scope.sql(name) for name in names if name in queries]
        if frames:
            parts[part.index] = scope.checkpoint(union_all(frames).distinct())
        else:
            parts[part.index] = scope.spark.table(plan.inputs[part.main_input].relation).select(*part.main_key).limit(0)
        scope.view(f"affected_p{part.index}", parts[part.index])
        if part.partitions and frames:  # windows: every main key of the partitions touched
            parts[part.index] = scope.checkpoint(scope.sql(f"partitions:p{part.index}"))
            scope.view(f"affected_p{part.index}", parts[part.index])
    keys = scope.sql("keys")  # over the checkpoints above: the same keys at every use
    count = keys.count()
    # No part has more distinct main keys than there are MV keys: each maps to its own.
    parts = {index: small(frame, count) for index, frame in parts.items()}
    for index, frame in parts.items():
        scope.view(f"affected_p{index}", frame)
    scope.view("keys", small(keys, count))
    return count, parts


def _empty_changed_views(scope: BatchScope, inputs: set[str]) -> None:
    for input_id in inputs:
        info = scope.plan.inputs[input_id]
        scope.view(f"changed_{info.slug}", scope.spark.table(info.relation).select(*info.key).limit(0))
