"""What the catalog tells a user, without Spark: ``mvflow catalog`` (versions, the version active
at a time, the diff of two versions), ``mvflow plan`` (what the next run would do per model) and
``--select state:modified`` (models whose compiled definition is not their active version).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Iterable

from ..errors import CompileError, Problem, did_you_mean
from ..run import full_refresh_for
from ..state import CatalogVersion, StateStore
from .changes import breaking, classify
from .entry import Entry, describe
from .gate import decide

if TYPE_CHECKING:
    from ..manifest import Manifest, Model


def active_at(versions: Iterable[CatalogVersion], at: datetime) -> CatalogVersion | None:
    """The version that was active at ``at``: the last one that became active at or before it.

    >>> t = lambda h: datetime(2026, 1, 1, h, tzinfo=timezone.utc)
    >>> vs = [CatalogVersion("m", 1, "{}", False, t(9)), CatalogVersion("m", 2, "{}", True, t(12))]
    >>> active_at(vs, t(11)).version, active_at(vs, t(12)).version, active_at(vs, t(8))
    (1, 2, None)
    """
    found = None
    for version in sorted(versions, key=lambda v: v.version):
        if version.active_at <= at:
            found = version
    return found


def latest(store: StateStore) -> dict[str, CatalogVersion]:
    """Every model's active version."""
    return {v.model: v for v in store.versions()}


def modified(manifest: "Manifest", store: StateStore, new_only: bool = False) -> set[str]:
    """Models whose compiled definition differs from their active version (dbt's
    ``state:modified``), new models included; ``new_only``: just those without a version."""
    active = latest(store)
    found = set()
    for name, model in manifest.models.items():
        if not model.kind.produces:
            continue
        current = active.get(name)
        if current is None or (not new_only and not describe(manifest, model).same_definition(Entry.from_json(current.entry))):
            found.add(name)
    return found


def version_lines(store: StateStore, model: str | None, at: datetime | None) -> list[str]:
    """``mvflow catalog``: one line per model (its active version, when it became active, its last
    breaking change), or per version of ``model``; with ``at``, the version active then."""
    versions = store.versions(model)
    if model is None:
        by_model: dict[str, list[CatalogVersion]] = {}
        for version in versions:
            by_model.setdefault(version.model, []).append(version)
        if not by_model:
            return ["the catalog is empty: `mvflow run` records each model's first version"]
        return [f"{'model':<32} {'active':>6}  {'since':<20} last breaking change"] + [
            _model_line(name, found, at) for name, found in sorted(by_model.items())]
    if at is not None:
        found = active_at(versions, at)
        return [f"{model}: no version was active at {at:%Y-%m-%d %H:%M:%S} UTC" if found is None else _version_line(found, versions)]
    return [_version_line(v, versions) for v in versions] or [f"{model}: no version recorded yet"]


def _model_line(name: str, versions: list[CatalogVersion], at: datetime | None) -> str:
    current = active_at(versions, at) if at is not None else versions[-1]
    if current is None:
        return f"{name:<32} {'—':>6}  not active then"
    last = next((v for v in reversed(versions) if v.breaking and v.version <= current.version), None)
    words = f"v{last.version} at {_when(last.active_at)}: {_summary(last, versions)}" if last else "none"
    return f"{name:<32} {'v' + str(current.version):>6}  {_when(current.active_at):<20} {words}"


def _version_line(version: CatalogVersion, versions: list[CatalogVersion]) -> str:
    flag = "breaking" if version.breaking else ""
    return f"v{version.version:<4} {_when(version.active_at):<20} {flag:<9} {_summary(version, versions)}"


def _summary(version: CatalogVersion, versions: list[CatalogVersion]) -> str:
    before = next((v for v in versions if v.version == version.version - 1), None)
    entry = Entry.from_json(version.entry)
    changes = classify(Entry.from_json(before.entry) if before else None, entry, *_policy(entry))
    return "; ".join(c.words for c in changes)


def history(store: StateStore) -> dict[str, list[dict[str, object]]]:
    """Every model's versions, newest first, for the docs site: version, since when, breaking, what changed."""
    by_model: dict[str, list[CatalogVersion]] = {}
    for version in store.versions():
        by_model.setdefault(version.model, []).append(version)
    return {model: [{"version": v.version, "active_at": _when(v.active_at) + " UTC", "breaking": v.breaking,
                     "changes": _summary(v, versions)} for v in reversed(versions)]
            for model, versions in by_model.items()}


