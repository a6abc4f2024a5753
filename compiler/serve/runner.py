"""``mvflow serve``: one runner process that refreshes the jobs handed to it, forever.

Every runner (seed 000's MvRunner) registers in the state store and beats a heartbeat from a
control thread, which also plays coordinator when it wins that lease (``coordinator``). The main
thread works: it starts the jobs (models) assigned to this runner as they fall due, up to
``--threads`` at once and in dependency order (``schedule``), each under a job lease
(``serve:job:<model>``) and the topics' own leases, taken in this runner's name, so a job moved
away mid-run is refused to its new runner until that run ends or its runner is gone.

SIGTERM or SIGINT asks for a graceful stop: the running models finish (a fact ends after its
current step), the runner leaves the store and gives up the coordinator's lease, so the others
take its jobs over at their next tick. A second signal cancels the Spark jobs and exits at once:
the abandoned step is redone by the next holder from the offsets (``next`` is written before the
work).
"""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Callable

import networkx as nx

from .. import phases
from ..graph import model_id
from ..progress import Progress
from ..run import RunOptions, run_models
from ..spark_connect import cancel_all_jobs
from ..leases import kept
from ..state import LeaseHeld, StateStore, default_holder
from .coordinator import Coordinator
from .schedule import Job, JobState, Turns, due, startable

if TYPE_CHECKING:
    from ..manifest import Manifest

JOB_TOPIC = "serve:job:"  # + a model's name: the lease a runner holds while it runs the model


@dataclass
class ServeOptions:
    interval: float = 60.0  # seconds between two runs of one job
    ttl: float = 30.0  # a runner's heartbeat, the coordinator's lease and the topics' leases live this long
    max_steps: int | None = None  # a fact's steps per run (None: until caught up)
    turns: int | None = None  # stop after this many work turns (tests; None: forever)
    threads: int = 1  # jobs run at once (independent ones: ``schedule``)


