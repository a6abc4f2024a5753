"""Where ``mvflow compile`` spends its time: CPU seconds per compile stage, then cProfile's top
functions. ``python -m bench.profile_compile DIR [--top N]`` (DIR: a project, e.g. a generated one
under bench/.work/p1/)."""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import time
from pathlib import Path

# (module, function) pairs timed as stages; nested stages are counted in their parents too
STAGES = [
    ("compiler.sources", "load_sources"),
    ("compiler.render", "Renderer.template"),
    ("compiler.render", "Renderer.render"),
    ("compiler.parse", "parse_select"),
    ("compiler.parse", "table_references"),
    ("compiler.parse", "output_columns"),
    ("compiler.parse", "pretty"),
    ("compiler.lineage", "lineage"),
    ("compiler.compile", "compile_project"),
    ("compiler.artifacts", "write_artifacts"),
]


def _wrap(totals: dict[str, float], module, path: str) -> None:
    owner, _, name = path.rpartition(".")
    holder = getattr(module, owner) if owner else module
    original = getattr(holder, name)

    @functools.wraps(original)
    def timed(*args, **kwargs):
        started = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            totals[path] = totals.get(path, 0.0) + time.process_time() - started

    setattr(holder, name, timed)
    # modules that imported the function by name
    import sys
    for other in list(sys.modules.values()):
        if getattr(other, "__name__", "").startswith("compiler") and getattr(other, name, None) is original:
            setattr(other, name, timed)


def stage_times(project_dir: Path) -> dict[str, float]:
    """CPU seconds per stage of one compile of ``project_dir`` (artifacts written)."""
    import importlib

    from compiler.artifacts import write_artifacts
    from compiler.compile import compile_project
    from compiler.project import load_project

    import compiler.background

    compiler.background.FORK_FROM = 10**9  # every stage in this process (compile forks on large projects)
    totals: dict[str, float] = {}
    for module_name, path in STAGES:
        _wrap(totals, importlib.import_module(module_name), path)
    import compiler.artifacts as artifacts
    import compiler.compile as compile_module

    started = time.process_time()
    manifest = compile_module.compile_project(load_project(project_dir))
    artifacts.write_artifacts(manifest)
    totals["total"] = time.process_time() - started
    del compile_project, write_artifacts
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("project_dir", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--profile", action="store_true", help="also print cProfile's top functions")
    args = parser.parse_args()
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
    for stage, seconds in stage_times(args.project_dir).items():
        print(f"{stage:<40} {seconds:7.2f} s CPU")
    if args.profile:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
