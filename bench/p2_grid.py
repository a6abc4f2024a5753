"""The P2 grid and P5 at one size, in one warm SparkSession (run by ``python -m bench.grid``, one
process per size, so the driver can sample its peak memory).

``python bench/p2_grid.py PROJECT --offers N --out RESULT.json [--shares 0.001,0.01,0.1]
[--patterns random,clustered] [--formats parquet,delta] [--strategies auto,incremental,full,peer]
[--runs 1] [--p5] [--p5-runs 5] [--p5-share 0.001] [--no-grid] [--floor]``

The project (``prepare``) holds one copy of the demo's ``offers_wide`` per table format and
strategy (``ow_<format>_<strategy>``), so every variant sees the same change batch: after
``demo init`` and a first build of each (untimed), and one warm-up batch (untimed), each cell
applies one change batch (``bench/changes.py``), then runs side by side, per format: mvflow's run
of each strategy's MV (``run_mv``, what ``mvflow run -s <mv>`` runs for the model: the file check,
the refresh, a redo's follow-up batch), and the dbt-spark peer's incremental run (parquet:
``INSERT OVERWRITE`` of the full recompute; Delta: ``MERGE`` with ``unique_key`` over it, see
``bench/p2_dbt.py``). Each timed command also counts its Spark jobs (``bench/jobs.py``).

Strategies are forced through the MV's ``config(strategy=...)``. Where mvflow has no such
option yet, ``full`` runs with ``--full-refresh`` and ``incremental`` and ``auto`` are plain
runs (the record says ``forced_by``).

The floor (``--floor``: every cell; by default the random 0.1% cells): one column-pruned scan of
every input the refresh reads, plus writing as many MV rows as the refresh affected.

P5 (``--p5``, run before the cells): the reader query below on the forced-incremental MV of each format, against the
same query on a plain parquet copy of the MV's rows, after a full build and after 1 and 10
refresh batches (``--p5-share`` of random changes each; the record says whether a batch compacted:
below ``compact_below_rows``, ``--compact-below``, every batch does).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.changes import PATTERNS, apply as apply_change  # noqa: E402
from bench.jobs import count_jobs  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMATS = ("parquet", "delta")
MV_STRATEGIES = ("auto", "incremental", "full")
STRATEGIES = (*MV_STRATEGIES, "peer")
SHARES = (0.001, 0.01, 0.1)
DEMO_MODEL = Path("models/marts/offers_wide.sql")
OFFERS_PER_SCALE = 10_000  # compiler.demo.sizes(1)["offers"]
P5_POINTS = (0, 1, 10)  # issue 32: readers after 1 and after 10 batches
# Seed 000's reader: filters on columns of two different inputs (regions, shops), sorted, first 100.
READ_QUERY = """SELECT offer_id, title, shop_name, region_name, retail_price
FROM {table}
WHERE country = 'DE' AND shop_rating >= 4.0
ORDER BY retail_price DESC, offer_id
LIMIT 100"""
_SEED = 5000


def mv_name(table_format: str, strategy: str) -> str:
    return f"ow_{table_format}_{strategy}"


def strategy_config_supported() -> bool:
    """Whether mvflow's ``mv`` accepts ``config(strategy=...)`` (issue 12; not on every branch yet)."""
    from compiler.kinds import MvKind

    return "strategy" in {f.name for f in dataclasses.fields(MvKind)}


def prepare(project: Path, formats: tuple[str, ...], strategies: tuple[str, ...], compact_below: int | None = None) -> list[str]:
    """Write one copy of the demo's ``offers_wide`` per format and strategy into ``project``
    (a copy of the demo project), with ``compact_below_rows`` when given; the MV names."""
    body = re.sub(r"^\{\{\s*config\(.*?\)\s*\}\}\n", "", (project / DEMO_MODEL).read_text(), flags=re.S)
    with_strategy = strategy_config_supported()
    names = []
    for table_format in formats:
        for strategy in (s for s in strategies if s in MV_STRATEGIES):
            config = f"materialized='mv', table_format='{table_format}'"
            if with_strategy:
                config += f", strategy='{strategy}'"
            if compact_below is not None:
                config += f", compact_below_rows={compact_below}"
            name = mv_name(table_format, strategy)
            (project / DEMO_MODEL.parent / f"{name}.sql").write_text(f"{{{{ config({config}) }}}}\n{body}")
            names.append(name)
    return names


