"""Running models on Spark in DAG order: independent models run concurrently with ``threads``;
a failed model skips its descendants.

Kinds whose refresh this runner does not implement are reported as skipped with a reason.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

import networkx as nx

from . import failures
from .catalog.record import RunCatalog
from .manifest import Manifest, Model
from .graph import model_id, node_name
from .phases import PhaseHook, no_phase
from .progress import Printer, task_of
from .state import open_state_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .progress import Progress
    from .state import StateStore


@dataclass
class Result:
    name: str
    kind: str
    status: str  # success | error | skipped; a test: pass | warn | fail | error | skipped
    seconds: float = 0.0
    rows: int | None = None
    message: str = ""
    started_at: str = ""
    strategy: str | None = None  # an mv batch: incremental | chunked | full (``compiler.kinds.mv.strategy``)
    estimates: dict | None = None  # an mv batch: the decision's figures (``Decision.to_dict``)
    failures: int | None = None  # a test: its failing rows (or fail_calc)
    catalog: dict | None = None  # the catalog version the run recorded (``compiler.catalog``): version, breaking, changes


@dataclass
class RunReport:
    results: list[Result] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C: running models were cancelled, the rest not started

    @property
    def ok(self) -> bool:
        return all(r.status not in FAILED for r in self.results)

    def counts(self) -> dict[str, int]:
        counts = {"success": 0, "error": 0, "skipped": 0}
        for r in self.results:
            counts[r.status] = counts.get(r.status, 0) + 1
        return counts

    def summary(self) -> str:
        """``3 ok, 1 failed, 0 skipped``; with tests ``…; tests: 2 passed, 1 warned, 1 failed``."""
        models = Counter(r.status for r in self.results if r.kind != "test")
        tests = Counter(r.status for r in self.results if r.kind == "test")
        parts = [f"{models['success']} ok, {models['error']} failed, {models['skipped']} skipped"] if models or not tests else []
        if tests:
            words = (("pass", "passed"), ("warn", "warned"), ("fail", "failed"), ("error", "errors"), ("skipped", "skipped"))
            parts.append("tests: " + ", ".join(f"{tests[s]} {word}" for s, word in words if tests[s] or s == "pass"))
        return "; ".join(parts)

    def to_json(self, project: str = "") -> str:
        """``run_results.json``; each result also under dbt's names: ``unique_id``
        (``model.<project>.<name>``, ``seed.…``, ``test.…``, ``operation.…``) and ``execution_time``."""
        results = [{**asdict(r), "unique_id": f"{_RESOURCE.get(r.kind, 'model')}.{project}.{r.name}", "execution_time": r.seconds}
                   for r in self.results]
        return json.dumps({"results": results, "counts": self.counts()}, indent=2) + "\n"


EXIT_INTERRUPTED = 130
_RESOURCE = {"test": "test", "seed": "seed", "hook": "operation"}  # a result's kind → dbt's resource type
#: statuses that make a run fail and skip what depends on the node
FAILED = ("error", "fail")


@dataclass
class RunOptions:
    """What ``mvflow run`` asks of every model; each kind's runner takes what it uses."""

    store: "StateStore | None" = None  # None: the target's state store
    full_refresh: bool = False
    max_steps: int | None = None  # fact: steps per model and run
    file_check: bool = True  # first ask compiler.watch whether anything moved, without Spark
    phase: PhaseHook = no_phase  # named crash points (the kill-point tests)
    echo: Printer = print
    holder: str | None = None  # who takes the topics' leases (None: this process, ``state.default_holder``)
    lease_ttl: float | None = None  # seconds a lease lives unless renewed (None: each kind's default)
    stopping: Callable[[], bool] = lambda: False  # ``mvflow serve`` is stopping: a fact starts no new step
    rebuild_state: bool = False  # numerator: compact its state (a new rebuild version V) before this generation
    progress: "Progress | None" = None  # reports the models that run long (the CLI's); None: silent

    def for_model(self, model: Model) -> "RunOptions":
        """These options as ``model`` takes them: its ``full_refresh`` config overrides the flag."""
        chosen = full_refresh_for(model, self.full_refresh)
        return self if chosen == self.full_refresh else replace(self, full_refresh=chosen)


def full_refresh_for(model: Model, asked: bool) -> bool:
    """Whether ``model`` is rebuilt from its SELECT alone: as dbt's ``full_refresh`` config says
    (``false``: never, whatever ``--full-refresh`` asks — e.g. a numerator whose ids must stay;
    ``true``: at every run), else as asked."""
    configured = model.config.get("full_refresh")
    return asked if configured is None else bool(configured)


