"""P2 MV refresh: the demo's ``offers_wide`` after ``mvflow demo change --fraction f`` (main and
side tables and a dictionary edit), three ways side by side on the same data in the same run:
mvflow's key-driven refresh (``mvflow run -s offers_wide``), a full rebuild of the same SELECT
(``--full-refresh``) and the dbt-spark incremental a user would write on parquet
(``bench/p2_dbt.py``). Each run of a fraction applies a fresh change first (untimed), then the
three commands alternate; every command starts its own SparkSession.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .measure import Series, run_command
from .p4_noop import ROOT, _mvflow, demo_copy
from .peers import WORK
from .report import Report, Row, ratio

MV = "offers_wide"
REFRESH_TARGET = 1 / 20
DBT_TARGET = 5.0


@dataclass(frozen=True)
class Options:
    runs: int = 3
    scale: float = 10.0
    fractions: tuple[float, ...] = (0.001, 0.01)


def last_message(project: Path) -> str:
    results = json.loads((project / "target" / "run_results.json").read_text())["results"]
    return "; ".join(r.get("message") or "" for r in results)


def run(options: Options, report: Report, echo=print) -> None:
    logs = WORK / "logs" / "p2"
    logs.mkdir(parents=True, exist_ok=True)
    project = demo_copy(WORK / "p2" / "demo")
    size = f"demo scale {options.scale:g} ({int(options.scale * 10_000):,} offers)"
    echo(f"P2: demo init --scale {options.scale:g} and a first build")
    run_command(_mvflow(project, "demo", "init", "--scale", str(options.scale)), project, log=logs / "init.log")
    run_command(_mvflow(project, "run", "-s", MV), project, log=logs / "build.log")
    dbt = [sys.executable, str(ROOT / "bench" / "p2_dbt.py"), str(project)]
    run_command(dbt, project, log=logs / "dbt-first.log")
    for fraction in options.fractions:
        series = {k: Series(k) for k in ("refresh", "full", "dbt")}
        messages = []
        for i in range(options.runs):
            tag = f"{fraction:g}.{i}"
            run_command(_mvflow(project, "demo", "change", "--fraction", str(fraction), "--seed", str(100 + i)),
                        project, log=logs / f"change-{tag}.log")
            echo(f"P2: {fraction:.1%} changed, run {i + 1}/{options.runs}")
            series["refresh"].samples.append(run_command(_mvflow(project, "run", "-s", MV), project,
                                                         log=logs / f"refresh-{tag}.log"))
            messages.append(last_message(project))
            series["full"].samples.append(run_command(_mvflow(project, "run", "-s", MV, "--full-refresh"), project,
                                                      log=logs / f"full-{tag}.log"))
            series["dbt"].samples.append(run_command(dbt, project, log=logs / f"dbt-{tag}.log"))
        share = f"{fraction:.1%} changed"
        vs_full, vs_dbt = ratio(series["refresh"], series["full"]), ratio(series["dbt"], series["refresh"])
        full_verdict = ""
        if fraction <= 0.001:
            full_verdict = f"target ≤ 1/20 of full: {'met' if vs_full <= REFRESH_TARGET else 'missed'}; "
        report.rows.append(Row("P2", f"full rebuild of the SELECT, {share}", size, series["full"], "1×"))
        report.rows.append(Row("P2", f"mvflow key-driven refresh, {share}", size, series["refresh"],
                               f"{vs_full:.2f}× full", full_verdict + messages[-1][:90]))
        report.rows.append(Row("P2", f"dbt-spark insert_overwrite (hand-written), {share}", size, series["dbt"],
                               f"{vs_dbt:.2f}× mvflow refresh",
                               f"target ≥ {DBT_TARGET:g}×: {'met' if vs_dbt >= DBT_TARGET else 'missed'}"))
