"""P3 fact step: the overhead of one step of the demo's ``orders_enriched`` (bounds, offsets,
idempotent write, commit, step log) over a bare ``INSERT INTO … SELECT`` of the same position
range (``bench/p3_bare.py``), at a realistic step size: a full ``maxstep`` (50,000 orders).

The demo is created at a scale whose orders are a backlog of several full steps (scale 1 =
20,000 orders), every other model is run once, and one untimed step creates the fact table.
Then, each step taking the next ``maxstep`` orders of the backlog:

- *process*: ``mvflow run -s orders_enriched --max-steps 1`` against ``p3_bare.py`` (the bare
  statement of the range that step covered), each a fresh process with its own SparkSession;
  besides the walls, the step's own seconds (step log) against the bare statement's, both cold;
- *in-process*: ``p3_bare.py --alternate N``, one SparkSession, a step then the bare statement
  of its range, N times after a warm-up pair: the overhead without JVM start and warm-up.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from .measure import Series, run_command
from .p4_noop import ROOT, _mvflow, demo_copy
from .peers import WORK
from .report import Report, Row, ratio

FACT = "orders_enriched"
TARGET = 1.10
MAXSTEP = 50_000  # orders_enriched's maxstep (models/marts/orders_enriched.sql)
MODEL_FILE = Path("models/marts/orders_enriched.sql")
ORDERS_PER_SCALE = 20_000  # compiler.demo.sizes(1)["orders"]


@dataclass(frozen=True)
class Options:
    runs: int = 3
    scale: float | None = None  # None: enough orders for every measured step to be a full one
    maxstep: int = MAXSTEP  # another value is written into the demo copy's model (--quick: small steps)


def backlog_scale(runs: int, maxstep: int = MAXSTEP) -> float:
    """The demo scale whose orders fill the untimed first step, ``runs`` process steps and
    ``runs + 1`` in-process steps with ``maxstep`` orders each (plus half a step to spare).

    >>> backlog_scale(3), backlog_scale(5), backlog_scale(1, 500)
    (21.25, 31.25, 0.12)
    """
    return math.ceil((2 * runs + 2.5) * maxstep / ORDERS_PER_SCALE * 100) / 100


def last_step(project: Path):
    sys.path.insert(0, str(ROOT))
    from compiler.project import load_project
    from compiler.state import open_state_store

    return open_state_store(load_project(project).target().state).steps(FACT, 1)[0]


def run(options: Options, report: Report, echo=print) -> None:
    logs = WORK / "logs" / "p3"
    logs.mkdir(parents=True, exist_ok=True)
    scale = options.scale or backlog_scale(options.runs, options.maxstep)
    project = demo_copy(WORK / "p3" / "demo")
    if options.maxstep != MAXSTEP:
        model = project / MODEL_FILE
        model.write_text(model.read_text().replace(f"maxstep={MAXSTEP}", f"maxstep={options.maxstep}", 1))
    echo(f"P3: demo init --scale {scale:g}, a first run of the other models and a first step (untimed)")
    run_command(_mvflow(project, "demo", "init", "--scale", str(scale)), project, log=logs / "init.log")
    run_command(_mvflow(project, "run", "--exclude", FACT), project, log=logs / "first-run.log")
    run_command(_mvflow(project, "run", "-s", FACT, "--max-steps", "1"), project, log=logs / "first-step.log")
    bare = [sys.executable, str(ROOT / "bench" / "p3_bare.py"), str(project)]
    series = {k: Series(k) for k in ("step", "bare")}
    cold: dict[str, list[float]] = {"step": [], "bare": []}
    rows: list[int] = []
    for i in range(options.runs):
        echo(f"P3: fact step vs bare insert, process run {i + 1}/{options.runs}")
        series["step"].samples.append(run_command(_mvflow(project, "run", "-s", FACT, "--max-steps", "1"), project,
                                                  log=logs / f"step-{i}.log"))
        step = last_step(project)
        cold["step"].append(step.seconds)
        rows.append(step.rows)
        series["bare"].samples.append(run_command(bare, project, log=logs / f"bare-{i}.log"))
        cold["bare"].append(_number("insert_seconds", logs / f"bare-{i}.log"))
    echo(f"P3: fact step vs bare insert in one SparkSession, {options.runs} pairs after a warm-up pair")
    run_command([*bare, "--alternate", str(options.runs)], project, log=logs / "alternate.log")
    pairs = [dict((k, float(v)) for k, v in re.findall(r"(\w+)=([0-9.]+)", line))
             for line in (logs / "alternate.log").read_text().splitlines() if line.startswith("pair ")]
    warm = {k: median(p[k] for p in pairs) for k in ("step_seconds", "run_seconds", "bare_seconds", "rows")}
    cold_step, cold_bare = median(cold["step"]), median(cold["bare"])
    in_ratio = warm["step_seconds"] / warm["bare_seconds"]
    size = f"{median(rows):,.0f}-row step (demo scale {scale:g})"
    report.rows.append(Row("P3", "bare INSERT INTO … SELECT of the step's range (process)", size, series["bare"], "1×",
                           f"statement alone: {cold_bare:.2f} s cold, {warm['bare_seconds']:.2f} s warm"))
    report.rows.append(Row(
        "P3", "mvflow fact step (process)", size, series["step"], f"{ratio(series['step'], series['bare']):.2f}× bare",
        f"step alone (step log): {cold_step:.2f} s cold = {cold_step / cold_bare:.2f}× the statement; warm, in one "
        f"session: {warm['step_seconds']:.2f} s = {in_ratio:.2f}× ({warm['run_seconds']:.2f} s = "
        f"{warm['run_seconds'] / warm['bare_seconds']:.2f}× with lease and file watch); "
        f"target ≤ {TARGET:.2f}× (warm, in-process): {'met' if in_ratio <= TARGET else 'missed'}"))


def _number(name: str, log: Path) -> float:
    found = re.search(rf"{name}=([0-9.]+)", log.read_text())
    return float(found.group(1)) if found else float("nan")
