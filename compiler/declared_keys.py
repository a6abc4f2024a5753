"""A model's or seed's unique key as its project declares it, and where: what an ``mv`` reading it
keys its rows by (``compiler.kinds.mv.plan``).

In order: the ``unique_key`` config, then a column that carries both a ``unique`` and a
``not_null`` test (what dbt projects already declare of their keys). A key found nowhere is none:
the ``mv`` then says the input cannot be mapped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from .compile import Manifest, Model
    from .data_tests import DataTest


@dataclass(frozen=True)
class DeclaredKey:
    columns: tuple[str, ...]
    origin: str  # where it was declared, in words (``mvflow explain``)


def declared_key(manifest: "Manifest", model: "Model") -> DeclaredKey | None:
    """The key ``model`` declares, or None."""
    stated = tuple(getattr(model.kind, "unique_key", ()) or ())
    if stated:
        line = model.config_lines.get("unique_key")
        return DeclaredKey(stated, f"unique_key at {model.path}{f':{line}' if line else ''}")
    return key_from_tests(model.name, manifest.tests.values())


def key_from_tests(name: str, tests: Iterable["DataTest"]) -> DeclaredKey | None:
    """The first column (in declaration order) of model ``name`` tested both ``unique`` and ``not_null``.

    >>> from types import SimpleNamespace as N
    >>> def t(kind, column, line): return N(declaration=N(test_type=kind, attached_to="shops", column=column,
    ...                                                  path="seeds/shops.yml", line=line), config=N(where=None))
    >>> key_from_tests("shops", [t("unique", "name", 4), t("not_null", "id", 6), t("unique", "id", 7)])
    DeclaredKey(columns=('id',), origin='tests unique and not_null of column id at seeds/shops.yml:6')
    >>> key_from_tests("shops", [t("unique", "name", 4)]) is None
    True
    """
    seen: dict[str, dict[str, int]] = {}
    for test in tests:
        declared = test.declaration
        if declared.attached_to != name or not declared.column or declared.test_type not in ("unique", "not_null"):
            continue
        if test.config.where:  # a test of some rows only says nothing of the key
            continue
        seen.setdefault(declared.column.lower(), {})[declared.test_type] = declared.line
        lines = seen[declared.column.lower()]
        if len(lines) == 2:
            return DeclaredKey((declared.column.lower(),), f"tests unique and not_null of column {declared.column} at "
                                                           f"{declared.path}:{min(lines.values())}")
    return None