def diff_lines(store: StateStore, model: str, first: int, second: int) -> list[str]:
    """``mvflow catalog diff MODEL V1 V2``: every change from V1 to V2, then the two entries' columns."""
    versions = {v.version: v for v in store.versions(model)}
    missing = [v for v in (first, second) if v not in versions]
    if missing:
        known = ", ".join(f"v{v}" for v in sorted(versions)) or "none"
        raise CompileError(Problem(f"{model} has no catalog version {', '.join(str(v) for v in missing)}", code="unknown-version",
                               hint=f"its versions: {known} (`mvflow catalog {model}`)"))
    old, new = Entry.from_json(versions[first].entry), Entry.from_json(versions[second].entry)
    changes = classify(old, new, *_policy(new))
    lines = [f"{model} v{first} → v{second}: " + ("breaking" if breaking(changes) else "not breaking")]
    lines += [f"  {'!' if c.breaking else '+'} {c.words}" for c in changes] or ["  (no difference)"]
    lines += [f"  columns v{first}: " + _columns(old), f"  columns v{second}: " + _columns(new)]
    return lines


def _columns(entry: Entry) -> str:
    return ", ".join(f"{name} {kind}" if kind else name for name, kind in entry.columns) or "(unknown)"


def _policy(entry: Entry) -> tuple[str, tuple[str, ...]]:
    from ..kinds import KINDS

    kind = KINDS.get(entry.kind)
    return (kind.on_breaking, kind.breaking) if kind else ("run", ())


def _when(moment: datetime) -> str:
    return f"{moment.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S}"


@dataclass(frozen=True)
class Step:
    """One line of ``mvflow plan``."""

    model: str
    kind: str
    action: str
    why: str

    def __str__(self) -> str:
        return f"{self.model:<32} {self.kind:<11} {self.action:<9} {self.why}"


def plan(manifest: "Manifest", selected: list[str], store: StateStore, now: datetime, full_refresh: bool = False) -> list[Step]:
    """What ``mvflow run`` would do to each selected model, from the compiled project, the catalog
    and the offsets: a changed definition's verdict (``gate``), else the kind's own answer
    (``ModelKind.next_run``). Column types are not compared: that needs Spark."""
    active = latest(store)
    steps = []
    for name in selected:
        model = manifest.models[name]
        current = active.get(name)
        entry = describe(manifest, model, {n: v.version for n, v in active.items()})
        old = Entry.from_json(current.entry) if current else None
        rebuilt = full_refresh_for(model, full_refresh)
        if old is None or not entry.same_definition(old):
            steps.append(_changed(model, old, entry, current, rebuilt))
            continue
        action, why = model.kind.next_run(manifest, model, store, now)
        if rebuilt and action != "run":  # a kind with state of its own (a table or view runs anyway)
            action, why = "rebuild", "--full-refresh" if full_refresh else "config(full_refresh=true)"
        steps.append(Step(name, model.kind.name, action, why))
    return steps


def _changed(model: "Model", old: Entry | None, entry: Entry, current: CatalogVersion | None, full_refresh: bool) -> Step:
    kind = model.kind
    changes = classify(old, entry, kind.on_breaking, kind.breaking)
    verdict = decide(kind.on_breaking, getattr(kind, "on_schema_change", "fail"), changes, full_refresh)
    words = "; ".join(str(c) for c in changes)
    if old is None:
        return Step(model.name, kind.name, "build", "no catalog version yet")
    since = f"since v{current.version}: {words}"
    action = {"run": "rebuild" if kind.on_breaking != "run" and full_refresh else "run", "rebuild": "rebuild",
              "refuse": "REFUSE", "add_columns": "add cols"}[verdict.action]
    if verdict.action == "refuse":
        since += " — needs --full-refresh or config(on_schema_change=...)"
    return Step(model.name, kind.name, action, since)


def check_model(manifest: "Manifest", name: str) -> None:
    if name not in manifest.models:
        raise CompileError(Problem(f"no model named '{name}'", code="unknown-model",
                               hint=did_you_mean(name, manifest.models) or "run 'mvflow ls' to see the models"))
