"""mvflow as users run it, in a process of its own: ``mvflow(project, *args)`` runs a command to its
end, ``Background`` keeps one running (its output lines read as they come, killed with -9 together
with everything it started), ``copy_demo`` makes a copy of the demo project for such commands."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from compiler.phases import _descendants
from tiny_spark import TINY_DATA

ROOT = Path(__file__).resolve().parent.parent
MVFLOW = [sys.executable, "-c", "from compiler.cli import main; main()"]
# `mvflow` as a shell in a terminal starts it, for the Ctrl-C tests: SIGINT delivered and handled by
# Python's default. A child inherits its parent's blocked signals and ignored ones across exec (a job a
# script starts with `&` ignores SIGINT); the slow tier of 2026-12-07 saw the three Ctrl-C tests of one
# pytest worker time out with no reaction to SIGINT, each passing alone (cause not confirmed).
MVFLOW_AT_A_TERMINAL = [sys.executable, "-c", "import signal; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
                        "signal.signal(signal.SIGINT, signal.default_int_handler); from compiler.cli import main; main()"]
DEMO_FILES = ("project.yml", "models", "macros", "lineage", "seeds", "data_tests")
# A command's own settings for a few rows: the test session's, and a JVM that compiles with C1 only
# (a command's JVM is cold and short-lived: C2's compiler threads competed with the work for 2
# cores; measured 15% less wall on a `demo change`). C1 alone gets a 48 MB code cache, which a
# `demo change` filled ("CodeCache is full. Compiler has been disabled"; that command then failed, in
# one of two runs of the test): the tiered default's 240 MB.
TINY_CONF = {**TINY_DATA, "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"}


def env(**extra: str) -> dict[str, str]:
    """The environment of an mvflow process: this checkout's code, the demo's Delta format whatever
    the calling environment says, and ``extra``."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "MVFLOW_TABLE_FORMAT": "delta", **extra}


def mvflow(project: Path, *args: str, ok: bool = True, timeout: float = 900, **extra: str) -> subprocess.CompletedProcess:
    """``mvflow ARGS`` in ``project`` to its end; with ``ok``, it must exit 0."""
    done = subprocess.run([*MVFLOW, *args], cwd=project, capture_output=True, text=True, timeout=timeout, env=env(**extra))
    if ok:
        assert done.returncode == 0, f"mvflow {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def copy_demo(where: Path) -> Path:
    """The demo project in ``where``, its local target with ``TINY_CONF``."""
    where.mkdir(parents=True, exist_ok=True)
    for name in DEMO_FILES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, where / name)
    yml = where / "project.yml"
    text, anchor = yml.read_text(), "      conf:\n        spark.driver.memory:"
    assert text.count(anchor) == 1, "the demo's local target no longer has the conf this copy extends"
    conf = "".join(f"        {key}: {value}\n" for key, value in TINY_CONF.items())
    yml.write_text(text.replace("        spark.sql.shuffle.partitions: 8\n", "", 1).replace(anchor, "      conf:\n" + conf + "        spark.driver.memory:"))
    return where


class PublishingDemo:
    """A copy of the demo whose ``offers_wide`` publishes to a database of its own (created on the
    tests' server) by key, 20 keys a transaction, built at scale 0.02 (200 offers). Its batches
    stay by key (a user's choice at this size, where a full build is as cheap), so that a kill lands
    in a by-key batch and publish. ``run`` runs a command with the publish's environment; with
    ``kill_at``, killed there (``compiler.phases.kill_at``)."""

    def __init__(self, where: Path, postgres_dsn: str, database: str):
        import psycopg

        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute(f"CREATE DATABASE {database}")
        self.dsn = postgres_dsn.rsplit("/", 1)[0] + f"/{database}"
        self.project = copy_demo(where)
        wide = self.project / "models/marts/offers_wide.sql"
        text = wide.read_text().replace("materialized='mv'", "materialized='mv', strategy='incremental'")
        wide.write_text(text.replace("{'to': 'app',", "{'to': 'app', 'chunk_rows': 20,"))
        self.run("demo", "init", "--scale", "0.02", "--seed", "7")
        self.run("run", "--full-refresh", "--select", "offers_wide")  # what the tests kill, run and verify

    def run(self, *args: str, kill_at: str = "") -> subprocess.CompletedProcess:
        return mvflow(self.project, *args, ok=not kill_at, MVFLOW_KILL_AT=kill_at, MVFLOW_PUBLISH="1",
                      MVFLOW_APP_DSN=self.dsn)


class Background:
    def __init__(self, project: Path, *args: str):
        self.proc = subprocess.Popen([*MVFLOW, *args], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env())
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout], daemon=True).start()

    def wait_for(self, text: str, timeout: float = 300) -> None:
        deadline, seen = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                assert self.proc.poll() is None, "".join(seen)
                continue
            seen.append(line)
            if text in line:
                return
        raise AssertionError(f"never printed {text!r}:\n" + "".join(seen))

    def kill(self) -> None:
        for pid in [*_descendants(self.proc.pid), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