@dataclass
class RunnerProcess:
    manifest: "Manifest"
    jobs: list[str]  # the selected models, in dependency order
    store: StateStore
    spark: object  # a LazySession: a runner with nothing due never starts Spark
    options: ServeOptions
    echo: Callable[[str], None] = print
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
    me: str = field(default_factory=default_holder)

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self.ticked = threading.Event()  # the control thread's first tick is done (a coordinator assigned)
        self.doing: frozenset[str] = frozenset()  # the jobs running now (replaced whole: read by other threads)
        self._doing_lock = threading.Lock()
        self.state = {job: JobState() for job in self.jobs}
        self.lineage = lineage(self.manifest, self.jobs)
        self.coordinator = Coordinator(self.store, self.me, self.options.ttl)
        self.command = f"mvflow serve ({os.getpid()})"
        self.phase = phases.from_env()  # MVFLOW_KILL_AT: the tests' hook (once per process), a no-op otherwise
        self.progress = Progress(self.echo, self.spark)  # a step running long says so every 30 s

    # -- the process -----------------------------------------------------------------------
    def serve(self) -> None:
        """Work until stopped (SIGTERM/SIGINT) or ``turns`` are done."""
        restore = _on_signals(self._signal)
        self.store.heartbeat(self.me, self.command, self.now(), "")
        self.echo(f"{_clock()} | runner {self.me} started: {len(self.jobs)} job(s) in the project, "
                  f"interval {self.options.interval:g}s, ttl {self.options.ttl:g}s")
        control = threading.Thread(target=self._control, name="serve-control", daemon=True)
        control.start()
        try:
            with self.progress:
                self._work()
        finally:
            self.stop.set()
            control.join()
            self.store.leave(self.me)
            if self.coordinator.lease is not None:  # hand this runner's jobs on now, not after the TTL
                self.coordinator.tick(self.jobs, self.now())
            self.coordinator.resign()
            restore()
            self.echo(f"{_clock()} | runner {self.me} stopped")

    def _signal(self, signum: int, _frame: object) -> None:
        if self.stop.is_set():  # the second signal: abandon the step (redone from the offsets)
            if getattr(self.spark, "started", False):
                cancel_all_jobs(self.spark)
            os._exit(128 + signum)
        self.echo(f"{_clock()} | {signal.Signals(signum).name}: stopping after "
                  + (f"the current step of {self._doing_text()}" if self.doing else "this turn") + " (again to exit at once)")
        self.stop.set()

    # -- the control thread: heartbeat and coordination ------------------------------------
    def _control(self) -> None:
        tick = self.options.ttl / 4
        was = False
        while True:
            try:
                held = self._beat(was)
            except Exception as exc:  # noqa: BLE001 - the store unreachable a moment: the next tick retries
                self.echo(f"{_clock()} | runner {self.me}: heartbeat failed: {exc}")
                held = was
            self.ticked.set()
            if held != was:
                token = self.coordinator.lease.token if self.coordinator.lease else "-"
                self.echo(f"{_clock()} | runner {self.me} {'is now the coordinator (token ' + str(token) + ')' if held else 'is no longer the coordinator'}")
                was = held
            if self.stop.wait(tick):
                return

    def _beat(self, was: bool) -> bool:
        now = self.now()
        self.store.heartbeat(self.me, self.command, now, self._doing_text())
        return self.coordinator.tick(self.jobs, now) if not self.stop.is_set() else was

    # -- the main thread: jobs ---------------------------------------------------------------
    def _work(self) -> None:
        """Start the jobs ``schedule`` allows, as threads free up, until stopped; then let the
        running ones end."""
        self.ticked.wait()
        tick = min(self.options.interval, self.options.ttl) / 4
        turns, running = Turns(self.options.turns), {}
        with ThreadPoolExecutor(self.options.threads, thread_name_prefix="serve-job") as pool:
            try:
                while not self.stop.is_set():
                    if self._start_due(pool, running, turns):
                        break
                    if not running:
                        self.stop.wait(tick)
                        continue
                    finished, _ = wait(running, timeout=tick, return_when=FIRST_COMPLETED)
                    for future in finished:
                        del running[future]
                        future.result()
                for future in list(running):
                    future.result()
            except BaseException:
                self.stop.set()  # the other running jobs end after their current step
                raise

    def _start_due(self, pool: ThreadPoolExecutor, running: dict[Future, str], turns: Turns) -> bool:
        """Start what is due; True once the ``turns`` asked are done."""
        mine = {a.job for a in self.store.assignments() if a.runner == self.me}
        jobs = {name: self.lineage[name] for name in self.jobs if name in mine}
        now, busy = self.now(), set(running.values())
        due_now = {n for n in jobs if n not in busy and due(jobs[n].kind, self.state[n], now, self.options.interval)}
        started = startable(jobs, self.state, busy, now, self.options.interval, self.options.threads)
        for name in started:
            running[pool.submit(self._run, name)] = name
        return turns.step(due_now, mine, set(started))

    def _run(self, job: str) -> None:
        """Run one job under its job lease: a job just moved here waits until its old runner's run
        ends (or that runner is dead), whatever the model's kind (a table has no topic of its own)."""
        ttl, started = self.options.ttl, self.now()
        try:
            lease = self.store.acquire(JOB_TOPIC + job, self.me, ttl, started)
        except LeaseHeld:  # its previous runner is still on it: after a tick
            retry = timedelta(seconds=min(self.options.interval, ttl) / 4)
            self.state[job] = replace(self.state[job], tried=started, refused_until=started + retry)
            return
        self._doing(job, True)
        self.store.heartbeat(self.me, self.command, started, self._doing_text())
        options = RunOptions(self.store, max_steps=self.options.max_steps, echo=self.progress.echo, holder=self.me,
                             lease_ttl=ttl, stopping=self.stop.is_set, phase=self.phase, progress=self.progress)
        try:
            with kept(self.store, lambda: [lease], ttl, self.now):
                report = run_models(self.spark, self.manifest, [job], echo=self.progress.echo, options=options)
        finally:
            self._doing(job, False)
            self.store.release(lease)
        status = report.results[0].status if report.results else "error"
        self.state[job] = JobState(started, status, tried=started, finished=self.now())

    def _doing_text(self) -> str:
        return ", ".join(sorted(self.doing))

    def _doing(self, job: str, running: bool) -> None:
        with self._doing_lock:
            self.doing = self.doing | {job} if running else self.doing - {job}


def lineage(manifest: "Manifest", jobs: list[str]) -> dict[str, Job]:
    """Each job's kind and the jobs above and below it in the project's DAG."""
    ids = {model_id(n): n for n in jobs}
    return {name: Job(manifest.models[name].kind.name,
                      frozenset(ids[a] for a in nx.ancestors(manifest.graph, model_id(name)) if a in ids),
                      frozenset(ids[d] for d in nx.descendants(manifest.graph, model_id(name)) if d in ids))
            for name in jobs}


def job_order(manifest: "Manifest", selected: list[str]) -> list[str]:
    """The jobs of a selection in dependency order (seeds and ephemeral models are not jobs)."""
    ids = {model_id(n): n for n in selected}
    order = [ids[node] for node in nx.lexicographical_topological_sort(manifest.graph) if node in ids]
    return [n for n in order if manifest.models[n].kind.name not in ("seed", "ephemeral")]


def _on_signals(handler: Callable) -> Callable[[], None]:
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    return restore


def _clock() -> str:
    return datetime.now().strftime("%H:%M:%S")
