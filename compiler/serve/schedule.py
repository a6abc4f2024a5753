"""Which of a runner's jobs start now: with ``serve --threads N``, up to N at once.

Three rules keep a runner's jobs as fresh as they can be without wasted runs:

- **due**: a job runs again ``interval`` seconds after its last start (a view: once, while it succeeds);
- **no overlap in a lineage**: a job does not start while a job it depends on, or one that depends on
  it, runs on this runner (a model never reads an input that is being rewritten under it here);
- **downstream first**: a job does not run again before each job downstream of it (on this runner,
  still to run) has had a turn since its last run, so a fast model at the top cannot starve the slow
  ones below it; among the rest, the one that waited longest goes first (ties: dependency order).

With one thread this is the order a sequential runner takes: the jobs in dependency order, turn
after turn.

    >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    >>> jobs = {"a": Job("mv", downstream={"b"}), "b": Job("mv", upstream={"a"}), "c": Job("table")}
    >>> startable(jobs, {}, set(), t, interval=60, slots=2)             # b waits for a
    ['a', 'c']
    >>> ran = {n: JobState(t, "success", tried=t, finished=t) for n in ("a", "c")}
    >>> startable(jobs, ran, set(), t + timedelta(seconds=90), 60, 2)  # a waits for b's turn
    ['b', 'c']
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Mapping

ONCE = ("view",)  # kinds whose run only (re)creates a definition: once per assignment


@dataclass(frozen=True)
class Job:
    """One of the runner's jobs: its kind, and the jobs of the selection above and below it
    (transitively, also through models that are not jobs)."""

    kind: str
    upstream: frozenset[str] | set[str] = frozenset()
    downstream: frozenset[str] | set[str] = frozenset()


@dataclass
class JobState:
    """What this runner knows of one job."""

    last_run: datetime | None = None  # when its last run started
    last_status: str = ""
    tried: datetime | None = None  # its last turn: a run, or its lease found held by another runner
    finished: datetime | None = None  # when its last run ended
    refused_until: datetime | None = None  # its lease was held: not tried again before this


def due(kind: str, job: JobState, now: datetime, interval: float) -> bool:
    """Whether a job assigned to this runner should run now.

    >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    >>> due("mv", JobState(), t, 60), due("mv", JobState(t), t + timedelta(seconds=30), 60)
    (True, False)
    >>> due("view", JobState(t, "success"), t + timedelta(days=1), 60), due("view", JobState(t, "error"), t + timedelta(seconds=61), 60)
    (False, True)
    """
    if job.refused_until is not None and now < job.refused_until:
        return False
    if job.last_run is None:
        return True
    if kind in ONCE and job.last_status == "success":
        return False
    return now - job.last_run >= timedelta(seconds=interval)


def startable(jobs: Mapping[str, Job], states: Mapping[str, JobState], running: set[str], now: datetime,
              interval: float, slots: int) -> list[str]:
    """The jobs to start now, at most ``slots - len(running)``; ``jobs`` holds only this runner's
    jobs, in dependency order."""
    order = {name: i for i, name in enumerate(jobs)}
    state = {name: states.get(name) or JobState() for name in jobs}
    waiting = [n for n in jobs if n not in running and due(jobs[n].kind, state[n], now, interval)]
    waiting.sort(key=lambda n: (state[n].tried or datetime.min.replace(tzinfo=timezone.utc), order[n]))
    busy, chosen = set(running), []
    for name in waiting:
        if len(busy) >= slots:
            break
        job = jobs[name]
        if busy & (set(job.upstream) | set(job.downstream)) or _owes_a_turn(name, jobs, state):
            continue
        chosen.append(name)
        busy.add(name)
    return chosen


def _owes_a_turn(name: str, jobs: Mapping[str, Job], state: Mapping[str, JobState]) -> bool:
    """Whether a job downstream of ``name`` has not had its turn since ``name`` last ran."""
    finished = state[name].finished
    if finished is None:
        return False
    for below in jobs[name].downstream:
        if below not in jobs or (jobs[below].kind in ONCE and state[below].last_status == "success"):
            continue  # another runner's, or a view made once
        tried = state[below].tried
        if tried is None or tried < finished:
            return True
    return False


@dataclass
class Turns:
    """``serve --turns N`` (the tests'): a turn ends when each job due at its start has had a try
    (or is no longer this runner's); a turn with nothing due ends at once."""

    limit: int | None
    done: int = 0
    owed: set[str] | None = None  # None: between two turns

    def step(self, due_now: set[str], mine: set[str], tried: set[str]) -> bool:
        """One pass of the runner; True once ``limit`` turns are done."""
        if self.owed is None:
            self.owed = set(due_now)
        self.owed = (self.owed & mine) - tried
        if not self.owed:
            self.done, self.owed = self.done + 1, None
        return self.limit is not None and self.done >= self.limit
