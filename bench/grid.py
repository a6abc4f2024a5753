"""P2 grid and P5 (issues 12 and 13): mvflow's MV refresh per strategy against the dbt-spark peer,
on parquet and Delta side by side, over sizes × changed shares × change patterns; then the
reader query on the MV against a plain parquet copy. One process and one warm SparkSession per
size (``bench/p2_grid.py``, whose module docstring says what each cell runs), started from here so
its peak memory is sampled; ``spark.driver.memory`` is 2g (the demo target's default).

Commands (from the repository root)::

    .venv/bin/python -m bench.grid                                  # 10,000 and 100,000 offers, everything
    .venv/bin/python -m bench.grid --sizes 1000000,10000000         # the large sizes (10M: ~1.4 GB of parquet per copy)
    .venv/bin/python -m bench.grid --sizes 10000000 --shares 0.001 --patterns random --strategies auto,peer --no-p5
    .venv/bin/python -m bench.grid --sizes 10000 --formats delta --strategies auto,full --runs 3
    .venv/bin/python -m bench.grid --sizes 10000 --no-grid --out bench/.work/p5    # P5 alone
    .venv/bin/python -m bench.grid --report bench/results/p2-grid-100000.json   # re-print saved results

Results: ``bench/results/p2-grid-<offers>.json`` (raw: every run's seconds, Spark jobs, strategy,
message; the floor; P5's every query time; the process's peak memory) and ``p2-grid.md`` (the
tables of this invocation); logs under ``bench/.work/logs/grid/``; projects under ``--work``. Each cell's line is printed as
it finishes, with how long the cell took.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import RunFailed, run_command  # noqa: E402
from bench.p2_grid import MV_STRATEGIES, READ_QUERY, add_selection, finish_selection, prepare  # noqa: E402
from bench.p4_noop import ROOT, demo_copy  # noqa: E402
from bench.peers import WORK  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SIZES = (10_000, 100_000)
AUTO_TARGET = 1.2  # auto ≤ 1.2× the faster of mvflow's full build and the peer (issue 12)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.grid", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="offers per size, e.g. 10000,100000")
    add_selection(parser)
    parser.add_argument("--source-format", choices=("parquet", "delta"), default="parquet",
                        help="the demo target's table_format (MVFLOW_TABLE_FORMAT) while the sources are created")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where p2-grid-<offers>.json and p2-grid.md go")
    parser.add_argument("--work", type=Path, default=WORK / "grid",
                        help="where the projects go (another one lets two invocations run side by side)")
    parser.add_argument("--report", type=Path, nargs="*", help="only print the tables of saved result files")
    args = finish_selection(parser, parser.parse_args(argv))
    args.sizes = tuple(int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip())
    args.out, args.work = args.out.resolve(), args.work.resolve()  # the size's process runs in its project
    return args


def main(argv: list[str] | None = None, echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    args = parse_args(argv)
    command = "python -m bench.grid " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.report:
        results = [json.loads(path.read_text()) for path in args.report]
    else:
        results = [r for offers in args.sizes if (r := run_size(offers, args, echo)) is not None]
        text = f"`{command}`\n\n" + "\n".join(render(r) for r in results)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "p2-grid.md").write_text(text)
    for result in results:
        echo(render(result))
    return results


def run_size(offers: int, args: argparse.Namespace, echo: Callable[[str], None]) -> dict[str, Any] | None:
    """Prepare the project for one size, run the grid process, save and return its results."""
    logs = WORK / "logs" / "grid"
    logs.mkdir(parents=True, exist_ok=True)
    project = demo_copy(args.work / f"offers-{offers}")
    mvs = prepare(project, args.formats, args.strategies, args.compact_below)
    out = args.out / f"p2-grid-{offers}.json"
    log = logs / f"{args.work.name}-offers-{offers}.log"
    command = [sys.executable, str(ROOT / "bench" / "p2_grid.py"), str(project), "--offers", str(offers),
               "--out", str(out), *_selection_args(args)]
    echo(f"grid: {offers:,} offers: {len(mvs)} MVs ({', '.join(mvs)}), log {log}")
    started = time.monotonic()
    log.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    tail = _Tail(log, echo)
    try:
        sample = run_command(command, project, env={"MVFLOW_TABLE_FORMAT": args.source_format,
                                                    "MVFLOW_DRIVER_MEMORY": "2g"}, log=log)
    except RunFailed as exc:
        echo(f"grid: {offers:,} offers FAILED after {time.monotonic() - started:.0f} s: {exc}")
        if not out.exists():
            return None
        sample = None  # what it measured before it failed is saved
    finally:
        tail.stop()
    result = json.loads(out.read_text())
    if sample is None:
        result["failed"] = True
        return result
    result["process"] = {"seconds": sample.seconds, "cpu_seconds": sample.cpu_seconds, "python_peak_mb": sample.python_mb,
                         "jvm_peak_mb": sample.jvm_mb, "driver_memory": "2g", "source_format": args.source_format,
                         "command": " ".join(command)}
    out.write_text(json.dumps(result, indent=1) + "\n")
    echo(f"grid: {offers:,} offers done in {sample.seconds:.0f} s (JVM peak {sample.jvm_mb or 0:.0f} MB)")
    return result


def _selection_args(args: argparse.Namespace) -> list[str]:
    found = ["--shares", ",".join(f"{s:g}" for s in args.shares), "--patterns", ",".join(args.patterns),
             "--formats", ",".join(args.formats), "--strategies", ",".join(args.strategies), "--runs", str(args.runs),
             "--p5-runs", str(args.p5_runs), "--p5-share", f"{args.p5_share:g}", "--p5" if args.p5 else "--no-p5",
             "--grid" if args.grid else "--no-grid"]
    found += [] if args.compact_below is None else ["--compact-below", str(args.compact_below)]
    return found + (["--floor"] if args.floor else [])


class _Tail:
    """Echo the ``grid:`` lines a log gains while a process writes it."""

    def __init__(self, path: Path, echo: Callable[[str], None]):
        self.path, self.echo, self.done = path, echo, threading.Event()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def _follow(self) -> None:
        offset, pending = 0, ""
        while True:
            finished = self.done.wait(1.0)
            if self.path.exists():
                with self.path.open(errors="replace") as f:
                    f.seek(offset)
                    pending += f.read()
                    offset = f.tell()
                *lines, pending = pending.split("\n")
                for line in lines:
                    if line.startswith("grid:"):
                        self.echo(line)
            if finished:
                return


# -- tables ---------------------------------------------------------------------------------------
def render(result: dict[str, Any]) -> str:
    """Markdown tables of one size: the grid, the floor, P5."""
    process = result.get("process", {})
    offers = result["offers"]
    forced = ("config(strategy=...)" if result.get("strategy_config")
              else "fallback: no config(strategy=...) yet, full = --full-refresh, incremental = a plain run")
    stored = ", ".join(f"{k}: {v}" for k, v in result.get("setup", {}).get("stored_as", {}).items())
    lines = [f"### P2 grid, {offers:,} offers",
             "",
             "One warm SparkSession, driver memory 2g" + (
                 f"; process {process['seconds']:.0f} s, JVM peak {process.get('jvm_peak_mb') or 0:.0f} MB, Python peak "
                 f"{process['python_peak_mb']:.0f} MB. " if process else " (process figures: not finished). ") +
             f"Strategies forced by {forced}. Sources: {process.get('source_format', 'parquet')}. MVs stored as: {stored}.",
             ""]
    if result["cells"]:
        lines += ["Seconds (strategy used, Spark jobs); medians over runs.", "",
                  "| changes | format | mvflow auto | forced incremental | forced full | peer | auto ÷ min(full, peer) "
                  f"(target ≤ {AUTO_TARGET}×) | peer ÷ auto | auto ÷ full |",
                  "|---|---|---|---|---|---|---|---|---|"]
    for (pattern, share), cells in _by_cell(result["cells"]).items():
        for table_format in result["formats"]:
            got = {what: _median_record(cells, table_format, what) for what in (*MV_STRATEGIES, "peer")}
            lines.append("| " + " | ".join([f"{pattern} {share:.1%}", table_format,
                                            *[_cell(got[w], w == "auto") for w in (*MV_STRATEGIES, "peer")],
                                            *_ratios(got)]) + " |")
    floors = [(key, cells) for key, cells in _by_cell(result["cells"]).items() if any(c["floor"] for c in cells)]
    if floors:
        lines += ["", "| changes | floor: scan of the inputs + write of the affected rows | " +
                  " | ".join(f"{f} auto ÷ floor" for f in result["formats"]) + " |",
                  "|---|---|" + "---|" * len(result["formats"])]
        for (pattern, share), cells in floors:
            floor = statistics.median(c["floor"]["seconds"] for c in cells if c["floor"])
            parts = [c["floor"] for c in cells if c["floor"]][-1]
            ratios = []
            for f in result["formats"]:
                auto = _median_record(cells, f, "auto")
                ratios.append(f"{auto['seconds'] / floor:.2f}×" if auto else "–")
            lines.append(f"| {pattern} {share:.1%} | {floor:.2f} s ({parts['scan_seconds']:.2f} s scan + "
                         f"{parts['write_seconds']:.2f} s writing {parts['rows_written']:,} rows) | " + " | ".join(ratios) + " |")
    if result.get("p5_error"):
        lines += ["", f"P5 failed: {result['p5_error'].splitlines()[0]}"]
    if result.get("failed"):
        lines += ["", "The size's process failed: the cells above are those it finished."]
    if result.get("p5"):
        query = " ".join(READ_QUERY.format(table="mv").split())
        lines += ["", f"P5, `{query}` on the forced-incremental MV vs a parquet copy of its rows (medians):", "",
                  "| format | refresh batches | on the MV | on the copy | ratio (target ≤ 1.2×) | Spark jobs MV / copy "
                  "| MV vs a plain Delta copy | batch (median, compaction included) | note |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for p in result["p5"]:
            note = ", ".join(n for n, bad in (("compacted", p["compacted"]),
                                              ("rows differ", not p["same_rows"])) if bad)
            delta_copy = (f"{p['delta_copy_ratio']:.2f}× ({p['delta_copy_seconds']:.3f} s, {p['delta_copy_jobs']} jobs)"
                          if "delta_copy_ratio" in p else "")
            batch = f"{p['batch_seconds']:.2f} s" if p.get("batch_seconds") is not None else ""
            lines.append(f"| {p['format']} | {p['batches']} | {p['mv_seconds']:.3f} s | {p['copy_seconds']:.3f} s | "
                         f"{p['ratio']:.2f}× | {p['mv_jobs']} / {p['copy_jobs']} | {delta_copy} | {batch} | {note} |")
    return "\n".join(lines) + "\n"


def verdicts(result: dict[str, Any]) -> list[str]:
    """One line per target for one size: the grid's auto cells, P5's readers (met when every point is).

    >>> verdicts({"offers": 10, "cells": [], "p5": [{"format": "delta", "batches": 1, "ratio": 2.0,
    ...   "delta_copy_ratio": 1.1}, {"format": "parquet", "batches": 1, "ratio": 1.3}]})
    ['P5 at 10 offers, readers ≤ 1.2× a plain table of their format: delta met (worst 1.10×), parquet missed (worst 1.30×)']
    """
    found = []
    autos = [_ratios({w: _median_record(cells, f, w) for w in (*MV_STRATEGIES, "peer")})[0]
             for cells in _by_cell(result["cells"]).values() for f in result.get("formats", ())]
    measured = [a for a in autos if a != "–"]
    if measured:
        met = sum("(met)" in a for a in measured)
        found.append(f"P2 grid at {result['offers']:,} offers, auto ≤ {AUTO_TARGET}× min(full, peer): "
                     f"{'met' if met == len(measured) else 'missed'} ({met} of {len(measured)} cells within)")
    worst: dict[str, float] = {}
    for p in result.get("p5") or []:  # a Delta MV against a Delta copy: what its own layout costs
        ratio = p.get("delta_copy_ratio", p["ratio"])
        worst[p["format"]] = max(worst.get(p["format"], 0.0), ratio)
    if worst:
        found.append(f"P5 at {result['offers']:,} offers, readers ≤ {AUTO_TARGET}× a plain table of their format: "
                     + ", ".join(f"{f} {'met' if r <= AUTO_TARGET else 'missed'} (worst {r:.2f}×)"
                                 for f, r in sorted(worst.items())))
    return found


def _by_cell(cells: list[dict[str, Any]]) -> dict[tuple[str, float], list[dict[str, Any]]]:
    grouped: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for cell in cells:
        grouped.setdefault((cell["pattern"], cell["share"]), []).append(cell)
    return grouped


def _median_record(cells: list[dict[str, Any]], table_format: str, what: str) -> dict[str, Any] | None:
    records = [r for c in cells for r in c["results"] if r["format"] == table_format and r["what"] == what]
    if not records:
        return None
    strategies = sorted({r["strategy"] for r in records})
    return {"seconds": statistics.median(r["seconds"] for r in records),
            "jobs": statistics.median(r["jobs"] for r in records), "strategy": "/".join(strategies),
            "ok": all(r["status"] == "success" for r in records)}


def _cell(record: dict[str, Any] | None, with_strategy: bool) -> str:
    if record is None:
        return "–"
    if not record["ok"]:
        return "error"
    what = f"{record['strategy']}, " if with_strategy else ""
    return f"{record['seconds']:.2f} s ({what}{record['jobs']:.0f} jobs)"


def _ratios(got: dict[str, dict[str, Any] | None]) -> list[str]:
    auto, full, peer = got["auto"], got["full"], got["peer"]
    baseline = [r["seconds"] for r in (full, peer) if r and r["ok"]]
    if not auto or not auto["ok"]:
        return ["–", "–", "–"]
    vs_best = auto["seconds"] / min(baseline) if baseline else None
    verdict = "–" if vs_best is None else f"{vs_best:.2f}× ({'met' if vs_best <= AUTO_TARGET else 'missed'})"
    vs_peer = f"{peer['seconds'] / auto['seconds']:.2f}×" if peer and peer["ok"] else "–"
    vs_full = f"{auto['seconds'] / full['seconds']:.2f}×" if full and full["ok"] else "–"
    return [verdict, vs_peer, vs_full]


if __name__ == "__main__":
    main()
