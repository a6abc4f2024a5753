"""Facts and tables on Delta vs parquet, side by side in one warm SparkSession (issue 13).

On a copy of the demo at ``--scale`` (default 10), with twin models that differ only in
``config(table_format=...)``:

- *fact step*: one step of ``orders_enriched`` (``maxstep`` orders, 50,000 in the demo) through
  the real runner (``run_fact --max-steps 1``: bounds, offsets, the write, commit, step log),
  the parquet twin (``INSERT OVERWRITE`` of a hidden step partition) against the Delta twin
  (``INSERT INTO … REPLACE WHERE`` the step's range); each twin's first step (table creation)
  is not timed, then the twins alternate.
- *table build*: ``run_statements`` of a table model, the parquet twin (DROP + CREATE TABLE of
  the idle slot, view swap) against the Delta twin (one ``CREATE OR REPLACE TABLE … AS``), for
  the demo's ``shop_stats`` (small) and for the demo MV's SELECT as a table (``offers_wide``'s
  rows: issue 12 wants the MV full build as cheap as an ``INSERT OVERWRITE``); alternating.

Walls are medians of ``--runs``; the ratio is Delta / parquet. No timed assertions anywhere:
the figures go to stdout and ``bench/.work/delta_writes.json``.

    python -m bench.delta_writes --scale 10 --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.p4_noop import ROOT, demo_copy  # noqa: E402
from bench.peers import WORK  # noqa: E402

FORMATS = ("parquet", "delta")
FACT = "orders_enriched"
TABLES = {"shop_stats": "models/marts/shop_stats.sql", "offers_wide": "models/marts/offers_wide.sql"}


def twins(project: Path) -> None:
    """``<model>_<format>`` copies of the fact and of the table models, one per table format."""
    marts = project / "models" / "marts"
    fact = (marts / f"{FACT}.sql").read_text()
    for fmt in FORMATS:
        (marts / f"{FACT}_{fmt}.sql").write_text(fact.replace("config(materialized='fact',",
                                                              f"config(materialized='fact', table_format='{fmt}',", 1))
        for name, path in TABLES.items():
            text = re.sub(r"\{\{ config\(.*?\) \}\}", "", (project / path).read_text(), count=1, flags=re.S)
            (marts / f"{name}_table_{fmt}.sql").write_text(f"{{{{ config(materialized='table', table_format='{fmt}') }}}}\n{text}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a session setting for the timed part (e.g. spark.databricks.delta.snapshotPartitions=2)")
    args = parser.parse_args(argv)

    from compiler.compile import compile_project
    from compiler.kinds.fact.steps import StepOptions, run_fact
    from compiler.project import load_project
    from compiler.run import run_statements
    from compiler.spark import spark_session
    from compiler.state import open_state_store

    project = demo_copy(WORK / "delta_writes" / "demo")
    twins(project)
    # The sources and the MV the fact joins, by the CLI in a process of its own, in parquet (not measured).
    empty = WORK / "delta_writes" / "no-jars"
    empty.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MVFLOW_JARS": str(empty), "MVFLOW_TABLE_FORMAT": "parquet"}
    for command in (["demo", "init", "--scale", f"{args.scale:g}"], ["run", "--exclude", f"{FACT}* *_table_*"]):
        subprocess.run([sys.executable, "-c", "from compiler.cli import main; main()", "--project-dir", str(project),
                        *command], env=env, check=True, cwd=ROOT)
    loaded = load_project(project)
    manifest, store = compile_project(loaded), open_state_store(loaded.target().state)
    spark = spark_session(loaded.target(), delta=True)
    for setting in args.conf:
        spark.conf.set(*setting.split("=", 1))
    samples: dict[str, list[float]] = {}

    def timed(label: str, call) -> None:
        started = time.perf_counter()
        result = call()
        assert result.status == "success", result.message
        samples.setdefault(label, []).append(time.perf_counter() - started)
        print(f"  {label}: {samples[label][-1]:.2f} s ({result.rows} rows)", flush=True)

    def step(fmt: str, **options):
        model = manifest.models[f"{FACT}_{fmt}"]
        return run_fact(spark, manifest, model, store, StepOptions(max_steps=1, file_check=False, **options), lambda _: None)

    for fmt in FORMATS:  # the first step creates the table: not timed
        assert step(fmt, full_refresh=True).status == "success"
    for run in range(args.runs):
        print(f"run {run + 1}/{args.runs}", flush=True)
        for fmt in FORMATS if run % 2 == 0 else reversed(FORMATS):
            timed(f"fact step {fmt}", lambda: step(fmt))
        for name in TABLES:
            for fmt in FORMATS if run % 2 == 0 else reversed(FORMATS):
                model = manifest.models[f"{name}_table_{fmt}"]
                timed(f"table {name} {fmt}", lambda: run_statements(spark, manifest, model))
    rows = {FACT: spark.table(manifest.models[f"{FACT}_delta"].relation).count(),
            **{n: spark.table(manifest.models[f"{n}_table_delta"].relation).count() for n in TABLES}}
    lines = [f"scale {args.scale:g}, {args.runs} runs, medians (min–max); ratio = delta / parquet"
             + (f"; {', '.join(args.conf)}" if args.conf else ""), "",
             "| what | parquet s | delta s | ratio |", "|---|---|---|---|"]
    for what in ("fact step", *(f"table {n}" for n in TABLES)):
        p, d = samples[f"{what} parquet"], samples[f"{what} delta"]
        lines.append(f"| {what} | {median(p):.2f} ({min(p):.2f}–{max(p):.2f}) | {median(d):.2f} ({min(d):.2f}–{max(d):.2f}) "
                     f"| {median(d) / median(p):.2f}× |")
    lines.append("")
    lines.append(f"rows: fact table after the steps {rows[FACT]:,}; " + ", ".join(f"{n} {rows[n]:,}" for n in TABLES))
    print("\n".join(lines))
    out = WORK / "delta_writes.json"
    out.write_text(json.dumps({"scale": args.scale, "runs": args.runs, "conf": args.conf, "samples": samples, "rows": rows},
                              indent=2) + "\n")


if __name__ == "__main__":
    main()
