"""Seed 000's workload on a published MV (issue 33): random ad-hoc queries — 2 to 4 filters of
equality, range and prefix over the wide columns, an ORDER BY, LIMIT 100 — on the PostgreSQL
table that ``publish`` keeps, against the same queries on Spark over the Delta MV; and what a
publish costs per batch against the MV's refresh.

    python -m bench.adhoc                                   # 1M offers (scale 100), 1,000 queries each side
    python -m bench.adhoc --scale 1 --queries 200           # minutes
    python bench/adhoc.py --dsn "$MVFLOW_APP_DSN" --table public.offers_wide --queries 200   # PostgreSQL only

The whole run: a copy of the demo project, a throwaway PostgreSQL on loopback (``tests/pg_server.py``),
``demo init``, ``mvflow run -s offers_wide`` with ``MVFLOW_PUBLISH=1`` (the build and its full
publish), then ``--batches`` of ``demo change --fraction`` each followed by a run (the batch's MV
seconds and its publish seconds, from ``run_results.json``), then the queries, alternating sides.
Prints p50/p95 per side (target: p95 ≤ 50 ms on PostgreSQL) and the publish ÷ refresh ratio
(target ≤ 0.5× for a 0.1% batch); writes ``adhoc.md`` and ``adhoc.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench" / ".work" / "adhoc"
EQUALITY = ("country", "region_name", "category_name", "shop_id", "currency")
RANGE = ("retail_price", "base_price", "shop_rating")
PREFIX = ("title", "shop_name")
ORDER = ("retail_price", "base_price", "shop_rating", "offer_id")
P95_TARGET_MS, PUBLISH_TARGET = 50.0, 0.5


# -- the queries (pure) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Filter:
    column: str
    op: str  # "=", ">=", "<=", "prefix"
    value: object


@dataclass(frozen=True)
class Query:
    filters: tuple[Filter, ...]
    order: str
    descending: bool

    def postgres(self, table: str) -> tuple[str, list]:
        """The query for psycopg (values as parameters)."""
        where = [f"{f.column} LIKE %s" if f.op == "prefix" else f"{f.column} {f.op} %s" for f in self.filters]
        values = [f"{f.value}%" if f.op == "prefix" else f.value for f in self.filters]
        return self._sql(table, where), values

    def spark(self, table: str) -> str:
        """The same query as Spark SQL (values as literals, quoted).

        >>> Query((Filter("country", "=", "DE"), Filter("title", "prefix", "O'"),), "retail_price", True).spark("m")
        "SELECT * FROM m WHERE country = 'DE' AND title LIKE 'O\\\\'%' ORDER BY retail_price DESC, offer_id LIMIT 100"
        """
        where = [f"{f.column} LIKE {_literal(str(f.value) + '%')}" if f.op == "prefix"
                 else f"{f.column} {f.op} {_literal(f.value)}" for f in self.filters]
        return self._sql(table, where)

    def _sql(self, table: str, where: list[str]) -> str:
        direction = " DESC" if self.descending else ""
        tie = ", offer_id" if self.order != "offer_id" else ""
        return f"SELECT * FROM {table} WHERE {' AND '.join(where)} ORDER BY {self.order}{direction}{tie} LIMIT 100"


def queries(sample: list[dict], n: int, seed: int = 7) -> list[Query]:
    """``n`` queries of 2–4 filters whose values are drawn from ``sample`` rows (so they match something).

    >>> rows = [{"country": "DE", "region_name": "Nord", "category_name": "c", "shop_id": 3, "currency": "EUR",
    ...          "retail_price": 9.5, "base_price": 8, "shop_rating": 4, "title": "Offer 12", "shop_name": "Shop 3"}]
    >>> [len(q.filters) for q in queries(rows, 3)], {q.filters[0].op for q in queries(rows, 20)} <= {"=", ">=", "<=", "prefix"}
    ([2, 4, 2], True)
    """
    rng = random.Random(seed)
    found = []
    for _ in range(n):
        row = rng.choice(sample)
        columns = rng.sample((*EQUALITY, *RANGE, *PREFIX), rng.randint(2, 4))
        filters = []
        for column in columns:
            value = row.get(column)
            if value is None:
                continue
            if column in RANGE:
                filters.append(Filter(column, rng.choice((">=", "<=")), value))
            elif column in PREFIX:
                filters.append(Filter(column, "prefix", str(value)[: rng.randint(3, 6)]))
            else:
                filters.append(Filter(column, "=", value))
        found.append(Query(tuple(filters) or (Filter("offer_id", ">=", 0),), rng.choice(ORDER), rng.random() < 0.5))
    return found


def _literal(value: object) -> str:
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile.

    >>> percentile([1, 2, 3, 4, 100], 0.5), percentile([1, 2, 3, 4, 100], 0.95)
    (3, 100)
    """
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(round(share * len(ordered) + 0.5)) - 1))]


# -- running them ---------------------------------------------------------------------------------
def sample_rows(dsn: str, table: str, n: int = 1000) -> list[dict]:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(dsn, row_factory=dict_row) as db:
        return db.execute(f"SELECT * FROM {table} TABLESAMPLE SYSTEM (10) LIMIT {n}").fetchall() or \
            db.execute(f"SELECT * FROM {table} LIMIT {n}").fetchall()


def time_postgres(dsn: str, table: str, chosen: list[Query]) -> list[float]:
    import psycopg

    times = []
    with psycopg.connect(dsn) as db:
        for query in chosen:
            sql, values = query.postgres(table)
            started = time.perf_counter()
            db.execute(sql, values).fetchall()
            times.append(time.perf_counter() - started)
    return times