def input_columns(select: Any) -> dict[str, list[str]]:
    """Table → the columns a SELECT reads of it (by the table's alias), sorted.

    >>> from sqlglot import parse_one
    >>> input_columns(parse_one("SELECT o.id, s.name FROM d.o AS o JOIN d.s AS s ON s.id = o.sid WHERE o.x"))
    {'d.o': ['id', 'sid', 'x'], 'd.s': ['id', 'name']}
    """
    from sqlglot import exp

    tables = {t.alias_or_name: ".".join(p for p in (t.catalog, t.db, t.name) if p) for t in select.find_all(exp.Table)}
    columns: dict[str, set[str]] = {name: set() for name in tables.values()}
    for column in select.find_all(exp.Column):
        if column.table in tables:
            columns[tables[column.table]].add(column.name)
    return {name: sorted(cols) for name, cols in sorted(columns.items())}


# -- measuring ----------------------------------------------------------------------------------------
def timed_jobs(spark: "SparkSession", call: Callable[[], Any]) -> tuple[Any, float, int]:
    """``call()``'s value, its seconds and its Spark jobs."""
    with count_jobs(spark) as counted:
        started = time.monotonic()
        value = call()
        seconds = time.monotonic() - started
    return value, seconds, counted.jobs or 0


def strategy_of(result: Any) -> str:
    """The strategy a run used: the result's own field when mvflow has one, else read from its
    message (``full build`` / ``keys refreshed`` / ``chunk`` / ``up to date``)."""
    chosen = getattr(result, "strategy", None)
    if chosen:
        return str(chosen)
    message = result.message or ""
    marks = {"full": r"full build|\bfull\b(?=:)", "incremental": r"\bincremental\b(?=:)|keys refreshed",
             "chunked": r"\bchunk", "noop": r"up to date"}
    found = [(m.start(), label) for label, pattern in marks.items() if (m := re.search(pattern, message))]
    return min(found)[1] if found else "?"


