"""Real crashes of ``mvflow run`` on the demo project: ``MVFLOW_KILL_AT=phase`` makes the runner
kill itself and its JVM with SIGKILL at that phase (``compiler.phases.kill_at``); then, as a user
would, new changes land, ``mvflow run`` redoes the batch, one more run finds nothing to do, and
``mvflow verify`` passes. This is issue 11's reproduction (the MV went stale after a redo because
its file watch claimed changes it had not read). ``offers_wide`` is published to a real PostgreSQL
(``MVFLOW_PUBLISH=1``), so ``verify`` also compares the published table with the MV. (A publish
killed at each of its phases is ``test_publish_kills_cli.py``'s, a fact step killed at
``fact:written`` on Delta ``test_fact_crash.py``'s, on both formats.)

SLOW: every command is its own process (a Spark start each). ``test_kill_points.py`` covers every
phase in-process."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from processes import PublishingDemo  # noqa: E402


@pytest.fixture(scope="module")
def demo(tmp_path_factory, postgres_dsn) -> PublishingDemo:
    return PublishingDemo(tmp_path_factory.mktemp("demo"), postgres_dsn, "kill_points_app")


def _line(output: str, model: str) -> str:
    return next(line for line in output.splitlines() if f" {model} " in line and ("OK" in line or "ERROR" in line))


@pytest.mark.slow
def test_mv_killed_after_next_written_with_changes_before_the_redo_slow(demo: PublishingDemo):
    demo.run("demo", "change", "--seed", "101")
    killed = demo.run("run", "--select", "offers_wide", kill_at="mv:next-written")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    status = demo.run("status").stdout
    assert "dead: pid" in status, f"the killed runner's leases show as dead:\n{status}"
    assert "Delta table, version" in status, status

    demo.run("demo", "change", "--seed", "102")  # lands between the crash and the redo
    redo = demo.run("run", "--select", "offers_wide").stdout
    assert "redo of the crashed batch" in _line(redo, "offers_wide"), redo
    again = demo.run("run", "--select", "offers_wide").stdout
    assert "up to date" in _line(again, "offers_wide"), again
    assert "published app.public.offers_wide by key" in _line(redo, "offers_wide"), redo
    verified = demo.run("verify", "--select", "offers_wide").stdout
    assert "FAIL" not in verified and "OK    offers_wide published (app.public.offers_wide)" in verified, verified
