"""Source declarations from ``lineage/*.yml``: existing tables, their keys and how changes are seen."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .errors import Problem, ProjectError
from .project import Project
from .spark_types import type_problem
from .yamlfile import LineDict, check_keys, load_yaml

_FILE_KEYS = {"sources"}
_SOURCE_KEYS = {
    "name", "database", "description", "primary_key", "unique", "columns", "position", "changes",
    "dictionary", "deleted", "delay", "depends_on", "tags", "freshness", "loaded_at_field",
}
_CHANGES_KEYS = {"table", "position"}
#: ``changes: cdf``: the changes are the Delta table's own Change Data Feed
CDF = "cdf"
_COLUMN_KEYS = {"name", "type", "description", "tests", "tags"}
#: A name mvflow can write into SQL unquoted (it does not quote the names it generates).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)?\s*$")
_UNITS = {None: 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Column:
    name: str
    type: str | None = None
    description: str = ""


@dataclass(frozen=True)
class ChangeFeed:
    """A separate table of changed keys plus a position, like a keys-only CDC stream."""

    table: str
    position: tuple[str, ...]


@dataclass(frozen=True)
class Source:
    """An existing table that models read, with its key and change mode.

    The change mode is exactly one of ``position`` (monotonic columns in the table itself),
    ``changes`` (a separate change feed, or ``changes: cdf``: the Delta table's own Change Data
    Feed, ``cdf``) or ``dictionary`` (diffed against the previous contents).
    """

    database: str
    name: str
    primary_key: tuple[str, ...]
    path: str
    line: int
    description: str = ""
    columns: tuple[Column, ...] = ()
    position: tuple[str, ...] = ()
    changes: ChangeFeed | None = None
    dictionary: bool = False
    cdf: bool = False  # changes: cdf — the Delta table's Change Data Feed
    deleted: str | None = None
    delay_seconds: int = 0
    depends_on: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    unique: tuple[tuple[str, ...], ...] = ()  # alternate unique keys: a join binding one is one-to-one
    plain: bool = False  # a dbt source: no key, no change mode (read in full by view/table models)
    ref_name: str | None = None  # a dbt source's name in source('<source>', '<table>'), when not its table's
    loaded_at_field: str | None = None  # dbt freshness: the column holding when each row was loaded
    freshness: dict | None = field(default=None, compare=False)  # dbt freshness: warn_after / error_after
    tests: Any = field(default=None, compare=False, repr=False)  # the YAML entry holding its data tests, if any

    @property
    def id(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def change_mode(self) -> str:
        if self.plain:
            return "none"
        return "position" if self.position else "changes" if self.changes else "cdf" if self.cdf else "dictionary"

    def column_types(self) -> dict[str, str] | None:
        """Column name → type for sqlglot's schema, or None when no columns are declared."""
        if not self.columns:
            return None
        return {c.name: c.type or "string" for c in self.columns}

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "database": self.database,
            "name": self.name,
            "path": self.path,
            "line": self.line,
            "description": self.description,
            "primary_key": list(self.primary_key),
            "unique": [list(u) for u in self.unique],
            "change_mode": self.change_mode,
            "position": list(self.position),
            "changes": {"table": self.changes.table, "position": list(self.changes.position)} if self.changes else None,
            "deleted": self.deleted,
            "delay_seconds": self.delay_seconds,
            "depends_on": list(self.depends_on),
            "tags": list(self.tags),
            "columns": [{"name": c.name, "type": c.type, "description": c.description} for c in self.columns],
        }


def parse_duration(value: Any) -> int | None:
    """Seconds in ``30s``, ``10m``, ``2h``, ``1d`` or a plain number of seconds; None if invalid.

    >>> parse_duration("10m"), parse_duration(45), parse_duration("soon")
    (600, 45, None)
    """
    match = _DURATION.match(str(value))
    if not match:
        return None
    return int(match.group(1)) * _UNITS[match.group(2)]