class Grid:
    """One size: the session, the compiled project, the MVs per (format, strategy)."""

    def __init__(self, project: Path, args: argparse.Namespace):
        from compiler.compile import compile_project
        from compiler.project import load_project
        from compiler.spark import spark_session
        from compiler.state import open_state_store

        self.args = args
        loaded = load_project(project)
        self.manifest = compile_project(loaded)
        self.store = open_state_store(loaded.target().state)
        self.source_format = loaded.target().table_format
        self.spark = spark_session(loaded.target(), delta="delta" in args.formats)
        self.strategy_config = strategy_config_supported()
        self.mvs = {(f, s): self.manifest.models[mv_name(f, s)] for f in args.formats for s in args.strategies
                    if s in MV_STRATEGIES}
        any_mv = next(iter(self.mvs.values()), None) or self.manifest.models["offers_wide"]
        self.select, self.key = any_mv.sql, "offer_id"
        self.inputs = input_columns(any_mv.ast)

    # -- commands ---------------------------------------------------------------------------------
    def run_mv(self, table_format: str, strategy: str, full_refresh: bool = False) -> dict[str, Any]:
        """mvflow's run of one MV, as ``mvflow run -s <mv>`` runs it; its record."""
        from compiler.kinds.mv.refresh import run_mv

        model = self.mvs[(table_format, strategy)]
        full = full_refresh or (strategy == "full" and not self.strategy_config)
        result, seconds, jobs = timed_jobs(self.spark, lambda: run_mv(self.spark, self.manifest, model, self.store,
                                                                      full_refresh=full))
        forced_by = "config" if self.strategy_config else ("--full-refresh" if full else "plain run")
        return {"what": strategy, "format": table_format, "seconds": seconds, "jobs": jobs, "status": result.status,
                "strategy": strategy_of(result), "rows": result.rows, "message": result.message[:300],
                "model_seconds": result.seconds, "forced_by": forced_by if strategy != "auto" else "",
                "compacted": "compacted" in (result.message or "")}

    def run_peer(self, table_format: str) -> dict[str, Any]:
        from bench.p2_dbt import insert_overwrite, merge_delta

        if table_format == "delta":
            call = lambda: merge_delta(self.spark, self.select, self.key)  # noqa: E731
        else:
            call = lambda: insert_overwrite(self.spark, self.select)  # noqa: E731
        _, seconds, jobs = timed_jobs(self.spark, call)
        what = "MERGE (unique_key) of the full recompute" if table_format == "delta" else "INSERT OVERWRITE"
        return {"what": "peer", "format": table_format, "seconds": seconds, "jobs": jobs, "status": "success",
                "strategy": what}

    def floor(self, affected: int) -> dict[str, Any]:
        """One column-pruned scan of every input plus writing ``affected`` MV rows (parquet)."""
        from pyspark.sql import functions as F

        _, scan_seconds, scan_jobs = timed_jobs(self.spark, self._scan_inputs)
        source = next(m for (f, s), m in self.mvs.items() if s != "full") if self.mvs else None
        rows = (self.spark.table(source.relation) if source else self.spark.sql(self.select)).limit(max(affected, 1))
        rows = rows.withColumn("_floor", F.lit(1)).localCheckpoint(eager=True)
        self.spark.sql("CREATE DATABASE IF NOT EXISTS bench_floor")
        _, write_seconds, write_jobs = timed_jobs(
            self.spark, lambda: rows.write.mode("overwrite").format("parquet").saveAsTable("bench_floor.affected"))
        return {"seconds": scan_seconds + write_seconds, "scan_seconds": scan_seconds, "write_seconds": write_seconds,
                "jobs": scan_jobs + write_jobs, "rows_written": max(affected, 1),
                "inputs": {t: len(c) for t, c in self.inputs.items()}}

    # -- the parts --------------------------------------------------------------------------------
    def setup(self, echo: Callable[[str], None]) -> dict[str, Any]:
        """``demo init``, a first build of every MV and peer table (untimed)."""
        from compiler import demo
        from compiler.table_format import is_delta_table

        started = time.monotonic()
        scale = self.args.offers / OFFERS_PER_SCALE
        formats = {"table_format": self.source_format} if "table_format" in inspect.signature(demo.init).parameters else {}
        counts = demo.init(self.spark, scale=scale, **formats)  # the sources in the target's format where it can
        echo(f"grid: demo init at scale {scale:g}: {counts.get('offers', 0):,} offers, {counts.get('prices', 0):,} prices")
        for (f, s) in self.mvs:
            self._check(self.run_mv(f, s, full_refresh=True))
        for f in self._peer_formats():
            self.run_peer(f)
        stored = {self.mvs[k].name: ("delta table" if is_delta_table(self.spark, self.mvs[k].relation)
                                     else self._kind_of(self.mvs[k].relation)) for k in self.mvs}
        echo(f"grid: set-up (init, first builds) took {time.monotonic() - started:.1f} s; "
             f"MVs stored as: {', '.join(f'{k} {v}' for k, v in stored.items())}")
        return {"rows": counts, "stored_as": stored, "source_format": self.source_format if formats else "parquet",
                "seconds": time.monotonic() - started}

    def warm_up(self, echo: Callable[[str], None]) -> float:
        """One batch of changes and a run of everything, untimed (it also brings MVs that P5 left
        behind up to date)."""
        started = time.monotonic()
        apply_change(self.spark, "random", 0.001, _SEED - 1)
        for (f, s) in self.mvs:
            self._check(self.run_mv(f, s))
        for f in self._peer_formats():
            self.run_peer(f)
        echo(f"grid: warm-up batch took {time.monotonic() - started:.1f} s")
        return time.monotonic() - started

    def cells(self, echo: Callable[[str], None], save: Callable[[list], None]) -> list[dict[str, Any]]:
        cells: list[dict[str, Any]] = []
        index = 0
        for share in self.args.shares:  # shares outermost: an interrupted size has both patterns of the first
            for pattern in self.args.patterns:
                for run in range(self.args.runs):
                    index += 1
                    cells.append(self.cell(pattern, share, run, _SEED + index, echo))
                    save(cells)
        return cells

    def cell(self, pattern: str, share: float, run: int, seed: int, echo: Callable[[str], None]) -> dict[str, Any]:
        started = time.monotonic()
        change, change_seconds, _ = timed_jobs(self.spark, lambda: apply_change(self.spark, pattern, share, seed))
        self._scan_inputs()  # untimed: the first reader of the changed files must not be the first command
        results = []
        for f in self.args.formats:
            for s in (s for s in MV_STRATEGIES if (f, s) in self.mvs):
                results.append(self.run_mv(f, s))
            if "peer" in self.args.strategies:
                results.append(self.run_peer(f))
        cell = {"pattern": pattern, "share": share, "run": run, "change": change, "change_seconds": change_seconds,
                "results": results, "floor": None}
        affected = [r["rows"] or 0 for r in results if r["what"] in ("incremental", "auto") and r["strategy"] == "incremental"]
        if self.args.floor or (pattern == "random" and share == 0.001):
            cell["floor"] = self.floor(max(affected, default=0))
        cell["seconds"] = time.monotonic() - started
        echo(f"grid: {self.args.offers:,} offers, {pattern} {share:.1%} (run {run + 1}): " + "; ".join(
            f"{r['format']} {r['what']} {r['seconds']:.2f} s ({r['strategy']}, {r['jobs']} jobs"
            + ("" if r["status"] == "success" else f", {r['status'].upper()}: {r.get('message', '')[:120]}") + ")"
            for r in results)
             + (f"; floor {cell['floor']['seconds']:.2f} s" if cell["floor"] else "")
             + f" — cell took {cell['seconds']:.1f} s (change {change_seconds:.1f} s)")
        return cell

    def p5(self, echo: Callable[[str], None]) -> list[dict[str, Any]]:
        """The reader query on each format's MV against a parquet copy, after each of ``P5_POINTS`` batches."""
        readers = {f: (self.mvs.get((f, "incremental")) or self.mvs.get((f, "auto"))) for f in self.args.formats}
        readers = {f: m for f, m in readers.items() if m is not None}
        points, batches = [], []
        for f in readers:
            self._check(self.run_mv(f, "incremental" if (f, "incremental") in self.mvs else "auto", full_refresh=True))
        for batch in range(max(P5_POINTS) + 1):
            if batch:
                apply_change(self.spark, "random", self.args.p5_share, _SEED + 900 + batch)
                for f in readers:
                    record = self._check(self.run_mv(f, "incremental" if (f, "incremental") in self.mvs else "auto"))
                    batches.append({"format": f, "batch": batch, "compacted": record["compacted"],
                                    "strategy": record["strategy"], "seconds": record["seconds"]})
            if batch in P5_POINTS:
                for f, model in readers.items():
                    ran = [b for b in batches if b["format"] == f]
                    compacted = any(b["compacted"] for b in ran)
                    point = {"format": f, "batches": batch, "compacted": compacted, **self._read(model.relation, f),
                             "batch_seconds": statistics.median(b["seconds"] for b in ran) if ran else None}
                    points.append(point)
                    echo(f"grid: P5 {f} MV after {batch} batches: {point['mv_seconds']:.3f} s vs parquet copy "
                         f"{point['copy_seconds']:.3f} s = {point['ratio']:.2f}× ({point['mv_jobs']} vs "
                         f"{point['copy_jobs']} jobs{', COMPACTED' if compacted else ''}"
                         f"{'' if point['same_rows'] else ', DIFFERENT ROWS'})"
                         + (f"; vs a plain Delta copy {point['delta_copy_seconds']:.3f} s = "
                            f"{point['delta_copy_ratio']:.2f}×" if "delta_copy_seconds" in point else ""))
        return points

    def _read(self, relation: str, table_format: str) -> dict[str, Any]:
        """The reader query on the MV, on a plain parquet copy of its rows and, for a Delta MV, on a
        plain Delta copy (what the MV's own layout costs, apart from what Delta costs), alternated."""
        self.spark.sql("CREATE DATABASE IF NOT EXISTS bench_read")
        tables = {"mv": relation, "copy": f"bench_read.copy_{table_format}"}
        if table_format == "delta":
            tables["delta_copy"] = f"bench_read.delta_copy_{table_format}"
        for label, table in tables.items():
            if label != "mv":
                self.spark.sql(f"DROP TABLE IF EXISTS {table}")
                using = "delta" if label == "delta_copy" else "parquet"
                self.spark.sql(f"CREATE TABLE {table} USING {using} AS SELECT * FROM {relation}")
        times: dict[str, list[float]] = {label: [] for label in tables}
        rows: dict[str, Any] = {}
        for _ in range(self.args.p5_runs):
            for label, table in tables.items():
                rows[label], seconds, jobs = timed_jobs(
                    self.spark, lambda t=table: [tuple(r) for r in self.spark.sql(READ_QUERY.format(table=t)).collect()])
                times[label].append(seconds)
                rows[f"{label}_jobs"] = jobs
        median = {label: statistics.median(t) for label, t in times.items()}
        found = {"mv_seconds": median["mv"], "copy_seconds": median["copy"], "ratio": median["mv"] / median["copy"],
                 "mv_times": times["mv"], "copy_times": times["copy"], "mv_jobs": rows["mv_jobs"],
                 "copy_jobs": rows["copy_jobs"], "same_rows": rows["mv"] == rows["copy"], "rows": len(rows["mv"])}
        if "delta_copy" in tables:
            found.update(delta_copy_seconds=median["delta_copy"], delta_copy_jobs=rows["delta_copy_jobs"],
                         delta_copy_ratio=median["mv"] / median["delta_copy"])
        return found

    # -- helpers ----------------------------------------------------------------------------------
    def _scan_inputs(self) -> None:
        """One column-pruned scan of every input (one statement)."""
        scans = [f"SELECT '{t}' AS t, BIT_XOR(xxhash64({', '.join(cols)})) AS h FROM {t}" for t, cols in self.inputs.items()]
        self.spark.sql(" UNION ALL ".join(scans)).collect()

    def _peer_formats(self) -> tuple[str, ...]:
        return self.args.formats if "peer" in self.args.strategies else ()

    def _kind_of(self, relation: str) -> str:
        table = self.spark.catalog.getTable(relation)
        if table.tableType != "VIEW":
            return f"{table.tableType.lower()} table"
        behind = f"{relation}__mvflow_rows"  # a Delta MV holding hidden key columns: read through a view
        return "view of a Delta table" if self.spark.catalog.tableExists(behind) else "view (merge-on-read)"

    @staticmethod
    def _check(record: dict[str, Any]) -> dict[str, Any]:
        if record["status"] != "success":
            raise RuntimeError(f"{record['format']} {record['what']}: {record['status']}: {record['message']}")
        return record


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("--offers", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    add_selection(parser)
    return finish_selection(parser, parser.parse_args(argv))


def add_selection(parser: argparse.ArgumentParser) -> None:
    """The options that choose cells (shared with ``bench.grid``)."""
    parser.add_argument("--shares", default=",".join(f"{s:g}" for s in SHARES), help="changed shares, e.g. 0.001,0.01")
    parser.add_argument("--patterns", default=",".join(PATTERNS), help="random,clustered")
    parser.add_argument("--formats", default=",".join(FORMATS), help="parquet,delta")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help="auto,incremental,full (mvflow) and peer (dbt-spark)")
    parser.add_argument("--runs", type=int, default=1, help="change batches per cell")
    parser.add_argument("--floor", action="store_true", help="measure the floor in every cell (default: random 0.1%%)")
    parser.add_argument("--grid", action=argparse.BooleanOptionalAction, default=True, help="run the grid's cells")
    parser.add_argument("--p5", action=argparse.BooleanOptionalAction, default=True, help="run P5 (before the cells)")
    parser.add_argument("--p5-runs", type=int, default=5, help="P5: runs of each query per point")
    parser.add_argument("--p5-share", type=float, default=0.001,
                        help="P5: changed share of each refresh batch (0.01 compacts the parquet MV by the 5th batch)")
    parser.add_argument("--compact-below", type=int, default=None,
                        help="the MVs' compact_below_rows (default: mvflow's; 0: compacted past compact_threshold only)")


