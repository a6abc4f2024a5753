"""Schema drift: the columns the sources of a run declare, checked against their actual tables
once per run, when Spark starts and before any model's SQL runs (``LazySession(then=...)``), so a
dropped or retyped column stops the run with the source's YAML file and line instead of failing
a model half-way, and no table or offset is touched. One table resolution per source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from .errors import Problem, ProblemList, RunError
from .failures import create_table_hint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .manifest import Manifest
    from .sources import Source


def check_sources(spark: "SparkSession", manifest: "Manifest", selected: Iterable[str]) -> None:
    """Raise RunError listing every source read by the ``selected`` models whose table is missing
    or lacks a declared column or has it with another type, or, declared ``changes: cdf``, is
    not a Delta table recording its Change Data Feed; a source that a selected model (a seed)
    makes in this run is not checked before it."""
    from .kinds.mv.change_modes import cdf_problem

    problems = ProblemList()
    made = {manifest.models[name].relation for name in selected if name in manifest.models}  # e.g. a dbt source over a seed
    for source in sources_read(manifest, selected):
        if source.id.lower() in made:  # this run makes it first (build orders the DAG so)
            continue
        actual = _actual_columns(spark, source.id)
        for problem in drift(source, actual, create_table_hint(manifest, source.id)):
            problems.add(problem)
        cdf = cdf_problem(spark, source.id, source.path, source.line) if source.cdf and actual is not None else None
        if cdf is not None:
            problems.add(cdf)
    problems.raise_if_any(RunError)


def sources_read(manifest: "Manifest", selected: Iterable[str]) -> list["Source"]:
    names = {name for node in selected for name in manifest.node(node).depends_on_sources}
    return [manifest.sources[name] for name in sorted(names) if name in manifest.sources]


def drift(source: "Source", actual: dict[str, str] | None,
          create_hint: str = "create it, or correct the database and name the declaration gives") -> list[Problem]:
    """What differs between the declaration and the table (``actual``: column → Spark type, None
    if there is no table; ``create_hint`` says what to do then).

    >>> from compiler.sources import Column, Source
    >>> source = Source("stage", "shops", ("id",), "lineage/a.yml", 3,
    ...                 columns=(Column("id", "bigint"), Column("rating", "double"), Column("name")))
    >>> for p in drift(source, {"id": "int", "name": "string"}): print(p.format())
    lineage/a.yml:3: [schema-drift] source stage.shops: declared column rating is not in the table (it has id, name) — declare the table's columns as they are, or fix the table
    lineage/a.yml:3: [schema-drift] source stage.shops: column id is declared bigint, the table has int — declare the table's columns as they are, or fix the table
    """
    if actual is None:
        return [Problem(f"source {source.id}: the table does not exist", source.path, source.line,
                        hint="create it first, or load the seed that fills it (mvflow seed)" if source.plain else create_hint,
                        code="table-not-found")]
    hint = "declare the table's columns as they are, or fix the table"
    columns = {name.lower(): kind for name, kind in actual.items()}
    missing = [c.name for c in source.columns if c.name.lower() not in columns]
    problems = [Problem(f"source {source.id}: declared column {name} is not in the table (it has {', '.join(actual)})",
                        source.path, source.line, hint=hint, code="schema-drift") for name in missing]
    for column in source.columns:
        found = columns.get(column.name.lower())
        if column.type and found and _type(column.type) != _type(found):
            problems.append(Problem(f"source {source.id}: column {column.name} is declared {column.type}, the table has {found}",
                                    source.path, source.line, hint=hint, code="schema-drift"))
    return problems


def _actual_columns(spark: "SparkSession", table: str) -> dict[str, str] | None:
    """Column → type of ``table``, None if it does not exist. Resolving the table (no job) costs
    a fifth of ``catalog.listColumns`` and leaves it in the session's relation cache for the models."""
    try:
        return dict(spark.table(table).dtypes)
    except Exception as exc:
        condition = getattr(exc, "getCondition", lambda: None)()
        if condition == "TABLE_OR_VIEW_NOT_FOUND":
            return None
        raise


def _type(name: str) -> str:
    """A type name as Spark prints it (``integer`` → ``int``, ``decimal(12, 2)`` → ``decimal(12,2)``).

    >>> _type("Integer"), _type("DECIMAL(12, 2)"), _type("long")
    ('int', 'decimal(12,2)', 'bigint')
    """
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        name = exp.DataType.build(name, dialect="spark").sql("spark")
    except (SqlglotError, ValueError):
        pass
    return name.lower().replace(" ", "")
