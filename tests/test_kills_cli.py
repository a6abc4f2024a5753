"""Real crashes of ``mvflow run`` on the demo project, every command a process of its own:
``MVFLOW_KILL_AT=phase`` makes the runner kill itself and its JVM with SIGKILL at that phase
(``compiler.phases.kill_at``); then, as a user would, new changes land, ``mvflow run`` redoes the
batch and ``mvflow verify`` passes. ``offers_wide`` is published to a real PostgreSQL
(``MVFLOW_PUBLISH=1``), so ``verify`` also compares the published table with the MV, which equals
its recomputation. One demo serves every test of the module (its set-up is two commands of a
minute each); each test starts from what the one before it left, which it only reads relative to
itself (the batch numbers, the published rows).

- An MV killed between its batch's ``next`` written and its commit (issue 11's reproduction: the
  MV went stale after a redo because its file watch claimed changes it had not read).
- A publish killed at ``compiler.phases.PUBLISH_PHASES`` (all but ``publish:loaded``), by key and in full: readers of
  the published table never see a half-built one; the last run publishes by key. The killed
  runner held the MV's lease (its refresh and its publish are one job): each next run takes it
  over from the dead holder.

(A fact step killed at ``fact:written`` is ``test_fact_crash.py``'s, on both formats.)

SLOW: every command is its own process (a Spark start each). ``test_kill_points.py`` and
``test_publish.py`` crash every phase in-process."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from processes import PublishingDemo  # noqa: E402

from compiler.phases import PUBLISH_PHASES  # noqa: E402


@pytest.fixture(scope="module")
def demo(tmp_path_factory, postgres_dsn) -> PublishingDemo:
    return PublishingDemo(tmp_path_factory.mktemp("demo"), postgres_dsn, "kills_app")


def _killed(demo: PublishingDemo, phase: str, *args: str) -> None:
    killed = demo.run("run", "--select", "offers_wide", *args, kill_at=phase)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr


def _published(demo: PublishingDemo) -> tuple:
    """What readers of the published table see, and the batch its offsets row records."""
    import psycopg

    with psycopg.connect(demo.dsn) as db:
        rows = db.execute("SELECT count(*), sum(hashtext(t::text)) FROM public.offers_wide AS t").fetchone()
        return rows, db.execute("SELECT batch FROM mvflow_published WHERE tbl = 'public.offers_wide'").fetchone()[0]


def _run_and_verify(demo: PublishingDemo) -> str:
    line = next(line for line in demo.run("run", "--select", "offers_wide").stdout.splitlines()
                if " offers_wide " in line and " OK " in line)
    verified = demo.run("verify", "--select", "offers_wide").stdout
    assert "FAIL" not in verified and "OK    offers_wide published (app.public.offers_wide)" in verified, verified
    return line


def test_every_publish_phase_is_killed_at():
    assert {"publish:leased", "publish:chunk-committed", "publish:loaded", "publish:indexed",
            "publish:swapped"} == set(PUBLISH_PHASES)


@pytest.mark.slow
def test_mv_killed_after_next_written_with_changes_before_the_redo_slow(demo: PublishingDemo):
    demo.run("demo", "change", "--seed", "101")
    _killed(demo, "mv:next-written")
    status = demo.run("status").stdout
    assert "dead: pid" in status, f"the killed runner's leases show as dead:\n{status}"
    assert "Delta table, version" in status, status

    demo.run("demo", "change", "--seed", "102")  # lands between the crash and the redo
    redo = _run_and_verify(demo)
    assert "redo of the crashed batch" in redo and "published app.public.offers_wide by key" in redo, redo
    again = demo.run("run", "--select", "offers_wide").stdout
    assert "up to date" in again, again


@pytest.mark.slow
def test_a_by_key_publish_killed_at_each_phase_is_redone_slow(demo):
    """Killed with the lease taken (the MV's batch committed, nothing published), then between two
    chunks of the next try: the batch is recorded with the last chunk only."""
    demo.run("demo", "change", "--seed", "201")
    before = _published(demo)
    _killed(demo, "publish:leased")
    assert _published(demo) == before
    demo.run("demo", "change", "--seed", "202")
    _killed(demo, "publish:chunk-committed@1")
    assert _published(demo)[1] == before[1], "killed after its first chunk: the batch is recorded with the last"
    demo.run("demo", "change", "--seed", "203")
    line = _run_and_verify(demo)
    assert f"published app.public.offers_wide by key (batches {before[1] + 1} to" in line, line


@pytest.mark.slow
def test_a_full_publish_killed_at_each_phase_leaves_readers_the_old_table_slow(demo):
    """A rebuilt MV's full publish killed with its fresh table loaded and indexed, then (the next
    try, in full again) swapped in with its batch; the next run publishes by key. (Killed after the
    load, before the indexes: ``test_publish.py`` crashes there in-process; a kill there here cost
    the slow tier ~110 s for a state the kill after the indexes leaves too: a fresh table not
    swapped in.)"""
    before = _published(demo)
    demo.run("demo", "change", "--seed", "103")
    _killed(demo, "publish:indexed", "--full-refresh")
    assert _published(demo) == before  # the fresh table was loaded and indexed, not swapped in
    demo.run("demo", "change", "--seed", "105")
    _killed(demo, "publish:swapped")
    swapped = _published(demo)
    assert swapped[1] > before[1], "the fresh table swapped in with the batch it holds"
    demo.run("demo", "change", "--seed", "106")
    line = _run_and_verify(demo)
    assert f"published app.public.offers_wide by key (batch {swapped[1] + 1} of the MV)" in line, line
