"""Delta 4.4.0 jars on pyspark 4.3.0 (spike; run with a pyspark 4.3.0 venv): python bench/delta_repro/spark43_compat.py <jars>"""
import sys, time
from pyspark.sql import SparkSession
jars = sys.argv[1]
s = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").config("spark.jars", jars)
     .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
     .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
     .config("spark.sql.warehouse.dir", "/tmp/compat43/wh").config("spark.databricks.delta.snapshotPartitions", "1").getOrCreate())
print("spark", s.version)
for q in ["CREATE OR REPLACE TABLE t43 USING delta AS SELECT id, id*2 AS v FROM range(100)",
          "CREATE OR REPLACE TEMP VIEW c AS SELECT id, -1 AS v, id % 2 = 0 AS _deleted FROM range(95, 105)",
          "MERGE INTO t43 t USING c ON t.id = c.id WHEN MATCHED AND c._deleted THEN DELETE WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED AND NOT c._deleted THEN INSERT *",
          "SELECT count(*), sum(v) FROM t43", "SELECT count(*) FROM t43 VERSION AS OF 0"]:
    try:
        r = s.sql(q).collect()
        print("OK", q[:40], r[:1])
    except Exception as e:
        print("FAIL", q[:40], type(e).__name__, " || ".join(l[:200] for l in str(e).splitlines() if "Exception" in l or "Error" in l)[:900])
s.stop()
