"""The bench harness runs at a tiny scale (no dbt, no Spark). Never timed assertions: the
figures themselves come from ``python -m bench`` (see docs/performance.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import networkx as nx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/ is a folder of scripts, not installed

from bench.generate import generate, write_dbt, write_mvflow  # noqa: E402
from bench.measure import run_command  # noqa: E402
from bench.run import main  # noqa: E402
from compiler.compile import compile_project  # noqa: E402
from compiler.kinds import FactKind, MvKind  # noqa: E402
from compiler.project import load_project  # noqa: E402


def test_generated_project_compiles_with_every_kind(tmp_path: Path):
    gen = generate(120)
    manifest = compile_project(load_project(write_mvflow(gen, tmp_path / "mvflow")))

    assert len(manifest.models) == 120
    assert {m.kind.name for m in manifest.models.values()} == {"view", "table", "mv", "fact"}
    assert any(isinstance(m.kind, MvKind) for m in manifest.models.values())
    assert any(isinstance(m.kind, FactKind) for m in manifest.models.values())
    assert all(m.columns for m in manifest.models.values()), "every * is expanded from declared columns"
    deepest = max(len(nx.ancestors(manifest.graph, f"model.{n}")) for n in manifest.models)
    assert deepest >= 5, "models are layered, not flat"


def test_generation_is_deterministic_and_dbt_gets_the_same_sql(tmp_path: Path):
    one, two = generate(60), generate(60)
    assert [m.body for m in one.models] == [m.body for m in two.models]

    dbt = write_dbt(one, tmp_path / "dbt")
    mvflow = write_mvflow(one, tmp_path / "mvflow")
    for model in one.models:
        dbt_sql = (dbt / "models" / model.folder / f"{model.name}.sql").read_text()
        mvflow_sql = (mvflow / "models" / model.folder / f"{model.name}.sql").read_text()
        assert model.body in dbt_sql and model.body in mvflow_sql
        if model.kind == "fact":
            assert "materialized='incremental'" in dbt_sql and "is_incremental()" in dbt_sql
    assert "method: session" in (dbt / "profiles.yml").read_text()


def test_run_command_reports_the_child_peak_memory(tmp_path: Path):
    sample = run_command([sys.executable, "-c", "x = bytearray(80_000_000); import time; time.sleep(0.3)"], tmp_path)

    assert sample.returncode == 0
    assert sample.python_mb >= 80
    assert sample.jvm_mb is None
    assert sample.cpu_seconds > 0


def test_bench_p1_runs_at_a_tiny_scale_without_dbt(tmp_path: Path, capsys):
    report = main(["--only", "P1", "--quick", "--no-dbt", "--out", str(tmp_path)])

    [row] = report.rows
    assert row.what == "mvflow compile, cold" and row.size == "10 models"
    assert len(row.series.samples) == 1
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["rows"][0]["label"] == "cold"
    assert "| P1 | mvflow compile, cold | 10 models |" in (tmp_path / "results.md").read_text()
    assert "| P1 | mvflow compile, cold |" in capsys.readouterr().out


# -- the P2 grid's pieces (bench/jobs.py, bench/changes.py, bench/p2_grid.py, bench/grid.py) ---------------

def test_count_jobs_counts_the_jobs_of_the_block(spark):
    from bench.jobs import count_jobs

    with count_jobs(spark) as nothing:
        pass
    with count_jobs(spark) as two:
        spark.range(10).write.format("noop").mode("overwrite").save()
        spark.range(10).write.format("noop").mode("overwrite").save()

    assert nothing.jobs == 0
    assert two.jobs == 2


def test_clustered_changes_fall_on_the_newest_offers_and_one_shop(spark):
    from bench.changes import apply
    from compiler import demo

    demo.init(spark, scale=0.02, seed=3)  # 200 offers
    table = lambda name: spark.table(f"stage.{name}")  # noqa: E731
    before = {name: table(name).localCheckpoint() for name in ("offers", "shops", "categories", "regions", "warehouses")}
    newest_id = before["offers"].agg({"offer_id": "max"}).first()[0]

    summary = apply(spark, "clustered", fraction=0.1, seed=4)

    changed = {name: table(name).exceptAll(rows).select(*demo.KEYS[name]).collect() for name, rows in before.items()}
    offers = sorted(r.offer_id for r in changed["offers"])
    assert len(offers) >= 20 and all(i > newest_id - 20 for i in offers)  # 10% of 200: the 20 newest (+ new ones)
    assert any(i > newest_id for i in offers), "new offers arrive"
    assert len(changed["shops"]) == 1 and summary["shops"] in ("+0 ~1 -0", "+0 ~0 -1")
    assert not changed["categories"] and not changed["regions"] and not changed["warehouses"]
    kept = {row["name"]: row["value"] for row in table(demo.STATE_TABLE).collect()}  # what the next batch sizes from
    assert {name: kept[f"rows.{name}"] for name in demo.SOURCES} == {name: table(name).count() for name in demo.SOURCES}


def test_input_columns_and_strategy_of():
    import doctest
    from types import SimpleNamespace

    from bench import p2_grid

    assert doctest.testmod(p2_grid).failed == 0
    of = lambda message: p2_grid.strategy_of(SimpleNamespace(message=message))  # noqa: E731
    assert of("batch 4: 607 keys refreshed (changed: offers 100)") == "incremental"
    assert of("batch 2: full build (--full-refresh), 100,000 rows") == "full"
    assert of("batch 5: incremental: est. 1.9 s vs full 8.7 s (607 keys of 100,000 rows)") == "incremental"
    assert of("batch 5: full: est. 9 s vs incremental 20 s") == "full"
    assert p2_grid.strategy_of(SimpleNamespace(message="", strategy="chunked")) == "chunked"


def test_grid_tables_show_strategies_jobs_ratios_floor_and_p5():
    from bench.grid import render

    def rec(fmt, what, seconds, strategy="incremental", jobs=12):
        return {"format": fmt, "what": what, "seconds": seconds, "jobs": jobs, "status": "success", "strategy": strategy}

    cell = {"pattern": "random", "share": 0.001, "results": [
        rec("parquet", "auto", 2.0), rec("parquet", "incremental", 2.2), rec("parquet", "full", 5.0, "full"),
        rec("parquet", "peer", 1.0, "INSERT OVERWRITE", 3)],
        "floor": {"seconds": 1.0, "scan_seconds": 0.7, "write_seconds": 0.3, "rows_written": 100}}
    text = render({"offers": 100_000, "formats": ["parquet"], "cells": [cell], "strategy_config": False,
                   "p5": [{"format": "parquet", "batches": 1, "mv_seconds": 0.3, "copy_seconds": 0.2, "ratio": 1.5,
                           "mv_jobs": 3, "copy_jobs": 1, "compacted": True, "same_rows": True, "batch_seconds": 2.5}]})

    assert "### P2 grid, 100,000 offers" in text and "fallback" in text
    assert "| random 0.1% | parquet | 2.00 s (incremental, 12 jobs) | 2.20 s (12 jobs) | 5.00 s (12 jobs) | " \
           "1.00 s (3 jobs) | 2.00× (missed) | 0.50× | 0.40× |" in text
    assert "| random 0.1% | 1.00 s (0.70 s scan + 0.30 s writing 100 rows) | 2.00× |" in text
    assert "| parquet | 1 | 0.300 s | 0.200 s | 1.50× | 3 / 1 |  | 2.50 s | compacted |" in text


def test_f1_latency_backlog_and_verdict():
    """F1's figures (bench/f1_stream.py): a landed batch is visible at the first MV batch that
    started after it; a backlog that keeps rising misses the target however fast the p95."""
    import doctest

    from bench import f1_stream as f1

    assert doctest.testmod(f1).failed == 0
    landed = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    keeping_up = [f1.Step(t + 1, t + 6) for t in landed]
    steady = f1.figures("mv", landed, keeping_up, start=0, end=60)
    assert steady.latencies == [6] * 6 and steady.p95 == 6 and abs(steady.growth) < 1 and steady.verdict == "met"
    falling_behind = [f1.Step(1, 30), f1.Step(31, 60)]  # one batch per 30 s against one landing per 10 s
    behind = f1.figures("mv", landed, falling_behind, start=0, end=60)
    assert behind.latencies == [30, 50, 40, 30] and behind.unseen == 2 and behind.growth > 1 and behind.verdict == "missed"
    assert "| mv | 2 | 4 of 6 | 30.0 s | 50.0 s | 50.0 s |" in f1.table([behind])
    reached = f1.visible_at(landed, keeping_up)  # an MV over that MV sees a change after its batch published it
    stacked = f1.figures("stacked", landed, [f1.Step(t + 7, t + 9) for t in landed], start=0, end=60, reached=reached)
    assert stacked.latencies == [9] * 6