def run_models(
    spark: "SparkSession",
    manifest: Manifest,
    selected: list[str],
    threads: int = 1,
    echo: Printer = print,
    options: RunOptions | None = None,
) -> RunReport:
    """Run ``selected`` models in dependency order, each by its kind's runner."""
    options = options or RunOptions(echo=echo)
    catalog = RunCatalog(manifest, lambda: options.store or open_state_store(manifest.project.target(manifest.target).state))
    dag = _selected_dag(manifest, selected)
    report = RunReport()
    lock = threading.Lock()
    failed: set[str] = set()
    total = len(selected)
    done = 0

    def finish(result: Result) -> None:
        nonlocal done
        if _session_failure(spark) is not None:  # the run stops with that error alone
            return
        with lock:
            done += 1
            report.results.append(result)
            if result.status in FAILED:
                failed.add(result.name)
            echo(_progress_line(done, total, result))

    def execute(name: str) -> Result:
        model = manifest.node(name)
        busy.add(name)  # before the stop check: a stop waits for the models that passed it (_stop)
        try:
            if stopping.is_set():
                return Result(name, model.kind.name, "skipped", message="the run was interrupted")
            where = started[name] = failures.Running(manifest, model, spark)
            label = model.relation if name in manifest.models else name
            echo(f"{_clock()} | START {model.kind.name:<5} {label}")
            with failures.running(where), task_of(options.progress, label) as task:
                def run(chosen: RunOptions) -> Result:
                    return model.kind.runner(replace(chosen, phase=task.hook(chosen.phase)))(spark, manifest, model)

                produces = name in manifest.models and model.kind.produces
                chosen = options.for_model(model) if produces else options
                outcomes[name] = catalog.run(spark, model, chosen, run) if produces else run(chosen)
            return outcomes[name]
        finally:
            busy.discard(name)

    pending = dict(dag.in_degree())
    ready = sorted(n for n, d in pending.items() if d == 0)
    stopping = threading.Event()
    busy: set[str] = set()
    started: dict[str, failures.Running] = {}  # what each started model runs now, for Ctrl-C's message
    outcomes: dict[str, Result] = {}  # as the workers return them: a stop collects them from here
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        running: dict[Future, str] = {}
        try:
            while (ready or running) and _session_failure(spark) is None:
                while ready and len(running) < max(1, threads):
                    name = ready.pop(0)
                    blocked = [p for p in nx.ancestors(dag, name) if p in failed]
                    if blocked:
                        finish(Result(name, manifest.node(name).kind.name, "skipped", message=f"upstream {sorted(blocked)[0]} failed"))
                        ready += _release(dag, pending, name)
                        continue
                    running[pool.submit(execute, name)] = name
                if not running:
                    continue
                # with a timeout: Ctrl-C is seen within half a second whichever thread the signal hit
                finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in finished:
                    name = running.pop(future)
                    finish(future.result())
                    ready += _release(dag, pending, name)
                ready.sort()
        except KeyboardInterrupt:
            report.interrupted = True
            _stop(spark, stopping, busy, started, echo)
    failure = _session_failure(spark)
    if failure is not None:
        raise failure
    reported = {r.name for r in report.results}
    for name in (n for n in selected if report.interrupted and n not in reported):
        if name in outcomes:
            finish(_interrupted(outcomes[name]))
        else:
            report.results.append(Result(name, manifest.node(name).kind.name, "skipped", message="the run was interrupted"))
    report.results.sort(key=lambda r: selected.index(r.name))
    return report


def run_hooks(spark: "SparkSession", manifest: Manifest, which: str, echo: Printer = print) -> RunReport:
    """The project's ``on-run-start`` or ``on-run-end`` statements (dbt's), in order; the first
    that fails stops them (``target/run/<which>.sql`` holds them)."""
    report = RunReport()
    if manifest.hooks.get(which) and which == "on-run-start":  # as dbt does: the schemas exist before the hooks run
        for schema in sorted({manifest.database} | {m.schema for m in manifest.models.values()}):
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {schema}")
    for index, sql in enumerate(manifest.hooks.get(which, ())):
        name = f"{which}.{index}"
        started = time.monotonic()
        try:
            spark.sql(sql)
            result = Result(name, "hook", "success")
        except Exception as exc:  # noqa: BLE001 - reported like a failed model
            result = Result(name, "hook", "error", message=f"{manifest.project.target_path}/run/{which}.sql: {_spark_message(exc)}")
        result.seconds = time.monotonic() - started
        report.results.append(result)
        echo(_progress_line(index + 1, len(manifest.hooks[which]), result))
        if result.status == "error":
            break
    return report


