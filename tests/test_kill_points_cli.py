"""Real crashes of ``mvflow run`` on the demo project: ``MVFLOW_KILL_AT=phase`` makes the runner
kill itself and its JVM with SIGKILL at that phase (``compiler.phases.kill_at``); then, as a user
would, new changes land, ``mvflow run`` redoes the batch, one more run finds nothing to do, and
``mvflow verify`` passes. The first case is issue 11's reproduction (the MV went stale after a
redo because its file watch claimed changes it had not read).

SLOW: every command is its own process (a Spark start each). ``test_kill_points.py`` covers every
phase in-process."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from processes import copy_demo, mvflow  # noqa: E402


def _mvflow(project: Path, *args: str, kill_at: str = ""):
    return mvflow(project, *args, ok=not kill_at, MVFLOW_KILL_AT=kill_at)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    project = copy_demo(tmp_path_factory.mktemp("demo"))
    # 200 offers: one shop or category edit touches more than the default 20% of the MV, and the
    # fan-out guard would turn every batch into a full build; keep the key-driven path
    wide = project / "models/marts/offers_wide.sql"
    wide.write_text(wide.read_text().replace("materialized='mv'", "materialized='mv', fanout_threshold=0.9"))
    _mvflow(project, "demo", "init", "--scale", "0.02", "--seed", "7")
    _mvflow(project, "run", "--full-refresh")
    return project


def _line(output: str, model: str) -> str:
    return next(line for line in output.splitlines() if f" {model} " in line and ("OK" in line or "ERROR" in line))


@pytest.mark.slow
def test_mv_killed_after_next_written_with_changes_before_the_redo_slow(demo):
    _mvflow(demo, "demo", "change", "--seed", "101")
    killed = _mvflow(demo, "run", "--select", "offers_wide", kill_at="mv:next-written")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    status = _mvflow(demo, "status").stdout
    assert "dead: pid" in status, f"the killed runner's leases show as dead:\n{status}"
    assert "Delta table, version" in status, status

    _mvflow(demo, "demo", "change", "--seed", "102")  # lands between the crash and the redo
    redo = _mvflow(demo, "run", "--select", "offers_wide").stdout
    assert "redo of the crashed batch" in _line(redo, "offers_wide"), redo
    again = _mvflow(demo, "run", "--select", "offers_wide").stdout
    assert "up to date" in _line(again, "offers_wide"), again
    verified = _mvflow(demo, "verify", "--select", "offers_wide").stdout
    assert "FAIL" not in verified and "offers_wide" in verified, verified


@pytest.mark.slow
def test_fact_killed_after_its_write_is_redone_without_duplicates_slow(demo):
    _mvflow(demo, "demo", "change", "--seed", "103")
    killed = _mvflow(demo, "run", "--select", "+orders_enriched", kill_at="fact:written")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    redo = _mvflow(demo, "run", "--select", "+orders_enriched").stdout
    assert "redoing the unfinished step" in redo, redo
    verified = _mvflow(demo, "verify", "--select", "+orders_enriched").stdout
    assert "FAIL" not in verified and "orders_enriched" in verified, verified