def load_sources(project: Project) -> dict[str, Source]:
    """All sources of the project by id (``database.name``); every problem is reported at once."""
    problems: list[Problem] = []
    sources: dict[str, Source] = {}
    invalid: set[str] = set()
    declared: dict[str, Source] = {}
    for path in project.files("lineage", (".yml", ".yaml")):
        display = project.relative(path)
        data = load_yaml(path, display)
        if data is None:
            continue
        if not isinstance(data, LineDict) or not isinstance(data.get("sources"), list):
            problems.append(Problem("a lineage file must hold 'sources:', a list of tables", display, 1, code="yaml",
                                    hint="start the file with 'sources:' and list tables under it as '- name: ...'"))
            continue
        problems += check_keys(data, _FILE_KEYS, display, "lineage file")
        for raw in data["sources"]:
            source = _source(raw, display, data.line_of("sources"), problems)
            if source is None:
                if isinstance(raw, LineDict):  # declared, with problems already reported
                    invalid.add(f"{raw.get('database')}.{raw.get('name')}")
                continue
            first = declared.setdefault(source.id.lower(), source)  # Spark table names ignore case
            if first is not source:
                spelled = "" if first.id == source.id else f" as {first.id}"
                problems.append(
                    Problem(
                        f"source {source.id} is declared twice (first at {first.path}:{first.line}{spelled})",
                        display, source.line, hint="keep one declaration", code="duplicate-source",
                    )
                )
                continue
            sources[source.id] = source
    for source in sources.values():
        for dep in source.depends_on:
            known = dep in sources or dep in invalid
            if not known and "." in dep and dep.split(".")[0] in {s.database for s in sources.values()}:
                problems.append(
                    Problem(f"source {source.id} depends on unknown source {dep}", source.path, source.line,
                            hint="depends_on lists sources as database.name, or model names", code="unknown-source")
                )
    if problems:
        raise ProjectError(problems)
    return dict(sorted(sources.items()))


