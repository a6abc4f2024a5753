"""What a run does with a model whose catalog entry changed: pure, from the kind's policy
(``ModelKind.on_breaking``), the fact's ``on_schema_change`` and ``--full-refresh``.

>>> from compiler.catalog.changes import Change
>>> dropped = [Change("column-dropped", "column dropped: total", True)]
>>> decide("rebuild", "fail", dropped, full_refresh=False).action
'rebuild'
>>> decide("refuse", "fail", dropped, full_refresh=False).action
'refuse'
>>> decide("refuse", "fail", dropped, full_refresh=True).action
'run'
>>> added = [Change("definition", "the fact definition changed", True), Change("column-added", "column added: fee", False, "fee")]
>>> decide("refuse", "append_new_columns", added, full_refresh=False).columns
('fee',)
>>> decide("refuse", "append_new_columns", added + dropped, full_refresh=False).action
'refuse'
"""

from __future__ import annotations

from dataclasses import dataclass

from .changes import Change, breaking

# With on_schema_change='append_new_columns' a fact carries on through these breaking changes:
# the rows already written keep what the old definition gave.
_APPENDABLE = {"definition"}
# ... and only through these others: columns are added at the end, nothing else moves.
_HARMLESS = {"column-added", "description", "upstream", "config", "sql"}


@dataclass(frozen=True)
class Verdict:
    action: str  # run | rebuild (a full refresh) | refuse | add_columns (then run)
    changes: tuple[Change, ...] = ()
    columns: tuple[str, ...] = ()  # add_columns: the new columns, in the SELECT's order

    @property
    def breaking(self) -> bool:
        return any(c.breaking for c in self.changes)


def decide(on_breaking: str, on_schema_change: str, changes: list[Change], full_refresh: bool) -> Verdict:
    """``on_breaking``: the kind's policy; ``on_schema_change``: a fact's config (``fail`` elsewhere)."""
    found = tuple(changes)
    if not breaking(changes) or on_breaking == "run" or full_refresh:
        return Verdict("run", found)
    if on_breaking == "rebuild" or on_schema_change == "rebuild":
        return Verdict("rebuild", found)
    if on_schema_change == "append_new_columns" and all(
            c.code in _APPENDABLE if c.breaking else c.code in _HARMLESS for c in changes):
        return Verdict("add_columns", found, tuple(c.column for c in changes if c.code == "column-added"))
    return Verdict("refuse", found)
