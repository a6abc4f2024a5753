"""Running models on Spark in DAG order: independent models run concurrently with ``threads``;
a failed model skips its descendants.

Kinds whose refresh this runner does not implement are reported as skipped with a reason.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

import networkx as nx

from . import failures, materialize
from .compile import Manifest, Model
from .graph import model_id
from .kinds import TableKind
from .table_format import DELTA, VIEW, describe_table, provider_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class Result:
    name: str
    kind: str
    status: str  # success | error | skipped
    seconds: float = 0.0
    rows: int | None = None
    message: str = ""
    started_at: str = ""
    strategy: str | None = None  # an mv batch: incremental | chunked | full (``compiler.strategy``)
    estimates: dict | None = None  # an mv batch: the decision's figures (``Decision.to_dict``)


@dataclass
class RunReport:
    results: list[Result] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C: running models were cancelled, the rest not started

    @property
    def ok(self) -> bool:
        return all(r.status != "error" for r in self.results)

    def counts(self) -> dict[str, int]:
        counts = {"success": 0, "error": 0, "skipped": 0}
        for r in self.results:
            counts[r.status] += 1
        return counts

    def to_json(self) -> str:
        return json.dumps({"results": [asdict(r) for r in self.results], "counts": self.counts()}, indent=2) + "\n"


EXIT_INTERRUPTED = 130
Printer = Callable[[str], None]
ModelRunner = Callable[["SparkSession", Manifest, Model], Result]


def run_models(
    spark: "SparkSession",
    manifest: Manifest,
    selected: list[str],
    threads: int = 1,
    echo: Printer = print,
    runners: dict[str, ModelRunner] | None = None,
) -> RunReport:
    """Run ``selected`` models in dependency order; ``runners`` maps a kind to its runner."""
    runners = {"view": run_statements, "table": run_statements, **(runners or {})}
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
            if result.status == "error":
                failed.add(result.name)
            echo(_progress_line(done, total, result))

    def execute(name: str) -> Result:
        model = manifest.models[name]
        runner = runners.get(model.kind.name)
        if runner is None:
            return Result(name, model.kind.name, "skipped", message=f"the '{model.kind.name}' kind is not run yet")
        busy.add(name)  # before the stop check: a stop waits for the models that passed it (_stop)
        try:
            if stopping.is_set():
                return Result(name, model.kind.name, "skipped", message="the run was interrupted")
            where = started[name] = failures.Running(manifest, model, spark)
            echo(f"{_clock()} | START {model.kind.name:<5} {model.relation}")
            with failures.running(where):
                outcomes[name] = runner(spark, manifest, model)
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
                        finish(Result(name, manifest.models[name].kind.name, "skipped", message=f"upstream {sorted(blocked)[0]} failed"))
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
            report.results.append(Result(name, manifest.models[name].kind.name, "skipped", message="the run was interrupted"))
    report.results.sort(key=lambda r: selected.index(r.name))
    return report


def _selected_dag(manifest: Manifest, selected: list[str]) -> nx.DiGraph:
    """The selection as a DAG: an edge wherever one selected model depends on another,
    directly or through unselected models."""
    ids = {model_id(n): n for n in selected}
    closure = nx.transitive_closure_dag(manifest.graph)
    dag = nx.DiGraph()
    dag.add_nodes_from(selected)
    dag.add_edges_from((ids[a], ids[b]) for a, b in closure.edges if a in ids and b in ids)
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
                    spark.sparkContext.cancelAllJobs()  # type: ignore[attr-defined]
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
    status = {"success": "OK   ", "error": "ERROR", "skipped": "SKIP "}[result.status]
    rows = f"{result.rows:,} rows" if result.rows is not None else ""
    # an error is a `path:line: [code] …` message like compile's: on a line of its own
    detail = f"\n  {result.message}" if result.status == "error" else f" — {result.message}" if result.message else ""
    return f"{_clock()} | {done} of {total} {status} {result.kind:<5} {result.name:<32} {rows:>14} in {result.seconds:.1f}s{detail}"


def run_statements(spark: "SparkSession", manifest: Manifest, model: Model) -> Result:
    """Run a view or table model's statements (see materialize.py)."""
    started = time.monotonic()
    result = Result(model.name, model.kind.name, "success", started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    params: dict[str, str] = {}
    try:
        is_table = isinstance(model.kind, TableKind)
        layout, slot = table_layout(spark, model.relation) if is_table else (None, None)
        if is_table and model.table_format != DELTA:
            params["build_table"] = materialize.slot_table(model.relation, slot)
        for item in materialize.statements(model) or []:
            if (item.slot is not None and item.slot != slot) or (item.layout is not None and item.layout != layout):
                continue
            failures.running_statement(item.sql, item.purpose)
            spark.sql(item.sql, args={k: v for k, v in params.items() if f":{k}" in item.sql} or None)
        if is_table:
            result.rows = spark.table(params.get("build_table", model.relation)).count()
    except Exception as exc:  # noqa: BLE001 - a failing model must not stop the others
        result.status = "error"
        result.message = _spark_message(exc)
    result.seconds = time.monotonic() - started
    return result


def table_layout(spark: "SparkSession", relation: str) -> tuple[str | None, str]:
    """What a table model's name holds now (None: nothing, ``view``, ``delta``) and the
    blue/green slot the parquet layout builds next: the one its view does not read ("a" first)."""
    info = describe_table(spark, relation)
    provider = provider_of(info)
    if provider is None:
        return None, materialize.SLOTS[0]
    if provider == DELTA:
        return DELTA, materialize.SLOTS[0]
    if provider != VIEW:
        raise RuntimeError(f"{relation} exists and is not a view or Delta table mvflow manages: drop or rename it first")
    live = re.search(r"__mvflow_([ab])\b", info.get("View Text", ""))
    return VIEW, materialize.SLOTS[1] if live and live.group(1) == materialize.SLOTS[0] else materialize.SLOTS[0]


def _spark_message(exc: Exception) -> str:
    """A failing model's one-line message (see ``compiler.failures``); runners of every kind use it."""
    return failures.describe(exc)