def time_spark(spark, relation: str, chosen: list[Query]) -> list[float]:
    times = []
    for query in chosen:
        started = time.perf_counter()
        spark.sql(query.spark(relation)).collect()
        times.append(time.perf_counter() - started)
    return times


def summary(name: str, times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return f"| {name} | {len(ms)} | {percentile(ms, 0.5):.1f} ms | {percentile(ms, 0.95):.1f} ms | {max(ms):.1f} ms |"


# -- the whole run -------------------------------------------------------------------------------
def _mvflow(project: Path, env: dict, *args: str) -> None:
    subprocess.run([sys.executable, "-c", "from compiler.cli import main; main()", *args], cwd=project, env=env,
                   check=True, stdout=subprocess.DEVNULL)


def _publish_share(project: Path) -> tuple[float, float]:
    """The last batch of offers_wide: its refresh's seconds (its step-log row, compaction included)
    and its publish's (the run's message)."""
    from compiler.project import load_project
    from compiler.state import open_state_store

    results = json.loads((project / "target" / "run_results.json").read_text())["results"]
    [mv] = [r for r in results if r["name"] == "offers_wide"]
    found = re.search(r"published \S+ by key .*?, ([\d.]+) s", mv["message"])
    store = open_state_store(load_project(project).target(None).state)
    steps = store.steps("offers_wide", limit=2)
    last = steps[0].next
    refresh = sum(s.seconds for s in steps if s.next == last)  # the batch and its compaction
    return refresh, float(found.group(1)) if found else 0.0


def run_all(args: argparse.Namespace) -> str:
    from bench.p4_noop import demo_copy
    sys.path.insert(0, str(ROOT / "tests"))
    from pg_server import PostgresServer

    server = PostgresServer().start()
    try:
        project = demo_copy(args.out / "project")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MVFLOW_PUBLISH": "1", "MVFLOW_APP_DSN": server.dsn,
               "MVFLOW_TABLE_FORMAT": "delta"}
        print(f"adhoc: demo at scale {args.scale:g}: init, then the first run (build and full publish)", flush=True)
        _mvflow(project, env, "demo", "init", "--scale", str(args.scale))
        _mvflow(project, env, "run", "-s", "+offers_wide")
        batches = []
        for batch in range(args.batches):
            _mvflow(project, env, "demo", "change", "--fraction", str(args.fraction), "--seed", str(batch + 11))
            _mvflow(project, env, "run", "-s", "+offers_wide")
            batches.append(_publish_share(project))
            print(f"adhoc: batch {batch + 1}: refresh {batches[-1][0]:.2f} s, publish {batches[-1][1]:.2f} s", flush=True)
        chosen = queries(sample_rows(server.dsn, "public.offers_wide"), args.queries)
        os.environ.update({k: v for k, v in env.items() if k.startswith("MVFLOW_")})
        from compiler.project import load_project
        from compiler.spark import spark_session

        spark = spark_session(load_project(project).target(None), delta=True)
        relation = "marts.offers_wide"
        time_spark(spark, relation, chosen[:20])  # warm-up, both sides
        time_postgres(server.dsn, "public.offers_wide", chosen[:20])
        pg, sp = [], []
        for i in range(0, len(chosen), 50):  # alternating blocks: the machine's noise hits both sides
            pg += time_postgres(server.dsn, "public.offers_wide", chosen[i:i + 50])
            sp += time_spark(spark, relation, chosen[i:i + 50])
        refresh = statistics.median(b[0] for b in batches) if batches else 0.0
        publish = statistics.median(b[1] for b in batches) if batches else 0.0
        ratio = publish / refresh if refresh else 0.0
        text = "\n".join([
            f"Seed 000's ad-hoc queries at scale {args.scale:g} ({int(args.scale * 10_000):,} offers), "
            f"{len(chosen)} queries per side (2–4 filters, ORDER BY, LIMIT 100)", "",
            "| side | queries | p50 | p95 | max |", "|---|---|---|---|---|",
            summary("PostgreSQL (published table)", pg), summary("Spark over the Delta MV", sp), "",
            f"- PostgreSQL p95 {percentile([t * 1000 for t in pg], 0.95):.1f} ms (target ≤ {P95_TARGET_MS:g} ms): "
            f"{'met' if percentile(pg, 0.95) * 1000 <= P95_TARGET_MS else 'missed'}",
            f"- publish per {args.fraction:.1%} batch: median {publish:.2f} s against the refresh's {refresh:.2f} s = "
            f"{ratio:.2f}× (target ≤ {PUBLISH_TARGET}×): {'met' if ratio <= PUBLISH_TARGET else 'missed'} "
            f"({len(batches)} batches)"])
        (args.out / "adhoc.md").write_text(text + "\n")
        (args.out / "adhoc.json").write_text(json.dumps({"postgres": pg, "spark": sp, "batches": batches}, indent=1))
        return text
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.adhoc", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=100.0, help="demo scale (100 = 1M offers)")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=3, help="change batches whose publish is timed")
    parser.add_argument("--fraction", type=float, default=0.001, help="offers changed per batch")
    parser.add_argument("--dsn", default="", help="only query this store's table (PostgreSQL side only)")
    parser.add_argument("--table", default="public.offers_wide")
    parser.add_argument("--out", type=Path, default=WORK)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.dsn:
        chosen = queries(sample_rows(args.dsn, args.table), args.queries)
        times = time_postgres(args.dsn, args.table, chosen)
        print("\n".join([f"{len(chosen)} ad-hoc queries on {args.table} (2–4 filters, ORDER BY, LIMIT 100):", "",
                         "| side | queries | p50 | p95 | max |", "|---|---|---|---|---|",
                         summary("PostgreSQL (published table)", times)]))
        return
    print(run_all(args))


if __name__ == "__main__":
    main()
