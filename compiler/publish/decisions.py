"""What a publish does (pure): nothing, the changed keys of some MV batches, every key into the
table readers have (columns were added), or a full publish into a fresh table swapped in (a table
model's after each build).

>>> mv = MvBatch(batch=7, built=3, unpublished=0, definition="d1")
>>> decide(Published(batch=5, definition="d1", fingerprint="f"), mv, "f")
Action(what='keys', reason='batches 6 to 7 of the MV', since=5, upto=7)
>>> decide(Published(batch=7, definition="d1", fingerprint="f"), mv, None).what
'nothing'
>>> decide(Published(batch=2, definition="d1", fingerprint="f"), mv, "f").reason
'the MV was rebuilt at batch 3'
>>> decide(None, mv, "f").reason
'first publish'
>>> decide(Published(batch=5, definition="d0", fingerprint="f"), mv, "f2", added=("status",))
Action(what='replace', reason='column status added (the table is kept, its rows replaced in one transaction)', since=0, upto=7)
>>> decide_table(Published(batch=0, definition="s1", fingerprint="f"), "s1").what
'nothing'
>>> decide_table(Published(batch=0, definition="s1", fingerprint="f"), "s2").reason
'the table was rebuilt'
"""

from __future__ import annotations

from dataclasses import dataclass

NOTHING, KEYS, REPLACE, FULL = "nothing", "keys", "replace", "full"


@dataclass(frozen=True)
class MvBatch:
    """The MV as its state store topic has it."""

    batch: int  # its last committed batch (0: never built)
    built: int  # the batch of its last full build
    unpublished: int  # the last batch that recorded no changed keys (no reader asked for them then)
    definition: str  # its definition hash


@dataclass(frozen=True)
class Published:
    """The published table as the store's offsets row has it."""

    batch: int  # the MV's batch it holds (0 for a table model)
    definition: str  # the MV's definition hash; a table model's build stamp
    fingerprint: str  # the published table's columns, types and key (``schema.Table.fingerprint``)
    token: int = 0
    rows: int = 0
    lease: str = ""  # the state-store topic whose lease ``token`` is of (tokens of other topics do not compare)


@dataclass(frozen=True)
class Action:
    what: str
    reason: str
    since: int = 0  # keys: the batches (since, upto] of the MV
    upto: int = 0


def up_to_date(published: Published | None, mv: MvBatch) -> bool:
    """Known without Spark: the published table holds the MV's last batch of its definition."""
    return published is not None and published.batch == mv.batch and published.definition == mv.definition


def decide(published: Published | None, mv: MvBatch, fingerprint: str | None, repair: bool = False,
           added: tuple[str, ...] | None = None) -> Action:
    """``fingerprint``: the published table the MV's rows make now (None: not asked, when up to date);
    ``added``: the columns it adds to the published one, when it only adds some."""
    if mv.batch <= 0:
        return Action(NOTHING, "the MV has no committed batch yet")
    if repair:
        return Action(FULL, "repair asked", upto=mv.batch)
    if published is None:
        return Action(FULL, "first publish", upto=mv.batch)
    if up_to_date(published, mv) and fingerprint in (None, published.fingerprint):
        return Action(NOTHING, f"batch {mv.batch} is published")
    if fingerprint != published.fingerprint:
        if added:  # the table stays (readers' views and grants on it too): ALTER TABLE … ADD COLUMN
            return Action(REPLACE, f"column{'s' if len(added) > 1 else ''} {', '.join(added)} added "
                                   "(the table is kept, its rows replaced in one transaction)", upto=mv.batch)
        return Action(FULL, "the MV's columns, types or key changed", upto=mv.batch)
    if published.batch > mv.batch:
        return Action(FULL, f"the published table is at batch {published.batch}, past the MV's {mv.batch} "
                            "(the MV was rebuilt from scratch)", upto=mv.batch)
    if mv.built > published.batch:
        return Action(FULL, f"the MV was rebuilt at batch {mv.built}", upto=mv.batch)
    if mv.unpublished > published.batch:
        return Action(FULL, f"batch {mv.unpublished} of the MV recorded no changed keys", upto=mv.batch)
    if published.definition != mv.definition:
        return Action(FULL, "the MV's definition changed", upto=mv.batch)
    first = published.batch + 1
    return Action(KEYS, f"batch {first} of the MV" if first == mv.batch else f"batches {first} to {mv.batch} of the MV",
                  since=published.batch, upto=mv.batch)


def decide_table(published: Published | None, stamp: str | None, repair: bool = False) -> Action:
    """A table model's publish: its build's ``stamp`` (None: its files are not watched, so each run
    rebuilds it) against the stamp the published table records."""
    if repair:
        return Action(FULL, "repair asked")
    if published is None:
        return Action(FULL, "first publish")
    if stamp is None:
        return Action(FULL, "the table was built (its files are not watched)")
    if published.definition != stamp:
        return Action(FULL, "the table was rebuilt")
    return Action(NOTHING, "its last build is published")