def finish_selection(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    def listed(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
        chosen = tuple(x.strip() for x in text.split(",") if x.strip())
        unknown = sorted(set(chosen) - set(allowed))
        if unknown:
            parser.error(f"unknown {what} {', '.join(unknown)}: choose from {', '.join(allowed)}")
        return chosen

    args.shares = tuple(float(s) for s in args.shares.split(",") if s.strip())
    args.patterns = listed(args.patterns, PATTERNS, "pattern")
    args.formats = listed(args.formats, FORMATS, "format")
    args.strategies = listed(args.strategies, STRATEGIES, "strategy")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    echo = lambda line: print(line, flush=True)  # noqa: E731
    grid = Grid(args.project, args)
    result: dict[str, Any] = {"offers": args.offers, "formats": args.formats, "strategies": args.strategies,
                              "strategy_config": grid.strategy_config, "inputs": grid.inputs}
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(**parts: Any) -> None:  # after every part, so an interrupted size keeps what it measured
        result.update(parts)
        args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")

    save(setup=grid.setup(echo), cells=[], p5=[])
    if args.p5:  # first: its batches refresh only its MVs, the warm-up batch brings the others up to date
        try:
            save(p5=grid.p5(echo))
        except Exception as exc:  # noqa: BLE001 - the grid still runs; the error is in the results
            echo(f"grid: P5 FAILED: {exc}")
            save(p5_error=str(exc)[:2000])
    if args.shares and args.grid:
        save(warm_up_seconds=grid.warm_up(echo))
        grid.cells(echo, lambda cells: save(cells=cells))
    echo(f"grid: saved {args.out}")
    grid.spark.stop()


if __name__ == "__main__":
    main()
