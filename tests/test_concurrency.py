"""Two mvflow processes on one project and target (embedded Derby metastore): the second is
refused by name before it reads or writes anything, with no Java trace; ``status`` names the
holder, and says when it died; a killed holder is taken over at once.

SLOW: two real ``mvflow run`` processes (each starts Spark)."""

from __future__ import annotations

import os
import socket
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from compiler.lock import ClaimHeld
from compiler.project import load_project
from compiler.state import open_state_store

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from processes import Background, mvflow  # noqa: E402


# the table's one task sleeps 1 s per row: the first run is busy long enough to be caught
SLOW = """
{{ config(materialized='table') }}
SELECT id FROM range(0, 40, 1, 1) WHERE reflect('java.lang.Thread', 'sleep', CAST(id * 0 + 1000 AS BIGINT)) = 'null'
"""


def test_claims_refuse_a_live_holder_and_take_over_a_dead_or_expired_one(tmp_path):
    store = open_state_store(load_project(_project(tmp_path)).target().state)
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    live = f"{socket.gethostname()}:{os.getpid()}:aa"
    mine = store.claim("target:local", live, "mvflow run", 60, now)
    assert mine.holder == live
    assert store.claim("target:local", "other-host:1:bb", "mvflow verify", 60, now).holder == live, "refused"
    dead = f"{socket.gethostname()}:999999999:cc"
    store.release_claim(mine)
    store.claim("target:local", dead, "mvflow run", 60, now)
    assert store.claim("target:local", live, "mvflow run", 60, now).holder == live, "a dead pid is taken over at once"
    later = now + timedelta(seconds=61)
    assert store.claim("target:local", "other-host:2:dd", "mvflow run", 60, later).holder == "other-host:2:dd", \
        "an expired claim is taken over"
    assert store.renew_claim(mine, 60, later) is None, "the old holder cannot renew what was taken over"


@pytest.mark.slow
def test_a_second_run_is_refused_by_name_and_a_killed_holder_is_taken_over_slow(tmp_path):
    project = _project(tmp_path)
    first = Background(project, "run")
    try:
        first.wait_for("START table")  # the claim is held and Spark is writing the table

        second = mvflow(project, "run", timeout=120, ok=False)
        assert second.returncode == 1, second.stderr
        assert "[lease-held]" in second.stderr and f"pid {first.proc.pid}" in second.stderr, second.stderr
        assert "`mvflow run`" in second.stderr and "Traceback" not in second.stderr
        assert "XSDB6" not in second.stderr and "at org.apache" not in second.stderr
        assert len(second.stderr) < 2000, "one clear error, not pages of traces"
        status = mvflow(project, "status", ok=False)
        assert f"target local: in use by `mvflow run` (pid {first.proc.pid}" in status.stdout, status.stdout
        try:
            _run_claimed(project)
        except ClaimHeld as exc:
            assert f"pid {first.proc.pid}" in str(exc)
        else:
            raise AssertionError("the claim of the first run was not seen in-process")
    finally:
        first.kill()

    status = mvflow(project, "status", ok=False)
    assert "which died; the next command takes over" in status.stdout, status.stdout
    again = mvflow(project, "run", ok=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 ok" in again.stdout


def _run_claimed(project: Path) -> None:
    from compiler.lock import target_lock

    target = load_project(project).target()
    with target_lock(open_state_store(target.state), target, "test"):
        pass


def _project(root: Path) -> Path:
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "project.yml").write_text("name: busy\n")
    (root / "models/slow.sql").write_text(SLOW)
    return root
