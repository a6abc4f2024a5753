"""``cluster_by`` on a Delta MV: what liquid clustering buys readers and costs the MERGE (issue 13).

Two Delta tables shaped like a wide MV (``--rows``, default 200,000; ``shop_id`` over 2,000 shops,
rows in key order as a build writes them), built by the MV's own build statement
(``compiler.kinds.mv.derive._derive_delta``: ``CREATE OR REPLACE TABLE … USING delta [CLUSTER BY (shop_id)]
TBLPROPERTIES (deletion vectors) AS …``), one with ``cluster_by='shop_id'`` and one without. Files
are kept small (``maxRecordsPerFile``, OPTIMIZE's ``maxFileSize``) so that 200k rows make ~20
files, as a 10M-row MV makes of 128 MB files. Measured, alternating, in one warm SparkSession:

- *read*: ``SELECT … WHERE shop_id = <s> ORDER BY id LIMIT 100``: seconds and the files the scan
  read (``numFiles`` of the scan node, after Delta's data skipping), after the build, after
  ``--batches`` MERGE batches, and after ``OPTIMIZE`` (the MV's compaction, which clusters);
- *MERGE*: the MV's batch statement shape (update / delete / insert by key) of ``--share`` random
  keys, seconds and Delta's operation metrics (files added/removed, deletion vectors);
- *OPTIMIZE* seconds; and whether ``ALTER TABLE … CLUSTER BY`` + ``OPTIMIZE`` clusters an
  unclustered table's existing files (what a changed ``cluster_by`` gets without a rebuild).

No timed assertions anywhere: the figures go to stdout and ``bench/.work/cluster_by.json``.

    python -m bench.cluster_by --rows 200000 --runs 5
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.project import DEFAULT_SPARK_CONF, SparkSettings, StateSettings, Target  # noqa: E402
from compiler.table_format import DELTA_PROPERTIES, using  # noqa: E402

SHOPS = 2000
TABLES = {"plain": (), "clustered": ("shop_id",)}
MERGE = """MERGE INTO {t} AS t USING changes AS c ON t.id = c.id
WHEN MATCHED AND c._deleted THEN DELETE
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED AND NOT c._deleted THEN INSERT *"""


def session(work: Path):
    from compiler.spark import spark_session

    conf = {**DEFAULT_SPARK_CONF, "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
            "spark.databricks.delta.optimize.maxFileSize": str(256 * 1024)}
    return spark_session(Target(name="bench", spark=SparkSettings(
        master="local[2]", app_name="bench-cluster-by", warehouse_dir=work / "warehouse", metastore_dir=work / "metastore",
        conf=conf), state=StateSettings(path=work / "state.sqlite")), delta=True)


def rows_sql(rows: int, first: int = 0, salt: str = "") -> str:
    return (f"SELECT id, CAST(hash(id, 7) % {SHOPS} + {SHOPS} AS INT) % {SHOPS} AS shop_id, "
            f"CAST(id % 37 AS INT) AS category, concat('offer {salt}', id) AS title, "
            f"CAST(id % 1000 AS DECIMAL(12,2)) AS price, concat('shop ', id % 97) AS shop, "
            f"concat('region ', id % 5) AS region FROM range({first}, {first + rows})")


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def scan_files(spark, query: str) -> tuple[float, int]:
    """Seconds and files read by the scan (AQE off for this query, so the plan's leaves are the scans)."""
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        frame = spark.sql(query)
        seconds, _ = timed(frame.collect)
        leaves = frame._jdf.queryExecution().executedPlan().collectLeaves()
        files = 0
        for i in range(leaves.size()):
            metric = leaves.apply(i).metrics().get("numFiles")
            if metric.isDefined():
                files += int(metric.get().value())
        return seconds, files
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", "true")


def num_files(spark, table: str) -> int:
    return int(spark.sql(f"DESCRIBE DETAIL {table}").first()["numFiles"])


def last_metrics(spark, table: str) -> dict:
    return dict(spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").first()["operationMetrics"])


def read_round(spark, runs: int, rng: random.Random) -> dict:
    out = {name: {"seconds": [], "files": [], "of": num_files(spark, name)} for name in TABLES}
    for _ in range(runs):
        shop = rng.randrange(SHOPS)
        for name in TABLES:
            seconds, files = scan_files(spark, f"SELECT id, title, price FROM {name} WHERE shop_id = {shop} ORDER BY id LIMIT 100")
            out[name]["seconds"].append(seconds)
            out[name]["files"].append(files)
    return {name: {"median_s": round(median(v["seconds"]), 3), "files_read": median(v["files"]), "files": v["of"]}
            for name, v in out.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--share", type=float, default=0.01, help="keys changed per MERGE batch")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mvflow-cluster-by-"))
    spark = session(work)
    spark.conf.set("spark.sql.files.maxRecordsPerFile", str(max(args.rows // 20, 1000)))
    rng = random.Random(7)
    result: dict = {"rows": args.rows, "runs": args.runs, "share": args.share}
    build = {}
    for name, cluster_by in TABLES.items():
        statement = f"CREATE OR REPLACE TABLE {name}\n{using('delta', DELTA_PROPERTIES, cluster_by)}\nAS\n{rows_sql(args.rows)}"
        build[name] = round(timed(lambda: spark.sql(statement).collect())[0], 2)
    result["build_s"] = build
    result["read_after_build"] = read_round(spark, args.runs, rng)
    merges: dict = {name: {"seconds": [], "metrics": []} for name in TABLES}
    for batch in range(args.batches):
        keys = rng.sample(range(args.rows), int(args.rows * args.share))
        changed = spark.createDataFrame([(k,) for k in keys], "id BIGINT")
        changed.createOrReplaceTempView("changed_keys")
        spark.sql(f"SELECT r.*, r.id % 10 = 0 AS _deleted FROM ({rows_sql(args.rows, salt=f'b{batch} ')}) AS r "
                  "JOIN changed_keys AS k ON k.id = r.id").localCheckpoint(eager=True).createOrReplaceTempView("changes")
        for name in (TABLES if batch % 2 == 0 else reversed(list(TABLES))):
            seconds, _ = timed(lambda: spark.sql(MERGE.format(t=name)).collect())
            merges[name]["seconds"].append(round(seconds, 2))
            m = last_metrics(spark, name)
            merges[name]["metrics"].append({k: m.get(k) for k in ("numTargetFilesAdded", "numTargetFilesRemoved",
                                                                 "numTargetDeletionVectorsAdded", "numTargetRowsCopied")})
    result["merge"] = {name: {"median_s": median(v["seconds"]), "seconds": v["seconds"], "metrics": v["metrics"]}
                       for name, v in merges.items()}
    result["read_after_merges"] = read_round(spark, args.runs, rng)
    result["optimize_s"] = {name: round(timed(lambda: spark.sql(f"OPTIMIZE {name}").collect())[0], 2) for name in TABLES}
    result["read_after_optimize"] = read_round(spark, args.runs, rng)
    # a changed cluster_by without a rebuild: ALTER, then the compaction's OPTIMIZE
    spark.sql("ALTER TABLE plain CLUSTER BY (shop_id)")
    result["alter_then_optimize_s"] = round(timed(lambda: spark.sql("OPTIMIZE plain").collect())[0], 2)
    result["read_after_alter_optimize"] = read_round(spark, args.runs, rng)["plain"]
    text = json.dumps(result, indent=2)
    print(text)
    out = Path(__file__).resolve().parent / ".work" / "cluster_by.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
