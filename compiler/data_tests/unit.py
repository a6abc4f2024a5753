"""dbt's unit tests (``unit_tests:`` in a model's YAML): a model's SELECT run on rows the test gives
for its inputs, compared with the rows it expects — without building or reading any table.

Each unit test compiles to a data test (``DataTest``) whose failing rows are the difference of the
two multisets: the model's SQL rendered with every ``ref()``/``source()`` replaced by a CTE of the
given rows (``__unit__<input>``), its output cut to the expected columns, each row numbered among
its copies, and joined with the expected rows on every column (``<=>``, so Spark coerces a value
written in YAML to the column's type as a comparison does: ``'2024-01-06'`` equals a DATE). A
failing row says whether it was ``actual`` only or ``expected`` only. ``mvflow test`` runs them
with the other tests; ``target/run/tests/<name>.sql`` holds the query.

Rows are given as ``dict`` (YAML mappings, the default), ``csv`` (inline or ``fixture:`` a file in
``<test path>/fixtures/``) or ``sql``. Input columns a row does not give are NULL (the input's
columns as the compile knows them). ``overrides: {vars: …, macros: {is_incremental: true}}``
render the model as dbt does.

>>> print(rows_sql([{"id": 1, "s": "it's"}, {"id": 2}], ["id", "s", "t"]))
SELECT 1 AS `id`, 'it\\'s' AS `s`, NULL AS `t`
UNION ALL
SELECT 2 AS `id`, NULL AS `s`, NULL AS `t`
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Collection, Mapping

from ..errors import CompileError, Problem
from ..parse import parse_select, with_ctes
from ..table_format import quoted
from ..yamlfile import LineDict
from .declare import TestConfig, TestDeclaration

if TYPE_CHECKING:
    from ..manifest import Model
    from ..project import Project
    from ..render import Renderer
    from ..sources import Source
    from .compile import DataTest

FORMATS = ("dict", "csv", "sql")
_INPUT = re.compile(r"""^\s*(ref|source)\(\s*(['"])([^'"]+)\2\s*(?:,\s*(['"])([^'"]+)\4\s*)?\)\s*$""")
_COPY = "__unit_copy"


def unit_tests(project: "Project", renderer: "Renderer", models: Mapping[str, "Model"], sources: Mapping[str, "Source"],
               templates: Mapping[str, Any], set_aside: Collection[str] = frozenset()) -> tuple[list["DataTest"], list[Problem]]:
    """Every unit test of the project's model YAML files, compiled (but those of models ``set_aside``);
    problems at their lines."""
    tests: list[DataTest] = []
    problems: list[Problem] = []
    for display, _, entry in project.yaml_items("unit_tests"):
        if isinstance(entry, LineDict) and str(entry.get("model")) in set_aside:
            continue
        try:
            test = _unit_test(project, renderer, models, sources, templates, entry, display)
        except CompileError as exc:
            problems += exc.problems
            continue
        if test is not None:
            tests.append(test)
    return tests, problems


def _unit_test(project, renderer, models, sources, templates, entry: Any, display: str) -> "DataTest | None":
    from .compile import DataTest

    line = getattr(entry, "line", 1)
    if not isinstance(entry, LineDict) or not entry.get("name") or not entry.get("model"):
        raise _error("a unit test needs a name and a model", display, line, "e.g. '- name: ...' with 'model: <model>'")
    name, model_name = str(entry["name"]), str(entry["model"])
    config = entry.get("config") if isinstance(entry.get("config"), dict) else {}
    if config.get("enabled") is False:
        return None
    model = models.get(model_name)
    if model is None or model_name not in templates:
        raise _error(f"unit test '{name}': no SQL model '{model_name}'", display, entry.line_of("model"),
                     "name a model of this project")
    inputs = _inputs(project, entry, display, name, models, sources)
    overrides = entry.get("overrides") if isinstance(entry.get("overrides"), dict) else {}
    rendered = _render(renderer, templates[model_name], model, overrides, inputs, display, line, name)
    expect = entry.get("expect")
    if not isinstance(expect, dict) or "rows" not in expect and "fixture" not in expect:
        raise _error(f"unit test '{name}': expect needs rows", display, line, "e.g. 'expect: {rows: [{id: 1}]}'")
    expected_sql, columns = _fixture(project, expect, display, getattr(expect, "line", line), name, None)
    if not columns:
        raise _error(f"unit test '{name}': the expected rows name no column", display, line,
                     "give the columns to compare: rows: [{id: 1}] (format: sql selects them)")
    sql = comparison_sql(with_ctes(rendered, [(cte, sql) for cte, sql in inputs.values()], display), expected_sql, columns)
    declaration = TestDeclaration(name, "unit", display, line, attached_to=model_name,
                                  description=str(entry.get("description") or ""))
    tags = config.get("tags") or ()
    judged = TestConfig(tags=tuple([tags] if isinstance(tags, str) else tags))
    return DataTest(declaration, judged, sql, (model_name,), raw_sql=sql)


def _inputs(project, entry: LineDict, display: str, name: str, models, sources) -> dict[str, tuple[str, str]]:
    """``ref('x')`` / ``source('a', 'b')`` as the model renders it → (CTE name, its rows' SELECT)."""
    given = entry.get("given") or []
    if not isinstance(given, list):
        raise _error(f"unit test '{name}': given must be a list of inputs", display, entry.line_of("given"),
                     "e.g. given: [{input: ref('stg_orders'), rows: [{order_id: 1}]}]")
    inputs: dict[str, tuple[str, str]] = {}
    for item in given:
        line = getattr(item, "line", entry.line_of("given"))
        match = _INPUT.match(str(item.get("input", ""))) if isinstance(item, dict) else None
        if match is None:
            raise _error(f"unit test '{name}': each input is ref('<model>') or source('<source>', '<table>')", display, line,
                         "e.g. - input: ref('stg_orders')")
        call, first, second = match.group(1), match.group(3), match.group(5)
        key = f"ref:{first}" if call == "ref" else f"source:{first}.{second}"
        known = models[first].columns or [] if call == "ref" and first in models else _source_columns(sources, models, first, second)
        if call == "ref" and first not in models or call == "source" and not _source(sources, first, second):
            raise _error(f"unit test '{name}': input {item['input']} is not a model or source of this project", display, line,
                         "name a ref or source the model reads")
        sql, _ = _fixture(project, item, display, line, name, known)
        inputs[key] = (f"__unit__{first}" + (f"__{second}" if second else ""), sql)
    return inputs


def _source(sources, database: str, table: str | None) -> "Source | None":
    return next((s for s in sources.values() if s.ref_name == f"{database}.{table}" or s.id == f"{database}.{table}"), None)


def _source_columns(sources, models, database: str, table: str | None) -> list[str]:
    """A source's declared columns, else those of the seed or model it names (dbt reads them from the table)."""
    source = _source(sources, database, table)
    if source is None:
        return []
    if source.columns:
        return [column.name for column in source.columns]
    return next((m.columns or [] for m in models.values() if m.relation == source.id.lower()), [])


def _render(renderer: "Renderer", template, model: "Model", overrides: Mapping[str, Any], inputs, display: str,
            line: int, name: str) -> str:
    """The model's SQL with its inputs replaced by the given rows' CTEs (and ``overrides``)."""
    def resolve_ref(ref: str, _line: int) -> str:
        if f"ref:{ref}" not in inputs:
            raise _error(f"unit test '{name}': the model reads ref('{ref}'), which the test does not give", display, line,
                         f"add '- input: ref(\"{ref}\")' with its rows (rows: [] for none) under given")
        return inputs[f"ref:{ref}"][0]

    def resolve_source(database: str, table: str, _line: int) -> str:
        if f"source:{database}.{table}" not in inputs:
            raise _error(f"unit test '{name}': the model reads source('{database}', '{table}'), which the test does not give",
                         display, line, f"add '- input: source(\"{database}\", \"{table}\")' with its rows under given")
        return inputs[f"source:{database}.{table}"][0]

    project, incremental = renderer.project, renderer.incremental
    macros = overrides.get("macros") if isinstance(overrides.get("macros"), dict) else {}
    renderer.project = replace(project, vars={**project.vars, **(overrides.get("vars") or {})})
    renderer.incremental = bool(macros.get("is_incremental", False))
    try:
        return renderer.render(template, this=model.relation, resolve_ref=resolve_ref, resolve_source=resolve_source).sql
    finally:
        renderer.project, renderer.incremental = project, incremental


def _fixture(project: "Project", spec: Mapping[str, Any], display: str, line: int, name: str,
             columns: list[str] | None) -> tuple[str, list[str]]:
    """A SELECT of the given rows and their columns (``columns``: the input's, to fill with NULL)."""
    form = str(spec.get("format") or "dict")
    if form not in FORMATS:
        raise _error(f"unit test '{name}': format '{form}' is not dict, csv or sql", display, line, "write format: dict, csv or sql")
    rows = spec.get("rows")
    if spec.get("fixture"):
        rows = _fixture_file(project, str(spec["fixture"]), form, display, line, name)
    if form == "sql":
        return str(rows or ""), _named_selects(str(rows or ""), display, line, name)
    if form == "csv":
        rows = [{k: _csv_value(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(str(rows or "").strip()))]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise _error(f"unit test '{name}': rows must be a list of mappings (format: dict)", display, line,
                     "e.g. rows: [{id: 1, status: placed}]")
    given = list(dict.fromkeys(str(k) for row in rows for k in row))
    names = given + [c for c in columns or [] if c not in given]
    if not rows:
        if not names:
            raise _error(f"unit test '{name}': no rows and no known columns for this input", display, line,
                         "give one row, or format: sql with a SELECT ... WHERE FALSE")
        return f"SELECT {', '.join(f'NULL AS {quoted(c)}' for c in names)} WHERE FALSE", given
    return rows_sql(rows, names), given


def _named_selects(sql: str, display: str, line: int, name: str) -> list[str]:
    """The columns a ``format: sql`` fixture selects.

    >>> _named_selects("select 1 as id, s from t", "u.yml", 1, "u")
    ['id', 's']
    """
    try:
        return list(parse_select(sql, display, f"unit test '{name}' rows").named_selects)
    except CompileError as exc:
        raise _error(f"unit test '{name}': its rows' SQL does not parse: {exc.problems[0].message}", display, line,
                     "write one SELECT") from exc


def _fixture_file(project: "Project", fixture: str, form: str, display: str, line: int, name: str) -> str:
    suffix = ".sql" if form == "sql" else ".csv"
    for folder in project.test_paths:
        path = project.root / folder / "fixtures" / f"{fixture}{suffix}"
        if path.is_file() and path.resolve().is_relative_to(project.root):
            return path.read_text(encoding="utf-8")
    raise _error(f"unit test '{name}': no fixture file '{fixture}{suffix}' under <test path>/fixtures/", display, line,
                 f"put it in {project.test_paths[0]}/fixtures/{fixture}{suffix}")


def rows_sql(rows: list[Mapping[str, Any]], columns: list[str]) -> str:
    """One SELECT of literals per row, in ``columns`` order (absent values NULL)."""
    return "\nUNION ALL\n".join("SELECT " + ", ".join(f"{_literal(row.get(c))} AS {quoted(c)}" for c in columns) for row in rows)


def comparison_sql(actual: str, expected: str, columns: list[str]) -> str:
    """The failing rows: each row of one side without a copy on the other (a multiset difference).

    >>> print(comparison_sql("SELECT 1 AS id", "SELECT 1 AS id", ["id"]).rstrip())  # doctest: +ELLIPSIS
    WITH __unit_actual AS (
      SELECT `id`, ROW_NUMBER() OVER (PARTITION BY `id` ORDER BY `id`) AS __unit_copy FROM (
    SELECT 1 AS id
      ) AS m
    ), ...
    WHERE a.__unit_copy IS NULL OR e.__unit_copy IS NULL
    """
    cols = ", ".join(quoted(c) for c in columns)

    def numbered(name: str, sql: str) -> str:
        return (f"{name} AS (\n  SELECT {cols}, ROW_NUMBER() OVER (PARTITION BY {cols} ORDER BY {cols}) AS {_COPY} FROM (\n"
                f"{sql.strip()}\n  ) AS m\n)")

    on = " AND ".join(f"a.{quoted(c)} <=> e.{quoted(c)}" for c in columns)
    shown = ", ".join(f"COALESCE(CAST(a.{quoted(c)} AS STRING), CAST(e.{quoted(c)} AS STRING)) AS {quoted(c)}" for c in columns)
    return (f"WITH {numbered('__unit_actual', actual)}, {numbered('__unit_expected', expected)}\n"
            f"SELECT CASE WHEN a.{_COPY} IS NULL THEN 'expected only' ELSE 'actual only' END AS diff, {shown}\n"
            f"FROM __unit_actual AS a FULL OUTER JOIN __unit_expected AS e ON {on} AND a.{_COPY} = e.{_COPY}\n"
            f"WHERE a.{_COPY} IS NULL OR e.{_COPY} IS NULL\n")


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _csv_value(text: str | None) -> Any:
    """A CSV cell as YAML would read it: a number, a boolean, empty or ``null`` as NULL, else text."""
    if text is None or text.strip() in ("", "null", "NULL"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.strip().lower(), text)


def _error(message: str, path: str, line: int | None, hint: str) -> CompileError:
    return CompileError(Problem(message, path, line, hint=hint, code="unit-test"))