def _selected_dag(manifest: Manifest, selected: list[str]) -> nx.DiGraph:
    """The selection as a DAG: an edge wherever one selected model depends on another,
    directly or through unselected models, or reads a source whose table a selected model (a
    seed) makes. A selected test runs after the models it reads, and
    the models downstream of the one it tests wait for it (``mvflow build``: a failing test
    skips them); a unit test runs before its model, and its failure skips the model too."""
    ids = {model_id(n): n for n in selected if n in manifest.models}
    closure = nx.transitive_closure_dag(manifest.graph)
    dag = nx.DiGraph()
    dag.add_nodes_from(selected)
    dag.add_edges_from((ids[a], ids[b]) for a, b in closure.edges if a in ids and b in ids)
    makers = {manifest.models[n].relation: n for n in ids.values()}  # a dbt source over a seed's table: the seed first
    for source, reader in closure.edges:
        maker = makers.get(node_name(source).lower()) if source.startswith("source.") else None
        if maker is not None and reader in ids and ids[reader] != maker:
            dag.add_edge(maker, ids[reader])
    for name in (n for n in selected if n in manifest.tests):
        test = manifest.tests[name]
        if test.declaration.test_type == "unit":  # on given rows only: before its model, which it gates (dbt's order)
            dag.add_edges_from([(name, test.attached_to)] if test.attached_to in dag else [])
            continue
        dag.add_edges_from((parent, name) for parent in test.depends_on if parent in dag)
        if test.attached_to in dag:
            dag.add_edges_from((name, child) for child in list(dag.successors(test.attached_to)) if child in ids.values())
    return dag


def _session_failure(spark: object) -> Exception | None:
    """A check run when the session started (``LazySession(then=...)``) that failed: the run stops."""
    return getattr(spark, "failure", None)


def _stop(spark: object, stopping: threading.Event, busy: set[str], started: dict[str, failures.Running],
          echo: Printer) -> None:
    """Ctrl-C: say what stops, start no model, cancel Spark's jobs until the running models have
    returned (a runner between two statements starts another job, which is cancelled in turn; the
    session may still be starting). A second Ctrl-C meanwhile ends the process at once."""
    stopping.set()
    previous = None
    try:
        previous = _exit_on_next_interrupt()
        echo(_stopping_line([started[n] for n in sorted(busy) if n in started]))
        while busy:
            if getattr(spark, "started", True):
                try:
                    from .spark_connect import cancel_all_jobs  # classic or Spark Connect

                    cancel_all_jobs(spark)
                except Exception:  # noqa: BLE001 - a session going down has no jobs left to cancel
                    pass
            time.sleep(0.25)
    except KeyboardInterrupt:  # the second Ctrl-C came before its handler was in place
        os._exit(EXIT_INTERRUPTED)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _stopping_line(doing: list[failures.Running]) -> str:
    steps = [f"{w.model.kind.name} {w.model.name}" + (f" ({w.purpose})" if w.purpose else "") for w in doing]
    what = f"cancelling the Spark jobs of {'; '.join(steps)}" if steps else "no model is running"
    return f"{_clock()} | Ctrl-C: stopping the run, {what}; no new model starts (Ctrl-C again to exit at once)"


def _exit_on_next_interrupt() -> Any:
    """A second Ctrl-C ends the process at once; returns the handler to restore."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, lambda *_: os._exit(EXIT_INTERRUPTED))


def _interrupted(result: Result) -> Result:
    if result.status == "error":
        result.message = f"interrupted (Ctrl-C): {result.message}"
    return result


def _release(dag: nx.DiGraph, pending: dict[str, int], name: str) -> list[str]:
    released = []
    for child in dag.successors(name):
        pending[child] -= 1
        if pending[child] == 0:
            released.append(child)
    return released


def _clock() -> str:
    return datetime.now().strftime("%H:%M:%S")


def _progress_line(done: int, total: int, result: Result) -> str:
    status = {"success": "OK   ", "error": "ERROR", "skipped": "SKIP ", "pass": "PASS ", "warn": "WARN ", "fail": "FAIL "}[result.status]
    rows = f"{result.rows:,} rows" if result.rows is not None else ""
    # an error is a `path:line: [code] …` message like compile's: on a line of its own
    detail = f"\n  {result.message}" if result.status == "error" else f" — {result.message}" if result.message else ""
    if result.failures is not None and result.status in ("warn", "fail"):
        rows = f"{result.failures:,} failing"
    return f"{_clock()} | {done} of {total} {status} {result.kind:<5} {result.name:<32} {rows:>14} in {result.seconds:.1f}s{detail}"


def _spark_message(exc: Exception) -> str:
    """A failing model's one-line message (see ``compiler.failures``); runners of every kind use it."""
    return failures.describe(exc)
