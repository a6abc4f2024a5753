"""What an MV batch covers, decided from figures: rebuild or not, up to date or not, and each
input's ``(last, next)`` range.

Pure: the state store's offsets and what the probe found are passed in (each input's change
mode, ``compiler.kinds.mv.change_modes``, supplies its figures; ``compiler.kinds.mv.refresh`` gathers them from
Spark and the state store and executes the result). How each batch is
applied (by key, in chunks, or by a full build) is ``compiler.kinds.mv.strategy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


def rebuild_reason(full_refresh: bool, committed: bool, in_flight: bool, stored_exists: bool,
                   definition_matches: bool, swapping: str) -> str | None:
    """Why the batch must be a full build (None: it need not).

    >>> rebuild_reason(False, committed=True, in_flight=False, stored_exists=True,
    ...                definition_matches=True, swapping="") is None
    True
    >>> rebuild_reason(False, committed=True, in_flight=False, stored_exists=True,
    ...                definition_matches=False, swapping="")
    'the definition changed'
    """
    if not committed and not in_flight:
        return "first run"
    if not stored_exists:
        return "no stored MV"
    if not definition_matches:  # before --full-refresh: the catalog asks a rebuild of a changed MV with it
        return "the definition changed"
    if full_refresh:
        return "--full-refresh"
    if swapping:
        return "redo of an interrupted build or compaction"
    return None


@dataclass(frozen=True)
class Seen:
    """One input as the up-to-date check sees it: whether its topic has a commit to compare with
    (``known``: False when it never committed, is in flight, or a dictionary has no stored
    fingerprint), what that commit recorded and what the probe finds now (a position, a
    fingerprint, an upstream MV's batch)."""

    known: bool
    committed: Any
    current: Any


def up_to_date(seen: Mapping[str, Seen]) -> bool:
    """Whether no input can have changed since the last commit, without opening a batch. An
    input not ``known`` answers False, so the exact path runs: a false "up to date" loses changes.

    >>> up_to_date({"o": Seen(True, ("2024-01-01", 7), ("2024-01-01", 7)), "c": Seen(True, "6:1:2", "6:1:2")})
    True
    >>> up_to_date({"o": Seen(True, (7,), (8,))}), up_to_date({"c": Seen(False, None, "6:1:2")})
    (False, False)
    """
    return all(s.known and s.committed == s.current for s in seen.values())


def input_range(batch: int, fresh: bool, last: tuple | None, planned: tuple | None, in_flight: bool,
                diffed: bool, unchanged: bool, current: tuple | None, resume: bool = False) -> tuple[Any, Any]:
    """``(last, next)`` of one input for ``batch``; ``next`` is written before any work.

    - a ``diffed`` input (a dictionary or table model diffed by snapshots) is snapshotted as of
      the batch, unless its fingerprint is ``unchanged`` since the last commit (its snapshot is
      kept, nothing diffed); inputs read by position, change feed or Delta version are not ``diffed``;
    - a position input redoes the ``next`` planned before a crash, else reads up to ``current``
      (an empty input: a build reads it from the start later, a refresh keeps its last);
    - ``fresh`` (a build) reads everything: no ``last``;
    - ``resume`` (a chunked batch resumed after a crash) keeps every ``next`` planned before the
      crash, a diffed input's too: its done chunks were computed against that snapshot.

    >>> input_range(8, False, (5,), (5,), False, diffed=True, unchanged=False, current=None)
    ((5,), (8,))
    >>> input_range(8, False, (5,), (8,), True, diffed=True, unchanged=True, current=None, resume=True)
    ((5,), (8,))
    >>> input_range(8, False, ("t1", 3), ("t2", 9), True, diffed=False, unchanged=False, current=("t3", 12))
    (('t1', 3), ('t2', 9))
    >>> input_range(8, True, ("t1", 3), None, False, diffed=False, unchanged=False, current=("t3", 12))
    (None, ('t3', 12))
    """
    if diffed:
        if resume and planned is not None:
            nxt = planned
        else:
            nxt = tuple(last) if not fresh and last and unchanged else (batch,)
    elif (in_flight or resume) and not fresh and planned is not None:
        nxt = planned
    else:
        nxt = current or (() if fresh else last)
    return (None if fresh else last, nxt)


def new_input(ranges: Mapping[str, tuple[Any, Any]]) -> bool:
    """Whether an input joined since the last commit (never committed, has data): the batch
    becomes a build, since the MV never saw that input's rows.

    >>> new_input({"o": ((1,), (2,)), "n": (None, (4,))}), new_input({"o": ((1,), (2,)), "e": (None, ())})
    (True, False)
    """
    return any(last is None and nxt for last, nxt in ranges.values())
