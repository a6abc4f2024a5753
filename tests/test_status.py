"""What users read about progress (compiler/status.py): ``mvflow status`` after real MV refreshes
on Spark and real fact-shaped commits in a real SQLite state store."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from click.testing import CliRunner

from compiler.cli import cli
from compiler.project import load_project
from compiler.state import open_state_store
from compiler.status import status_lines

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from mv_world import World, seed  # noqa: E402

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)


def _rows(lines: list[str]) -> dict[str, list[str]]:
    """Cells by topic, split at the header's column starts (cells hold single spaces)."""
    header = lines[0]
    starts = [header.index(title) for title in ("topic", "last", "next (in flight)", "behind source", "age", "rows",
                                                  "holder", "state")]
    cut = lambda line: [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]  # noqa: E731
    return {cut(line)[0]: cut(line) for line in lines[1:]}


def test_mv_topics_in_words_after_real_refreshes(spark, tmp_path):
    world = World(spark, tmp_path)
    seed(world)
    world.refresh()
    world.put("offers", id=1, title="renamed")
    world.put("regions", id=1, name="Nord")
    assert world.refresh().mode == "refresh"
    lines = status_lines(world.store.offsets(), NOW)
    text = "\n".join(lines)
    assert "{" not in text and "fingerprint" not in text, text
    rows = _rows(lines)
    base, delta = (spark.table(f"{world.db}.wide__mvflow_{what}_a").count() for what in ("base", "delta"))
    # topic, last, next, behind, age, rows, holder, state
    assert rows["wide"][1] == "batch 2" and rows["wide"][3] == "-"
    assert rows["wide"][7] == f"slot a, {base:,} rows + {delta:,} in delta"
    assert rows[f"wide:{world.db}.regions"][7] == "snapshot of batch 2"  # edited: a new snapshot
    assert rows[f"wide:{world.db}.categories"][7] == "snapshot of batch 1"  # unchanged: the first one still holds
    offers = rows[f"wide:{world.db}.offers"]
    newest = max(world.rows["offers"].values(), key=lambda r: (r[7], r[8]))
    assert offers[1] == f"{newest[7]:%Y-%m-%d %H:%M:%S}, {newest[8]}"  # one spelling: a space, no T
    assert offers[3] == "0s"  # a batch takes every change its source holds
    assert offers[4].endswith("days")  # the data lies in 2024: old, but not behind


def test_fact_positions_lag_and_cli(make_project):
    root = make_project({"lineage/s.yml": "sources: []\n", "models/m.sql": "select 1 as x"})
    store = open_state_store(load_project(root).target(None).state)
    for topic, state, last, seen in (
            ("done", "caught up", ("2025-12-31 21:50:24", 998), ("2025-12-31 21:50:24", 998)),
            ("held", "waiting for offers_wide, 4s behind (caught up to 2025-12-31 22:00:00)",
             ("2025-12-31 21:50:24.5", 7), ("2025-12-31 22:00:24.5", 9)),
            ("new", "caught up", ("2025-12-31 21:50:24", 1), None)):
        lease = store.acquire(topic, "host:1", 60, NOW - timedelta(hours=1))
        store.commit(lease, last, 3, "", NOW - timedelta(hours=1))
        store.set_state(lease, state, NOW - timedelta(hours=1), seen)  # as the runner notes why it stopped
        store.release(lease)
    rows = _rows(status_lines(store.offsets(), NOW))
    assert rows["done"][1:5] == ["2025-12-31 21:50:24, 998", "-", "0s", "326 days"]
    assert rows["held"][1:5] == ["2025-12-31 21:50:24.5, 7", "-", "10 min", "326 days"]  # the newest pending row
    assert rows["new"][1:5] == ["2025-12-31 21:50:24, 1", "-", "-", "326 days"]  # never looked: not recorded
    out = CliRunner().invoke(cli, ["--project-dir", str(root), "status"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0].split() == ["topic", "last", "next", "(in", "flight)", "behind", "source", "age",
                                                  "rows", "holder", "state"]
    assert "2025-12-31 21:50:24, 998" in out.output and "caught up" in out.output


def test_an_mv_input_in_flight_is_behind_by_what_its_batch_planned(tmp_path):
    from compiler.project import StateSettings

    store = open_state_store(StateSettings(path=tmp_path / "state.sqlite"))
    then = NOW - timedelta(minutes=5)
    for topic, last, planned in (("wide:d.offers", ("2025-12-31T22:00:00", 5), ("2025-12-31T22:12:00", 9)),
                                 ("wide:d.shops", (41,), (41,))):
        lease = store.acquire(topic, "host:1", 60, then)
        store.commit(lease, last, 1, "", then)
        store.set_next(lease, planned, then)  # the batch that crashed had planned up to here
        store.release(lease)
    rows = _rows(status_lines(store.offsets(), NOW))
    assert rows["wide:d.offers"][1:5] == ["2025-12-31 22:00:00, 5", "2025-12-31 22:12:00, 9", "12 min", "326 days"]
    assert rows["wide:d.shops"][1:5] == ["41", "-", "nothing", "-"]  # no time in the position: no age either
