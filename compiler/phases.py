"""Named phases of a runner's work: the one place where tests stop a runner at a known point.

The MV refresh, the fact steps and the numerator's generations call their ``phase`` hook
(``Callable[[str], None]``) with the name of each point they pass; the hook does nothing in
production. Tests crash the runner there, either in-process (``crash_at``: raises ``Crash``,
which no runner catches) or as a real ``kill -9`` of the Python process and its JVM
(``kill_at``, also reachable from the command line through ``MVFLOW_KILL_AT=phase@n``), and
then check that the redo recovers; or pause the Python process there
(``MVFLOW_KILL_AT=phase@n:stop``: SIGSTOP, as a stalled host would) until the test sends SIGCONT.

>>> hook = crash_at("mv:delta-written", 2)
>>> hook("mv:delta-written")  # the first time passes
>>> hook("mv:delta-written")
Traceback (most recent call last):
...
compiler.phases.Crash: crashed at mv:delta-written (time 2)
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable

PhaseHook = Callable[[str], None]
ENV = "MVFLOW_KILL_AT"

# Every point the MV refresh reports, in the order a batch passes them (compiler/refresh.py and
# the storage of its table format, compiler/mv_storage.py: see MV_PARQUET_ONLY / MV_DELTA_ONLY).
MV_PHASES = (
    "mv:leased",               # the MV's and its inputs' leases taken, nothing read yet
    "mv:probed",               # the inputs' newest positions and fingerprints known
    "mv:next-written",         # the batch number and every input's next written
    "mv:snapshot-written",     # a changed dictionary's snapshot taken for this batch
    "mv:changed-keys",         # the changed keys of every input checkpointed
    "mv:affected-keys",        # the affected MV keys checkpointed
    "mv:fanout-guard",         # the strategy chose a full build (compiler.kinds.mv.strategy): about to switch to it
    "mv:delta-written",        # parquet: the recomputed rows and tombstones written to the delta
    "mv:merged",               # delta: the recomputed rows and tombstones merged (one commit)
    "mv:published",            # the refreshed keys published for MVs stacked on this one (if any reads it)
    "mv:chunk-written",        # a chunked batch: one chunk written and published, not yet recorded
    "mv:chunk-recorded",       # a chunked batch: the chunk recorded in the MV topic's state (resume point)
    "mv:committed",            # every topic committed in one transaction
    "mv:step-logged",          # the step log row written
    "mv:snapshots-dropped",    # snapshot partitions no later batch reads dropped
    "mv:compaction-written",   # parquet: the compacted base written into the idle slot
    "mv:compaction-marked",    # parquet: the swap to the idle slot marked in the state
    "mv:compaction-swapped",   # parquet: the view reads the new slot; the state not yet updated
    "mv:optimized",            # delta: OPTIMIZE committed; the state not yet updated
    "mv:compacted",            # the state names the new slot (delta: the optimized version)
    "mv:build-snapshots",      # a full build took every dictionary's snapshot
    "mv:build-marked",         # a full build marked the swap in the state
    "mv:build-base-written",   # parquet: a full build wrote the new base
    "mv:build-replaced",       # delta: a full build replaced the table (CREATE OR REPLACE)
    "mv:build-published",      # a full build published every old and new key (when an MV reads this one)
    "mv:build-swapped",        # parquet: the view reads the new base; not yet committed
)
MV_PARQUET_ONLY = frozenset({"mv:delta-written", "mv:compaction-written", "mv:compaction-marked",
                             "mv:compaction-swapped", "mv:build-base-written", "mv:build-swapped"})
MV_DELTA_ONLY = frozenset({"mv:merged", "mv:optimized", "mv:build-replaced"})
# Every point a publish to a serving store reports (compiler/publish/publisher.py).
PUBLISH_PHASES = (
    "publish:leased",          # the publish topic's lease taken, nothing read or written
    "publish:chunk-committed", # by key: one chunk's rows and deletes committed (the last one with the batch)
    "publish:loaded",          # in full: every row loaded into the fresh table, not keyed or swapped in
    "publish:indexed",         # in full: the fresh table keyed, indexed and analysed
    "publish:swapped",         # in full: the fresh table swapped in with the batch, the lease not yet released
)
# Every point a fact step reports (compiler/steps.py).
FACT_PHASES = (
    "fact:planned",            # next chosen, not yet written
    "fact:next-written",       # next written: from here on a crash is redone over (last, next]
    "fact:writing",            # the step's hooks ran; its INSERT is about to start
    "fact:written",            # the step's rows written, not committed
    "fact:committed",          # last = next
    "fact:step-logged",        # the step log row written
)
# Every point a numerator generation reports (compiler/kinds/numerator/generation.py).
NUMERATOR_PHASES = (
    "numerator:leased",         # the lease taken, the published state not read yet
    "numerator:input-written",  # the generation's key tuples and shards in this build's input table
    "numerator:planned",        # decided what the generation does; next not written yet
    "numerator:next-written",   # next = the version being built
    "numerator:state-written",  # the new state in this build's table, not checked
    "numerator:checked",        # its invariants hold; not committed
    "numerator:committed",      # last = next; the view not yet pointed at it
    "numerator:published",      # the view reads the new state
    "numerator:cleaned",        # the input and the builds no one reads dropped
)


class Crash(BaseException):
    """A simulated death of the runner: a BaseException, so no ``except Exception`` handles it."""


def mv_phases(table_format: str) -> tuple[str, ...]:
    """The MV points a batch on this table format can pass, in order.

    >>> [p for p in mv_phases("delta") if "build" in p]
    ['mv:build-snapshots', 'mv:build-marked', 'mv:build-replaced', 'mv:build-published']
    """
    other = MV_PARQUET_ONLY if table_format == "delta" else MV_DELTA_ONLY
    return tuple(p for p in MV_PHASES if p not in other)


class PhaseClock:
    """A phase hook that also notes when each phase was first reached, in seconds since ``start``:
    the step log keeps them (``detail["phases"]``) and ``mvflow explain --costs`` splits a batch's
    seconds by phase (``phase_spans``).

    >>> clock = PhaseClock(no_phase)
    >>> clock("mv:probed"); clock("mv:probed"); sorted(clock.reached)
    ['mv:probed']
    """

    def __init__(self, hook: PhaseHook) -> None:
        self.hook = hook
        self.start()

    def start(self) -> None:
        self.origin, self.reached = time.monotonic(), {}

    def elapsed(self) -> float:
        return time.monotonic() - self.origin

    def __call__(self, name: str) -> None:
        self.reached.setdefault(name, round(time.monotonic() - self.origin, 3))
        self.hook(name)


def phase_spans(reached: dict[str, float]) -> list[tuple[str, float]]:
    """The seconds spent up to each phase reached since the one before it (the batch's start for
    the first), named after the phase without its kind's prefix.

    >>> phase_spans({"mv:probed": 1.25, "mv:changed-keys": 2.0, "mv:committed": 2.5})
    [('probed', 1.25), ('changed-keys', 0.75), ('committed', 0.5)]
    """
    spans, before = [], 0.0
    for name, at in sorted(reached.items(), key=lambda item: item[1]):
        spans.append((name.split(":", 1)[-1], round(at - before, 3)))
        before = at
    return spans


def no_phase(name: str) -> None:
    """The production hook: phases pass unobserved."""


def crash_at(phase: str, nth: int = 1) -> PhaseHook:
    """A hook raising ``Crash`` the ``nth`` time ``phase`` is reached."""
    return _at(phase, nth, lambda seen: _raise(Crash(f"crashed at {phase} (time {seen})")))


def kill_at(phase: str, nth: int = 1) -> PhaseHook:
    """A hook that kills this process and every process it started (Spark's JVM) with SIGKILL
    the ``nth`` time ``phase`` is reached: a real crash, nothing runs after it."""
    return _at(phase, nth, lambda _: _kill_self())


def from_env(environ: dict[str, str] | None = None) -> PhaseHook:
    """``kill_at`` from ``MVFLOW_KILL_AT=phase@n`` (``@n`` optional; ``phase@n:stop`` pauses the
    process instead: ``stop_at``), else ``no_phase``.

    >>> from_env({}) is no_phase
    True
    >>> from_env({ENV: "nosuch"})
    Traceback (most recent call last):
    ...
    ValueError: MVFLOW_KILL_AT: unknown phase 'nosuch'
    """
    spec = (os.environ if environ is None else environ).get(ENV, "")
    if not spec:
        return no_phase
    pause = spec.endswith(":stop")
    phase, _, nth = spec.removesuffix(":stop").partition("@")
    if phase not in MV_PHASES + FACT_PHASES + NUMERATOR_PHASES + PUBLISH_PHASES:
        raise ValueError(f"{ENV}: unknown phase {phase!r}")
    return (stop_at if pause else kill_at)(phase, int(nth or 1))


def stop_at(phase: str, nth: int = 1) -> PhaseHook:
    """A hook that pauses this Python process (SIGSTOP; its JVM runs on) the ``nth`` time ``phase``
    is reached: its threads stop too, so its leases stop being renewed until SIGCONT."""
    return _at(phase, nth, lambda _: os.kill(os.getpid(), signal.SIGSTOP))


def _at(phase: str, nth: int, act: Callable[[int], None]) -> PhaseHook:
    seen = {"n": 0}

    def hook(name: str) -> None:
        if name == phase:
            seen["n"] += 1
            if seen["n"] == nth:
                act(seen["n"])

    return hook


def _raise(exc: BaseException) -> None:
    raise exc


def _kill_self() -> None:
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    """Every process started by ``pid``, children first (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found
