"""What changed between two catalog entries of one model, each change breaking or not.

Breaking: a column dropped, renamed or narrowed (or retyped), the key or the kind changed, a
config field that changes the data (``ModelKind.breaking``) changed, or the definition of a kind
whose rows are kept across runs (``mv``, ``fact``: ``ModelKind.on_breaking`` is not ``run``)
changed. Not breaking: a column added, a type widened, the SQL of a view or table changed with the
same columns, a description, an upstream model's new version.

>>> old = Entry("m", "view", "db.m", "h1", (("id", "int"), ("name", "string"), ("price", "decimal(10,2)")))
>>> new = Entry("m", "view", "db.m", "h2", (("id", "bigint"), ("title", "string"), ("price", "decimal(8,2)"), ("x", "int")))
>>> for change in classify(old, new, on_breaking="run"): print(change)
breaking: column renamed: name → title
breaking: column price narrowed: decimal(10,2) → decimal(8,2)
column id widened: int → bigint
column added: x int
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .entry import Entry

_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


@dataclass(frozen=True)
class Change:
    code: str  # new | kind | key | column-dropped | column-renamed | type-narrowed | type-changed | column-added |
    #            column-inserted | type-widened | columns-reordered | definition | sql | config | description | upstream
    words: str
    breaking: bool
    column: str = ""  # the column a column change is about (its new name)

    def __str__(self) -> str:
        return f"breaking: {self.words}" if self.breaking else self.words


def classify(old: Entry | None, new: Entry, on_breaking: str = "run", breaking_config: tuple[str, ...] = ()) -> list[Change]:
    """The changes from ``old`` (None: the model's first version) to ``new``, breaking ones first."""
    if old is None:
        return [Change("new", "first version", False)]
    changes = _kind_and_key(old, new) + _columns(old, new)
    kept = on_breaking != "run"  # its rows outlive a run: old and new definitions would mix
    if old.sql_hash != new.sql_hash and (kept or not changes):  # else the column changes say it
        changes.append(Change("definition" if kept else "sql", f"the {new.kind} definition changed" if kept else "the SQL changed", kept))
    changes += _config(old, new, breaking_config)
    if (old.description, old.column_docs) != (new.description, new.column_docs):
        changes.append(Change("description", "descriptions changed", False))
    was = dict(old.upstream)
    moved = [f"{name} v{was[name]} → v{version}" if name in was else f"{name} v{version}"
             for name, version in new.upstream if was.get(name) != version]
    if moved:
        changes.append(Change("upstream", "upstream " + ", ".join(moved), False))
    return sorted(changes, key=lambda c: not c.breaking)


def breaking(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.breaking]


def _kind_and_key(old: Entry, new: Entry) -> list[Change]:
    changes = []
    if old.kind != new.kind:
        changes.append(Change("kind", f"kind {old.kind} → {new.kind}", True))
    if [k.lower() for k in old.key] != [k.lower() for k in new.key]:
        changes.append(Change("key", f"key ({', '.join(old.key)}) → ({', '.join(new.key)})", True))
    return changes


def _columns(old: Entry, new: Entry) -> list[Change]:
    """Dropped, renamed (a dropped and an added column at one position, same type), retyped,
    added and reordered columns. Columns compile could not name (``SELECT *`` over an unknown
    table) compare as none."""
    before = {name.lower(): (i, name, kind) for i, (name, kind) in enumerate(old.columns)}
    after = {name.lower(): (i, name, kind) for i, (name, kind) in enumerate(new.columns)}
    if not before or not after:
        return []
    dropped = [before[n] for n in before if n not in after]
    added = [after[n] for n in after if n not in before]
    changes = []
    for i, name, kind in dropped:
        twin = next((a for a in added if a[0] == i and a[2] == kind), None)
        if twin is not None:
            added.remove(twin)
            changes.append(Change("column-renamed", f"column renamed: {name} → {twin[1]}", True))
        else:
            changes.append(Change("column-dropped", f"column dropped: {name}", True))
    for name in (n for n in after if n in before):
        was, now = before[name][2], after[name][2]
        if was and now and was != now:
            widened = widens(was, now)
            changes.append(Change("type-widened" if widened else "type-narrowed" if widens(now, was) else "type-changed",
                                  f"column {after[name][1]} {'widened' if widened else 'narrowed' if widens(now, was) else 'retyped'}: "
                                  f"{was} → {now}", not widened))
    kept = [n for n in after if n in before]
    last_kept = max((after[n][0] for n in kept), default=-1)
    changes += [Change("column-added" if i > last_kept else "column-inserted",
                       f"column added{'' if i > last_kept else ' before others'}: {name}{' ' + kind if kind else ''}", False, name)
                for i, name, kind in added]
    if kept != sorted(kept, key=lambda n: before[n][0]):
        changes.append(Change("columns-reordered", "columns reordered", False))
    return changes


def _config(old: Entry, new: Entry, breaking_config: tuple[str, ...]) -> list[Change]:
    was, now = dict(old.config), dict(new.config)
    return [Change("config", f"config {name}: {was.get(name, '—')} → {now.get(name, '—')}",
                   name in breaking_config or name == "table_format")
            for name in sorted(set(was) | set(now)) if was.get(name) != now.get(name)]


def widens(was: str, now: str) -> bool:
    """Whether every value of type ``was`` fits type ``now`` unchanged.

    >>> widens("int", "bigint"), widens("bigint", "int"), widens("float", "double"), widens("int", "double")
    (True, False, True, True)
    >>> widens("decimal(10,2)", "decimal(12,2)"), widens("decimal(10,2)", "decimal(10,3)"), widens("int", "decimal(12,2)")
    (True, False, True)
    >>> widens("string", "int"), widens("date", "timestamp")
    (False, True)
    """
    if was in _INTEGRAL and now in _INTEGRAL:
        return _INTEGRAL.index(was) < _INTEGRAL.index(now)
    if was in (*_INTEGRAL, "float") and now == "double":
        return True
    digits = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}
    a, b = _DECIMAL.fullmatch(was), _DECIMAL.fullmatch(now)
    if b and (a or was in digits):
        precision, scale = (int(a.group(1)), int(a.group(2))) if a else (digits[was], 0)
        return int(b.group(2)) >= scale and int(b.group(1)) - int(b.group(2)) >= precision - scale
    return (was, now) in {("float", "double"), ("date", "timestamp")}
