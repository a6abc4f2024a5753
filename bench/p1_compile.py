"""P1 compile: ``mvflow compile`` of a generated project of N models against ``dbt parse`` and
``dbt compile`` of the equivalent dbt project (see generate.py), each a subprocess.

*cold* runs start without earlier output (mvflow: no ``target/`` and no compile cache
``.mvflow/cache/``; dbt: ``--no-partial-parse``); *warm* runs keep it (dbt's partial parse;
mvflow's ``target/`` and compile cache, after one untimed run). dbt and
mvflow runs alternate, so machine noise hits both.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from .generate import generate, write_dbt, write_mvflow
from .measure import Series, interleaved, run_command
from .peers import WORK, dbt_executable
from .report import Report, Row, ratio

MVFLOW = Path(sys.executable).parent / "mvflow"
TARGET_SECONDS = 2.0  # for 1,000 models
TARGET_RATIO = 10.0  # dbt parse / mvflow compile
DBT_ENV = {"DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "DBT_PRINTER_WIDTH": "120"}


@dataclass(frozen=True)
class Options:
    sizes: tuple[int, ...] = (100, 1000, 5000)
    dbt_size: int | None = 1000  # None: no dbt
    runs: int = 5  # of each command, dbt's included
    dbt_compile_runs: int = 1


def projects(size: int, with_dbt: bool) -> tuple[Path, Path | None]:
    """Generate (or refresh) the mvflow and dbt projects of ``size`` models under bench/.work/p1/."""
    gen = generate(size)
    mvflow = write_mvflow(gen, WORK / "p1" / f"mvflow-{size}")
    dbt = write_dbt(gen, WORK / "p1" / f"dbt-{size}") if with_dbt else None
    return mvflow, dbt


def _mvflow_cmd(project: Path) -> list[str]:
    return [str(MVFLOW), "--project-dir", str(project), "compile"]


def _dbt_cmd(dbt: Path, project: Path, command: str, *extra: str) -> list[str]:
    return [str(dbt), command, "--project-dir", str(project), "--profiles-dir", str(project), *extra]


def _clean(*paths: Path):
    return lambda: [shutil.rmtree(p, ignore_errors=True) for p in paths]


def run(options: Options, report: Report, echo=print) -> None:
    logs = WORK / "logs" / "p1"
    logs.mkdir(parents=True, exist_ok=True)
    cold: dict[int, Series] = {}
    if options.dbt_size is not None:
        cold[options.dbt_size] = _versus_dbt(options, report, logs, echo)
    for size in options.sizes:
        if size in cold:
            continue
        echo(f"P1: mvflow compile, {size:,} models ({options.runs} cold runs)")
        project, _ = projects(size, with_dbt=False)
        series = interleaved({"cold": (_mvflow_cmd(project), project, None)}, options.runs,
                             before={"cold": _clean(project / "target", project / ".mvflow")}, log_dir=logs / f"mvflow-{size}")
        cold[size] = series["cold"]
        note = ""
        if size == 1000:
            met = cold[size].median <= TARGET_SECONDS
            note = f"target ≤ {TARGET_SECONDS:.0f} s: {'met' if met else 'missed'}"
        per_model = cold[size].median / size * 1000
        report.rows.append(Row("P1", "mvflow compile, cold", f"{size:,} models", cold[size],
                               f"{per_model:.1f} ms/model", note))
    _growth(cold, report)


def _versus_dbt(options: Options, report: Report, logs: Path, echo) -> Series:
    """mvflow against dbt, alternating; returns mvflow's cold series."""
    size = options.dbt_size
    dbt = dbt_executable(echo)
    project, dbt_project = projects(size, with_dbt=True)
    echo(f"P1: mvflow compile vs dbt parse, {size:,} models ({options.runs} runs each, alternating)")
    cold = interleaved(
        {"mvflow": (_mvflow_cmd(project), project, None),
         "dbt parse": (_dbt_cmd(dbt, dbt_project, "parse", "--no-partial-parse"), dbt_project, DBT_ENV)},
        options.runs, before={"mvflow": _clean(project / "target", project / ".mvflow")}, log_dir=logs / f"cold-{size}")
    run_command(_mvflow_cmd(project), project)  # prime target/ for the warm runs
    run_command(_dbt_cmd(dbt, dbt_project, "parse"), dbt_project, DBT_ENV)  # prime partial parse
    warm = interleaved(
        {"mvflow": (_mvflow_cmd(project), project, None),
         "dbt parse": (_dbt_cmd(dbt, dbt_project, "parse"), dbt_project, DBT_ENV)},
        options.runs, log_dir=logs / f"warm-{size}")
    label = f"{size:,} models"
    for mode, series in (("cold", cold), ("warm", warm)):
        times = ratio(series["dbt parse"], series["mvflow"])
        verdict = f"target ≥ {TARGET_RATIO:.0f}×: {'met' if times >= TARGET_RATIO else 'missed'}"
        met = series["mvflow"].median <= TARGET_SECONDS if size == 1000 else None
        note = "" if met is None else f"target ≤ {TARGET_SECONDS:.0f} s: {'met' if met else 'missed'}"
        report.rows.append(Row("P1", f"mvflow compile, {mode}", label, series["mvflow"], "1×", note))
        report.rows.append(Row("P1", f"dbt parse, {mode}" + (" (partial parse)" if mode == "warm" else ""), label,
                               series["dbt parse"], f"{times:.1f}× mvflow", verdict))
    if options.dbt_compile_runs:
        echo(f"P1: dbt compile, {size:,} models ({options.dbt_compile_runs} runs; starts Spark: method session)")
        compiled = interleaved({"dbt compile": (_dbt_cmd(dbt, dbt_project, "compile"), dbt_project, DBT_ENV)},
                               options.dbt_compile_runs, log_dir=logs / f"compile-{size}")["dbt compile"]
        times = ratio(compiled, warm["mvflow"])
        report.rows.append(Row("P1", "dbt compile (partial parse, Spark session)", label, compiled,
                               f"{times:.1f}× mvflow warm", "writes compiled SQL like mvflow compile"))
    return cold["mvflow"]


def _growth(cold: dict[int, Series], report: Report) -> None:
    sizes = sorted(cold)
    if len(sizes) < 2:
        return
    steps = [f"{a:,}→{b:,} models: ×{cold[b].median / cold[a].median:.1f} time for ×{b / a:.0f} models"
             for a, b in zip(sizes, sizes[1:])]
    report.verdicts.append("P1 growth (mvflow cold): " + "; ".join(steps))
