"""``mvflow show``: a quick look at rows, writing nothing (dbt's ``show``): a model's compiled
SELECT, or an inline query whose ``ref()``/``source()`` name the project's tables, run with a
``LIMIT`` and printed as a table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .errors import CompileError, Problem, did_you_mean
from .kinds.ephemeral import cte_name
from .parse import with_ctes

if TYPE_CHECKING:
    from .manifest import Manifest


def model_query(manifest: "Manifest", name: str) -> str:
    model = manifest.models.get(name)
    if model is None:
        raise CompileError(Problem(f"no model named '{name}'", hint=did_you_mean(name, manifest.models) or "run 'mvflow ls'",
                                   code="unknown-model"))
    return model.select_sql


def inline_query(manifest: "Manifest", text: str) -> str:
    """The inline SQL rendered like a model's (ephemeral models inlined as CTEs)."""
    from .render import Renderer

    renderer = Renderer(manifest.project, target=manifest.project.target(manifest.target))
    renderer.source_names = {s.ref_name: s.id for s in manifest.sources.values() if s.ref_name}
    used: list[str] = []

    def resolve_ref(name: str, line: int) -> str:
        if name not in manifest.models:
            raise CompileError(Problem(f"--inline: ref('{name}'): no such model", code="unknown-ref",
                                       hint=did_you_mean(name, manifest.models) or "run 'mvflow ls'"))
        if manifest.models[name].kind.name == "ephemeral":
            used.append(name)
            return cte_name(name)
        return manifest.models[name].relation

    def resolve_source(database: str, table: str, line: int) -> str:
        key = renderer.source_names.get(f"{database}.{table}", f"{database}.{table}")
        if key not in manifest.sources:
            raise CompileError(Problem(f"--inline: source('{database}', '{table}'): no such source", code="unknown-source",
                                       hint="sources: " + ", ".join(sorted(manifest.sources)[:10])))
        return manifest.sources[key].id

    sql = renderer.render(renderer.env.from_string(text), this="", resolve_ref=resolve_ref, resolve_source=resolve_source).sql
    return with_ctes(sql, [(cte_name(n), manifest.models[n].sql) for n in dict.fromkeys(used)], "--inline") if used else sql


def limited(sql: str, limit: int) -> str:
    """
    >>> limited("select 1 as a", 5)
    'SELECT * FROM (\\nselect 1 as a\\n) AS mvflow_show LIMIT 5'
    """
    return f"SELECT * FROM (\n{sql.strip().rstrip(';')}\n) AS mvflow_show LIMIT {limit}"


def table_text(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows as a text table (NULL for None).

    >>> print(table_text(["id", "name"], [(1, "Ann"), (20, None)]))
    | id | name |
    | -- | ---- |
    |  1 | Ann  |
    | 20 | NULL |
    """
    cells = [[("NULL" if v is None else str(v)) for v in row] for row in rows]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) for i in range(len(columns))]
    widths = [max([len(c), 2] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]

    def render(values: Sequence[str], align: bool = True) -> str:
        return "| " + " | ".join(v.rjust(w) if align and numeric[i] else v.ljust(w)
                                 for i, (v, w) in enumerate(zip(values, widths))) + " |"

    return "\n".join([render(list(columns), align=False), render(["-" * w for w in widths], align=False),
                      *(render(row) for row in cells)])
