"""A catalog entry: what one model produces, as far as a reader or a downstream model can tell.

The compiled SQL's hash, the output columns (with their Spark types where Spark has analysed the
SELECT), the key, the kind, the config that changes the data, the descriptions, and the versions
of the models it reads when it was recorded. Built from the compiled manifest (``describe``), so
``mvflow plan`` and ``--select state:modified`` compare without Spark; ``mvflow run`` adds the
types before recording (``typed``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from ..manifest import Manifest, Model

Column = tuple[str, "str | None"]  # name, Spark type (None: not analysed)


@dataclass(frozen=True)
class Entry:
    model: str
    kind: str
    relation: str
    sql_hash: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ()
    config: tuple[tuple[str, str], ...] = ()  # (field, JSON value) of the kind's fields that change the data
    description: str = ""
    column_docs: tuple[tuple[str, str], ...] = ()
    upstream: tuple[tuple[str, int], ...] = ()  # (model, catalog version) of the models it reads

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Entry":
        """>>> e = Entry("m", "view", "db.m", "ab", (("id", "bigint"),), upstream=(("a", 2),))
        >>> Entry.from_json(e.to_json()) == e
        True
        """
        data = json.loads(text)
        tuples = {name: tuple(tuple(v) if isinstance(v, list) else v for v in data[name])
                  for name in ("columns", "key", "config", "column_docs", "upstream")}
        return cls(**{**data, **tuples})

    def same_definition(self, other: "Entry | None") -> bool:
        """Whether ``other`` records what compile says now: every field but the columns, which the
        SQL's hash covers and whose types only Spark knows, and the upstream versions, which only
        the catalog knows.

        >>> a = Entry("m", "view", "db.m", "ab", (("id", "bigint"),), upstream=(("u", 1),))
        >>> a.same_definition(replace(a, columns=(("id", None),), upstream=()))
        True
        >>> a.same_definition(replace(a, sql_hash="cd")), a.same_definition(None)
        (False, False)
        """
        return other is not None and _untyped(self) == _untyped(other)


def _untyped(entry: Entry) -> Entry:
    return replace(entry, columns=(), upstream=())


def describe(manifest: "Manifest", model: "Model", upstream: Mapping[str, int] | None = None) -> Entry:
    """The entry compile knows for ``model`` (no types); ``upstream``: the active catalog version of
    each model (those it reads are kept)."""
    kind, upstream = model.kind, upstream or {}
    ignored = {"name", *kind.operational}
    config = tuple((name, json.dumps(value, sort_keys=True, default=str)) for name, value in kind.to_dict().items()
                   if name not in ignored and value not in ((), None, ""))
    text = model.select_sql + ("\n-- incremental\n" + model.incremental_sql if model.incremental_sql else "")
    return Entry(
        model=model.name, kind=kind.name, relation=model.relation,
        sql_hash=hashlib.sha256(text.encode()).hexdigest()[:16],
        columns=tuple((name, None) for name in (model.columns or ())),
        key=tuple(getattr(kind, "unique_key", ()) or getattr(kind, "key", ())),
        config=(*config, ("table_format", json.dumps(model.table_format))),
        description=model.description or "",
        column_docs=tuple(sorted((k, v) for k, v in model.column_docs.items() if v)),
        upstream=tuple(sorted((name, upstream[name]) for name in model.depends_on_models if name in upstream)),
    )


def typed(entry: Entry, types: Mapping[str, str] | None) -> Entry:
    """``entry`` with the columns Spark's analysis gives (names and types in its order).

    >>> e = Entry("m", "view", "db.m", "ab", (("ID", None),))
    >>> typed(e, {"id": "bigint", "n": "string"}).columns
    (('id', 'bigint'), ('n', 'string'))
    >>> typed(e, None) == e
    True
    """
    return entry if types is None else replace(entry, columns=tuple(types.items()))
