"""The catalog during a run: before a model runs, whether what it produces changed since its active
version and what to do about it (``gate``); after it succeeded, its next version appended.

A model whose compiled definition and upstream versions match its active version costs one read
of the state store per run and no Spark: only a changed model has its SELECT analysed (no job)
for its column types.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

import networkx as nx

from ..errors import Problem
from ..graph import model_id, node_name
from ..state import CatalogVersion, StateStore
from .changes import Change, classify
from .entry import Entry, describe, typed
from .gate import Verdict, decide

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..manifest import Manifest, Model
    from ..run import Result, RunOptions

Runner = Callable[["RunOptions"], "Result"]


@dataclass(frozen=True)
class Check:
    """A model whose entry differs from its active version (``base``: that version, 0: none)."""

    entry: Entry
    verdict: Verdict
    base: int


class RunCatalog:
    """The catalog as one run sees it: the active versions, read once, and those the run appends."""

    def __init__(self, manifest: "Manifest", store: Callable[[], StateStore],
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self.manifest, self._open, self.now = manifest, store, now
        self._lock = threading.Lock()
        self._active: dict[str, CatalogVersion] | None = None
        self._opened: StateStore | None = None

    def _store(self) -> StateStore:
        if self._opened is None:  # opened when first needed: a run of seeds or tests only may not need it
            self._opened = self._open()
        return self._opened

    def active(self) -> dict[str, CatalogVersion]:
        with self._lock:
            if self._active is None:
                self._active = {}
                for version in self._store().versions():  # by model, then version: the last one stays
                    self._active[version.model] = version
            return self._active

    def run(self, spark: "SparkSession", model: "Model", options: "RunOptions", run: Runner) -> "Result":
        """Run ``model`` as its catalog verdict says, and record its new version if it succeeded."""
        check = self.check(spark, model, options.full_refresh)
        if check is None:
            return run(options)
        if check.verdict.action == "refuse":
            return self._refused(model, check)
        if check.verdict.action == "add_columns":
            _add_columns(spark, model, check)
        result = run(replace(options, full_refresh=True) if check.verdict.action == "rebuild" else options)
        if result.status == "success":
            version = self.record(model, check)
            result.catalog = {"version": version.version, "breaking": version.breaking,
                              "changes": [str(c) for c in check.verdict.changes]}
            result.message = "; ".join(filter(None, (result.message, self._note(model, check, version))))
        return result

    def check(self, spark: "SparkSession", model: "Model", full_refresh: bool) -> Check | None:
        """None when the model's entry is its active version's (Spark is not asked)."""
        active = self.active()
        entry = describe(self.manifest, model, {name: v.version for name, v in active.items()})
        current = active.get(model.name)
        old = Entry.from_json(current.entry) if current is not None else None
        if old is not None and entry.same_definition(old) and entry.upstream == old.upstream:
            return None
        entry = typed(entry, model.kind.output_types(spark, model))
        kind = model.kind
        changes = classify(old, entry, kind.on_breaking, kind.breaking)
        verdict = decide(kind.on_breaking, getattr(kind, "on_schema_change", "fail"), changes, full_refresh)
        return Check(entry, verdict, current.version if current is not None else 0)

    def record(self, model: "Model", check: Check) -> CatalogVersion:
        """Append the model's next version; when another runner appended one first, classify
        against that one and try the next number (compare-and-set)."""
        store, base, verdict = self._store(), check.base, check.verdict
        for _ in range(5):
            version = CatalogVersion(model.name, base + 1, check.entry.to_json(), verdict.breaking, self.now())
            if store.append_version(version):
                break
            latest = store.versions(model.name)[-1]
            if Entry.from_json(latest.entry) == check.entry:  # another runner recorded this very entry
                version = latest
                break
            base = latest.version
            verdict = Verdict(verdict.action, tuple(classify(Entry.from_json(latest.entry), check.entry,
                                                             model.kind.on_breaking, model.kind.breaking)))
        else:
            raise RuntimeError(f"the catalog of {model.name} kept moving: gave up appending after 5 tries")
        active = self.active()
        with self._lock:
            active[model.name] = version
        return version

    def downstream(self, model: "Model") -> list[str]:
        return sorted(node_name(n) for n in nx.descendants(self.manifest.graph, model_id(model.name)))

    def _refused(self, model: "Model", check: Check) -> "Result":
        from ..run import Result

        changes = "; ".join(c.words for c in check.verdict.changes if c.breaking)
        below = self.downstream(model)
        problem = Problem(
            f"{model.kind.name} '{model.name}' changed in a breaking way since catalog version {check.base} ({changes}); "
            f"its history may not be recomputable, so the run leaves its table and offsets as they are"
            + (f"; downstream: {', '.join(below)}" if below else ""),
            model.path, model.config_lines.get("materialized"), code="breaking-change",
            hint=f"rebuild it with mvflow run --full-refresh -s {model.name}, or set "
            "config(on_schema_change='append_new_columns') to keep its rows and add the new columns, "
            "or config(on_schema_change='rebuild')")
        return Result(model.name, model.kind.name, "error", message=problem.format(),
                      catalog={"version": check.base, "breaking": True, "changes": [str(c) for c in check.verdict.changes]})

    def _note(self, model: "Model", check: Check, version: CatalogVersion) -> str:
        """``catalog v3 (breaking: column total dropped; rebuilt; downstream: a, b)``."""
        shown = [c for c in check.verdict.changes if c.breaking] or list(check.verdict.changes)
        words = [("breaking: " if version.breaking else "") + "; ".join(c.words for c in shown[:3])
                 + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")]
        if check.verdict.action == "rebuild":
            words.append("rebuilt")
        if check.verdict.action == "add_columns":
            words.append(f"added {', '.join(check.verdict.columns)}; rows already written keep the old definition's values")
        if version.breaking and self.downstream(model):
            words.append("downstream: " + ", ".join(self.downstream(model)))
        return f"catalog v{version.version} ({'; '.join(words)})"


def _add_columns(spark: "SparkSession", model: "Model", check: Check) -> None:
    types = dict(check.entry.columns)
    model.kind.add_columns(spark, model, [(name, types.get(name) or "string") for name in check.verdict.columns])


__all__ = ["Change", "Check", "RunCatalog"]
