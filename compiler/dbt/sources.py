"""dbt's ``sources:`` in schema YAML as mvflow sources: plain tables (no key, no change mode), so
view and table models read them in full; an ``mv`` or ``fact`` reading one is refused, naming it.

``source('raw', 'orders')`` names a source and a table; the table is ``<schema>.<identifier>``
(schema default: the source's name; identifier default: the table's name). ``schema`` may use
Jinja (``{{ target.schema }}_raw``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import Problem
from ..sources import Column, Source
from ..yamlfile import LineDict, load_yaml

if TYPE_CHECKING:
    from ..project import Project
    from ..render import Renderer


def dbt_sources(project: "Project", renderer: "Renderer") -> tuple[dict[str, Source], list[Problem]]:
    """The sources of every schema YAML file, by table id (``schema.identifier``)."""
    sources: dict[str, Source] = {}
    problems: list[Problem] = []
    for path in project.files("models", (".yml", ".yaml")):
        display = project.relative(path)
        data = load_yaml(path, display)
        for entry in (data.get("sources") or []) if isinstance(data, LineDict) else []:
            if not isinstance(entry, LineDict) or "name" not in entry:
                problems.append(Problem("each source needs a name", display, getattr(entry, "line", 1), code="yaml",
                                        hint="write '- name: <source>' with schema and tables under it"))
                continue
            for table in entry.get("tables") or []:
                if not isinstance(table, LineDict) or "name" not in table:
                    problems.append(Problem(f"each table of source '{entry['name']}' needs a name", display,
                                            getattr(table, "line", entry.line), code="yaml", hint="write '- name: <table>'"))
                    continue
                with renderer.scope(display):  # a package's sources see its vars
                    source = _source(entry, table, display, renderer)
                other = sources.get(source.id)
                if other is not None:
                    problems.append(Problem(f"source table {source.id} is declared twice (also {other.path}:{other.line})",
                                            display, table.line, code="duplicate-source", hint="keep one declaration"))
                    continue
                sources[source.id] = source
    return sources, problems


def _source(entry: LineDict, table: LineDict, display: str, renderer: "Renderer") -> Source:
    schema = renderer.render_string(str(entry.get("schema") or entry["name"]))
    freshness = table["freshness"] if "freshness" in table else entry.get("freshness")
    return Source(
        database=schema,
        name=str(table.get("identifier") or table["name"]),
        primary_key=(),
        path=display,
        line=table.line,
        description=renderer.render_string(str(table.get("description") or entry.get("description") or "")).strip(),
        columns=tuple(Column(str(c["name"]), c.get("data_type") or c.get("type"), str(c.get("description") or ""))
                      for c in table.get("columns") or [] if isinstance(c, LineDict) and "name" in c),
        tags=tuple(_list(entry.get("tags")) + _list(table.get("tags"))),
        plain=True,
        ref_name=f"{entry['name']}.{table['name']}",
        loaded_at_field=table.get("loaded_at_field") or entry.get("loaded_at_field"),
        freshness=dict(freshness) if isinstance(freshness, dict) else None,
        tests=table,
    )


def _list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)] if value else []
