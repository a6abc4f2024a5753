"""Real crashes of ``mvflow run`` on the demo project: ``MVFLOW_KILL_AT=phase`` makes the runner
kill itself and its JVM with SIGKILL at that phase (``compiler.phases.kill_at``); then, as a user
would, new changes land, ``mvflow run`` redoes the batch, one more run finds nothing to do, and
``mvflow verify`` passes. The first case is issue 11's reproduction (the MV went stale after a
redo because its file watch claimed changes it had not read). ``offers_wide`` is published to a
real PostgreSQL throughout (``MVFLOW_PUBLISH=1``), so ``verify`` also compares the published table
with the MV; the other cases kill a publish at each of its phases (``compiler.phases.PUBLISH_PHASES``)
by key and in full. (A fact step killed at ``fact:written`` on Delta is ``test_fact_crash.py``'s, on
both formats.)

SLOW: every command is its own process (a Spark start each). ``test_kill_points.py`` covers every
phase in-process."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from processes import copy_demo, mvflow  # noqa: E402


PUBLISHED: dict[str, str] = {}  # MVFLOW_PUBLISH and the store's dsn, for every command of the module


def _mvflow(project: Path, *args: str, kill_at: str = ""):
    return mvflow(project, *args, ok=not kill_at, MVFLOW_KILL_AT=kill_at, **PUBLISHED)


@pytest.fixture(scope="module")
def demo(tmp_path_factory, postgres_dsn) -> Path:
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute("CREATE DATABASE kill_points_app")
    PUBLISHED.update(MVFLOW_PUBLISH="1", MVFLOW_APP_DSN=postgres_dsn.rsplit("/", 1)[0] + "/kill_points_app")
    project = copy_demo(tmp_path_factory.mktemp("demo"))
    # 200 offers: one shop or category edit touches more than the default 20% of the MV, and the
    # fan-out guard would turn every batch into a full build; keep the key-driven path
    wide = project / "models/marts/offers_wide.sql"
    # and publish 20 keys a transaction, so that a by-key publish is killed between two of its chunks
    text = wide.read_text().replace("materialized='mv'", "materialized='mv', fanout_threshold=0.9")
    wide.write_text(text.replace("{'to': 'app',", "{'to': 'app', 'chunk_rows': 20,"))
    _mvflow(project, "demo", "init", "--scale", "0.02", "--seed", "7")
    _mvflow(project, "run", "--full-refresh")
    return project


def _published(dsn: str) -> tuple:
    """What readers of the published table see, and the batch its offsets row records."""
    import psycopg

    with psycopg.connect(dsn) as db:
        rows = db.execute("SELECT count(*), max(title), sum(hashtext(title)) FROM public.offers_wide").fetchone()
        return rows, db.execute("SELECT batch FROM mvflow_published WHERE tbl = 'public.offers_wide'").fetchone()[0]


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
    assert "published app.public.offers_wide by key" in _line(redo, "offers_wide"), redo
    verified = _mvflow(demo, "verify", "--select", "offers_wide").stdout
    assert "FAIL" not in verified and "OK    offers_wide published (app.public.offers_wide)" in verified, verified


@pytest.mark.slow
def test_a_by_key_publish_killed_at_each_phase_is_redone_slow(demo):
    """Killed with its lease taken (the MV's: its batch committed, nothing published), then between two
    chunks of the redo; new changes land before each try; the last run publishes everything by key."""
    dsn = PUBLISHED["MVFLOW_APP_DSN"]
    _mvflow(demo, "demo", "change", "--seed", "201")
    before = _published(dsn)
    killed = _mvflow(demo, "run", "--select", "offers_wide", kill_at="publish:leased")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert _published(dsn) == before
    _mvflow(demo, "demo", "change", "--seed", "202")
    killed = _mvflow(demo, "run", "--select", "offers_wide", kill_at="publish:chunk-committed@1")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert _published(dsn)[1] == before[1], "killed after its first chunk: the batch is recorded with the last"
    _mvflow(demo, "demo", "change", "--seed", "203")
    redo = _line(_mvflow(demo, "run", "--select", "offers_wide").stdout, "offers_wide")
    assert f"published app.public.offers_wide by key (batches {before[1] + 1} to" in redo, redo
    verified = _mvflow(demo, "verify", "--select", "offers_wide").stdout
    assert "FAIL" not in verified and "OK    offers_wide published (app.public.offers_wide)" in verified, verified


@pytest.mark.slow
def test_a_full_publish_killed_at_each_phase_leaves_readers_the_old_table_and_is_redone_slow(demo):
    """A rebuilt MV's full publish killed when its fresh table is loaded, then (the redo, a full
    publish again) when it is indexed, then just after the swap; new changes land before each try."""
    dsn = PUBLISHED["MVFLOW_APP_DSN"]
    before = _published(dsn)
    _mvflow(demo, "demo", "change", "--seed", "103")
    killed = _mvflow(demo, "run", "--full-refresh", "--select", "offers_wide", kill_at="publish:loaded")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert _published(dsn) == before  # the fresh table was loaded, not swapped in
    _mvflow(demo, "demo", "change", "--seed", "104")
    killed = _mvflow(demo, "run", "--select", "offers_wide", kill_at="publish:indexed")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert _published(dsn) == before
    _mvflow(demo, "demo", "change", "--seed", "105")
    killed = _mvflow(demo, "run", "--select", "offers_wide", kill_at="publish:swapped")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    swapped = _published(dsn)
    assert swapped[1] > before[1], "the fresh table swapped in with the batch it holds"
    _mvflow(demo, "demo", "change", "--seed", "106")
    redo = _line(_mvflow(demo, "run", "--select", "offers_wide").stdout, "offers_wide")
    assert f"published app.public.offers_wide by key (batch {swapped[1] + 1} of the MV)" in redo, redo
    verified = _mvflow(demo, "verify", "--select", "offers_wide").stdout
    assert "FAIL" not in verified and "OK    offers_wide published (app.public.offers_wide)" in verified, verified
