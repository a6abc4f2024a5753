"""Delta Lake feasibility spike for issues 12 and 13: measured, re-runnable.

    .venv-delta/bin/python -m bench.delta_spike --rows 100000
    .venv-delta/bin/python -m bench.delta_spike --rows 1000000 --runs 3
    .venv-delta/bin/python -m bench.delta_spike --startup          # session start-up, with vs without Delta
    .venv-delta/bin/python -m bench.delta_spike --rows 100000 --parts build,merge

One local[2] SparkSession (driver memory 2g, Hive support, embedded Derby metastore and
warehouse under ``bench/.work/delta-<rows>/``, wiped per run), Delta 4.4.0 jars from
``.mvflow/jars/`` (``compiler.delta_jars``). The table is shaped like the demo MV ``offers_wide``:
15 columns, key ``offer_id``. Parts:

- ``build``: ``CREATE OR REPLACE TABLE … USING delta AS SELECT`` vs ``INSERT OVERWRITE`` of a
  parquet table with the same rows (alternating, medians);
- ``merge``: the key-driven batch ``MERGE INTO … WHEN MATCHED AND c._deleted THEN DELETE …``
  at 0.1% and 1% random keys (80% updates, 10% deletes, 10% new keys), seconds and Spark jobs;
- ``variants``: the 0.1% MERGE, random keys vs clustered keys (the newest offers), with
  deletion vectors off/on and the table unclustered / Z-ordered / liquid-clustered by the key;
- ``read``: two filters, ORDER BY, LIMIT 100 on the Delta table after 1 and 5 MERGE batches
  (1% each) vs a plain parquet copy of the same rows, DV off and on;
- ``cdf``: Change Data Feed on a table, one batch, ``table_changes`` rows and cost;
- ``catalog``: time travel ``VERSION AS OF`` through the Hive catalog, ``DESCRIBE HISTORY``;
- ``txn``: idempotent appends (``txnAppId``/``txnVersion``, writer options and SQL confs),
  ``replaceWhere`` on a position range (writer option and ``INSERT … REPLACE WHERE``);
- ``reopen``: after the session stops, a second process opens the same Derby metastore and
  reads the Delta table by name (and an old version).

Spark jobs per statement: job ids are global and sequential, so a one-task sentinel job just
before and just after a statement brackets it: jobs = after - before - 1 (threads included).
Results: ``bench/.work/delta-<rows>/results.json`` and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from compiler.delta_jars import DELTA_CONF, delta_jars

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work"
PARTS = ("build", "merge", "variants", "read", "cdf", "catalog", "txn")

COLUMNS = """
    id AS offer_id,
    CAST(pmod(xxhash64(id, 1), 5000) AS BIGINT) AS seller_id,
    CAST(pmod(xxhash64(id, 2), 200) AS INT) AS category_id,
    concat('category ', CAST(pmod(xxhash64(id, 2), 200) AS STRING)) AS category_name,
    concat('offer title ', CAST(id AS STRING), ' ', sha1(CAST(id AS STRING))) AS title,
    CAST(pmod(xxhash64(id, 3), 100000) / 100.0 AS DECIMAL(12, 2)) AS price,
    element_at(array('EUR', 'USD', 'RUB'), CAST(pmod(xxhash64(id, 4), 3) + 1 AS INT)) AS currency,
    CAST(pmod(xxhash64(id, 5), 1000) AS INT) AS stock,
    element_at(array('active', 'paused', 'sold'), CAST(pmod(xxhash64(id, 6), 3) + 1 AS INT)) AS status,
    concat('brand ', CAST(pmod(xxhash64(id, 7), 800) AS STRING)) AS brand,
    element_at(array('DE', 'FR', 'RU', 'US', 'KZ'), CAST(pmod(xxhash64(id, 8), 5) + 1 AS INT)) AS country,
    CAST(pmod(xxhash64(id, 9), 500) / 100.0 AS DOUBLE) AS rating,
    timestamp_seconds(1700000000 + id) AS created_at,
    timestamp_seconds(1700000000 + id + pmod(xxhash64(id, 10), 86400)) AS updated_at,
    pmod(xxhash64(id, 11), 10) > 0 AS is_active
