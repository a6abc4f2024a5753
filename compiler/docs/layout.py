"""A layered drawing of the DAG for the docs overview graph.

Longest-path layering (sources pulled next to their first reader), then barycenter ordering
within layers, sweeping down and up a few times. Pure and deterministic: ties break by id.
"""

from __future__ import annotations

from typing import Iterable


def layout(nodes: Iterable[str], edges: Iterable[tuple[str, str]], sweeps: int = 4) -> dict[str, tuple[int, float]]:
    """``(layer, row)`` of every node; edges go from a lower layer to a higher one.

    Rows are centred: a layer with fewer nodes than the largest is shifted down by half the
    difference.

    >>> layout(["a", "b", "c", "d"], [("a", "c"), ("b", "c"), ("c", "d")])
    {'a': (0, 0.0), 'b': (0, 1.0), 'c': (1, 0.5), 'd': (2, 0.5)}
    """
    names = sorted(set(nodes))
    parents: dict[str, list[str]] = {n: [] for n in names}
    children: dict[str, list[str]] = {n: [] for n in names}
    for upstream, downstream in sorted(set(edges)):
        parents[downstream].append(upstream)
        children[upstream].append(downstream)
    layer = _layers(names, parents, children)
    layers: list[list[str]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for name in names:
        layers[layer[name]].append(name)
    for sweep in range(sweeps):
        downward = sweep % 2 == 0
        for index in (range(1, len(layers)) if downward else range(len(layers) - 2, -1, -1)):
            _reorder(layers[index], parents if downward else children, _positions(layers))
    widest = max((len(ls) for ls in layers), default=0)
    return {name: (number, row + (widest - len(ls)) / 2)
            for number, ls in enumerate(layers) for row, name in enumerate(ls)}


def _layers(names: list[str], parents: dict[str, list[str]], children: dict[str, list[str]]) -> dict[str, int]:
    layer: dict[str, int] = {}
    for name in _topological(names, parents, children):
        layer[name] = 1 + max((layer[p] for p in parents[name]), default=-1)
    for name in names:
        # A node without parents (a source) sits just left of its first reader, not in column 0.
        if not parents[name] and children[name]:
            layer[name] = max(0, min(layer[c] for c in children[name]) - 1)
    return layer


def _topological(names: list[str], parents: dict[str, list[str]], children: dict[str, list[str]]) -> list[str]:
    waiting = {n: len(parents[n]) for n in names}
    ready = [n for n in names if not waiting[n]]
    order = []
    while ready:
        name = ready.pop()
        order.append(name)
        for child in children[name]:
            waiting[child] -= 1
            if not waiting[child]:
                ready.append(child)
    return order


def _positions(layers: list[list[str]]) -> dict[str, int]:
    return {name: row for ls in layers for row, name in enumerate(ls)}


def _reorder(names: list[str], neighbours: dict[str, list[str]], position: dict[str, int]) -> None:
    def key(item: tuple[int, str]) -> tuple[float, str]:
        row, name = item
        linked = [position[n] for n in neighbours[name]]
        return (sum(linked) / len(linked) if linked else row, name)

    names[:] = [name for _, name in sorted(enumerate(names), key=key)]
