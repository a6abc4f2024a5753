"""Spark's cache of generated code and the MV batch: its default 100 entries against mvflow's 2,000.

    python -m bench.codegen_cache                       # demo at scale 0.02, 6 batches, 2 rounds
    python -m bench.codegen_cache --scale 0.1 --batches 10

``spark.sql.codegen.cache.maxEntries`` is static (one per JVM), so each setting runs in a process of
its own, alternating, in rounds: each child initialises the demo, builds ``offers_wide`` and times
``--batches`` change + refresh batches in one warm session, and reports how many classes Spark
compiled (``CodegenMetrics``) during those batches. The parent prints both side by side.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.p4_noop import DEMO_FILES

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work" / "codegen_cache"
SETTINGS = ("100", "2000")


def child(entries: str, scale: float, batches: int) -> dict:
    from compiler import demo
    from compiler.compile import compile_project
    from compiler.kinds.mv.refresh import refresh_mv
    from compiler.project import load_project
    from compiler.spark import spark_session
    from compiler.state import open_state_store

    project = WORK / entries
    if project.exists():
        shutil.rmtree(project)
    project.mkdir(parents=True)
    for name in DEMO_FILES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, project / name)
    manifest = compile_project(load_project(project))
    target = manifest.project.target()
    conf = {**target.spark.conf, "spark.sql.codegen.cache.maxEntries": entries}
    spark = spark_session(replace(target, spark=replace(target.spark, conf=conf)))
    store = open_state_store(target.state)
    demo.init(spark, scale=scale, seed=7)
    model = manifest.models["offers_wide"]
    refresh_mv(spark, manifest, model, store)
    metric = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    compiled, seconds = metric.getCount(), []
    for batch in range(batches):
        demo.change(spark, fraction=0.01, seed=100 + batch)
        started = time.monotonic()
        refresh_mv(spark, manifest, model, store)
        seconds.append(time.monotonic() - started)
    result = {"seconds": seconds, "compiled": metric.getCount() - compiled}
    spark.stop()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.02)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.scale, args.batches)))
        return
    results: dict[str, list[dict]] = {entries: [] for entries in SETTINGS}
    for _ in range(args.rounds):
        for entries in SETTINGS:
            out = subprocess.run([sys.executable, "-m", "bench.codegen_cache", "--child", entries, "--scale", str(args.scale),
                                  "--batches", str(args.batches)], cwd=ROOT, check=True, capture_output=True, text=True)
            results[entries].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"offers_wide at scale {args.scale}: {args.batches} change + refresh batches per process, {args.rounds} rounds")
    print("maxEntries  batch s median (min-max)  classes compiled per batch")
    medians = {}
    for entries, runs in results.items():
        seconds = [s for run in runs for s in run["seconds"]]
        medians[entries] = statistics.median(seconds)
        compiled = statistics.mean(run["compiled"] for run in runs) / args.batches
        print(f"{entries:>10}  {medians[entries]:6.2f} ({min(seconds):.2f}-{max(seconds):.2f})       {compiled:8.0f}")
    print(f"ratio 2000/100: {medians['2000'] / medians['100']:.2f}")


if __name__ == "__main__":
    main()