def _names(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _unique(value: Any) -> tuple[tuple[str, ...], ...] | None:
    """
    >>> _unique([["a_id"], "x, y"]), _unique("a_id"), _unique([[]])
    ((('a_id',), ('x', 'y')), None, None)
    """
    if not isinstance(value, list):
        return None
    keys = tuple(_names(item) for item in value)
    return keys if all(keys) else None


def _column_names(raw: LineDict, key: str) -> tuple[str, ...]:
    """The names a key of a source declaration holds (every column of every ``unique`` key)."""
    if key == "unique":
        return tuple(name for names in _unique(raw.get("unique", [])) or () for name in names)
    return _names(raw.get(key)) or ()


def _source(raw: Any, display: str, list_line: int, problems: list[Problem]) -> Source | None:
    if not isinstance(raw, LineDict):
        problems.append(Problem(f"each source must be a mapping, found {raw!r}", display, list_line, code="yaml",
                                hint="write '- name: ...' with database, primary_key and a change mode under it"))
        return None
    before = len(problems)
    problems += check_keys(raw, _SOURCE_KEYS, display, "source", required={"name", "database"})
    what = f"source {raw.get('database')}.{raw.get('name')}"
    key = _names(raw.get("primary_key"))
    if "primary_key" in raw and not key:
        problems.append(Problem(f"{what}: primary_key must be column names, found {raw.get('primary_key')!r}", display,
                                raw.line_of("primary_key"), hint="write 'primary_key: [col, ...]'", code="bad-value"))
    elif not key:
        problems.append(
            Problem(f"{what} has no primary_key", display, raw.line,
                    hint="add 'primary_key: [col, ...]': mvflow maps every change to keys", code="missing-key")
        )
    unique = _unique(raw.get("unique", []))
    if unique is None:
        problems.append(Problem(f"{what}: unique must be a list of column lists, found {raw.get('unique')!r}", display,
                                raw.line_of("unique"), hint="write 'unique: [[col], [col_a, col_b]]': each list is "
                                "one alternate unique key", code="bad-value"))
    modes = [m for m in ("position", "changes", "dictionary") if raw.get(m)]
    if len(modes) != 1:
        problems.append(
            Problem(
                f"{what} must declare exactly one change mode, found {len(modes)}: {', '.join(modes) or 'none'}",
                display, raw.line_of(modes[1]) if len(modes) > 1 else raw.line,
                hint="use one of 'position: [cols]', 'changes: {table, position}', 'changes: cdf', 'dictionary: true'",
                code="change-mode",
            )
        )
    position = _names(raw.get("position")) if raw.get("position") else ()
    if position is None:
        problems.append(Problem(f"{what}: position must be a list of column names", display, raw.line_of("position"),
                                hint="e.g. 'position: [updated_at, change_id]'", code="bad-value"))
    changes = None
    cdf = raw.get("changes") == CDF
    if raw.get("changes") and not cdf:
        feed = raw["changes"]
        if not isinstance(feed, LineDict):
            problems.append(Problem(f"{what}: changes must be 'cdf' or a mapping with table and position, found {feed!r}",
                                    display, raw.line_of("changes"), code="bad-value",
                                    hint="write 'changes: cdf' (a Delta table with the Change Data Feed on) or "
                                         "'changes: {table: db.t_changes, position: [changed_at]}'"))
        else:
            problems += check_keys(feed, _CHANGES_KEYS, display, f"{what} changes", required={"table", "position"})
            feed_position = _names(feed.get("position"))
            if feed.get("table") and feed_position:
                changes = ChangeFeed(str(feed["table"]), feed_position)
    delay = parse_duration(raw.get("delay", 0))
    if delay is None:
        problems.append(Problem(f"{what}: invalid delay {raw.get('delay')!r}", display, raw.line_of("delay"),
                                hint="write a duration like 30s, 10m, 2h or 1d", code="bad-value"))
    depends_on = _names(raw.get("depends_on") or [])
    if depends_on is None:
        problems.append(Problem(f"{what}: depends_on must be a list of names", display, raw.line_of("depends_on"),
                                hint="e.g. 'depends_on: [stage.offers]'", code="bad-value"))
    if not are_tags(raw.get("tags")):
        problems.append(tags_problem(raw["tags"], display, raw.line_of("tags"), "tags: [daily, finance]", what))
    problems += _name_problems(raw, display, what)
    columns = _columns(raw.get("columns") or [], display, raw.line_of("columns"), what, problems)
    if columns:
        problems += _undeclared_columns(raw, {c.name.lower() for c in columns}, display, what)
    if len(problems) > before:
        return None
    return Source(
        database=str(raw["database"]),
        name=str(raw["name"]),
        primary_key=key,
        path=display,
        line=raw.line,
        description=str(raw.get("description", "")).strip(),
        columns=columns,
        position=position or (),
        changes=changes,
        dictionary=bool(raw.get("dictionary")),
        cdf=cdf,
        deleted=raw.get("deleted"),
        delay_seconds=delay or 0,
        depends_on=depends_on or (),
        tags=(raw["tags"],) if isinstance(raw.get("tags"), str) else tuple(raw.get("tags") or ()),
        loaded_at_field=raw.get("loaded_at_field"),
        freshness=dict(raw["freshness"]) if isinstance(raw.get("freshness"), dict) else None,
        unique=unique or (),
    )


def _columns(raw: Any, display: str, line: int, what: str, problems: list[Problem]) -> tuple[Column, ...]:
    hint = "write each column as '- {name: col, type: bigint, description: ...}'"
    if not isinstance(raw, list):
        problems.append(Problem(f"{what}: columns must be a list", display, line, hint=hint, code="bad-value"))
        return ()
    columns: dict[str, Column] = {}  # by lower-cased name: Spark column names ignore case
    for item in raw:
        if not isinstance(item, LineDict) or "name" not in item:
            problems.append(Problem(f"{what}: each column needs a name, found {item!r}", display,
                                    getattr(item, "line", line), hint=hint, code="bad-value"))
            continue
        problems += check_keys(item, _COLUMN_KEYS, display, f"{what} column")
        column = Column(str(item["name"]), item.get("type"), str(item.get("description", "")).strip())
        problems += _bad_names((column.name,), display, item.line, f"{what}: column")
        problems += type_problems(item, display, f"{what}: column '{column.name}'")
        first = columns.setdefault(column.name.lower(), column)
        if first is not column:
            types = f" ({first.type} and {column.type})" if first.type != column.type else ""
            problems.append(Problem(f"{what}: column '{column.name}' is declared twice{types}", display, item.line,
                                    hint="keep one declaration (Spark column names ignore case)", code="duplicate-column"))
    return tuple(columns.values())


def are_tags(value: Any) -> bool:
    """Tags are a text or a list of texts (or nothing).

    >>> are_tags("daily"), are_tags(["a", "b"]), are_tags(None), are_tags(5), are_tags(["a", 5])
    (True, True, True, False, False)
    """
    listed = isinstance(value, (list, tuple)) and all(isinstance(t, str) for t in value)
    return value is None or isinstance(value, str) or listed


def tags_problem(value: Any, path: str, line: int, example: str, what: str = "") -> Problem:
    return Problem(f"{what}{': ' if what else ''}tags must be a tag or a list of tags (text), got {value!r}", path, line,
                   code="bad-config", hint=f"e.g. {example}")


def type_problems(column: LineDict, display: str, what: str) -> list[Problem]:
    """A column's declared ``type:`` that is not a Spark SQL type (a typo: ``strnig``)."""
    type_ = column.get("type")
    hint = type_problem(type_) if type_ is not None else None
    if hint is None:
        return []
    return [Problem(f"{what} is declared of type '{type_}', which is not a Spark SQL type", display, column.line_of("type"),
                    hint=hint, code="bad-type")]


def _name_problems(raw: LineDict, display: str, what: str) -> list[Problem]:
    """Table and column names that would need quoting in SQL (a space, a hyphen, a backtick)."""
    problems = []
    for key in ("database", "name", "primary_key", "unique", "position", "deleted"):
        problems += _bad_names(_column_names(raw, key), display, raw.line_of(key), f"{what}: {key}")
    feed = raw.get("changes")
    if isinstance(feed, LineDict):
        table = tuple(str(feed["table"]).split(".", 1)) if feed.get("table") else ()
        problems += _bad_names(table, display, feed.line_of("table"), f"{what}: changes table")
        position = _names(feed.get("position")) or ()
        problems += _bad_names(position, display, feed.line_of("position"), f"{what}: changes position")
    return problems


def _bad_names(names: tuple[str, ...], display: str, line: int, what: str) -> list[Problem]:
    return [Problem(f"{what} '{name}' is not a plain name", display, line, code="bad-name",
                    hint="use letters, digits and _ only (mvflow writes names into SQL unquoted): rename the table or "
                         "column, or read it through a view that renames it")
            for name in names if not IDENTIFIER.fullmatch(name)]


def _undeclared_columns(raw: LineDict, declared: set[str], display: str, what: str) -> list[Problem]:
    """Key, position and soft-delete columns that are not among the source's declared columns."""
    problems = []
    for key in ("primary_key", "unique", "position", "deleted"):
        missing = [name for name in _column_names(raw, key) if name.lower() not in declared]
        if missing:
            problems.append(Problem(f"{what}: {key} column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                                    f"{'are' if len(missing) > 1 else 'is'} not among its declared columns", display,
                                    raw.line_of(key), hint="fix the name, or declare the column under 'columns:'",
                                    code="unknown-column"))
    return problems
