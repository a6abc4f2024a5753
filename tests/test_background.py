"""Background (compiler/background.py): a forked child computes what the parent would, errors
surface in the parent, and compile output is the same with or without the child."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from compiler import artifacts, background
from compiler.background import Background
from compiler.cache import CompileCache
from compiler.compile import compile_project
from compiler.project import load_project

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.generate import generate, write_mvflow  # noqa: E402


def needs_fork(test):
    """Background forks only in a process without other threads: where this one has some (Spark's
    after a Spark test ran here, pytest-xdist's I/O thread), the test runs in a fresh interpreter
    and its outcome is asserted here."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        if threading.active_count() == 1:
            return test(*args, **kwargs)
        node = f"{Path(__file__).relative_to(ROOT)}::{test.__name__}"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", node],
                              cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    return pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")(run)


@needs_fork
def test_child_computes_the_result_the_parent_would():
    data = {"n": list(range(1000))}
    with Background(lambda: (os.getpid(), sum(data["n"]))) as later:
        assert later.forked
        pid, total = later.result()
    assert pid != os.getpid() and total == 499500


@needs_fork
def test_a_failing_child_is_computed_again_in_the_parent_which_raises_the_error():
    calls = []

    def compute():
        calls.append(os.getpid())
        raise ValueError("broken model")

    with Background(compute) as later, pytest.raises(ValueError, match="broken model"):
        later.result()
    assert calls == [os.getpid()] and not later.forked  # the child's own call is not in our list


@needs_fork
def test_a_result_never_asked_for_stops_the_child():
    with Background(lambda: threading.Event().wait(60)) as later:
        pid = later._pid
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped: no zombie, no child left running


def test_without_fork_the_parent_computes():
    later = Background(lambda: os.getpid(), fork=False)
    assert not later.forked and later.result() == os.getpid()


@needs_fork
def test_compile_output_and_cache_are_the_same_with_parsing_and_lineage_in_children(tmp_path: Path, monkeypatch):
    root = write_mvflow(generate(40), tmp_path / "gen")

    def build(fork_from: int) -> dict[str, bytes]:
        monkeypatch.setattr(background, "FORK_FROM", fork_from)
        shutil.rmtree(root / "target", ignore_errors=True)
        shutil.rmtree(root / ".mvflow", ignore_errors=True)
        cache = CompileCache.for_project(root)
        artifacts.write_artifacts(compile_project(load_project(root), cache=cache))
        cache.save()
        files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "target").rglob("*")) if p.is_file()}
        monkeypatch.setattr(background, "FORK_FROM", 10**9)
        again = CompileCache.for_project(root)  # lineage entries the child made were kept
        artifacts.write_artifacts(compile_project(load_project(root), cache=again))
        assert again.misses == 0 and again.hits > 0
        return files

    assert build(0) == build(10**9)


@needs_fork
def test_syntax_errors_found_by_the_child_are_reported_as_without_it(tmp_path: Path, monkeypatch):
    from compiler.errors import CompileError

    root = write_mvflow(generate(40), tmp_path / "gen")
    models = sorted((root / "models").rglob("*.sql"))
    for path in (models[3], models[-2]):  # one in each half of the models to parse
        path.write_text(path.read_text() + "\nWHERE (\n")
    models[-1].write_text(models[-1].read_text() + "\n{{ oops\n")  # in the templates a child compiles

    def problems(fork_from: int) -> list[str]:
        monkeypatch.setattr(background, "FORK_FROM", fork_from)
        with pytest.raises(CompileError) as raised:
            compile_project(load_project(root), cache=CompileCache())
        return [p.format() for p in raised.value.problems]

    found = problems(0)
    assert len(found) == 3 and found == problems(10**9)
    assert any("jinja-syntax" in f for f in found)
