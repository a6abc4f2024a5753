"""dbt's exposures: the dashboards, notebooks and applications that read a project's models, declared
in the models' YAML (``exposures:``). mvflow runs nothing for them; the docs site lists each one on
the pages of the models and sources it depends on, and manifest.json keeps them.

    exposures:
      - name: weekly_kpis
        type: dashboard            # dashboard | notebook | analysis | ml | application
        owner: {name: Ana, email: ana@example.com}
        depends_on: ["ref('orders')", "source('raw', 'payments')"]
        url: https://bi.example.com/kpis
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Collection, Mapping

from ..errors import Problem, did_you_mean

if TYPE_CHECKING:
    from ..project import Project

TYPES = ("dashboard", "notebook", "analysis", "ml", "application")
_CALL = re.compile(r"""^\s*(ref|source)\(\s*['"]([^'"]+)['"]\s*(?:,\s*['"]([^'"]+)['"]\s*)?\)\s*$""")


@dataclass(frozen=True)
class Exposure:
    name: str
    type: str
    path: str
    line: int
    owner: Mapping[str, str]
    depends_on: tuple[str, ...]  # model names and source ids (``db.table``)
    description: str = ""
    url: str = ""
    maturity: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "owner": dict(self.owner), "depends_on": list(self.depends_on)}


def load_exposures(project: "Project", models: Collection[str], sources: Mapping[str, str]) -> tuple[list[Exposure], list[Problem]]:
    """The exposures of the models' YAML files and warnings for what they name wrongly (dbt refuses
    those; mvflow runs nothing for an exposure, so a wrong one only warns). ``sources``: a source's
    ``'db.table'`` as dbt names it → its id."""
    found: list[Exposure] = []
    warnings: list[Problem] = []
    for display, line, entry in project.yaml_items("exposures"):
        if not isinstance(entry, dict) or not entry.get("name"):
            warnings.append(Problem("an exposure needs a name: ignored", display, line, code="bad-exposure",
                                    hint="e.g. '- {name: weekly_kpis, type: dashboard, owner: {name: Ana}, depends_on: [...]}'"))
            continue
        depends, bad = _depends_on(entry.get("depends_on"), models, sources)
        warnings += [Problem(f"exposure '{entry['name']}': {message}", display, line, code="bad-exposure", hint=hint)
                     for message, hint in bad]
        kind = str(entry.get("type") or "")
        if kind not in TYPES:
            warnings.append(Problem(f"exposure '{entry['name']}': type {kind!r} is not one of dbt's", display, line,
                                    code="bad-exposure", hint="types: " + ", ".join(TYPES)))
        owner = entry.get("owner") if isinstance(entry.get("owner"), dict) else {}
        found.append(Exposure(str(entry["name"]), kind, display, line, {str(k): str(v) for k, v in owner.items()},
                              depends, str(entry.get("description") or "").strip(), str(entry.get("url") or ""),
                              str(entry.get("maturity") or "")))
    return sorted(found, key=lambda e: e.name), warnings


def _depends_on(value: Any, models: Collection[str], sources: Mapping[str, str]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """What an exposure reads: ``ref('x')`` → model ``x``, ``source('db', 't')`` → the source's id.

    >>> _depends_on(["ref('a')", "source('raw', 't')", "ref('b')", "x"], {"a"}, {"raw.t": "raw_db.t"})[0]
    ('a', 'raw_db.t')
    """
    names: list[str] = []
    bad: list[tuple[str, str]] = []
    for item in value if isinstance(value, list) else []:
        match = _CALL.match(str(item))
        call, first, second = match.groups() if match else (None, None, None)
        if call == "ref" and second is None:
            if first in models:
                names.append(first)
            else:
                bad.append((f"ref('{first}'): no such model", did_you_mean(first, models) or "check the name"))
        elif call == "source" and second is not None:
            if f"{first}.{second}" in sources:
                names.append(sources[f"{first}.{second}"])
            else:
                bad.append((f"source('{first}', '{second}'): no such source", "declare it in the sources' YAML"))
        else:
            bad.append((f"depends_on entry {item!r} is not ref('…') or source('…', '…')", "write \"ref('model')\""))
    return tuple(dict.fromkeys(names)), bad
