"""P2 MV refresh: the demo's ``offers_wide`` after ``mvflow demo change --fraction f`` (main and
side tables and a dictionary edit), three ways side by side on the same data in the same run:
mvflow's key-driven refresh (``mvflow run -s offers_wide``), a full rebuild of the same SELECT
(``--full-refresh``) and the dbt-spark incremental a user would write on parquet
(``bench/p2_dbt.py``). Each run of a fraction applies a fresh change first (untimed), then the
three commands alternate; every command starts its own SparkSession.

Besides the process walls (which Spark's start-up, the metastore's first access and Spark's first
query dominate), each command's own seconds: the model's ``seconds`` in
``target/run_results.json`` for mvflow (it includes Spark's start-up: ``mvflow run`` starts the
session on first use, inside the model), the statement's for the peer (cold, as each process is).
Then the curves, in one SparkSession each (``bench/p2_curve.py``, warm): refresh seconds against
the change size at the bench's scale, and against the table size at ``curve_scales``.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from .measure import Series, run_command
from .p4_noop import ROOT, _mvflow, demo_copy
from .peers import WORK
from .report import Report, Row, ratio

MV = "offers_wide"
REFRESH_TARGET = 1 / 20
DBT_TARGET = 5.0
OFFERS_PER_SCALE = 10_000  # compiler.demo.sizes(1)["offers"]


@dataclass(frozen=True)
class Options:
    runs: int = 3
    scale: float = 10.0
    fractions: tuple[float, ...] = (0.001, 0.01)
    curve_fractions: tuple[float, ...] = (0.001, 0.01, 0.05)
    curve_scales: tuple[float, ...] = ()  # further demo scales for the curve against table size
    curve_runs: int = 2


def model_result(project: Path) -> dict:
    results = json.loads((project / "target" / "run_results.json").read_text())["results"]
    return next(r for r in results if r.get("name") == MV)


def size_label(scale: float) -> str:
    return f"demo scale {scale:g} ({round(scale * OFFERS_PER_SCALE):,} offers)"


def prepared(name: str, scale: float, logs: Path, echo) -> Path:
    """A demo copy at ``scale`` with ``offers_wide`` built once."""
    project = demo_copy(WORK / "p2" / name)
    echo(f"P2: demo init --scale {scale:g} and a first build")
    run_command(_mvflow(project, "demo", "init", "--scale", str(scale)), project, log=logs / f"{name}-init.log")
    run_command(_mvflow(project, "run", "-s", MV), project, log=logs / f"{name}-build.log")
    return project


def run(options: Options, report: Report, echo=print) -> None:
    logs = WORK / "logs" / "p2"
    logs.mkdir(parents=True, exist_ok=True)
    project = prepared("demo", options.scale, logs, echo)
    dbt = [sys.executable, str(ROOT / "bench" / "p2_dbt.py"), str(project)]
    run_command(dbt, project, log=logs / "dbt-first.log")
    for fraction in options.fractions:
        _compare(project, dbt, fraction, options, report, logs, echo)
    curves = {options.scale: _curve(project, options.curve_fractions, options.curve_runs, logs, echo)}
    for scale in options.curve_scales:
        other = prepared(f"demo-{scale:g}", scale, logs, echo)
        curves[scale] = _curve(other, options.curve_fractions, options.curve_runs, logs, echo)
    report.sections.append(curve_table(curves, options.curve_fractions))


def _compare(project: Path, dbt: list[str], fraction: float, options: Options, report: Report, logs: Path,
             echo) -> None:
    series = {k: Series(k) for k in ("refresh", "full", "dbt")}
    own: dict[str, list[float]] = {k: [] for k in series}
    messages = []
    for i in range(options.runs):
        tag = f"{fraction:g}.{i}"
        run_command(_mvflow(project, "demo", "change", "--fraction", str(fraction), "--seed", str(100 + i)),
                    project, log=logs / f"change-{tag}.log")
        echo(f"P2: {fraction:.1%} changed, run {i + 1}/{options.runs}")
        for label, command in (("refresh", _mvflow(project, "run", "-s", MV)),
                               ("full", _mvflow(project, "run", "-s", MV, "--full-refresh"))):
            series[label].samples.append(run_command(command, project, log=logs / f"{label}-{tag}.log"))
            result = model_result(project)
            own[label].append(result["seconds"])
            if label == "refresh":
                messages.append(result.get("message") or "")
        series["dbt"].samples.append(run_command(dbt, project, log=logs / f"dbt-{tag}.log"))
        own["dbt"].append(_number("insert_seconds", logs / f"dbt-{tag}.log"))
    share, size = f"{fraction:.1%} changed", size_label(options.scale)
    cold = {k: median(v) for k, v in own.items()}
    vs_full, vs_dbt = cold["refresh"] / cold["full"], cold["dbt"] / cold["refresh"]
    full_verdict = ""
    if fraction <= 0.001:
        full_verdict = f"target ≤ 1/20 of full: {'met' if vs_full <= REFRESH_TARGET else 'missed'}; "
    report.rows.append(Row("P2", f"full rebuild of the SELECT, {share}", size, series["full"], "1×",
                           f"model {cold['full']:.2f} s (run_results, with Spark start-up)"))
    report.rows.append(Row(
        "P2", f"mvflow key-driven refresh, {share}", size, series["refresh"],
        f"{ratio(series['refresh'], series['full']):.2f}× full",
        f"model {cold['refresh']:.2f} s = {vs_full:.2f}× full; {full_verdict}{messages[-1][:90]}"))
    report.rows.append(Row(
        "P2", f"dbt-spark insert_overwrite (hand-written), {share}", size, series["dbt"],
        f"{ratio(series['dbt'], series['refresh']):.2f}× mvflow refresh",
        f"statement alone {cold['dbt']:.2f} s = {vs_dbt:.2f}× mvflow's model seconds; "
        f"target ≥ {DBT_TARGET:g}×: {'met' if vs_dbt >= DBT_TARGET else 'missed'}"))


def _curve(project: Path, fractions: tuple[float, ...], runs: int, logs: Path, echo) -> dict[float, dict[str, float]]:
    """Median seconds per fraction from ``p2_curve.py`` (one warm SparkSession)."""
    echo(f"P2: curve in one SparkSession ({project.name}): {', '.join(f'{f:.1%}' for f in fractions)}, {runs} runs")
    log = logs / f"curve-{project.name}.log"
    command = [sys.executable, str(ROOT / "bench" / "p2_curve.py"), str(project),
               "--fractions", ",".join(f"{f:g}" for f in fractions), "--runs", str(runs)]
    run_command(command, project, log=log)
    points = [{**dict((k, float(v)) for k, v in re.findall(r"(\w+)=([0-9.]+)", line)),
               "build": float(" mode=build" in line)}
              for line in log.read_text().splitlines() if line.startswith("point ")]
    return {f: {k: median(p[k] for p in points if p["fraction"] == f)
                for k in ("refresh_seconds", "keys", "full_seconds", "dbt_seconds", "compacted", "build")}
            for f in fractions}


def curve_table(curves: dict[float, dict[float, dict[str, float]]], fractions: tuple[float, ...]) -> str:
    """Markdown: per demo scale and changed share, the warm refresh (keys refreshed), the full
    rebuild and the peer, medians in seconds."""
    head = ["P2 curve (one warm SparkSession)", "rows", *[f"refresh, {f:.1%} changed (keys)" for f in fractions],
            "full rebuild", "dbt-spark peer", f"refresh / full at {fractions[0]:.1%}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for scale in sorted(curves):
        points = curves[scale]
        full = median(p["full_seconds"] for p in points.values())
        dbt = median(p["dbt_seconds"] for p in points.values())
        cells = [f"{p['refresh_seconds']:.2f} s ("
                 + ("fan-out guard: full build" if p["build"] else f"{p['keys']:,.0f}{', compacted' if p['compacted'] else ''}")
                 + ")" for p in points.values()]
        first = points[fractions[0]]["refresh_seconds"] / full
        lines.append("| " + " | ".join([f"demo scale {scale:g}", f"{round(scale * OFFERS_PER_SCALE):,} offers", *cells,
                                        f"{full:.2f} s", f"{dbt:.2f} s", f"{first:.2f}×"]) + " |")
    return "\n".join(lines) + "\n"


def _number(name: str, log: Path) -> float:
    found = re.search(rf"{name}=([0-9.]+)", log.read_text())
    return float(found.group(1)) if found else float("nan")
