"""P4 no-op run: ``mvflow run`` of the demo's incremental models (``mv``, ``fact``) when nothing is
due, against a bare SparkSession start and stop with the same settings (bare_session.py); P4b:
the whole project's ``mvflow run`` (its views and table too, ``compiler.kinds.unchanged``) when
nothing changed, and the same with ``--no-file-check`` (every view and table built, as before).

The demo project is copied to ``bench/.work/p4/demo`` (its own warehouse, metastore and state
store), its sources created (``mvflow demo init``) and every model run once, so the measured runs
find nothing to do.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from .measure import interleaved, run_command
from .peers import WORK
from .report import Report, Row, ratio

ROOT = Path(__file__).resolve().parent.parent
MVFLOW = Path(sys.executable).parent / "mvflow"
DEMO_FILES = ("project.yml", "models", "macros", "lineage", "seeds", "data_tests")
TARGET_RATIO = 1.2
NOOP_SELECT = "kind:mv kind:fact"


@dataclass(frozen=True)
class Options:
    runs: int = 5
    scale: float = 1.0


def demo_copy(where: Path) -> Path:
    """A fresh copy of the demo project (its local state under ``where/.mvflow``)."""
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    for name in DEMO_FILES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, where / name)
    return where


def _mvflow(project: Path, *args: str) -> list[str]:
    return [str(MVFLOW), "--project-dir", str(project), *args]


def rows_written(project: Path) -> int:
    """Rows the last run wrote into MVs and facts, from target/run_results.json (0 for a no-op)."""
    results = json.loads((project / "target" / "run_results.json").read_text())["results"]
    return sum(r.get("rows") or 0 for r in results if r.get("kind") in ("mv", "fact"))


def run(options: Options, report: Report, echo=print) -> None:
    if not (ROOT / "compiler" / "demo.py").exists():
        report.skipped.append("P4: compiler/demo.py is missing (no demo data to run on)")
        return
    logs = WORK / "logs" / "p4"
    logs.mkdir(parents=True, exist_ok=True)
    project = demo_copy(WORK / "p4" / "demo")
    echo(f"P4: demo init --scale {options.scale:g} and a first full run")
    run_command(_mvflow(project, "demo", "init", "--scale", str(options.scale)), project, log=logs / "init.log")
    run_command(_mvflow(project, "run"), project, log=logs / "first-run.log")
    noop = _mvflow(project, "run", "--select", NOOP_SELECT)
    asked = [*noop, "--no-file-check"]
    whole = _mvflow(project, "run")
    bare = [sys.executable, str(ROOT / "bench" / "bare_session.py"), str(project)]
    run_command(asked, project, log=logs / "warm-up.log")  # the OS file cache holds Spark's jars from here on
    echo(f"P4: no-op mvflow run vs bare SparkSession, {options.runs} runs each, alternating")
    series = interleaved({"noop": (noop, project, None), "asked": (asked, project, None), "whole": (whole, project, None),
                          "whole_asked": ([*whole, "--no-file-check"], project, None), "bare": (bare, project, None)},
                         options.runs, log_dir=logs)
    written = rows_written(project)
    size = f"demo scale {options.scale:g}"
    report.rows.append(Row("P4", "bare SparkSession start + stop", size, series["bare"], "1×"))
    for key, what in (("noop", "nothing due (files and offsets checked, Spark not started)"),
                      ("asked", "nothing due, --no-file-check (Spark asked)")):
        times = ratio(series[key], series["bare"])
        verdict = f"target ≤ {TARGET_RATIO}×: {'met' if times <= TARGET_RATIO else 'missed'}"
        report.rows.append(Row("P4", f"mvflow run -s '{NOOP_SELECT}', {what}", size, series[key], f"{times:.2f}× bare",
                               verdict + ("" if written == 0 else f"; NOT a no-op: {written} rows written")))
    for key, what in (("whole", "nothing changed (views and table watched too, Spark not started)"),
                      ("whole_asked", "nothing changed, --no-file-check (every view and table built)")):
        times = ratio(series[key], series["bare"])
        verdict = f"target: no Spark, ≤ {TARGET_RATIO}× bare: {'met' if times <= TARGET_RATIO else 'missed'}"
        report.rows.append(Row("P4b", f"mvflow run (whole project), {what}", size, series[key], f"{times:.2f}× bare",
                               verdict if key == "whole" else "what every run cost before P4b"))
