"""The bench harness runs at a tiny scale (no dbt, no Spark). Never timed assertions: the
figures themselves come from ``python -m bench`` (see README, Performance)."""

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
