"""A numerator's state version ``T.S.V.G`` (seed 001) and what the state store keeps of it.

- T (type): the kind of collection the state numbers (``config(state_type=...)``);
- S (scheme): the sharding scheme version; it grows when the scheme changes (the state is re-sharded);
- V (rebuild): grows when the state is compacted (ids renumbered densely);
- G (generation): grows when a run changes the key set the state numbers; restarts with V and S.

Data built on state ``T.S.V.G2`` is usable with state ``T.S.V.G1`` when ``G1 >= G2``: within one
``T.S.V`` a key keeps its ids for as long as it is present (``usable``).

The offsets row of the model's topic keeps the published version in ``last`` and the one being built
in ``next``, each with the build (the lease's fencing token) whose table holds it (``Position``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, order=True)
class Version:
    type: int
    scheme: int
    rebuild: int
    generation: int

    def __str__(self) -> str:
        return f"{self.type}.{self.scheme}.{self.rebuild}.{self.generation}"

    def lineage(self) -> str:
        """The versions whose data stays usable with this one.

        >>> Version(1, 0, 2, 7).lineage()
        '1.0.2.≤7'
        """
        return f"{self.type}.{self.scheme}.{self.rebuild}.≤{self.generation}"

    def next_generation(self) -> "Version":
        return replace(self, generation=self.generation + 1)

    def rebuilt(self) -> "Version":
        return replace(self, rebuild=self.rebuild + 1, generation=0)

    def resharded(self, state_type: int) -> "Version":
        """A new sharding scheme (or state type): S grows within one type, V and G restart.

        >>> str(Version(1, 0, 2, 7).resharded(1)), str(Version(1, 3, 2, 7).resharded(2))
        ('1.1.0.0', '2.0.0.0')
        """
        if state_type != self.type:
            return Version(state_type, 0, 0, 0)
        return Version(self.type, self.scheme + 1, 0, 0)


def usable(data: Version, state: Version) -> bool:
    """Whether data built on state ``data`` is usable with state ``state``: ids are persistent
    within one ``T.S.V``, so a state at least as new as the data's numbers every key the data
    names as the data saw it.

    >>> usable(Version(1, 0, 2, 6), Version(1, 0, 2, 7)), usable(Version(1, 0, 2, 7), Version(1, 0, 2, 7))
    (True, True)
    >>> usable(Version(1, 0, 2, 8), Version(1, 0, 2, 7))  # the data knows ids the state does not
    False
    >>> usable(Version(1, 0, 2, 0), Version(1, 0, 3, 0)), usable(Version(1, 0, 2, 0), Version(1, 1, 2, 0))
    (False, False)
    """
    return (data.type, data.scheme, data.rebuild) == (state.type, state.scheme, state.rebuild) and state.generation >= data.generation


@dataclass(frozen=True)
class Position:
    """What the offsets row holds of a state: its version, the build whose table holds it, the
    build published before it (kept for readers still on it) and the sharding scheme it follows."""

    version: Version
    build: int  # the fencing token of the lease the state was built under
    previous: int | None  # the build published before this one
    scheme: str  # ``Scheme.fingerprint``

    def to_list(self) -> list:
        """The offsets position (a JSON list).

        >>> Position(Version(1, 0, 2, 7), 12, 9, "0:4:a,b").to_list()
        [1, 0, 2, 7, 12, 9, '0:4:a,b']
        """
        v = self.version
        return [v.type, v.scheme, v.rebuild, v.generation, self.build, self.previous, self.scheme]

    @classmethod
    def from_list(cls, values) -> "Position | None":
        """
        >>> Position.from_list((1, 0, 2, 7, 12, None, "0:4:a,b"))
        Position(version=Version(type=1, scheme=0, rebuild=2, generation=7), build=12, previous=None, scheme='0:4:a,b')
        >>> Position.from_list(None) is None
        True
        """
        if values is None:
            return None
        t, s, v, g, build, previous, scheme = values
        return cls(Version(int(t), int(s), int(v), int(g)), int(build), None if previous is None else int(previous), str(scheme))


@dataclass(frozen=True)
class Scheme:
    """A sharding scheme: the shard of a key is ``pmod(xxhash64(number, key…), shards)``."""

    number: int  # ``config(sharding_scheme=...)``
    shards: int
    key: tuple[str, ...]

    @property
    def fingerprint(self) -> str:
        """
        >>> Scheme(0, 4, ("shop_id", "offer_id")).fingerprint
        '0:4:shop_id,offer_id'
        """
        return f"{self.number}:{self.shards}:{','.join(self.key)}"

    @classmethod
    def parse(cls, fingerprint: str) -> "Scheme":
        number, shards, key = fingerprint.split(":", 2)
        return cls(int(number), int(shards), tuple(key.split(",")))

    def changes_from(self, old: "Scheme") -> str:
        """What differs from ``old``, for the run's message.

        >>> Scheme(0, 8, ("a",)).changes_from(Scheme(0, 4, ("a",)))
        'shards 4 → 8'
        >>> Scheme(1, 4, ("a", "b")).changes_from(Scheme(0, 4, ("a",)))
        'sharding_scheme 0 → 1, key a → a, b'
        """
        pairs = [("sharding_scheme", old.number, self.number), ("shards", old.shards, self.shards),
                 ("key", ", ".join(old.key), ", ".join(self.key))]
        return ", ".join(f"{name} {before} → {after}" for name, before, after in pairs if before != after)
