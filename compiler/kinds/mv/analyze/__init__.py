"""The analysis of an ``mv`` SELECT into its ``MvPlan`` (``compiler.kinds.mv.plan``), in phases; a
phase with errors stops the next, and every problem of the failing phase is raised together:

1. shape (``compiler.kinds.mv.shape``): one SELECT or a UNION ALL of them, FROM a table, joins
   with equality conditions, no subquery, ORDER BY or LIMIT;
2. names (``names``): every table a known input with a key, every column qualified and known;
   a GROUP BY MV's row-level members (``groups``);
3. keys (``parts``, over ``joins``): the MV's key and the parts that refresh it.

Before it, ``lift`` (at compile) makes each aggregate joined back an mv of its own and
``normalize`` flattens views, CTEs and ``*``; the inputs and their keys come from ``inputs``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sqlglot import exp

from ....errors import CompileError, Problem
from ....parse import table_references
from ....publish.spec import publish_problems
from .. import MvKind
from ..inputs import BATCH, Input, catalog, mv_consumers, relations
from ..normalize import Relations, normalize
from ..plan import InputInfo, MvPlan, Part, output_names
from ..shape import aggregates, check_shape
from .groups import members
from .names import resolve
from .parts import parts_and_key
from .report import Report

if TYPE_CHECKING:
    from ....manifest import Manifest, Model

#: stable problem codes, in the order of the phases that report them
CODES = (
    "mv-set-operation", "mv-aggregate", "mv-distinct", "mv-window", "mv-subquery", "mv-order-limit", "mv-star",
    "mv-join-kind", "mv-join-condition",
    "mv-unknown-alias", "mv-unqualified-column", "mv-unknown-column", "mv-unmappable-input", "mv-no-key",
    "mv-join-not-unique", "mv-key-not-derivable", "mv-key-not-unique", "mv-union-discriminator", "mv-where-unmatched",
)


def mv_plan(model: "Model", manifest: "Manifest") -> MvPlan:
    """Validate an ``mv`` model and derive its plan; every problem of the failing phase is raised.

    >>> plan = plan_from_sql("SELECT o.id, c.name FROM d.o AS o LEFT JOIN d.c AS c ON c.id = o.cid",
    ...                      {"d.o": ("position", ("id",)), "d.c": ("dictionary", ("id",))})
    >>> plan.key, plan.hidden
    (('id',), ('_mvflow_k_c_id',))
    """
    def plan() -> MvPlan:
        views: list[str] = []
        query = normalize(model.mv_query or model.ast, relations(manifest, model), views)
        reads = {name for name, _ in table_references(query)}
        written = manifest.models[model.owner] if model.owner else model  # a lifted mv's lines are its owner's
        inputs = catalog(manifest, model, reads, lambda other: _mv_plan_of(other, manifest))
        report = Report(model.name, model.path, _line_offset(written))
        return replace(analyze(report, model.relation, query, inputs, tuple(getattr(model.kind, "unique_key", ()) or ()),
                               model.table_format),
                       cluster_by=tuple(getattr(model.kind, "cluster_by", ()) or ()),
                       consumers=mv_consumers(manifest, model.name), views=tuple(sorted(views)),
                       lifted=tuple(sorted(m.name for m in manifest.models.values() if m.owner == model.name)))

    return manifest.derived("mv_plan", model, plan)


def plan_from_sql(sql: str, inputs: dict[str, tuple], unique_key: tuple[str, ...] = (),
                  name: str = "mv", columns: dict[str, tuple[str, ...]] | None = None,
                  table_format: str = "parquet", cluster_by: tuple[str, ...] = (),
                  views: dict[str, str] | None = None) -> MvPlan:
    """A plan from bare SQL and ``{table: (mode, key[, alternate unique keys])}`` (tests, docs
    examples); ``views`` maps a view's relation to its SELECT."""
    from ....parse import parse_select

    known = {t: Input(t, t, None if mode in ("view", "fact") else mode, tuple(key), (columns or {}).get(t),
                      position=("v",) if mode in ("position", "changes") else (BATCH,) if mode == "mv" else (),
                      feed=f"{t}_changes" if mode == "changes" else f"{t}__mvflow_changes" if mode == "mv" else None,
                      why=f"{t} is a {mode}", unique=tuple(tuple(u) for u in (unique[0] if unique else ())))
             for t, (mode, key, *unique) in inputs.items()}
    tables = Relations({t: (columns or {}).get(t) for t in inputs},
                       {v: parse_select(text, f"models/{v}.sql") for v, text in (views or {}).items()},
                       {t: (tuple(key), *(unique[0] if unique else ())) for t, (mode, key, *unique) in inputs.items()})
    expanded: list[str] = []
    query = normalize(parse_select(sql, f"models/{name}.sql"), tables, expanded)
    report = Report(name, f"models/{name}.sql", 0)
    return replace(analyze(report, f"db.{name}", query, known, tuple(unique_key), table_format),
                   cluster_by=tuple(cluster_by), views=tuple(sorted(expanded)))


