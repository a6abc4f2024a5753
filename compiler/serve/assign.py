"""Hand jobs to live runners: every job to exactly one runner, loads within one job of each other,
and as few jobs moved as possible (a moved job waits for its old runner's step to end).

    >>> balance(["a", "b", "c", "d"], ["r1", "r2"], {"a": "r1", "b": "r1", "c": "r1"})
    {'a': 'r1', 'b': 'r1', 'c': 'r2', 'd': 'r2'}
    >>> balance(["a", "b", "c"], ["r2"], {"a": "r1", "b": "r2"})   # r1 died: its job moves
    {'a': 'r2', 'b': 'r2', 'c': 'r2'}
    >>> balance(["a"], [], {"a": "r1"})                            # no runner alive: nothing assigned
    {}
"""

from __future__ import annotations

from typing import Iterable, Mapping


def balance(jobs: Iterable[str], runners: Iterable[str], current: Mapping[str, str]) -> dict[str, str]:
    """``{job: runner}`` over the live ``runners``, keeping ``current`` assignments where it can."""
    jobs, runners = sorted(set(jobs)), sorted(set(runners))
    if not runners:
        return {}
    held: dict[str, list[str]] = {r: sorted(j for j in jobs if current.get(j) == r) for r in runners}
    # the runners holding most get the larger quotas: fewer jobs move
    by_load = sorted(runners, key=lambda r: (-len(held[r]), r))
    base, extra = divmod(len(jobs), len(runners))
    quota = {r: base + (1 if i < extra else 0) for i, r in enumerate(by_load)}
    result: dict[str, str] = {}
    for runner in runners:
        for job in held[runner][:quota[runner]]:
            result[job] = runner
    free = [j for j in jobs if j not in result]
    for runner in sorted(runners, key=lambda r: (len(held[r]), r)):  # the least loaded fill up first
        while free and sum(1 for r in result.values() if r == runner) < quota[runner]:
            result[free.pop(0)] = runner
    return dict(sorted(result.items()))
