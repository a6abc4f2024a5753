"""Progress of long work (compiler/progress.py): the live line on a terminal, periodic lines in a
log, what Spark runs now, and the phase a model of ``run_models`` passed last."""

from __future__ import annotations

import io
import re
import threading
import time

from compiler.progress import Progress
from compiler.run import RunOptions
from test_run_simple import Env


def test_a_terminal_gets_one_live_line_cleared_before_other_output():
    stream, lines = io.StringIO(), []
    progress = Progress(lines.append, live=True, quiet=0, stream=stream)
    with progress.task("wide") as task:
        task.passed("mv:affected-keys")
        progress.beat(now=task.started + 7)
        assert stream.getvalue() == "\r\033[Kwide: 7s, passed affected keys" and lines == []
        progress.echo("10:00:01 | 1 of 2 OK wide")
        assert stream.getvalue().endswith("\r\033[K") and lines == ["10:00:01 | 1 of 2 OK wide"]
        progress.beat(now=task.started + 8)
        assert stream.getvalue().endswith("\r\033[Kwide: 8s, passed affected keys")
    assert stream.getvalue().endswith("\r\033[K")  # the last task ended: the line is gone


def test_a_log_gets_a_line_per_interval_and_only_for_long_tasks():
    lines = []
    progress = Progress(lines.append, live=False, quiet=5, every=30, stream=io.StringIO())
    with progress.task("stage.offers") as slow:
        progress.beat(now=slow.started + 4)  # not yet long
        assert lines == []
        with progress.task("quick") as quick:
            quick.started = slow.started + 5
            progress.beat(now=slow.started + 6)
            progress.beat(now=slow.started + 20)  # within the interval: nothing new
            progress.beat(now=slow.started + 36)
    assert lines == ["  ... stage.offers: 6s", "  ... stage.offers: 36s; quick: 31s"]


def test_what_spark_runs_now_is_named_with_its_tasks_done(spark):
    lines = []
    progress = Progress(lines.append, spark, live=False, quiet=0, every=0, stream=io.StringIO())
    slow = "SELECT reflect('java.lang.Thread', 'sleep', CAST(400 AS BIGINT)) FROM range(0, 6, 1, 3)"
    job = threading.Thread(target=lambda: spark.sql(slow).collect())
    with progress.task("verify stage.wide"):
        job.start()
        while job.is_alive() and not any("Spark stage" in line for line in lines):
            progress.beat()
            time.sleep(0.05)
        job.join()
    spark_lines = [line for line in lines if "Spark stage" in line]
    assert spark_lines and re.fullmatch(r"  \.\.\. verify stage\.wide: \ds \| Spark stage \d+: [0-3]/3 tasks", spark_lines[0]), lines


def test_a_run_reports_the_phase_its_model_passed(spark, make_project):
    env = Env(spark, make_project, {
        "models/mart/item_list.sql": """
            {{ config(materialized='mv') }}
            select i.id, i.shop from {{ source('SRC', 'items') }} as i
        """,
    })
    lines: list[str] = []
    progress = Progress(lines.append, spark, live=False, quiet=0, every=0, stream=io.StringIO())

    def phase(name: str) -> None:  # a beat while the model is at that point, as the thread would
        if name == "mv:probed":
            progress.beat()

    try:
        report, _ = env.run(["item_list"], options=RunOptions(phase=phase, progress=progress, echo=lines.append))
        assert report.ok
        assert any(line.startswith(f"  ... {env.mart}.item_list: ") and "passed probed" in line for line in lines), lines
    finally:
        env.drop()