def analyze(report: Report, relation: str, ast: exp.Query, inputs: dict[str, Input], unique_key: tuple[str, ...],
            table_format: str = "parquet") -> MvPlan:
    """The plan of one MV SELECT (``ast`` is not modified), or ``CompileError`` with the problems
    ``report`` collected."""
    selects = check_shape(ast.copy(), report.problem)
    report.stop_if_any()
    resolved = [resolve(report, inputs, select) for select in selects]
    report.stop_if_any()
    grouped = selects[0] if len(selects) == 1 and aggregates(selects[0]) else None
    groups = None
    if grouped is not None:
        rows, groups = members(report, grouped, resolved[0], unique_key)
        selects = [rows]
        report.stop_if_any()
    parts, key, columns = parts_and_key(report, selects, resolved, unique_key, groups)
    report.stop_if_any()
    if grouped is not None:
        parts[0] = replace(parts[0], grouped=grouped, groups=groups)
        key = tuple(dict.fromkeys(key + tuple(name for name, _ in groups)))
        columns = output_names(grouped)
    return _assemble(report, relation, inputs, parts, key, columns, table_format)


def _assemble(report: Report, relation: str, inputs: dict[str, Input], parts: list[Part], key: tuple[str, ...],
              columns: list[str], table_format: str) -> MvPlan:
    hidden = tuple(name for part in parts for name, _ in part.hidden)
    if parts and parts[0].grouped is not None:  # the members' main key is hidden too
        hidden = parts[0].main_key_columns + hidden
    used: dict[str, set[str]] = {}
    for part in parts:
        aliases = {part.main_alias: part.main_input, **{l.alias: l.input for l in part.links}}
        selects = [part.select] + ([part.grouped] if part.grouped is not None else [])
        for column in (c for select in selects for c in select.find_all(exp.Column)):
            if column.table.lower() in aliases:
                used.setdefault(aliases[column.table.lower()], set()).add(column.name.lower())
        for alias, input_id in aliases.items():
            used.setdefault(input_id, set())
            if alias != part.main_alias and part.link(alias).constant:
                report.warning(part.link(alias).line, "mv-literal-join",
                               f"{alias} is joined only by literals: any change of it refreshes every row",
                               "fine for a small constant table; otherwise join it by key")
    by_id = {i.id: i for i in inputs.values()}
    infos = {}
    for input_id in sorted(used):
        source = by_id[input_id]
        key_cols = tuple(k.lower() for k in source.key)
        infos[input_id] = InputInfo(input_id, source.relation, source.mode, key_cols,
                                    key_cols + tuple(sorted(used[input_id] - set(key_cols))),
                                    source.position, source.feed, source.table_format, source.origin,
                                    source.key_from, source.in_slots)
    return MvPlan(report.name, relation, report.path, key, tuple(columns), hidden, tuple(parts), infos,
                  tuple(report.warnings), table_format)


def _mv_plan_of(other: "Model", manifest: "Manifest") -> MvPlan | None:
    try:
        return mv_plan(other, manifest)
    except CompileError:
        return None


def _line_offset(model: "Model") -> int:
    """Lines the rendered SQL lost at its top (a leading ``config()`` line renders empty and is stripped)."""
    rendered = model.sql.splitlines()
    at = next((i for i, line in enumerate(rendered) if line.strip()), None)
    if at is None:
        return 0
    for number, line in enumerate(model.raw_sql.splitlines()):
        if line.strip() == rendered[at].strip():
            return number - at
    return 0


def check_mvs(manifest: "Manifest") -> list[Problem]:
    """Validate every ``mv`` model of a manifest (``mvflow compile`` fails on errors); returns warnings."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    failed: set[str] = set()
    def depth(model: "Model") -> int:  # lifted ones first, innermost first: their owners read them
        return 1 + depth(manifest.models[model.owner]) if model.owner else 0

    for model in sorted(manifest.models.values(), key=lambda m: -depth(m)):
        if not isinstance(model.kind, MvKind) or model.ast is None or model.name in failed:
            continue
        try:
            plan = mv_plan(model, manifest)
            warnings += plan.warnings
            if model.kind.publish is not None:
                problems += publish_problems(model, plan.visible_key, manifest.project.target(manifest.target))
        except CompileError as exc:
            if not model.owner:
                problems += exc.problems
                continue
            problems += [_lifted_problem(p, model) for p in exc.problems]
            failed.add(model.owner)  # the owner would fail for want of it: its error is this one
    if problems:
        raise CompileError(problems)
    return warnings


def _lifted_problem(problem: Problem, model: "Model") -> Problem:
    """A problem of a lifted mv, said as one of its owner's (the user wrote the owner)."""
    alias = model.name[len(model.owner) + 2:]
    return replace(problem, message=problem.message.replace(
        f"mv '{model.name}':", f"mv '{model.owner}': its aggregate '{alias}' (made the mv '{model.name}' to be refreshed by "
                               "its groups):", 1))
