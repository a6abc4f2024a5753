"""Run-time failures as mvflow messages: a Spark error in a model says which line of the model's
file it is about, what is wrong, what to do, and which ``target/run/`` file ran — the way compile
errors do — instead of Spark's message and Java stack trace::

    models/staging/stg_shops.sql:7: [table-not-found] table stage.shops does not exist — ... (ran target/run/staging/stg_shops.sql)

Spark's errors carry a query context: the fragment of the SQL text that failed and where it starts.
The compiled SQL is sqlglot's pretty print of the rendered model, so its positions are not the
file's: the fragment (a table or column name) is looked up in the model's own source instead
(``errors.find_line``), else the message points at the file's first line.

Runners report errors with ``describe(exc)`` alone (refresh.py, steps.py call ``run._spark_message``),
so which model and statement were running travels in a context variable that ``run_models`` and
``run_statements`` set (one per worker thread).
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from .errors import MvflowError, Problem, find_line

if TYPE_CHECKING:
    from .manifest import Manifest, Model

log = logging.getLogger("mvflow")


def create_table_hint(manifest: "Manifest", table: str) -> str:
    """What to do about a declared table that does not exist: ``mvflow demo init`` is the answer only
    in the demo project (elsewhere it would fill the user's ``stage`` database with the demo's rows)."""
    from .demo import creates

    if creates(manifest.sources, table):
        return "create it (the demo project: run `mvflow demo init`)"
    return "create it, or correct the database and name the declaration gives"


@dataclass
class Running:
    """What a worker is running: the model, and the statement it gave Spark last (if known)."""

    manifest: "Manifest"
    model: "Model"
    spark: Any = None  # the session, to list a table's actual columns
    statement: str | None = None
    purpose: str | None = None  # what that statement does ("build the new version in the idle slot")


_running: ContextVar[Running | None] = ContextVar("mvflow_running", default=None)


@contextmanager
def running(where: Running) -> Iterator[Running]:
    """Failures described inside are about ``where.model``."""
    token = _running.set(where)
    try:
        yield where
    finally:
        _running.reset(token)


def running_statement(sql: str, purpose: str | None = None) -> None:
    """The statement the current model runs now (positions in Spark's errors are within it)."""
    where = _running.get()
    if where is not None:
        where.statement, where.purpose = sql, purpose


def describe(exc: BaseException) -> str:
    """The one-line message for a failure of the running model (``path:line: [code] what — hint
    (ran target/run/…)``); the full error, Java stack trace included, is logged for ``--debug``."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s", _full_text(exc))
    where = _running.get()
    if isinstance(exc, MvflowError) or where is None:
        return _first_line(exc)
    return problem(exc, where).format()


def problem(exc: BaseException, where: Running) -> Problem:
    """The failure as a Problem pointing into the model's file."""
    condition = _condition(exc)
    params = _parameters(exc)
    if condition in ("DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE", "MVFLOW_DUPLICATE_KEYS"):
        found = _bad_source_keys(where)
        if found is not None:
            return found
    if condition == "TABLE_OR_VIEW_NOT_FOUND":
        name = _unquote(params.get("relationName", ""))
        code, message, hint = "table-not-found", f"table {name} does not exist", _missing_table_hint(name, where)
    elif condition.startswith("UNRESOLVED_COLUMN"):
        name = _unquote(params.get("objectName", ""))
        code, message, hint = "unknown-column", f"column {name} does not exist", _unknown_column_hint(name, params, where)
    else:
        name = ""
        code = condition.lower().replace("_", "-").replace(".", "-") if condition else "run-failed"
        message, hint = _spark_text(exc), None
    fragment, start = _context(exc)
    before = where.statement[:start] if where.statement and start is not None else ""
    line = getattr(where.model, "declared_line", None)  # a test declared in YAML: its line there
    if line is None and (fragment or name):
        line = find_line(where.model.raw_sql, fragment or name, before)
    ran = f"(ran {run_file(where)})"
    if hint:
        return Problem(message, where.model.path, line or 1, hint=f"{hint} {ran}", code=code)
    return Problem(f"{message} {ran}", where.model.path, line or 1, code=code)


def _bad_source_keys(where: Running) -> Problem | None:
    """Two rows for one MV key reached a MERGE: the sources whose rows break their declared keys,
    at the first one's declaration (``compiler.source_keys``); None when no source explains it."""
    from .source_keys import HINT, find_bad_keys, sources_read

    bad = find_bad_keys(where.spark, sources_read(where.manifest, where.model)) if where.spark is not None else []
    if not bad:
        return None
    rest = "".join(f"; {b.format()}" for b in bad[1:])
    return Problem(f"{where.model.name} was not written: {bad[0].words()}{rest} (ran {run_file(where)})",
                   bad[0].source.path, bad[0].source.line, hint=HINT, code="bad-source-keys")


def run_file(where: Running) -> str:
    """The ``target/run/`` file (view, table) or folder (mv, fact) holding what ran."""
    from .artifacts import run_path

    return f"{where.manifest.project.target_path}/{run_path(where.model, where.manifest)}"


def _missing_table_hint(name: str, where: Running) -> str:
    manifest = where.manifest
    source = next((s for s in manifest.sources.values() if s.id.lower() == name.lower()), None)
    if source is not None:
        return (f"source {source.id} is declared at {source.path}:{source.line} but its table does not exist: "
                f"{create_table_hint(manifest, source.id)}")
    feed = next((s for s in manifest.sources.values() if s.changes and s.changes.table.lower() == name.lower()), None)
    if feed is not None:
        return (f"it is the change feed of source {feed.id} (declared at {feed.path}:{feed.line}): "
                f"{create_table_hint(manifest, feed.changes.table)}")
    model = next((m for m in manifest.models.values() if m.relation.lower() == name.lower()), None)
    if model is not None:
        return f"it is model {model.name}'s table: build it first (mvflow run -s +{model.name})"
    return "create the table, or correct the name"


def _unknown_column_hint(name: str, params: dict[str, str], where: Running) -> str | None:
    qualifier = name.rsplit(".", 1)[0] if "." in name else None
    table = _table_of(where.model, qualifier)
    columns = _actual_columns(where.spark, table) if table else None
    proposal = _unquote(params.get("proposal", "").strip("[]"))
    hints = []
    if proposal:
        hints.append(f"did you mean {proposal}?")
    if columns:
        hints.append(f"{table} has columns: {', '.join(columns)}")
    return "; ".join(hints) or None


def _table_of(model: "Model", qualifier: str | None) -> str | None:
    """The table the model reads under ``qualifier`` (an alias or name), or its only table."""
    from sqlglot import exp

    tables = list(model.ast.find_all(exp.Table)) if model.ast is not None else []
    if qualifier is not None:
        tables = [t for t in tables if t.alias_or_name.lower() == qualifier.split(".")[-1].lower()]
    names = {".".join(p for p in (t.db, t.name) if p) for t in tables}
    return names.pop() if len(names) == 1 else None


def _actual_columns(spark: Any, table: str) -> list[str] | None:
    if spark is None:
        return None
    try:
        return spark.table(table).columns  # no job, unlike catalog.listColumns
    except Exception:  # noqa: BLE001 - only a better hint is lost
        return None


def _condition(exc: BaseException) -> str:
    getter = getattr(exc, "getCondition", None)
    return (getter() if callable(getter) else None) or ""


def _parameters(exc: BaseException) -> dict[str, str]:
    getter = getattr(exc, "getMessageParameters", None)
    return dict(getter() or {}) if callable(getter) else {}


def _context(exc: BaseException) -> tuple[str | None, int | None]:
    """The failing fragment of the SQL text and its start index, from Spark's query context."""
    getter = getattr(exc, "getQueryContext", None)
    contexts = getter() if callable(getter) else []
    for context in contexts or []:
        if context.contextType().name == "SQL":
            return context.fragment() or None, context.startIndex()
    return None, None


def _unquote(name: str) -> str:
    return name.replace("`", "")


def _spark_text(exc: BaseException) -> str:
    """Spark's message without the error class, the SQLSTATE and the position (said elsewhere)."""
    text = _first_line(exc)
    text = re.sub(r"^\[[A-Z_.]+\]\s*", "", text)
    return re.sub(r"\s*(SQLSTATE: \w+)?(;? ?line \d+ pos \d+)?;?$", "", text)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    java = getattr(exc, "java_exception", None)  # a Py4JJavaError Spark did not convert
    if java is not None:
        text = str(java.getMessage() or java.toString()).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


def _full_text(exc: BaseException) -> str:
    import traceback

    java = getattr(exc, "_stackTrace", None) or getattr(exc, "java_exception", None)  # PySpark's error keeps the Java one
    return "".join(traceback.format_exception(exc)) + (f"\n{java}" if java is not None else "")
