"""Node selection like dbt's ``--select`` / ``--exclude``.

Grammar: space-separated terms are a union, comma-separated criteria inside a term an
intersection. A criterion is ``[@][N+]method:value[+N]`` with methods ``name`` (the default,
``*`` wildcards allowed), ``tag``, ``path``, ``kind``, ``source`` and ``state`` (``state:modified``,
``state:new``: against the catalog's active versions, ``compiler.catalog``); ``+`` before adds
ancestors, after adds descendants (``2+x`` at most two levels up); ``@x`` is x, its
descendants and their ancestors. In ``--select``, a name, tag, path or source that matches
nothing is an error (a typo, most likely); a kind, a state or a wildcard may select nothing.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable

import networkx as nx

from .errors import Problem, SelectionError, did_you_mean
from .graph import is_model, model_id, node_name, test_id
from .kinds import KINDS

if TYPE_CHECKING:
    from .manifest import Manifest

_CRITERION = re.compile(
    r"^(?P<at>@)?(?:(?P<up_depth>\d*)(?P<up>\+))?(?:(?P<method>[a-z_]+):)?(?P<value>[^+@,:\s]+?)(?:(?P<down>\+)(?P<down_depth>\d*))?$"
)
METHODS = ("name", "tag", "path", "kind", "source", "state", "test_type", "package")
#: dbt's test_type: values → the tests they select
TEST_TYPES = {"unit": {"unit"}, "data": {"generic", "singular"}, "generic": {"generic"}, "singular": {"singular"}}
STATES = ("modified", "new")


@dataclass(frozen=True)
class Criterion:
    method: str
    value: str
    parents: bool = False
    parents_depth: int | None = None
    children: bool = False
    children_depth: int | None = None
    childrens_parents: bool = False


def parse_criterion(text: str) -> Criterion:
    """Parse one criterion; bad syntax is a SelectionError with the valid forms.

    >>> parse_criterion("2+tag:nightly+")
    Criterion(method='tag', value='nightly', parents=True, parents_depth=2, children=True, children_depth=None, childrens_parents=False)
    """
    match = _CRITERION.match(text)
    if match and (match.group("method") or "name") not in METHODS:
        raise SelectionError(
            Problem(f"unknown selection method '{match.group('method')}:' in '{text}'",
                    hint="methods: " + ", ".join(f"{m}:" for m in METHODS), code="bad-selection")
        )
    if not match or (match.group("at") and match.group("up")):
        raise SelectionError(
            Problem(
                f"invalid selection '{text}'",
                hint="use name, +name, name+, 2+name, @name, tag:x, path:models/x, kind:table, source:db.t, package:p; "
                "separate with spaces (union) or commas (intersection)",
                code="bad-selection",
            )
        )
    depth = match.group("value")
    if depth.isdigit() and (match.group("up") or match.group("down")) and not match.group("method"):
        # '3+': model names never start with a digit
        raise SelectionError(
            Problem(f"'{text}' has a depth ({depth}) but no model name", code="bad-selection",
                    hint=f"write the depth next to a model: '{depth}+name' (its ancestors up to {depth} levels) "
                    f"or 'name+{depth}' (its descendants)")
        )
    return Criterion(
        method=match.group("method") or "name",
        value=match.group("value"),
        parents=bool(match.group("up")),
        parents_depth=int(match.group("up_depth")) if match.group("up_depth") else None,
        children=bool(match.group("down")),
        children_depth=int(match.group("down_depth")) if match.group("down_depth") else None,
        childrens_parents=bool(match.group("at")),
    )


def select(graph: nx.DiGraph, select: Iterable[str] = (), exclude: Iterable[str] = ()) -> list[str]:
    """Selected model names in topological order; no ``select`` means every model.

    Errors name the option they come from (``--select`` / ``--exclude``).

    >>> g = nx.DiGraph([("model.a", "model.b"), ("model.b", "model.c")])
    >>> select(g, ["b+"]), select(g, ["+c"], exclude=["b"])
    (['b', 'c'], ['a', 'c'])
    """
    select, exclude = _split(select), _split(exclude)
    chosen = _union(graph, select, "--select") if select else {n for n in graph if is_model(n)}
    chosen -= _union(graph, exclude, "--exclude")
    order = nx.lexicographical_topological_sort(graph)
    return [node_name(n) for n in order if n in chosen and is_model(n)]


def needed(select_terms: Iterable[str] = (), exclude_terms: Iterable[str] = ()) -> Callable[[nx.DiGraph], set[str] | None]:
    """What a run of this selection needs compiled (``compile_project``'s ``needs``): the selected
    models and their ancestors; None, all of them, when the selection is not one of models alone (a
    test's name, ``state:``) or selects everything.

    >>> g = nx.DiGraph([("model.a", "model.b"), ("model.b", "model.c"), ("model.x", "model.c")])
    >>> sorted(needed(["b"])(g)), sorted(needed(exclude_terms=["c"])(g)), needed()(g)
    (['a', 'b'], ['a', 'b', 'x'], None)
    """
    def needs(graph: nx.DiGraph) -> set[str] | None:
        if not _split(select_terms) and not _split(exclude_terms):
            return None
        try:
            chosen = select(graph, select_terms, exclude_terms)
        except SelectionError:
            return None
        return {node_name(n) for name in chosen for n in nx.ancestors(graph, model_id(name)) if is_model(n)} | set(chosen)
    return needs


def select_with_tests(manifest: "Manifest", select: Iterable[str] = (), exclude: Iterable[str] = ()) -> list[str]:
    """Like ``select``, over models and data tests: a test may be selected by its name, tag, path
    or ``kind:test``, and a test of a selected model comes along (dbt's eager selection: any
    model it reads is selected) unless ``--exclude`` leaves it out. Tests follow their models.
    """
    graph = manifest.graph.copy()
    for name, test in manifest.tests.items():
        test_type = "unit" if test.declaration.test_type == "unit" else "singular" if test.declaration.is_singular else "generic"
        graph.add_node(test_id(name), kind="test", tags=test.config.tags, path=test.path, test_type=test_type)
        graph.add_edges_from((model_id(parent), test_id(name)) for parent in test.depends_on)
    select, exclude = _split(select), _split(exclude)
    chosen = _union(graph, select, "--select") if select else {n for n in graph if _runnable(n)}
    chosen |= {test_id(t) for t in manifest.tests if any(model_id(p) in chosen for p in manifest.tests[t].depends_on)}
    chosen -= _union(graph, exclude, "--exclude")
    order = nx.lexicographical_topological_sort(graph)
    return [node_name(n) for n in order if n in chosen and _runnable(n)]


def _runnable(node: str) -> bool:
    return is_model(node) or node.startswith("test.")


def _split(expressions: Iterable[str]) -> list[str]:
    return [term for expression in expressions for term in expression.split()]


def _union(graph: nx.DiGraph, terms: list[str], option: str) -> set[str]:
    result: set[str] = set()
    try:
        for term in terms:
            parts = [_expand(graph, parse_criterion(part), strict=option == "--select") for part in term.split(",")]
            result |= set.intersection(*parts)
    except SelectionError as exc:
        raise SelectionError([replace(p, path=p.path or option) for p in exc.problems]) from exc
    return _with_owned(graph, result)


def _with_owned(graph: nx.DiGraph, chosen: set[str]) -> set[str]:
    """``chosen`` with the mvs lifted out of its mvs (kinds/mv/lift.py), at any depth: they come along."""
    owned = {n for n in graph if graph.nodes[n].get("owner") in chosen} - chosen
    return _with_owned(graph, chosen | owned) if owned else chosen


def _expand(graph: nx.DiGraph, criterion: Criterion, strict: bool) -> set[str]:
    nodes = _match(graph, criterion)
    typo = criterion.method not in ("kind", "state", "test_type") and not any(ch in criterion.value for ch in "*?[")
    if not nodes and strict and typo:
        raise SelectionError(_no_match(graph, criterion))
    result = set(nodes)
    for node in nodes:
        if criterion.parents:
            result |= _within(graph.reverse(copy=False), node, criterion.parents_depth)
        if criterion.children or criterion.childrens_parents:
            result |= _within(graph, node, criterion.children_depth)
    if criterion.childrens_parents:
        for node in list(result):
            result |= nx.ancestors(graph, node)
    return result


def _no_match(graph: nx.DiGraph, criterion: Criterion) -> Problem:
    """A selection criterion that matches nothing is most likely a typo: say what exists."""
    method, value = criterion.method, criterion.value
    if method == "tag":
        known = sorted({t for n in graph for t in graph.nodes[n].get("tags", ())})
        hint = "tags in this project: " + (", ".join(known) if known else "none")
    elif method == "source":
        names = sorted(node_name(n) for n in graph if n.startswith("source."))
        close = difflib.get_close_matches(value, names, n=1)
        hint = f"did you mean '{close[0]}'?" if close else "sources: " + (", ".join(names[:10]) or "none")
    else:
        hint = "run 'mvflow ls -o path' to see the model paths"
    return Problem(f"'{method}:{value}' matches no model", hint=hint, code="unknown-selection")


def _state(graph: nx.DiGraph, value: str) -> set[str]:
    """``state:modified`` / ``state:new``: models against the catalog's active versions; the
    command's context puts the catalog's answer on the graph (``graph.graph["state"]``)."""
    if value not in STATES:
        raise SelectionError(Problem(f"unknown state '{value}' in 'state:{value}'", hint="states: " + ", ".join(STATES),
                                     code="bad-selection"))
    answer = graph.graph.get("state")
    if answer is None:
        raise SelectionError(Problem("state: selection needs the catalog of a target", code="bad-selection",
                                     hint="use it with mvflow commands that read a project's target"))
    return {model_id(name) for name in answer(value)}


def _within(graph: nx.DiGraph, node: str, depth: int | None) -> set[str]:
    return set(nx.single_source_shortest_path_length(graph, node, cutoff=depth)) - {node}


def _packages(graph: nx.DiGraph) -> set[str]:
    """The project's name and its installed packages' that hold models."""
    return ({graph.graph.get("project")} | {graph.nodes[n].get("package") for n in graph}) - {"", None}


def _match(graph: nx.DiGraph, criterion: Criterion) -> set[str]:
    method, value = criterion.method, criterion.value
    data = graph.nodes
    if method == "name":
        found = {n for n in graph if _runnable(n) and fnmatch.fnmatchcase(node_name(n), value)}
        if not found and value in _packages(graph):  # dbt: a package's name selects its nodes
            return _match(graph, Criterion("package", value))
        if not found and not any(ch in value for ch in "*?["):
            names = [node_name(n) for n in graph if _runnable(n)]
            raise SelectionError(Problem(f"no model named '{value}'", code="unknown-selection",
                                         hint=did_you_mean(value, names) or "run 'mvflow ls' to see the models"))
        return found
    if method == "tag":
        return {n for n in graph if value in data[n].get("tags", ())}
    if method == "kind":
        if value not in KINDS and value != "test":
            raise SelectionError(Problem(f"unknown kind '{value}' in 'kind:{value}'", hint="kinds: " + ", ".join([*KINDS, "test"]),
                                         code="bad-selection"))
        return {n for n in graph if data[n].get("kind") == value}
    if method == "source":
        return {n for n in graph if n.startswith("source.") and fnmatch.fnmatchcase(node_name(n), value)}
    if method == "test_type":
        if value not in TEST_TYPES:
            raise SelectionError(Problem(f"unknown test type '{value}' in 'test_type:{value}'", code="bad-selection",
                                         hint="test types: " + ", ".join(TEST_TYPES)))
        return {n for n in graph if data[n].get("test_type") in TEST_TYPES[value]}
    if method == "state":
        return _state(graph, value)
    if method == "package":
        if value not in _packages(graph):
            raise SelectionError(Problem(f"no package named '{value}' in 'package:{value}'", code="unknown-selection",
                                         hint="packages: " + ", ".join(sorted(_packages(graph)))))
        own = "" if value == graph.graph.get("project") else value
        return {n for n in graph if _runnable(n) and data[n].get("package", "") == own}
    prefix = value.rstrip("/")
    return {n for n in graph if data[n].get("path", "") == prefix or data[n].get("path", "").startswith(prefix + "/")
            or fnmatch.fnmatchcase(data[n].get("path", ""), value)}

