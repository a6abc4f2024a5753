"""DeltaCatalog without the Delta SQL extension (spike): python bench/delta_repro/catalog_only.py <jars>"""
import sys
from pyspark.sql import SparkSession
s = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").config("spark.sql.warehouse.dir", "/tmp/catonly/wh")
     .config("spark.jars", sys.argv[1]).config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
     .config("spark.databricks.delta.snapshotPartitions", "1").getOrCreate())
for q in ["CREATE TABLE t USING delta AS SELECT id, id*2 AS v FROM range(100)",
          "CREATE OR REPLACE TEMP VIEW c AS SELECT id, -1 AS v, id % 2 = 0 AS _deleted FROM range(95, 105)",
          "MERGE INTO t USING c ON t.id = c.id WHEN MATCHED AND c._deleted THEN DELETE WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED AND NOT c._deleted THEN INSERT *",
          "SELECT count(*) FROM t VERSION AS OF 0", "SELECT count(*) FROM t", "DELETE FROM t WHERE id < 3", "OPTIMIZE t",
          "DESCRIBE HISTORY t"]:
    try:
        r = s.sql(q).collect(); print("OK  ", q[:50], r[:1])
    except Exception as e:
        print("FAIL", q[:50], "->", " ".join(str(e).split())[:150])
s.stop()
