"""P3 fact step: one step of the demo's ``orders_enriched`` (bounds, offsets, idempotent write,
commit, step log: ``mvflow run -s orders_enriched --max-steps 1``) against a bare
``INSERT INTO … SELECT`` of the same position range (``bench/p3_bare.py``). Each run applies a
fresh ``demo change`` and refreshes ``offers_wide`` first (untimed: the step waits for it).
Both commands start their own SparkSession, so the process ratio dilutes the overhead; the
in-process ratio compares the step's own seconds (step log) with the bare statement's.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class Options:
    runs: int = 3
    scale: float = 1.0


def step_seconds(project: Path) -> float:
    sys.path.insert(0, str(ROOT))
    from compiler.project import load_project
    from compiler.state import open_state_store

    store = open_state_store(load_project(project).target().state)
    return store.steps(FACT, 1)[0].seconds


def run(options: Options, report: Report, echo=print) -> None:
    logs = WORK / "logs" / "p3"
    logs.mkdir(parents=True, exist_ok=True)
    project = demo_copy(WORK / "p3" / "demo")
    size = f"demo scale {options.scale:g}"
    echo(f"P3: demo init --scale {options.scale:g} and a first run")
    run_command(_mvflow(project, "demo", "init", "--scale", str(options.scale)), project, log=logs / "init.log")
    run_command(_mvflow(project, "run"), project, log=logs / "first-run.log")
    bare = [sys.executable, str(ROOT / "bench" / "p3_bare.py"), str(project)]
    series = {k: Series(k) for k in ("step", "bare")}
    inside: dict[str, list[float]] = {"step": [], "bare": []}
    for i in range(options.runs):
        run_command(_mvflow(project, "demo", "change", "--seed", str(200 + i)), project, log=logs / f"change-{i}.log")
        run_command(_mvflow(project, "run", "-s", "offers_wide"), project, log=logs / f"mv-{i}.log")
        echo(f"P3: fact step vs bare insert, run {i + 1}/{options.runs}")
        series["step"].samples.append(run_command(_mvflow(project, "run", "-s", FACT, "--max-steps", "1"), project,
                                                  log=logs / f"step-{i}.log"))
        inside["step"].append(step_seconds(project))
        series["bare"].samples.append(run_command(bare, project, log=logs / f"bare-{i}.log"))
        found = re.search(r"insert_seconds=([0-9.]+)", (logs / f"bare-{i}.log").read_text())
        inside["bare"].append(float(found.group(1)) if found else float("nan"))
    times = ratio(series["step"], series["bare"])
    step_in, bare_in = median(inside["step"]), median(inside["bare"])
    verdict = f"target ≤ {TARGET:.2f}×: {'met' if step_in / bare_in <= TARGET else 'missed'} (in-process)"
    report.rows.append(Row("P3", "bare INSERT INTO … SELECT of the step's range (process)", size, series["bare"], "1×",
                           f"statement alone: {bare_in:.2f} s"))
    report.rows.append(Row("P3", "mvflow fact step (process)", size, series["step"], f"{times:.2f}× bare",
                           f"step alone: {step_in:.2f} s = {step_in / bare_in:.2f}× the statement; {verdict}"))
