"""A model's or seed's unique key as its project declares it, and where: what an ``mv`` reading it
keys its rows by (``compiler.kinds.mv.analyze``).

In order: the ``unique_key`` config, then dbt's ``constraints`` (``primary_key``), then a column
that carries both a ``unique`` and a ``not_null`` test (what dbt projects already declare of their
keys). A key found nowhere is none: the ``mv`` then says the input has no key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from .errors import Problem

if TYPE_CHECKING:
    from .manifest import Manifest, Model
    from .data_tests import DataTest
    from .yamlfile import LineDict


@dataclass(frozen=True)
class DeclaredKey:
    columns: tuple[str, ...]
    origin: str  # where it was declared, in words (``mvflow explain``)


def declared_key(manifest: "Manifest", model: "Model") -> DeclaredKey | None:
    """The key ``model`` declares, or None. An incremental model's ``unique_key`` is a key only when
    it merges by it (``append`` and ``insert_overwrite`` keep whatever rows come)."""
    stated = tuple(getattr(model.kind, "unique_key", ()) or ())
    if stated and getattr(model.kind, "incremental_strategy", "merge") == "merge":
        line = model.config_lines.get("unique_key")
        return DeclaredKey(stated, f"unique_key at {model.path}{f':{line}' if line else ''}")
    return model.constraint_key or key_from_tests(model.name, manifest.tests.values())


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


#: the constraint types dbt documents (only ``primary_key`` says something mvflow uses)
CONSTRAINT_TYPES = ("not_null", "unique", "primary_key", "foreign_key", "check", "custom")


def constraint_key(entry: "LineDict | None", path: str) -> tuple[DeclaredKey | None, list[Problem]]:
    """dbt's ``constraints`` of a model's or seed's YAML entry: its primary key, if one is declared
    (``{type: primary_key, columns: [...]}`` on the entry, or ``{type: primary_key}`` on a column),
    and the problems of malformed constraints.

    >>> from compiler.yamlfile import load_yaml_text
    >>> doc = load_yaml_text("name: m\\ncolumns:\\n  - name: id\\n    constraints: [{type: primary_key}]\\n", "m.yml")
    >>> constraint_key(doc, "m.yml")
    (DeclaredKey(columns=('id',), origin='constraints primary_key at m.yml:4'), [])
    >>> doc = load_yaml_text("name: m\\nconstraints:\\n  - {type: primary_key, columns: [a, b]}\\n  - {type: key}\\n", "m.yml")
    >>> key, problems = constraint_key(doc, "m.yml")
    >>> key.columns, [p.format() for p in problems]  # doctest: +NORMALIZE_WHITESPACE
    (('a', 'b'), ["m.yml:4: [bad-value] constraint type 'key' is not one of dbt's — use not_null, unique,
      primary_key, foreign_key, check or custom"])
    """
    if entry is None:
        return None, []
    found: list[tuple[tuple[str, ...], int]] = []
    problems: list[Problem] = []
    holders = [(entry, None)] + [(c, str(c["name"])) for c in entry.get("columns") or [] if isinstance(c, dict) and "name" in c]
    for holder, column in holders:
        constraints = holder.get("constraints")
        if constraints is None:
            continue
        line = holder.line_of("constraints")
        if not isinstance(constraints, list) or not all(isinstance(c, dict) for c in constraints):
            problems.append(Problem("'constraints' must be a list of mappings", path, line, code="bad-value",
                                    hint="e.g. constraints: [{type: primary_key}]"))
            continue
        for constraint in constraints:
            at = getattr(constraint, "line", 0) or line
            kind = constraint.get("type")
            if kind not in CONSTRAINT_TYPES:
                problems.append(Problem(f"constraint type {kind!r} is not one of dbt's", path, at, code="bad-value",
                                        hint=f"use {', '.join(CONSTRAINT_TYPES[:-1])} or {CONSTRAINT_TYPES[-1]}"))
            elif kind == "primary_key":
                columns = [column] if column else constraint.get("columns")
                if not (isinstance(columns, list) and columns and all(isinstance(c, str) for c in columns)):
                    problems.append(Problem("a model's primary_key constraint names its columns", path, at, code="bad-value",
                                            hint="e.g. {type: primary_key, columns: [order_id, line]}, or put it on the column"))
                    continue
                found.append((tuple(c.lower() for c in columns), at))
    if len(found) > 1:
        problems.append(Problem("more than one primary_key constraint", path, found[1][1], code="bad-value",
                                hint=f"keep one (the first is at line {found[0][1]}); a key of several columns is "
                                     "{type: primary_key, columns: [...]} on the model"))
    key = DeclaredKey(found[0][0], f"constraints primary_key at {path}:{found[0][1]}") if found else None
    return key, problems
