"""What one generation of a numerator does, decided from the published state's version and per-shard
counts of the input against it: pure, no Spark, no state store (``generation.py`` asks and runs).

A generation is one of:

- ``first``: no state yet: every key is numbered ``0..n-1`` in its shard, in key order;
- ``reshard``: the sharding scheme (or the state type) changed: the present keys are numbered
  again in their new shards (S grows, V and G restart);
- ``rebuild``: compaction, asked (``--rebuild-state``) or because the holes (ids held by absent
  keys) would exceed ``max_holes`` of the ids: the present keys are numbered ``0..n-1`` per shard in
  the order of their old ids, new keys after them in key order (V grows, G restarts);
- ``append``: present keys keep their ids; new keys take, per shard and in key order, the ids of
  keys absent for more than ``ttl_generations`` generations (lowest first), then the ids after the
  shard's highest (G grows);
- ``unchanged``: the input is exactly the key set the state numbers as present: nothing is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from .version import Position, Scheme, Version

FIRST, RESHARD, REBUILD, APPEND, UNCHANGED = "first", "reshard", "rebuild", "append", "unchanged"
RENUMBERING = (FIRST, RESHARD, REBUILD)


@dataclass(frozen=True)
class Settings:
    """The model's config as the decisions need it."""

    state_type: int
    scheme: Scheme
    ttl_generations: int
    max_holes: float


@dataclass(frozen=True)
class ShardCounts:
    """One shard of the input against the published state (``plan.counts`` query)."""

    shard_id: int
    new_keys: int  # input keys the state does not number
    returned: int  # input keys the state numbers as absent
    gone: int  # keys present in the state, not in the input
    expired: int  # keys not in the input, absent for more than ttl generations at the new one: free ids
    absent: int  # keys of the state not in the input
    ids: int  # ids the state holds in the shard
    top: int | None  # the shard's highest id

    @property
    def reused(self) -> int:
        """New keys that take a free id (the rest go after the shard's highest)."""
        return min(self.new_keys, self.expired)


@dataclass(frozen=True)
class Generation:
    """The decision: what to build, its version, why, and what it changes."""

    action: str
    version: Version
    why: str = ""
    new_ids: int = 0  # new keys numbered after their shard's highest id
    reused: int = 0  # new keys given the id of an expired key
    gone: int = 0
    returned: int = 0

    @property
    def builds(self) -> bool:
        return self.action != UNCHANGED

    @property
    def renumbers(self) -> bool:
        return self.action in RENUMBERING


def expired(last_seen: int, generation: int, ttl_generations: int) -> bool:
    """Whether a key last present in generation ``last_seen`` frees its id in ``generation``: it has
    been absent for more than ``ttl_generations`` generations (the SQL says ``last_seen < :generation - ttl``).

    >>> [expired(4, g, 3) for g in (5, 7, 8)]  # absent in 5, 6, 7: three generations; in 8: four
    [False, False, True]
    """
    return generation - last_seen > ttl_generations


def without_counts(previous: Position | None, settings: Settings, rebuild: bool, fresh: bool = False) -> Generation | None:
    """The generations decided by versions and config alone: a first state, a new scheme or type,
    a forced rebuild, a new state from the input alone (``fresh``: ``--full-refresh``). None: the
    counts decide (``with_counts``).

    >>> s = Settings(1, Scheme(0, 4, ("k",)), 3, 0.5)
    >>> without_counts(None, s, rebuild=False)
    Generation(action='first', version=Version(type=1, scheme=0, rebuild=0, generation=0), why='a new state', new_ids=0, reused=0, gone=0, returned=0)
    >>> p = Position(Version(1, 0, 2, 7), 12, 9, "0:2:k")
    >>> g = without_counts(p, s, rebuild=False); g.action, str(g.version), g.why
    ('reshard', '1.1.0.0', 'the sharding scheme changed: shards 2 → 4')
    >>> g = without_counts(Position(Version(1, 0, 2, 7), 12, 9, "0:4:k"), s, rebuild=True); g.action, str(g.version)
    ('rebuild', '1.0.3.0')
    >>> without_counts(Position(Version(1, 0, 2, 7), 12, 9, "0:4:k"), s, rebuild=False) is None
    True
    >>> g = without_counts(Position(Version(1, 0, 2, 7), 12, 9, "0:4:k"), s, rebuild=False, fresh=True); g.action, str(g.version)
    ('first', '1.0.3.0')
    """
    if previous is None:
        return Generation(FIRST, Version(settings.state_type, 0, 0, 0), "a new state")
    old = previous.version
    if fresh:
        same = old.type == settings.state_type and previous.scheme == settings.scheme.fingerprint
        version = old.rebuilt() if same else old.resharded(settings.state_type)
        return Generation(FIRST, version, "a new state from the input alone (--full-refresh)")
    if old.type != settings.state_type:
        return Generation(RESHARD, old.resharded(settings.state_type), f"the state type changed: {old.type} → {settings.state_type}")
    if previous.scheme != settings.scheme.fingerprint:
        change = settings.scheme.changes_from(Scheme.parse(previous.scheme))
        return Generation(RESHARD, old.resharded(settings.state_type), f"the sharding scheme changed: {change}")
    if rebuild:
        return Generation(REBUILD, old.rebuilt(), "asked (--rebuild-state)")
    return None


