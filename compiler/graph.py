"""The dependency DAG of sources and models (networkx), with ids ``model.<name>`` and
``source.<database>.<table>``."""

from __future__ import annotations

from typing import Iterable

import networkx as nx

from .errors import CompileError, Problem


def model_id(name: str) -> str:
    return f"model.{name}"


def test_id(name: str) -> str:
    return f"test.{name}"


def source_id(name: str) -> str:
    return f"source.{name}"


def node_name(node: str) -> str:
    """``model.x`` → ``x``; ``source.db.t`` → ``db.t``; ``test.t`` → ``t``."""
    return node.split(".", 1)[1]


def is_model(node: str) -> bool:
    return node.startswith("model.")


def build_graph(edges: Iterable[tuple], nodes: Iterable[tuple[str, dict]]) -> nx.DiGraph:
    """A DAG with an edge ``upstream → downstream`` (optionally with data: ``path``, ``line`` of
    the call that made it); a cycle is a CompileError printing it.

    >>> g = build_graph([("model.a", "model.b")], [("model.a", {}), ("model.b", {})])
    >>> list(nx.topological_sort(g))
    ['model.a', 'model.b']
    >>> build_graph([("model.a", "model.b", {"path": "b.sql", "line": 3}), ("model.b", "model.a")], [])
    Traceback (most recent call last):
    ...
    compiler.errors.CompileError: b.sql:3: [cycle] dependency cycle: a --> b --> a — a model cannot depend on itself, directly or through others: break one ref() of the cycle
    """
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from(edges)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return graph
    names = [node_name(edge[0]) for edge in cycle] + [node_name(cycle[0][0])]
    # an edge may carry where it was made (the ref() call): point at that line
    where = graph.edges[cycle[0][0], cycle[0][1]]
    raise CompileError(
        Problem(
            "dependency cycle: " + " --> ".join(names),
            where.get("path") or graph.nodes[cycle[0][1]].get("path"),
            where.get("line"),
            hint="a model cannot depend on itself, directly or through others: break one ref() of the cycle",
            code="cycle",
        )
    )


def model_order(graph: nx.DiGraph) -> list[str]:
    """Model names in a deterministic topological order (ties broken by name)."""
    return [node_name(n) for n in nx.lexicographical_topological_sort(graph) if is_model(n)]
