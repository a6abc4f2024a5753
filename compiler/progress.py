"""Progress of long work: nothing that runs longer than a few seconds is silent.

What runs is a set of *tasks* (a model of a run, a verify, the demo's table writes), each with a
label, a start time and what it passed last (a phase: ``mv:changed-keys``, ``offers written``).
A ``Progress`` thread looks at them every second; each task running longer than ``quiet`` seconds
is reported with its phase, its elapsed time and what Spark works on now (the running stages,
tasks done of all). On a terminal that is one live line, redrawn in place and cleared before any
other output; in a log (not a terminal) it is a line every ``every`` seconds, as Spark's and dbt's
users expect from a long job.

>>> lines = []
>>> progress = Progress(lines.append, live=False, quiet=0, every=0)
>>> with progress.task("wide") as task:
...     task.passed("mv:changed-keys")
...     progress.beat(now=task.started + 12.4)
>>> lines
['  ... wide: 12s, passed changed keys']
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Printer = Callable[[str], None]
QUIET = 5.0  # seconds a task runs before it is reported
EVERY = 30.0  # seconds between two reports in a log (a terminal's live line is redrawn every second)


@dataclass
class Task:
    label: str
    started: float = field(default_factory=time.monotonic)
    phase: str = ""

    def passed(self, phase: str) -> None:
        """Record the last point the task passed (``compiler.phases`` names, or plain words)."""
        self.phase = phase

    def hook(self, then: Callable[[str], None]) -> Callable[[str], None]:
        """A phase hook (``compiler.phases``) that records each phase, then calls ``then``."""
        def passed(name: str) -> None:
            self.passed(name)
            then(name)
        return passed

    def words(self, now: float) -> str:
        """``wide: 12s, passed changed keys``.

        >>> Task("wide", 0.0, "mv:affected-keys").words(75.2)
        'wide: 1m15s, passed affected keys'
        """
        elapsed = _duration(now - self.started)
        return f"{self.label}: {elapsed}, passed {_phase_words(self.phase)}" if self.phase else f"{self.label}: {elapsed}"


class Progress:
    """The tasks running now, reported by a background thread while the ``Progress`` is entered."""

    def __init__(self, echo: Printer, spark: "SparkSession | None" = None,
                 live: bool | None = None, quiet: float = QUIET, every: float = EVERY, stream=None):
        self._echo, self._spark, self.quiet, self.every = echo, spark, quiet, every
        self._stream = stream or sys.stdout
        self.live = _is_terminal(self._stream) if live is None else live
        self._tasks: list[Task] = []
        self._lock = threading.Lock()
        self._shown = ""  # the live line on the terminal now
        self._last_report = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def echo(self, line: str) -> None:
        """Print a line of the work's own output (the live line is cleared first, redrawn next beat)."""
        with self._lock:
            self._clear()
            self._echo(line)

    @contextmanager
    def task(self, label: str) -> Iterator[Task]:
        task = Task(label)
        with self._lock:
            self._tasks.append(task)
        try:
            yield task
        finally:
            with self._lock:
                self._tasks.remove(task)
                if not self._tasks:
                    self._clear()

    def beat(self, now: float | None = None) -> None:
        """Report the tasks that ran longer than ``quiet`` (the thread calls this every second)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            long = [task for task in self._tasks if now - task.started >= self.quiet]
            due = bool(long) and (self.live or now - self._last_report >= self.every)
            if not long:
                self._clear()
            if not due:
                return
            self._last_report = now
            text = "; ".join(task.words(now) for task in long)
        spark = spark_activity(self._spark)  # a call into the JVM: not under the lock the work's output takes
        text = f"{text} | {spark}" if spark else text
        with self._lock:
            if self.live:
                self._draw(text)
            else:
                self._echo(f"  ... {text}")

    def __enter__(self) -> "Progress":
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="mvflow-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._clear()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.beat()

    def _draw(self, text: str) -> None:
        width = shutil.get_terminal_size((100, 20)).columns - 1
        self._stream.write("\r\033[K" + text[:width])
        self._stream.flush()
        self._shown = text

    def _clear(self) -> None:
        if self._shown:
            self._stream.write("\r\033[K")
            self._stream.flush()
            self._shown = ""


def task_of(progress: "Progress | None", label: str) -> ContextManager[Task]:
    """``progress.task(label)``, or a task nobody reports without a ``Progress``."""
    return progress.task(label) if progress is not None else nullcontext(Task(label))


def spark_activity(spark: "SparkSession | None") -> str:
    """What the Spark driver of this process runs now: ``Spark stage 34: 3/8 tasks``; empty without
    a running stage, a started session or a JVM here (Spark Connect: the server's)."""
    if spark is None or not getattr(spark, "started", True):  # a LazySession not started: nothing runs
        return ""
    try:
        tracker = spark.sparkContext.statusTracker()
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext; a stopped session neither
        return ""
    stages = [tracker.getStageInfo(stage) for stage in sorted(tracker.getActiveStageIds())]
    return ", ".join(f"Spark stage {s.stageId}: {s.numCompletedTasks}/{s.numTasks} tasks" for s in stages if s)


def _phase_words(phase: str) -> str:
    """``mv:changed-keys`` -> ``changed keys``; plain words stay."""
    return phase.split(":", 1)[-1].replace("-", " ")


def _duration(seconds: float) -> str:
    """``12s``, ``1m15s``, ``1h02m``.

    >>> _duration(4.6), _duration(75.2), _duration(3725)
    ('5s', '1m15s', '1h02m')
    """
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