def with_counts(previous: Position, settings: Settings, counts: list[ShardCounts]) -> Generation:
    """The generation the input's counts call for: unchanged, append, or a rebuild when the holes
    after appending would exceed ``max_holes``.

    >>> s = Settings(1, Scheme(0, 2, ("k",)), 3, 0.5)
    >>> p = Position(Version(1, 0, 2, 7), 12, 9, "0:2:k")
    >>> same = [ShardCounts(0, 0, 0, 0, 0, 1, 5, 4), ShardCounts(1, 0, 0, 0, 0, 0, 3, 2)]
    >>> with_counts(p, s, same).action
    'unchanged'
    >>> grown = [ShardCounts(0, 3, 0, 1, 1, 2, 5, 4), ShardCounts(1, 2, 0, 0, 0, 0, 3, 2)]
    >>> g = with_counts(p, s, grown); g.action, str(g.version), g.new_ids, g.reused, g.gone
    ('append', '1.0.2.8', 4, 1, 1)
    >>> emptied = [ShardCounts(0, 1, 0, 4, 0, 4, 5, 4), ShardCounts(1, 0, 0, 0, 0, 0, 3, 2)]
    >>> g = with_counts(p, Settings(1, Scheme(0, 2, ("k",)), 3, 0.4), emptied); g.action, str(g.version), g.why
    ('rebuild', '1.0.3.0', 'the holes would be 4 of 9 ids (44%) > max_holes 40%')
    """
    new = sum(c.new_keys for c in counts)
    reused = sum(c.reused for c in counts)
    gone, returned = sum(c.gone for c in counts), sum(c.returned for c in counts)
    changes = dict(new_ids=new - reused, reused=reused, gone=gone, returned=returned)
    if not (new or gone or returned):
        return Generation(UNCHANGED, previous.version, "the input is the key set the state numbers")
    held, ids = holes_after(counts)
    if ids and held / ids > settings.max_holes:
        why = f"the holes would be {held:,} of {ids:,} ids ({held / ids:.0%}) > max_holes {settings.max_holes:.0%}"
        return Generation(REBUILD, previous.version.rebuilt(), why, **changes)
    return Generation(APPEND, previous.version.next_generation(), **changes)


def holes_after(counts: list[ShardCounts]) -> tuple[int, int]:
    """Ids held by absent keys, and all ids, once new keys have taken free ids and ids past the top.

    >>> holes_after([ShardCounts(0, 3, 0, 1, 1, 2, 5, 4)])  # 2 absent, 1 id reused: 1 hole of 5 + 3 - 1
    (1, 7)
    """
    held = sum(c.absent - c.reused for c in counts)
    ids = sum(c.ids + c.new_keys - c.reused for c in counts)
    return held, ids


def message(previous: Position | None, generation: Generation, present: int) -> str:
    """The run's message: the state version, where it came from and which data stays usable.

    >>> p = Position(Version(1, 0, 2, 6), 12, 9, "0:2:k")
    >>> print(message(p, Generation(APPEND, Version(1, 0, 2, 7), new_ids=12, reused=3), 40))
    state 1.0.2.7 (from 1.0.2.6: 12 new ids, 3 reused); 40 keys; data built on 1.0.2.≤7 stays usable
    >>> print(message(p, Generation(UNCHANGED, Version(1, 0, 2, 6), "the input is the key set the state numbers"), 40))
    state 1.0.2.6 unchanged: the input is the key set the state numbers; 40 keys; data built on 1.0.2.≤6 stays usable
    >>> print(message(p, Generation(REBUILD, Version(1, 0, 3, 0), "asked (--rebuild-state)"), 40))
    state 1.0.3.0 (rebuilt from 1.0.2.6: asked (--rebuild-state)); 40 keys; data built on 1.0.3.≤0 stays usable, data built on 1.0.2.* does not
    """
    version = generation.version
    if generation.action == UNCHANGED:
        head = f"state {version} unchanged: {generation.why}"
    elif generation.action == APPEND:
        head = f"state {version} (from {previous.version}: {_changes(generation)})"
    elif previous is None:
        head = f"state {version} ({generation.why})"
    else:
        how = {REBUILD: "rebuilt from", RESHARD: "re-sharded from", FIRST: "replacing"}[generation.action]
        head = f"state {version} ({how} {previous.version}: {generation.why})"
    usable = f"data built on {version.lineage()} stays usable"
    if generation.renumbers and previous is not None:
        old = previous.version
        usable += f", data built on {old.type}.{old.scheme}.{old.rebuild}.* does not"
    return f"{head}; {present:,} keys; {usable}"


def _changes(generation: Generation) -> str:
    """
    >>> _changes(Generation(APPEND, Version(1, 0, 0, 1), gone=2, returned=1))
    '0 new ids, 0 reused, 2 gone, 1 back'
    """
    parts = [f"{generation.new_ids:,} new ids", f"{generation.reused:,} reused"]
    parts += [f"{generation.gone:,} gone"] if generation.gone else []
    parts += [f"{generation.returned:,} back"] if generation.returned else []
    return ", ".join(parts)