"""
# A changed row: same key, new price/stock/status/updated_at ({seed} varies per batch).
CHANGED = """
    offer_id, seller_id, category_id, category_name, title,
    CAST(pmod(xxhash64(offer_id, {seed}), 100000) / 100.0 AS DECIMAL(12, 2)) AS price,
    currency, CAST(pmod(xxhash64(offer_id, {seed} + 1), 1000) AS INT) AS stock, status, brand, country,
    rating, created_at, timestamp_seconds(1800000000 + {seed}) AS updated_at, is_active
"""
MERGE = """
MERGE INTO {t} AS t USING {c} AS c ON t.offer_id = c.offer_id
WHEN MATCHED AND c._deleted THEN DELETE
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED AND NOT c._deleted THEN INSERT *
"""
READ = """
SELECT offer_id, title, price, seller_id, updated_at FROM {t}
WHERE category_id = 7 AND price > 500 ORDER BY price DESC, offer_id LIMIT 100
"""


def median(xs):
    return round(statistics.median(xs), 3) if xs else None


class Spike:
    def __init__(self, rows: int, runs: int, work: Path, jars: list[Path], delta: bool = True):
        self.rows, self.runs, self.work = rows, runs, work
        self.results: dict = {"rows": rows, "runs": runs}
        self.per_file = max(10_000, rows // 16)
        self.spark = start_session(work, jars if delta else None, self.per_file)
        self.sc = self.spark.sparkContext
        self.next_id = rows  # keys 0..rows-1 exist; new keys start here
        self.seed = 100

    # -- helpers -------------------------------------------------------------------------
    def sql(self, text: str, **fmt):
        return self.spark.sql(text.format(**fmt) if fmt else text)

    def _sentinel(self) -> int:
        self.sc.setJobGroup("sentinel", "sentinel")
        self.sc.parallelize([1], 1).count()
        ids = self.sc.statusTracker().getJobIdsForGroup("sentinel")
        self.sc.setJobGroup("spike", "spike")
        return max(ids)

    def timed(self, fn) -> tuple[float, int]:
        """Seconds and Spark jobs of fn()."""
        before = self._sentinel()
        t0 = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t0
        after = self._sentinel()
        return seconds, after - before - 1

    def collect(self, text: str, **fmt):
        return lambda: self.sql(text, **fmt).collect()

    def src(self, n: int, start: int = 0) -> None:
        """View ``src``: the rows; ``src_mv``: the same rows hash-distributed by the key, laid out
        like the output of the MV's join (keys scattered over every file, not in id order)."""
        self.spark.range(start, start + n).selectExpr(*[c.strip() for c in split_columns(COLUMNS)]) \
            .createOrReplaceTempView("src")
        self.sql("CREATE OR REPLACE TEMPORARY VIEW src_mv AS SELECT * FROM src DISTRIBUTE BY offer_id")

    def files(self, table: str) -> int:
        return self.sql(f"DESCRIBE DETAIL {table}").collect()[0]["numFiles"]

    def make_changes(self, fraction: float, pattern: str = "random") -> dict:
        """Write table ``chg``: fraction × rows keys, 80% updates, 10% deletes, 10% new keys."""
        self.seed += 7
        k = max(10, int(self.rows * fraction))
        n_upd, n_del = int(k * 0.8), int(k * 0.1)
        n_new = k - n_upd - n_del
        if pattern == "random":
            # Random existing keys: a hash threshold over all keys ever issued (no table scan).
            modulus = 1_000_000
            cut = int(modulus * k * 0.9 / self.next_id) + 1
            picked = (f"SELECT id AS offer_id, pmod(xxhash64(id, {self.seed}), {modulus}) AS h FROM range({self.next_id}) "
                      f"WHERE pmod(xxhash64(id, {self.seed}), {modulus}) < {cut}")
            old = f"SELECT offer_id, h < {cut} / 9 AS _deleted FROM ({picked})"
        else:  # clustered: the newest offers
            lo = self.next_id - (n_upd + n_del)
            old = f"SELECT id AS offer_id, id < {lo + n_del} AS _deleted FROM range({lo}, {self.next_id})"
        self.src(self.next_id + n_new)
        changed = CHANGED.format(seed=self.seed)
        self.sql(f"""CREATE OR REPLACE TEMPORARY VIEW chg_v AS
            SELECT {changed}, o._deleted FROM src JOIN ({old}) o USING (offer_id)
            UNION ALL
            SELECT {changed}, false AS _deleted FROM src WHERE offer_id >= {self.next_id}""")
        self.sql("DROP TABLE IF EXISTS chg")
        self.sql("CREATE TABLE chg USING parquet AS SELECT * FROM chg_v")
        self.next_id += n_new
        counts = {r["_deleted"]: r["n"] for r in self.sql("SELECT _deleted, count(*) AS n FROM chg GROUP BY 1").collect()}
        return {"keys": sum(counts.values()), "deletes": counts.get(True, 0), "pattern": pattern}

    def build_delta(self, name: str, props: dict | None = None, cluster: bool = False) -> None:
        self.src(self.next_id)
        tbl = ", ".join(f"'{k}' = '{v}'" for k, v in (props or {}).items())
        self.sql(f"DROP TABLE IF EXISTS {name}")
        self.sql(f"CREATE TABLE {name} USING delta {'CLUSTER BY (offer_id)' if cluster else ''} "
                 f"{'TBLPROPERTIES (' + tbl + ')' if tbl else ''} AS SELECT * FROM src_mv")

    def merge(self, table: str) -> tuple[float, int]:
        return self.timed(self.collect(MERGE, t=table, c="chg"))

    # -- parts ---------------------------------------------------------------------------
    def part_build(self) -> None:
        self.src(self.rows)
        self.sql("DROP TABLE IF EXISTS b_pq")
        self.sql("CREATE TABLE b_pq USING parquet AS SELECT * FROM src WHERE false")
        delta, parquet, djobs, pjobs = [], [], [], []
        for i in range(self.runs):
            s, j = self.timed(self.collect("CREATE OR REPLACE TABLE b_delta USING delta AS SELECT * FROM src_mv"))
            delta.append(s), djobs.append(j)
            s, j = self.timed(self.collect("INSERT OVERWRITE b_pq SELECT * FROM src_mv"))
            parquet.append(s), pjobs.append(j)
        self.results["build"] = {"delta_s": delta, "parquet_s": parquet, "delta_jobs": djobs, "parquet_jobs": pjobs,
                                 "delta_median": median(delta), "parquet_median": median(parquet),
                                 "delta_files": self.files("b_delta")}
        print("build", self.results["build"], flush=True)

    def part_merge(self) -> None:
        out = {}
        self.build_delta("m_delta", {"delta.enableDeletionVectors": "false"})
        for fraction in (0.001, 0.01):
            secs, jobs, info = [], [], None
            for _ in range(self.runs):
                info = self.make_changes(fraction)
                s, j = self.merge("m_delta")
                secs.append(s), jobs.append(j)
            metrics = self.last_metrics("m_delta")
            out[str(fraction)] = {"seconds": secs, "median": median(secs), "jobs": jobs, "changes": info, "metrics": metrics}
            print("merge", fraction, out[str(fraction)], flush=True)
        self.results["merge"] = out

    def last_metrics(self, table: str) -> dict:
        row = self.sql(f"DESCRIBE HISTORY {table} LIMIT 1").collect()[0]
        keep = ("numTargetRowsUpdated", "numTargetRowsInserted", "numTargetRowsDeleted", "numTargetFilesAdded",
                "numTargetFilesRemoved", "numTargetDeletionVectorsAdded", "numTargetFilesSkipped",
                "numTargetRowsCopied", "executionTimeMs", "scanTimeMs", "rewriteTimeMs")
        return {"operation": row["operation"], **{k: v for k, v in (row["operationMetrics"] or {}).items() if k in keep}}

    def part_variants(self) -> None:
        out = {}
        for dv in (False, True):
            for layout in ("none", "zorder", "liquid"):
                name = f"v_{'dv' if dv else 'nodv'}_{layout}"
                self.next_id = self.rows
                self.build_delta(name, {"delta.enableDeletionVectors": str(dv).lower()}, cluster=layout == "liquid")
                if layout != "none":
                    size = self.sql(f"DESCRIBE DETAIL {name}").collect()[0]["sizeInBytes"]
                    self.spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(max(1 << 20, size // 16)))
                    t0 = time.perf_counter()
                    self.sql(f"OPTIMIZE {name}" + (" ZORDER BY (offer_id)" if layout == "zorder" else "")).collect()
                    optimize_s = time.perf_counter() - t0
                    self.spark.conf.unset("spark.databricks.delta.optimize.maxFileSize")
                else:
                    optimize_s = 0.0
                res = {"files": self.files(name), "optimize_s": round(optimize_s, 3)}
                for pattern in ("random", "clustered"):
                    secs, jobs, metrics = [], [], []
                    for _ in range(self.variant_runs):
                        self.make_changes(0.001, pattern)
                        s, j = self.merge(name)
                        secs.append(s), jobs.append(j), metrics.append(self.last_metrics(name))
                    res[pattern] = {"seconds": secs, "median": median(secs), "jobs": jobs, "metrics": metrics[-1]}
                res["files_after"] = self.files(name)
                out[name] = res
                print("variant", name, {k: (v["median"], v["jobs"]) if isinstance(v, dict) else v for k, v in res.items()}, flush=True)
                self.sql(f"DROP TABLE {name}")
        self.results["variants"] = out

    def part_read(self) -> None:
        out = {}
        for dv in (False, True):
            name = f"r_{'dv' if dv else 'nodv'}"
            self.next_id = self.rows
            self.build_delta(name, {"delta.enableDeletionVectors": str(dv).lower()})
            done = 0
            for batches in (0, 1, 5):
                while done < batches:
                    self.make_changes(0.01)
                    self.merge(name)
                    done += 1
                self.sql("DROP TABLE IF EXISTS r_pq")
                self.sql(f"CREATE TABLE r_pq USING parquet AS SELECT * FROM {name}")
                d, p, dj, pj = [], [], [], []
                self.sql(READ, t=name).collect(), self.sql(READ, t="r_pq").collect()  # warm both
                for _ in range(max(5, self.runs)):
                    s, j = self.timed(self.collect(READ, t=name))
                    d.append(s), dj.append(j)
                    s, j = self.timed(self.collect(READ, t="r_pq"))
                    p.append(s), pj.append(j)
                same = self.sql(READ, t=name).collect() == self.sql(READ, t="r_pq").collect()
                res = {"delta_median": median(d), "parquet_median": median(p), "ratio": round(median(d) / median(p), 2),
                       "delta_jobs": dj[-1], "parquet_jobs": pj[-1], "delta_files": self.files(name), "same_rows": same}
                out[f"{name}_after_{batches}"] = res
                print("read", name, batches, res, flush=True)
            self.sql(f"DROP TABLE {name}")
        self.results["read"] = out

    def part_readtune(self) -> None:
        """Where a Delta read's fixed cost goes: the same query with data skipping off, and on a
        DV table after 5 batches before and after ``REORG TABLE … APPLY (PURGE)``."""
        out = {}
        self.next_id = self.rows
        self.build_delta("rt", {"delta.enableDeletionVectors": "true"})
        for _ in range(5):
            self.make_changes(0.01)
            self.merge("rt")
        self.sql("DROP TABLE IF EXISTS rt_pq")
        self.sql("CREATE TABLE rt_pq USING parquet AS SELECT * FROM rt")

        def measure(label):
            self.sql(READ, t="rt").collect(), self.sql(READ, t="rt_pq").collect()
            d, p, dj = [], [], 0
            for _ in range(max(5, self.runs)):
                s, dj = self.timed(self.collect(READ, t="rt"))
                d.append(s)
                p.append(self.timed(self.collect(READ, t="rt_pq"))[0])
            out[label] = {"delta_median": median(d), "parquet_median": median(p), "ratio": round(median(d) / median(p), 2),
                          "delta_jobs": dj, "delta_files": self.files("rt")}
            print("readtune", label, out[label], flush=True)

        measure("dv_5_batches")
        self.spark.conf.set("spark.databricks.delta.stats.skipping", "false")
        try:
            measure("dv_5_batches_skipping_off")
        except Exception as exc:  # noqa: BLE001 -- seen: "Cannot work with a non-pinned table snapshot of the TahoeFileIndex"
            out["dv_5_batches_skipping_off"] = type(exc).__name__ + ": " + " ".join(str(exc).split())[:160]
            print("readtune skipping off:", out["dv_5_batches_skipping_off"], flush=True)
        self.spark.conf.unset("spark.databricks.delta.stats.skipping")
        t0 = time.perf_counter()
        self.sql("REORG TABLE rt APPLY (PURGE)").collect()  # rewrites the files that carry DVs
        out["purge_s"] = round(time.perf_counter() - t0, 3)
        measure("dv_after_purge")
        self.results["readtune"] = out

    def part_cdf(self) -> None:
        out = {}
        for cdf in (False, True):
            name = f"c_{'cdf' if cdf else 'plain'}"
            self.next_id = self.rows
            self.build_delta(name, {"delta.enableChangeDataFeed": str(cdf).lower(), "delta.enableDeletionVectors": "false"})
            secs = []
            for _ in range(self.runs):
                info = self.make_changes(0.01)
                s, _ = self.merge(name)
                secs.append(s)
            out[name] = {"merge_1pct_median": median(secs), "seconds": secs}
        v2 = self.sql("DESCRIBE HISTORY c_cdf LIMIT 1").collect()[0]["version"]
        s, jobs = self.timed(self.collect(f"SELECT _change_type, count(*) FROM table_changes('c_cdf', {v2}, {v2}) GROUP BY 1"))
        counts = {r[0]: r[1] for r in self.sql(f"SELECT _change_type, count(*) FROM table_changes('c_cdf', {v2}, {v2}) GROUP BY 1").collect()}
        s_all, _ = self.timed(self.collect(f"SELECT * FROM table_changes('c_cdf', 1, {v2})"))
        sample = self.sql(f"""SELECT offer_id, price, _change_type, _commit_version, _commit_timestamp
                              FROM table_changes('c_cdf', {v2}, {v2})
                              ORDER BY offer_id, _change_type LIMIT 6""").collect()
        keys_s, _ = self.timed(self.collect(f"SELECT DISTINCT offer_id FROM table_changes('c_cdf', 1, {v2})"))
        cols = self.sql(f"SELECT * FROM table_changes('c_cdf', {v2}, {v2})").columns
        cdc_dir = self.work / "warehouse" / "c_cdf" / "_change_data"
        out["table_changes"] = {"last_batch_counts": counts, "last_batch_s": round(s, 3), "last_batch_jobs": jobs,
                                "all_batches_s": round(s_all, 3), "distinct_keys_all_batches_s": round(keys_s, 3),
                                "columns": cols[-3:], "sample": [r.asDict() for r in sample],
                                "change_data_files": len(list(cdc_dir.rglob("*.parquet"))) if cdc_dir.exists() else 0,
                                "last_batch_last_changes": info}
        self.results["cdf"] = json.loads(json.dumps(out, default=str))
        print("cdf", self.results["cdf"], flush=True)

    def part_catalog(self) -> None:
        name = "tt_delta"
        self.next_id = self.rows
        self.build_delta(name)
        self.make_changes(0.01)
        self.merge(name)
        out = {"provider": self.sql(f"DESCRIBE EXTENDED {name}").where("col_name = 'Provider'").collect()[0]["data_type"]}
        out["v0_count"] = self.sql(f"SELECT count(*) FROM {name} VERSION AS OF 0").collect()[0][0]
        out["v1_count"] = self.sql(f"SELECT count(*) FROM {name} VERSION AS OF 1").collect()[0][0]
        out["v0_minus_v1_rows"] = self.sql(f"SELECT count(*) FROM (SELECT * FROM {name} VERSION AS OF 0 EXCEPT SELECT * FROM {name})").collect()[0][0]
        ts = self.sql(f"DESCRIBE HISTORY {name}").orderBy("version").collect()[0]["timestamp"]
        out["timestamp_as_of_ok"] = self.sql(f"SELECT count(*) FROM {name} TIMESTAMP AS OF '{ts}'").collect()[0][0] == out["v0_count"]
        s, jobs = self.timed(self.collect(f"SELECT count(*) FROM {name} VERSION AS OF 0"))
        out["version_as_of_s"], out["version_as_of_jobs"] = round(s, 3), jobs
        out["history"] = [(r["version"], r["operation"]) for r in self.sql(f"DESCRIBE HISTORY {name}").collect()]
        # A parquet table and a Delta table side by side in one Hive catalog (the DeltaCatalog delegates).
        self.sql("CREATE TABLE IF NOT EXISTS tt_pq USING parquet AS SELECT * FROM src LIMIT 10")
        out["tables"] = sorted((r["tableName"]) for r in self.sql("SHOW TABLES").collect())
        self.results["catalog"] = out
        print("catalog", out, flush=True)

    def part_txn(self) -> None:
        out = {}
        self.sql("DROP TABLE IF EXISTS f_delta")
        self.sql("CREATE TABLE f_delta (pos BIGINT, v STRING) USING delta")

        def step(lo, hi, version, tag="a"):
            df = self.spark.range(lo, hi).selectExpr("id AS pos", f"'{tag}' AS v")
            (df.write.format("delta").mode("append").option("txnAppId", "fact:f_delta")
             .option("txnVersion", version).saveAsTable("f_delta"))

        count = lambda: self.sql("SELECT count(*) FROM f_delta").collect()[0][0]
        step(0, 1000, 1)
        out["after_v1"] = count()
        step(0, 1000, 1)  # the same step again: must be skipped
        out["after_v1_again"] = count()
        step(1000, 2000, 2)
        out["after_v2"] = count()
        step(0, 500, 1)  # an older version: skipped as well
        out["after_older_v1"] = count()
        out["versions"] = [(r["version"], r["operation"]) for r in self.sql("DESCRIBE HISTORY f_delta").collect()]
        # SQL: the same through session confs (applies to the next write only)
        self.spark.conf.set("spark.databricks.delta.write.txnAppId", "fact:f_delta:sql")
        self.spark.conf.set("spark.databricks.delta.write.txnVersion", "7")
        self.sql("INSERT INTO f_delta SELECT id, 's' FROM range(2000, 2100)")
        out["sql_after_v7"] = count()
        self.spark.conf.set("spark.databricks.delta.write.txnAppId", "fact:f_delta:sql")
        self.spark.conf.set("spark.databricks.delta.write.txnVersion", "7")
        self.sql("INSERT INTO f_delta SELECT id, 's' FROM range(2000, 2100)")
        out["sql_after_v7_again"] = count()
        self.spark.conf.unset("spark.databricks.delta.write.txnAppId")
        self.spark.conf.unset("spark.databricks.delta.write.txnVersion")
        # replaceWhere on a position range: the redo of step (1000, 2000] replaces exactly that range.
        df = self.spark.range(1000, 2000).selectExpr("id AS pos", "'redo' AS v")
        (df.write.format("delta").mode("overwrite").option("replaceWhere", "pos >= 1000 AND pos < 2000")
         .saveAsTable("f_delta"))
        out["replace_where"] = {r["v"]: r["n"] for r in self.sql("SELECT v, count(*) AS n FROM f_delta GROUP BY v").collect()}
        try:  # a row outside the predicate must be refused
            (self.spark.range(5000, 5001).selectExpr("id AS pos", "'bad' AS v").write.format("delta").mode("overwrite")
             .option("replaceWhere", "pos >= 1000 AND pos < 2000").saveAsTable("f_delta"))
            out["replace_where_outside"] = "accepted"
        except Exception as exc:  # noqa: BLE001
            out["replace_where_outside"] = type(exc).__name__ + ": " + str(exc).splitlines()[0][:160]
        try:
            self.sql("INSERT INTO f_delta REPLACE WHERE pos >= 0 AND pos < 1000 SELECT id, 'sqlredo' FROM range(0, 1000)")
            out["insert_replace_where_sql"] = {r["v"]: r["n"] for r in self.sql("SELECT v, count(*) AS n FROM f_delta GROUP BY v").collect()}
        except Exception as exc:  # noqa: BLE001
            out["insert_replace_where_sql"] = type(exc).__name__ + ": " + str(exc).splitlines()[0][:160]
        out["txn_state_in_log"] = sorted({k for f in (self.work / "warehouse" / "f_delta" / "_delta_log").glob("*.json")
                                          for line in f.read_text().splitlines() for k in json.loads(line) if k == "txn"})
        self.results["txn"] = out
        print("txn", out, flush=True)


def split_columns(text: str) -> list[str]:
    """Top-level comma split of the column list."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def start_session(work: Path, jars: list[Path] | None, per_file: int = 0):
    from pyspark.sql import SparkSession

    metastore = work / "metastore"
    metastore.mkdir(parents=True, exist_ok=True)
    log4j = metastore / "log4j2.properties"
    log4j.write_text("rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
                     "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
                     "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n"
                     "logger.repl.name = org.apache.spark.repl.Main\nlogger.repl.level = warn\n"
                     "logger.hms.name = org.apache.hadoop.hive.metastore.RetryingHMSHandler\nlogger.hms.level = off\n"
                     "logger.hos.name = org.apache.hadoop.hive.metastore.ObjectStore\nlogger.hos.level = off\n")
    b = (SparkSession.builder.master("local[2]").appName("delta-spike")
         .config("spark.driver.memory", "2g")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.sql.warehouse.dir", str(work / "warehouse"))
         .config("spark.hadoop.javax.jdo.option.ConnectionURL", f"jdbc:derby:;databaseName={metastore / 'metastore_db'};create=true")
         .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={metastore} -Dlog4j2.configurationFile=file:{log4j}"))
    if per_file:
        b = b.config("spark.sql.files.maxRecordsPerFile", str(per_file))
    if jars is not None:
        b = b.config("spark.jars", ",".join(map(str, jars)))
        for k, v in DELTA_CONF.items():
            b = b.config(k, v)
        # Delta rebuilds a snapshot's state with spark.databricks.delta.snapshotPartitions tasks (50 by default)
        b = b.config("spark.databricks.delta.snapshotPartitions", "2")
    s = b.enableHiveSupport().getOrCreate()
    s.sparkContext.setLogLevel("WARN")
    return s


def startup(runs: int, jars: list[Path]) -> dict:
    """Seconds to start a session (and run one catalog statement), with vs without Delta, in fresh processes."""
    out = {"plain": [], "delta": []}
    for i in range(runs):
        for kind in ("plain", "delta"):
            work = WORK / f"delta-startup-{kind}"
            shutil.rmtree(work, ignore_errors=True)
            code = (f"import time; t=time.perf_counter(); from bench.delta_spike import start_session; from pathlib import Path; "
                    f"s=start_session(Path({str(work)!r}), {[str(j) for j in jars] if kind == 'delta' else None!r}); "
                    f"s.sql('SHOW TABLES').collect(); print(time.perf_counter()-t); s.stop()")
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            inner = float(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
            out[kind].append({"process_s": round(wall, 2), "session_s": round(inner, 2) if inner else None,
                              "stderr_lines": len(r.stderr.splitlines())})
    out["plain_median"] = median([x["process_s"] for x in out["plain"]])
    out["delta_median"] = median([x["process_s"] for x in out["delta"]])
    return out


def stop_jvm(spark) -> None:
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    spark.stop()
    if proc is not None:
        proc.stdin.close()  # the gateway JVM exits when its stdin closes
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def reopen(work: Path, jars: list[Path]) -> dict:
    """In a fresh process (Derby admits one), read the Delta table created earlier by name."""
    code = (f"from bench.delta_spike import start_session; from pathlib import Path; "
            f"s=start_session(Path({str(work)!r}), {[str(j) for j in jars]!r}); "
            f"print(s.sql('SELECT count(*) FROM tt_delta').collect()[0][0], "
            f"s.sql('SELECT count(*) FROM tt_delta VERSION AS OF 0').collect()[0][0], "
            f"s.sql('SELECT count(*) FROM tt_pq').collect()[0][0]); s.stop()")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    return {"rc": r.returncode, "stdout": r.stdout.strip(), "stderr_tail": r.stderr.strip().splitlines()[-3:]}


def report(results: dict) -> str:
    """A markdown table of one results.json."""
    r, rows = results, []
    add = lambda *cells: rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    add("what", "Delta", "plain parquet / baseline", "ratio", "Spark jobs", "note")
    add(*["---"] * 6)
    if "build" in r:
        b = r["build"]
        add("full build (CTAS delta vs INSERT OVERWRITE parquet)", f"{b['delta_median']} s", f"{b['parquet_median']} s",
            f"{b['delta_median'] / b['parquet_median']:.2f}x", f"{b['delta_jobs'][-1]} vs {b['parquet_jobs'][-1]}", f"runs {b['delta_s']} / {b['parquet_s']}")
    for f, m in r.get("merge", {}).items():
        mt = m["metrics"]
        add(f"MERGE {float(f) * 100:g}% random keys, DV off", f"{m['median']} s", "", "", m["jobs"][-1],
            f"{m['changes']['keys']} keys; files +{mt.get('numTargetFilesAdded')}/-{mt.get('numTargetFilesRemoved')}, rows copied {mt.get('numTargetRowsCopied')}")
    base = r.get("build", {}).get("delta_median")
    for name, v in r.get("variants", {}).items():
        for pattern in ("random", "clustered"):
            x = v[pattern]
            mt = x["metrics"]
            add(f"MERGE 0.1% {pattern}, {name[2:]}", f"{x['median']} s", "", f"{x['median'] / base:.2f}x build" if base else "",
                x["jobs"][-1], f"files {v['files']}->{v['files_after']}, optimize {v['optimize_s']} s; +{mt.get('numTargetFilesAdded')}/-{mt.get('numTargetFilesRemoved')} files, "
                f"copied {mt.get('numTargetRowsCopied')}, DVs {mt.get('numTargetDeletionVectorsAdded')}")
    for name, x in r.get("read", {}).items():
        add(f"read query, {name}", f"{x['delta_median']} s", f"{x['parquet_median']} s", f"{x['ratio']}x",
            f"{x['delta_jobs']} vs {x['parquet_jobs']}", f"{x['delta_files']} files, same rows {x['same_rows']}")
    if "cdf" in r:
        c = r["cdf"]
        add("MERGE 1% with CDF on vs off", f"{c['c_cdf']['merge_1pct_median']} s", f"{c['c_plain']['merge_1pct_median']} s",
            f"{c['c_cdf']['merge_1pct_median'] / c['c_plain']['merge_1pct_median']:.2f}x", "", "")
        t = c["table_changes"]
        add("table_changes, one batch / all batches", f"{t['last_batch_s']} s / {t['all_batches_s']} s", "", "", t["last_batch_jobs"], str(t["last_batch_counts"]))
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.delta_spike")
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--variant-runs", type=int, default=0, help="runs per variant (default: --runs)")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--startup", action="store_true", help="only measure session start-up with vs without Delta")
    p.add_argument("--report", type=Path, help="print the markdown table of a results.json and exit")
    args = p.parse_args(argv)
    if args.report:
        print(report(json.loads(args.report.read_text())))
        return 0
    jars = delta_jars()
    if args.startup:
        res = startup(args.runs, jars)
        print(json.dumps(res, indent=1))
        (WORK / "delta-startup.json").write_text(json.dumps(res, indent=1))
        return 0
    work = WORK / f"delta-{args.rows}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.chdir(work)  # anything Spark or Derby drops into the working directory stays here
    t0 = time.perf_counter()
    spike = Spike(args.rows, args.runs, work, jars)
    spike.variant_runs = args.variant_runs or args.runs
    spike.results["session_start_s"] = round(time.perf_counter() - t0, 2)
    spike.results["versions"] = {"spark": spike.spark.version, "delta_jar": jars[0].name}
    for part in args.parts.split(","):
        t = time.perf_counter()
        getattr(spike, f"part_{part}")()
        spike.results.setdefault("part_seconds", {})[part] = round(time.perf_counter() - t, 1)
        (work / "results.json").write_text(json.dumps(spike.results, indent=1, default=str))
    stop_jvm(spike.spark)  # the embedded Derby stays booted (and locked) until the JVM exits
    if "catalog" in args.parts:
        spike.results["reopen"] = reopen(work, jars)
        print("reopen", spike.results["reopen"], flush=True)
    (work / "results.json").write_text(json.dumps(spike.results, indent=1, default=str))
    print(report(spike.results))
    print(f"results: {work / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
